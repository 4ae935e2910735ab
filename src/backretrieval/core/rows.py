"""Row-wise L2 normalisation of embedding matrices, the one helper every encoder uses.

Scoring code uses :func:`backretrieval.search.l2_normalize` instead: it produces the same bits on
every machine (an exactly rounded norm), which scores and ranks need; an encoder's output is
produced once, cached and fingerprinted, so numpy's own norm is what it has always used.
"""
from __future__ import annotations

import numpy as np


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` divided by their L2 norm; all-zero rows stay zero (never NaN).

    Args:
        x: a 2-D float array (its dtype is kept).

    Returns:
        A new array of ``x``'s shape and dtype: ``x / ||x||_2`` row by row, element for element
        the same bits as ``x / np.linalg.norm(x, axis=1, keepdims=True)`` where the norm is > 0.

    Raises:
        ValueError: ``x`` is not 2-D.
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"normalize_rows needs a 2-D array, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
