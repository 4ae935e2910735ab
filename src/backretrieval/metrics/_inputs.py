"""Input checks and the similarity set-up shared by the metrics."""
from __future__ import annotations

import dataclasses
from typing import Iterable

import numpy as np

from ..core import MetricInputError, first_bad_row
from ..search import csls_penalty, unit_rows

SIMILARITIES = ("cosine", "csls", "dot")


def _check_shape(x: np.ndarray, name: str) -> None:
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise MetricInputError(f"{name}: expected a non-empty 2-D array, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.number):
        raise MetricInputError(f"{name}: expected numbers, got dtype {x.dtype}")


def _check_values(x: np.ndarray, name: str) -> None:
    bad = first_bad_row(x)
    if bad is not None:
        kind, row = bad
        if kind == "nonfinite":
            raise MetricInputError(f"{name}: NaN or inf in row {row}")
        raise MetricInputError(f"{name}: all-zero vector in row {row} (cosine undefined)")


def check_rows(x: np.ndarray, name: str) -> None:
    """``x`` is a non-empty 2-D numeric array whose rows are all usable (no NaN/inf, none all
    zero), checked chunk by chunk without copying ``x`` whole; raises naming the first bad row."""
    _check_shape(x, name)
    _check_values(x, name)


def check_dims(a: np.ndarray, b: np.ndarray, names: tuple[str, str]) -> None:
    """``a`` and ``b`` have the same number of dimensions (columns)."""
    if a.shape[1] != b.shape[1]:
        raise MetricInputError(
            f"dimension mismatch: {names[0]} has {a.shape[1]} dimensions, {names[1]} has {b.shape[1]}"
        )


def as_matrix(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` as float32 (n, d); rejects other shapes, NaN/inf and all-zero rows, naming the row."""
    x = np.asarray(x)
    _check_shape(x, name)
    x = np.asarray(x, dtype=np.float32)
    _check_values(x, name)  # on the float32 matrix: its chunks are views, nothing is converted twice
    return x


def check_pair(a: np.ndarray, b: np.ndarray, names: tuple[str, str], same_rows: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Both sides as float32 matrices (:func:`as_matrix`) of the same dimension; with
    ``same_rows``, aligned (as many rows)."""
    a, b = as_matrix(a, names[0]), as_matrix(b, names[1])
    check_dims(a, b, names)
    if same_rows and a.shape[0] != b.shape[0]:
        raise MetricInputError(
            f"{names[0]} has {a.shape[0]} rows but {names[1]} has {b.shape[0]}; rows must be aligned"
        )
    return a, b


def check_ks(ks: int | Iterable[int], n: int, what: str = "K") -> tuple[int, ...]:
    ks = (ks,) if isinstance(ks, (int, np.integer)) else tuple(ks)
    if not ks:
        raise MetricInputError(f"{what}: give at least one cut-off")
    for k in ks:
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise MetricInputError(f"{what}={k!r} must be a positive integer")
        if k > n:
            raise MetricInputError(f"{what}={k} is larger than the number of candidates N={n}")
    return tuple(int(k) for k in ks)


@dataclasses.dataclass
class Scored:
    """Unit-normalised query and database sides plus the score parameters of ``search``."""

    Q: np.ndarray
    D: np.ndarray
    scale: float = 1.0
    q_bias: np.ndarray | None = None
    d_bias: np.ndarray | None = None

    def kwargs(self) -> dict:
        return {"scale": self.scale, "q_bias": self.q_bias, "d_bias": self.d_bias}

    def reversed(self) -> "Scored":
        return Scored(self.D, self.Q, self.scale, self.d_bias, self.q_bias)


def similarity(src: np.ndarray, tgt: np.ndarray, sim: str, csls_k: int, block_bytes: int | None) -> Scored:
    """Cosine; CSLS: ``2 cos(x, y) - r_T(x) - r_S(y)`` with k-NN mean similarities r; or ``dot``:
    the raw inner product of the rows as given (no normalisation), how a vector store scores
    quantised codes (int8 codes, ±1 sign bits: integer scores, exact)."""
    if sim not in SIMILARITIES:
        raise MetricInputError(f"unknown similarity {sim!r}; use one of {', '.join(SIMILARITIES)}")
    if sim == "dot":
        return Scored(np.ascontiguousarray(src, dtype=np.float32), np.ascontiguousarray(tgt, dtype=np.float32))
    Q, D = unit_rows(src), unit_rows(tgt)
    if sim == "cosine":
        return Scored(Q, D)
    check_ks(csls_k, min(Q.shape[0], D.shape[0]), "CSLS k")
    return Scored(
        Q,
        D,
        2.0,
        csls_penalty(Q, D, csls_k, block_bytes=block_bytes),
        csls_penalty(D, Q, csls_k, block_bytes=block_bytes),
    )


def rank_summary(ranks: np.ndarray, ks: tuple[int, ...], prefix: str) -> dict[str, float]:
    """Recall@K for each K, MRR and median rank of an array of 1-based ranks.

    Args:
        ranks: 1-based (pessimistic) ranks of the right item, one per query.
        ks: cut-offs K.
        prefix: key prefix, e.g. ``"xlr"``, ``"xlr_t2s"`` or ``"bkr"``.

    Returns:
        ``{prefix}@K`` (share of ranks <= K) per K, ``{prefix}_mrr`` (mean of 1 / rank) and
        ``{prefix}_median_rank`` (the median rank; the mean of the two middle ranks for an even
        count), floats.
    """
    out = {f"{prefix}@{k}": float(np.mean(ranks <= k)) for k in ks}
    out[f"{prefix}_mrr"] = float(np.mean(1.0 / ranks))
    out[f"{prefix}_median_rank"] = float(np.median(ranks))
    return out
