"""Encoders: text and image models behind one protocol, and the embedding cache."""
from .base import EncoderInfo, ImageEncoder, TextEncoder, check_embeddings
from .registry import (
    get_image_encoder, get_text_encoder, list_image_encoders, list_text_encoders, register_image, register_text,
)

__all__ = [
    "EncoderInfo", "ImageEncoder", "TextEncoder", "check_embeddings", "get_image_encoder", "get_text_encoder",
    "list_image_encoders", "list_text_encoders", "register_image", "register_text",
]
