"""Encoder protocols, the description of a registered model, and the checks every embedding passes.

A text encoder is anything with ``name``, ``version``, ``dim`` and
``encode(texts, lang, *, ids=None) -> float32 (n, d)``; an image encoder has
``encode_images(paths) -> float32 (n, d)``. Each built-in lives in its own module and
registers a factory with :func:`~backretrieval.encoders.registry.register_text` /
:func:`~backretrieval.encoders.registry.register_image`; a model is asked
for by a spec string: ``"use-m"``, ``"precomputed:emb.parquet"``, ``"st:/path/to/model"``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from ..core import EncoderError, first_bad_row


@runtime_checkable
class TextEncoder(Protocol):
    name: str  # the spec it was built from, e.g. "use-m"
    version: str  # changes whenever the vectors would change (package + options)
    dim: int | None  # None until known (e.g. TF-IDF before fit)
    languages: frozenset[str] | None  # languages the model was trained on; None: any
    cacheable: bool  # False when vectors depend on more than (text, lang)

    def encode(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None) -> np.ndarray: ...


@runtime_checkable
class ImageEncoder(Protocol):
    name: str
    version: str
    dim: int | None

    def encode_images(self, paths: Sequence[str]) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True)
class EncoderInfo:
    name: str
    factory: Callable[..., Any]  # factory(arg: str | None, **options) -> encoder
    description: str
    kind: str  # "text" or "image"
    takes_arg: bool = False  # spec is "name:ARG"
    requires: str = ""  # pip package(s) needed


def check_embeddings(x: np.ndarray, n: int, what: str, ids: Sequence[str] | None = None) -> np.ndarray:
    """Return ``x`` as C-contiguous float32 (n, d) or raise naming the first bad row.

    Rejects a wrong shape, NaN/inf values and all-zero rows (cosine similarity is undefined
    for them).
    """
    x = np.ascontiguousarray(np.asarray(x), dtype=np.float32)
    if x.ndim != 2 or x.shape[0] != n:
        raise EncoderError(f"{what}: expected an array of {n} rows, got shape {x.shape}")
    bad = first_bad_row(x)
    if bad is not None:
        kind, i = bad
        label = f"id {ids[i]!r}" if ids is not None else f"row {i}"
        if kind == "nonfinite":
            raise EncoderError(f"{what}: NaN or inf in the embedding of {label}")
        raise EncoderError(f"{what}: all-zero embedding for {label}")
    return x


def package_version(dist: str) -> str:
    """Installed version of a distribution, for cache keys."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"
