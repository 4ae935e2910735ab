"""``color-hist``: a deliberately weak image baseline, a joint RGB colour histogram.

Each image is composited over white (see :func:`.batching.load_rgb`) and, at its own
resolution (no resize), every pixel is put in one of 8 x 8 x 8 = 512 bins:
``bin = (R // 32) * 64 + (G // 32) * 8 + (B // 32)``. The counts are divided by the
number of pixels (a probability distribution ``p``) and the vector is the Hellinger
embedding ``sqrt(p)``, which already has unit L2 norm, so the cosine similarity of two
images is the Bhattacharyya coefficient of their colour distributions. The square root
keeps one dominant colour (the white background of every emoji) from swamping the
comparison as it would with plain L2-normalised counts. An all-white image is a one-hot
vector at bin 511, never all zeros. No torch needed.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from .batching import LOADING, BatchedImageEncoder, load_rgb
from ..base import Example, package_version
from ..registry import register_image

BINS = 8
DIM = BINS**3


def color_histogram(path: str | os.PathLike[str]) -> np.ndarray:
    """The 512-d Hellinger colour histogram (float64, unit L2 norm) of one image."""
    rgb = np.asarray(load_rgb(path), dtype=np.uint8).reshape(-1, 3)
    q = (rgb >> 5).astype(np.int64)  # 256 / 8 = 32 values per bin
    idx = q[:, 0] * (BINS * BINS) + q[:, 1] * BINS + q[:, 2]
    counts = np.bincount(idx, minlength=DIM).astype(np.float64)
    v = np.sqrt(counts / max(counts.sum(), 1.0))
    return v / np.linalg.norm(v)


@register_image(
    "color-hist",
    description="weak baseline: joint RGB colour histogram, 8 bins per channel (512-d), Hellinger (sqrt) normalised",
    example=lambda folder: Example(),
)
class ColorHistEncoder(BatchedImageEncoder):
    """Joint RGB histogram, 8 bins per channel, Hellinger (sqrt) then unit L2 norm."""

    unit_norm = True

    def __init__(self, *, batch_size: int = 64, progress: bool = False) -> None:
        self.name = "color-hist"
        self.dim = DIM
        self.version = f"color-hist/rgb8x8x8/hellinger-l2/native-res/{LOADING}/pillow{package_version('pillow')}"
        super().__init__(batch_size=batch_size, progress=progress)

    @property
    def versions(self) -> dict[str, str]:
        """The installed Pillow (decoding) and numpy (the histogram): keys of the cache and records."""
        from ...core import env

        return env.versions_of(("pillow", "numpy"))

    def _encode_batch(self, batch: list[str | os.PathLike[str]]) -> np.ndarray:
        return np.stack([color_histogram(p) for p in batch])
