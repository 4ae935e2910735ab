"""Lowest layer: errors, atomic file writes and the user cache location.

Every other layer may import from here; this package imports nothing from the project.
"""
from .errors import BackretrievalError, DataError, EncoderError, MetricInputError, ServiceError, UnsupportedLanguageError
from .rows import first_bad_row, normalize_rows, numeric_rows
from .io import atomic_write, atomic_write_text, atomic_save_npz, cache_dir, content_hash, json_default, json_finite, json_ready

__all__ = [
    "BackretrievalError",
    "DataError",
    "EncoderError",
    "MetricInputError",
    "ServiceError",
    "UnsupportedLanguageError",
    "atomic_write",
    "atomic_write_text",
    "atomic_save_npz",
    "cache_dir",
    "content_hash",
    "first_bad_row",
    "json_default",
    "json_finite",
    "json_ready",
    "normalize_rows",
    "numeric_rows",
]
