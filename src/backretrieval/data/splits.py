"""Content-hash splits: an item's split is a function of its key and a seed only.

The project's one hash split. ``u = blake2b(f"{seed}{sep}{key}", 8 bytes) / 2^64`` is a uniform
number in [0, 1) per key; consecutive bands of ``fracs`` assign it. Because nothing but the key
and the seed enters, an item keeps its split whatever else is loaded (other languages, other
items), so models trained on different selections share their held-out items. M3L splits
images by their content key (``train/m3l/data.py``).
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ..core import BackretrievalError, content_hash


def hash_uniform(keys: Iterable[str], seed: int, *, sep: str = "\x00") -> np.ndarray:
    """A seeded pseudo-uniform number in [0, 1) per key.

    Args:
        keys: item keys (strings).
        seed: the split seed (an integer; part of the hashed text).
        sep: separator between seed and key in the hashed text.

    Returns:
        float64 array: ``int(blake2b(f"{seed}{sep}{key}", digest 8 bytes)) / 2^64`` per key.
    """
    return np.array([int(content_hash(f"{int(seed)}{sep}{k}", 8), 16) / 2.0**64 for k in keys], dtype=np.float64)


def hash_split(keys: Sequence[str], seed: int, fracs: Sequence[float], *, sep: str = "\x00") -> np.ndarray:
    """Band index per key: ``i`` when ``u`` falls in the ``i``-th band of ``fracs``, else ``len(fracs)``.

    Band ``i`` is ``[sum(fracs[:i]), sum(fracs[:i+1]))`` with ``u`` from :func:`hash_uniform`;
    e.g. ``fracs=(test, val)`` gives 0 test, 1 val, 2 train.

    Args:
        keys: item keys.
        seed: the split seed.
        fracs: shares of the bands, each in [0, 1), summing to below 1.
        sep: see :func:`hash_uniform`.

    Returns:
        int8 array of band indices, one per key.

    Raises:
        BackretrievalError: a share outside [0, 1) or shares summing to 1 or more.
    """
    fr = [float(f) for f in fracs]
    for i, f in enumerate(fr):
        if not 0.0 <= f < 1.0:  # also refuses NaN
            raise BackretrievalError(f"split share {i} must be in [0, 1), got {fracs[i]!r}")
    edges = np.cumsum(np.array(fr, dtype=np.float64))
    if len(fr) and edges[-1] >= 1.0:
        raise BackretrievalError(f"split shares {list(fracs)} sum to {edges[-1]}: nothing left for the last band")
    u = hash_uniform(keys, seed, sep=sep)
    return np.searchsorted(edges, u, side="right").astype(np.int8)
