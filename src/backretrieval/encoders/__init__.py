"""Encoders: text and image models behind one protocol, their declarations, and the embedding cache."""
from .base import EncoderInfo, Example, ImageEncoder, TextEncoder, check_embeddings
from .options import Option
from .registry import (
    build_encoder, encoder_info, get_image_encoder, get_text_encoder, list_image_encoders, list_text_encoders,
    register_image, register_text,
)
from .checks import ContractError, check_image_encoder, check_text_encoder

__all__ = [
    "ContractError", "EncoderInfo", "Example", "ImageEncoder", "Option", "TextEncoder", "build_encoder", "check_embeddings",
    "check_image_encoder", "check_text_encoder", "encoder_info", "get_image_encoder", "get_text_encoder",
    "list_image_encoders", "list_text_encoders", "register_image", "register_text",
]
