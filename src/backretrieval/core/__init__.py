"""Lowest layer: errors (:mod:`.errors`), atomic writes, output-folder checks, the user cache
location and the one JSON-lines decoder (:mod:`.io`), the one file lock (:mod:`.locks`), content
hashes and fingerprints (:mod:`.fingerprint`), the software environment and its versions
(:mod:`.env`), canonical float arithmetic (:mod:`.canonical`), row normalisation (:mod:`.rows`),
what counts as an empty text (:mod:`.text`) and the hints errors give (:mod:`.hints`).

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
