"""``random`` -- a seeded random baseline: chance-level cross-lingual retrieval.

Each text's vector is ``standard_normal(dim)`` from ``numpy.random.default_rng`` seeded by the
BLAKE2b digest of ``"random\\0{seed}\\0{text}"`` (hashlib, never Python's salted ``hash()``),
then unit-normalised. So the same text gets the same vector in every language, run and
process, and different ``seed`` values give independent draws. The recipe is the one
:func:`backretrieval.encoders.variants.text_rng` uses for ``mix=A``, so ``BASE@mix=1`` equals
this baseline (when its dimension matches). ``cacheable`` is False: drawing is cheaper than
a cache look-up. There is no maximum length: a text of any length is one hash and one draw.

Options: ``seed`` (0), ``dim`` (512), ``batch_size``, ``progress``.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ...core import EncoderError, normalize_rows
from ..base import Example
from ..registry import register_text
from .batching import BatchedTextEncoder, positive_int

SALT = "random"


def text_vector(text: str, seed: int, dim: int) -> np.ndarray:
    """The float64 standard-normal draw of ``text`` (not normalised)."""
    h = hashlib.blake2b(f"{SALT}\x00{seed}\x00{text}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(h, "little")).standard_normal(dim)


@register_text(
    "random",
    description="seeded random unit vectors per text (chance baseline; same text, same vector in any language)",
    example=lambda folder: Example(options={"dim": 16}, other=(None, {"dim": 16, "seed": 1})),
)
class RandomTextEncoder(BatchedTextEncoder):
    """Unit vectors drawn from N(0, I), seeded by (seed, text)."""

    languages = None
    cacheable = False
    unit_norm = True
    default_batch_size = 4096

    def __init__(self, *, seed: int = 0, dim: int = 512, batch_size: int | None = None, progress: bool = False) -> None:
        self.name = "random"
        super().__init__(batch_size=batch_size, progress=progress)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise EncoderError(f"random: seed must be an integer, got {seed!r}")
        self.seed = int(seed)
        self.dim = positive_int(dim, "dim", self.name)
        self.version = f"blake2b-normal/seed{self.seed}/dim{self.dim}/numpy-{np.__version__}"

    def _load_model(self) -> Any:
        return None

    def _encode_batch(self, model: Any, texts: list[str]) -> np.ndarray:
        x = np.stack([text_vector(t, self.seed, self.dim) for t in texts])
        return normalize_rows(x).astype(np.float32)
