"""``precomputed``: image vectors come from the dataset's own feature file, not from a model.

A corpus may ship ``image_features`` (a ``.npy`` of shape (n_images, d)) and, per item,
``image_rows`` (the row of that file holding the item's image vector). The spec
``precomputed`` selects those vectors; :func:`load_feature_rows` reads them (memory-mapped,
so only the requested rows are read). The registered encoder object only marks the choice:
it has no images to encode, and its ``encode_images`` says so.

``precomputed@noise=S`` weakens those vectors like any ``MODEL@noise=S`` (:func:`weaken_features`):
the noise of an image is seeded by the digest of its feature vector, as a file's noise is seeded by
the file's bytes. Every other image model encodes image files, so a dataset that has only a
feature file cannot be evaluated with it (the grid refuses, naming model and dataset).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...core import DataError, EncoderError
from ...data.generic import open_feature_file
from .batching import BatchedImageEncoder
from ..base import Example, check_embeddings
from ..registry import register_image


@register_image(
    "precomputed",
    description="image vectors read from the dataset's own feature file (image_features .npy + image_rows)",
    example=lambda folder: Example(shows_progress=False),
)
class PrecomputedImageFeatures(BatchedImageEncoder):
    """Marker encoder for ``--image-model precomputed`` (takes the common image-model options,
    has no images to batch)."""

    is_precomputed = True

    def __init__(self, *, batch_size: int = 64, progress: bool = False) -> None:
        self.name = "precomputed"
        self.version = "precomputed"
        self.dim: int | None = None  # known only once the dataset's file is read
        super().__init__(batch_size=batch_size, progress=progress)

    def encode_images(self, paths: Sequence[str], batch_size: int | None = None, progress: bool | None = None) -> np.ndarray:
        """Always refused: precomputed features are read from the dataset's feature file, not from image
        files."""
        raise EncoderError(
            "image model 'precomputed' does not encode image files: precomputed image features are read "
            "from the dataset's own feature file (Corpus.image_features / image_rows); choose an image "
            "model such as 'efficientnet-lite0' for a dataset that has image paths"
        )


def uses_precomputed_features(spec: str) -> bool:
    """Whether image model ``spec`` reads the dataset's feature file (``precomputed``, or a variant
    of it such as ``precomputed@noise=4``) rather than encoding image files.

    Args:
        spec: an image model spec.

    Returns:
        True for ``precomputed`` and its variants.
    """
    return spec.split("@", 1)[0].strip() == "precomputed"


def weaken_features(encoder: Any, x: np.ndarray, digests: Sequence[bytes]) -> np.ndarray:
    """Precomputed features ``x`` as image model ``encoder`` gives them: unchanged for
    ``precomputed``; with the variant's seeded noise for ``precomputed@noise=S`` (row i's noise
    seeded by ``digests[i]``, the digest of its feature vector, see ``Corpus.image_digests``).

    Args:
        encoder: the image model built from the spec (``get_image_encoder``).
        x: the (n, d) feature rows.
        digests: one digest per row.

    Returns:
        float32 (n, d) features.

    Raises:
        EncoderError: the encoder neither is ``precomputed`` nor weakens it.
    """
    if getattr(encoder, "is_precomputed", False):
        return x
    weaken = getattr(encoder, "weaken", None)
    if not callable(weaken):
        raise EncoderError(f"image model {getattr(encoder, 'name', encoder)!r} does not read precomputed features")
    if len(digests) != len(x):
        raise EncoderError(f"{len(digests)} image digests for {len(x)} feature rows")
    return weaken(x, [bytes(d).hex() for d in digests])


def load_feature_rows(npy_path: str | os.PathLike[str], rows: Sequence[int] | np.ndarray | None, what: str) -> np.ndarray:
    """Rows ``rows`` of the (n_images, d) ``.npy`` at ``npy_path`` as C-contiguous float32.

    ``rows=None`` takes every row. Raises :class:`DataError` naming the path when the file is
    missing, unreadable or not 2-D, and naming the first row index that is not an integer in
    ``[0, n_images)`` (negative indices are not wrapped). The result passes
    :func:`check_embeddings` (no NaN/inf, no all-zero row; :class:`EncoderError` otherwise).
    """
    path = os.fspath(npy_path)
    if not os.path.isfile(path):
        raise DataError(f"{what}: precomputed image feature file not found: {path}")
    feats = open_feature_file(path, what)
    if not isinstance(feats, np.ndarray) or feats.ndim != 2:
        shape = getattr(feats, "shape", None)
        raise DataError(f"{what}: {path} must hold a 2-D (n_images, d) array, got shape {shape}")
    if feats.dtype.kind not in "fiu":
        raise DataError(f"{what}: {path} holds {feats.dtype} values, expected numbers")
    n = feats.shape[0]
    if rows is None:
        idx = np.arange(n, dtype=np.int64)
    else:
        raw = np.asarray(rows)
        if raw.ndim != 1:
            raise DataError(f"{what}: image rows must be a 1-D sequence of row indices, got shape {raw.shape}")
        if raw.size and raw.dtype.kind not in "iu":
            if raw.dtype.kind == "f" and np.isfinite(raw).all() and (raw == np.round(raw)).all():
                raw = raw.astype(np.int64)
            else:
                bad = next(i for i, r in enumerate(raw.tolist()) if not _is_int(r))
                raise DataError(f"{what}: image row {raw.tolist()[bad]!r} (item {bad}) is not an integer row index of {path}")
        idx = raw.astype(np.int64, copy=False)
        out_of_range = (idx < 0) | (idx >= n)
        if out_of_range.any():
            i = int(np.argmax(out_of_range))
            raise DataError(
                f"{what}: image row {int(idx[i])} (item {i}) is out of range for {path}, which has {n} rows"
            )
    x = np.asarray(feats[idx])
    return check_embeddings(x, len(idx), f"{what} ({path})", _RowLabels(idx))


class _RowLabels:
    """Lazy ``ids`` for check_embeddings: names an item by its position and file row."""

    def __init__(self, idx: np.ndarray) -> None:
        self.idx = idx

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, i: int) -> str:
        return f"item {i} (row {int(self.idx[i])})"


def _is_int(v: Any) -> bool:
    try:
        return float(v) == int(v)
    except (TypeError, ValueError, OverflowError):
        return False
