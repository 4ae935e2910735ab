"""Encoders: text and image models behind one protocol (:mod:`.base`), their declarations and
options (:mod:`.registry`, :mod:`.options`), the contract every registered model keeps
(:mod:`.checks`), the embedding cache (:mod:`.cache`), variants (:mod:`.variants`), devices and
backends; one module per model in ``text/`` and ``image/``, the inference half of trained models
in ``trained/``. docs/models.md lists the models; docs/plugins.md says how to add one."""
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
