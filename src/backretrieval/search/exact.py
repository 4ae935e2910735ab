"""Canonical, order-independent scores: the numbers every decision of the search kernels is
made on, the same bits on every machine, thread count, block shape and process.

Why. BLAS sums a dot product in an order that depends on the thread count, the block shape,
the CPU's vector width and the library version, so the float32 score of a pair can differ in its
last bits between two runs. A rank decides ``score >= score_of_true``; where two scores are
equal or nearly so (duplicate texts, skin-tone emoji siblings, character n-grams), such a bit
decides the rank. So ranks are defined on a *canonical* score that does not depend on any
summation order, and the fast float32 pass is used only where it provably agrees with it.

Definitions (``x``, ``y`` float32 vectors of dimension d; ``u = 2**-24``):

* **Canonical dot product** ``dot64(x, y)``: ``acc = 0.0; for k in 0..d-1: acc += x_k * y_k`` in
  float64, in this order. Each product of two float32 numbers is exact in float64, so the only
  roundings are the d additions, in a fixed order: every IEEE-754 machine computes the same bits
  (with or without fused multiply-add, since the products are exact).
* **Canonical score** of a (query i, item j) pair:
  ``c_ij = float32( float64(scale * dot64(Q_i, D_j)) - float64(q_bias_i + d_bias_j) )``
  (one IEEE rounding per operation; absent biases are 0). The bias sum is formed first, so the
  score of a pair is the same whichever side is the query (CSLS is symmetric).
* **Canonical unit rows** (:func:`unit_rows_exact`): ``float32(x_k / sqrt(dot64(x, x)))`` in
  float64; with a tolerance, a row whose ``dot64(x, x)`` is within it of 1 is kept bit for bit.

Every operation above is exact or a single IEEE-rounded operation (addition, multiplication,
division, square root, conversion) in a fixed order, which every conforming machine computes
identically. The loops are compiled with numba without ``fastmath``, so LLVM keeps their order.

Error bound of the fast pass. A float32 BLAS product of rows with norms at most ``n_q`` and
``n_d`` differs from the exact dot product by at most ``gamma_d * n_q * n_d`` with
``gamma_d = d*u / (1 - d*u)``, whatever the summation order (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., Sec. 3.1). :func:`score_error_bound` adds the float32 rounding of
the scale and the biases and of the canonical score itself, so ``|fast - canonical| <= tau`` for
every pair. A comparison whose fast scores are more than ``tau`` apart from the threshold is
therefore decided identically by both; only comparisons inside the window are re-decided on
canonical scores (:func:`pair_scores`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..core.canonical import U32, U64
from ..core.canonical import dots_kernel as _dots_seq
from ..core.canonical import round_checked_kernel as _round_checked

_CHUNK_ELEMS = 1 << 22  # float64 elements per temporary (32 MiB)
_jit = dict(nogil=True, cache=True, boundscheck=False, fastmath=False, error_model="numpy")


@njit(**_jit)
def _dots_sparse(A, B, pa, ia, pb, ib, use_a, use_b, qi, dj, out):  # pragma: no cover - compiled
    """``out[p] = dot64(A[qi[p]], B[dj[p]])`` visiting only the nonzero columns of one of the two
    rows (``pa``/``ia``: CSR pattern of ``A``'s rows, ascending columns; ``pb``/``ib`` of ``B``'s;
    ``use_a``/``use_b``: which patterns exist). The shorter available pattern is walked, in
    ascending column order, so the additions that happen are those of :func:`_dots_seq` in the
    same order; the skipped terms are products with a zero factor, i.e. exact +-0, and adding
    +-0 never changes an accumulator that starts at +0.0 (it never becomes -0.0 under
    round-to-nearest): the result has the same bits as the full loop."""
    for p in range(qi.shape[0]):
        a = qi[p]
        b = dj[p]
        walk_a = use_a
        if use_a and use_b:
            walk_a = pa[a + 1] - pa[a] <= pb[b + 1] - pb[b]
        s = 0.0
        if walk_a:
            for t in range(pa[a], pa[a + 1]):
                k = ia[t]
                s += np.float64(A[a, k]) * np.float64(B[b, k])
        else:
            for t in range(pb[b], pb[b + 1]):
                k = ib[t]
                s += np.float64(A[a, k]) * np.float64(B[b, k])
        out[p] = s


@njit(**_jit)
def _unit_rows_seq(x, tol, out, keep):  # pragma: no cover - compiled
    """Canonical unit rows of the float32 matrix ``x`` into ``out``; ``keep[i]`` = row kept as is."""
    n, d = x.shape
    for i in range(n):
        ssq = 0.0
        for k in range(d):
            v = np.float64(x[i, k])
            ssq += v * v
        if tol > 0.0 and abs(ssq - 1.0) <= tol:
            keep[i] = True
            for k in range(d):
                out[i, k] = x[i, k]
        elif ssq == 0.0:
            keep[i] = False
            for k in range(d):
                out[i, k] = 0.0
        else:
            keep[i] = False
            norm = np.sqrt(ssq)
            for k in range(d):
                out[i, k] = np.float32(np.float64(x[i, k]) / norm)


@njit(**_jit)
def _kept_rows_seq(x, tol):  # pragma: no cover - compiled
    """Whether every row's ``dot64(x, x)`` is within ``tol`` of 1. Four rows are summed side by
    side (instruction-level parallelism); each row's own additions stay in order."""
    n, d = x.shape
    i = 0
    while i + 4 <= n:
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for k in range(d):
            v0 = np.float64(x[i, k])
            v1 = np.float64(x[i + 1, k])
            v2 = np.float64(x[i + 2, k])
            v3 = np.float64(x[i + 3, k])
            s0 += v0 * v0
            s1 += v1 * v1
            s2 += v2 * v2
            s3 += v3 * v3
        if not (abs(s0 - 1.0) <= tol and abs(s1 - 1.0) <= tol and abs(s2 - 1.0) <= tol and abs(s3 - 1.0) <= tol):
            return False
        i += 4
    while i < n:
        ssq = 0.0
        for k in range(d):
            v = np.float64(x[i, k])
            ssq += v * v
        if not abs(ssq - 1.0) <= tol:
            return False
        i += 1
    return True


@njit(**_jit)
def _max_sq_norm(x):  # pragma: no cover - compiled
    """The largest float64 sum of squares of a row (in any order: a bound, not a canonical
    value): 8 partial sums per row, vectorised."""
    n, d = x.shape
    best = 0.0
    part = np.empty(8, dtype=np.float64)
    for i in range(n):
        part[:] = 0.0
        full = d - d % 8
        for k in range(0, full, 8):
            for lane in range(8):
                v = np.float64(x[i, k + lane])
                part[lane] += v * v
        s = 0.0
        for lane in range(8):
            s += part[lane]
        for k in range(full, d):
            v = np.float64(x[i, k])
            s += v * v
        best = s if s > best else best
    return best


def _f32c(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


SPARSE_MIN_DIM = 64  # below this a dense row is short enough that walking a pattern cannot pay
SPARSE_MAX_DENSITY = 0.25  # rows with at most this fraction of nonzeros get a pattern


class RowPattern(NamedTuple):
    """The nonzero columns of each row of a matrix, CSR-style: row i's are
    ``indices[indptr[i]:indptr[i+1]]``, ascending."""

    indptr: np.ndarray  # int64 (n + 1,)
    indices: np.ndarray  # int32


_NO_PATTERN = RowPattern(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32))


def row_pattern(x: np.ndarray) -> RowPattern | None:
    """The :class:`RowPattern` of ``x`` when it is sparse enough for :func:`dots` to gain from it
    (at least :data:`SPARSE_MIN_DIM` columns, at most :data:`SPARSE_MAX_DENSITY` of the entries
    nonzero: character n-gram TF-IDF, bag-of-words), else None. Costs one pass over ``x``.

    Args:
        x: a 2-D float array.

    Returns:
        The pattern, or None for dense (or narrow) matrices.
    """
    if x.ndim != 2 or x.shape[1] < SPARSE_MIN_DIM or x.size == 0:
        return None
    head = x[:64]  # dense embeddings are told apart by their first rows, without a pass over all
    if np.count_nonzero(head) > 2 * SPARSE_MAX_DENSITY * head.size or np.count_nonzero(x) > SPARSE_MAX_DENSITY * x.size:
        return None
    x = np.ascontiguousarray(x)
    indptr = np.zeros(x.shape[0] + 1, dtype=np.int64)
    _row_counts(x, indptr[1:])
    np.cumsum(indptr, out=indptr)
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    _row_columns(x, indptr, indices)
    return RowPattern(indptr, indices)


@njit(**_jit)
def _row_counts(x, out):  # pragma: no cover - compiled
    """``out[i]`` = nonzeros of row i (branch-free: vectorised)."""
    for i in range(x.shape[0]):
        c = 0
        for k in range(x.shape[1]):
            c += np.int64(x[i, k] != 0)
        out[i] = c


@njit(**_jit)
def _row_columns(x, indptr, indices):  # pragma: no cover - compiled
    """The nonzero columns of each row, ascending, at ``indices[indptr[i]:]``."""
    for i in range(x.shape[0]):
        t = indptr[i]
        for k in range(x.shape[1]):
            if x[i, k] != 0:
                indices[t] = k
                t += 1


def dots(
    A: np.ndarray,
    B: np.ndarray,
    qi: np.ndarray,
    dj: np.ndarray,
    patterns: tuple[RowPattern | None, RowPattern | None] = (None, None),
) -> np.ndarray:
    """``dot64(A[qi[p]], B[dj[p]])`` for listed pairs (float64, the canonical dot product).

    Args:
        A, B: the two float32 matrices.
        qi, dj: row of ``A`` and row of ``B`` of each pair.
        patterns: :func:`row_pattern` of ``A`` and of ``B`` (None: dense). With one, only the
            nonzero columns of a row are visited; the bits are those of the full loop.

    Returns:
        float64 (len(qi),) canonical dot products.
    """
    A, B = _f32c(A), _f32c(B)
    qi = np.ascontiguousarray(qi, dtype=np.int64)
    dj = np.ascontiguousarray(dj, dtype=np.int64)
    out = np.empty(qi.shape[0], dtype=np.float64)
    if not qi.size:
        return out
    pa, pb = patterns
    if pa is None and pb is None:
        _dots_seq(A, B, qi, dj, out)
    else:
        a, b = pa or _NO_PATTERN, pb or _NO_PATTERN
        _dots_sparse(A, B, a.indptr, a.indices, b.indptr, b.indices, pa is not None, pb is not None, qi, dj, out)
    return out


def _combine(d64: np.ndarray, scale: float, bias: np.ndarray | None) -> np.ndarray:
    """``float64(scale * dot64) - bias`` in float64: the canonical score before its float32 rounding."""
    w = d64 * np.float64(scale) if scale != 1.0 else d64
    return w - bias if bias is not None else w


def _bias_sum(q_bias, d_bias, qi, dj, shape) -> np.ndarray | None:
    """``float64(q_bias_i + d_bias_j)`` per pair (the canonical order), or None without biases."""
    if q_bias is None and d_bias is None:
        return None
    b = np.zeros(shape, dtype=np.float64)
    if q_bias is not None:
        b = b + np.asarray(q_bias, dtype=np.float64)[qi]
    if d_bias is not None:
        b = b + np.asarray(d_bias, dtype=np.float64)[dj]
    return b


def pair_scores(
    Q: np.ndarray,
    D: np.ndarray,
    qi: np.ndarray,
    dj: np.ndarray,
    *,
    scale: float = 1.0,
    q_bias: np.ndarray | None = None,
    d_bias: np.ndarray | None = None,
    patterns: tuple[RowPattern | None, RowPattern | None] = (None, None),
) -> np.ndarray:
    """Canonical float32 scores ``c(Q[qi[p]], D[dj[p]])`` of listed pairs (see the module doc);
    ``patterns`` as in :func:`dots` (speed only)."""
    qi = np.asarray(qi, dtype=np.int64)
    dj = np.asarray(dj, dtype=np.int64)
    bias = _bias_sum(q_bias, d_bias, qi, dj, qi.shape)
    return _combine(dots(Q, D, qi, dj, patterns), scale, bias).astype(np.float32)


def scores_block(
    Q: np.ndarray,
    D: np.ndarray,
    *,
    scale: float = 1.0,
    q_bias: np.ndarray | None = None,
    d_bias: np.ndarray | None = None,
) -> np.ndarray:
    """The canonical float32 score matrix (n_q, n_d). One float64 GEMM (any summation order) is
    within ``2 (d+2) 2**-53 |Q_i| |D_j|`` of ``dot64``; where both ends of that interval round to
    the same float32 the canonical score is known, and the few other elements (about one in a
    million) are computed canonically. Holds the whole matrix (and a float64 copy): callers pass
    row blocks. Two sparse matrices (:func:`row_pattern`) are multiplied as scipy sparse
    matrices: the bound holds for any order and number of the additions."""
    Q, D = _f32c(Q), _f32c(D)
    has_bias = q_bias is not None or d_bias is not None
    qb = np.zeros(Q.shape[0]) if q_bias is None else np.ascontiguousarray(q_bias, dtype=np.float64)
    db = np.zeros(D.shape[0]) if d_bias is None else np.ascontiguousarray(d_bias, dtype=np.float64)
    patterns = (row_pattern(Q), row_pattern(D))
    if patterns[0] is not None and patterns[1] is not None:
        A, B = as_csr(Q, patterns[0], np.float64), as_csr(D, patterns[1], np.float64)
        nq = np.sqrt(np.asarray(A.multiply(A).sum(axis=1)).ravel())
        nd = np.sqrt(np.asarray(B.multiply(B).sum(axis=1)).ravel())
        v = np.ascontiguousarray((A @ B.T).toarray())
    else:
        A, B = Q.astype(np.float64), D.astype(np.float64)
        nq = np.sqrt(np.einsum("ij,ij->i", A, A))
        nd = np.sqrt(np.einsum("ij,ij->i", B, B))
        v = A @ B.T
    out = np.empty(v.shape, dtype=np.float32)
    cap = 64
    while True:
        bi = np.empty(cap, dtype=np.int64)
        bj = np.empty(cap, dtype=np.int64)
        k = _round_checked(v, nq, nd, qb, db, has_bias, float(scale), A.shape[1], out, bi, bj)
        if k <= cap:
            break
        cap = k
    if k:
        out[bi[:k], bj[:k]] = pair_scores(Q, D, bi[:k], bj[:k], scale=scale, q_bias=q_bias, d_bias=d_bias,
                                          patterns=patterns)
    return out


def as_csr(x: np.ndarray, pattern: RowPattern, dtype=np.float32):
    """``x`` (dense) as a scipy CSR matrix of ``dtype`` holding the nonzeros of ``pattern``.

    Args:
        x: the dense matrix.
        pattern: its :func:`row_pattern`.
        dtype: the stored values' type (float32 values are exact in float64).

    Returns:
        A ``scipy.sparse.csr_matrix`` equal to ``x``.
    """
    from scipy.sparse import csr_matrix

    rows = np.repeat(np.arange(x.shape[0]), np.diff(pattern.indptr))
    return csr_matrix((x[rows, pattern.indices].astype(dtype), pattern.indices, pattern.indptr), shape=x.shape)


def max_row_norm(x: np.ndarray) -> float:
    """An upper bound of the largest row norm of ``x`` (float64, inflated by 1e-9), read in chunks
    (no copy of a C-contiguous float array; memory-mapped inputs a chunk at a time)."""
    best = 0.0
    step = max(1, _CHUNK_ELEMS // max(1, x.shape[1]))
    for s in range(0, x.shape[0], step):
        blk = np.asarray(x[s : s + step])
        if blk.dtype not in (np.float32, np.float64):
            blk = blk.astype(np.float64)
        if blk.size:
            best = max(best, _max_sq_norm(np.ascontiguousarray(blk)))
    return float(np.sqrt(best)) * (1.0 + 1e-9)


def score_error_bound(
    d: int,
    norm_q: float,
    norm_d: float,
    scale: float = 1.0,
    q_bias: np.ndarray | None = None,
    d_bias: np.ndarray | None = None,
) -> float:
    """``tau``, a bound of ``|fast - canonical|`` for every pair, where the fast score is
    ``fl32(fl32(fl32(scale * blas32(Q_i . D_j)) - d_bias_j) - q_bias_i)`` with float32 biases.

    Args:
        d: dimension of the vectors.
        norm_q, norm_d: upper bounds of the row norms of the two sides (:func:`max_row_norm`).
        scale, q_bias, d_bias: the score's parameters.

    Returns:
        The bound (with a 25% margin): BLAS's float32 summation error ``gamma_d |Q_i| |D_j|`` in any
        order, the float32 roundings of the scale, of the two biases, of the two subtractions and
        of the canonical score itself, and the float64 error of ``dot64``.

    Raises:
        ValueError: for dimensions where the float32 bound is meaningless (d >= 2**23).
    """
    if d * U32 >= 0.5:
        raise ValueError(f"dimension {d} too large for a float32 error bound")
    gamma = d * U32 / (1.0 - d * U32)
    bias = sum(float(np.max(np.abs(b))) for b in (q_bias, d_bias) if b is not None and np.size(b))
    m = abs(scale) * norm_q * norm_d + bias  # bounds the magnitude of every intermediate value
    return 1.25 * (abs(scale) * gamma * norm_q * norm_d + 6.0 * U32 * m + 4.0 * (d + 16) * U64 * (m + 1.0))


def unit_rows_exact(x: np.ndarray, tol: float = 0.0, *, out: np.ndarray | None = None) -> np.ndarray:
    """Canonical unit rows of ``x`` as float32 (see the module doc). With ``tol > 0`` a row whose
    ``dot64(x, x)`` is within ``tol`` of 1 is kept as it is, and when every row is kept a float32
    C-contiguous ``x`` is returned itself (no copy; callers must not modify it). All-zero rows
    stay zero. ``out``: a writable float32 C-contiguous array of ``x``'s shape to write the rows
    into (it may be ``x`` itself: each row is read whole before it is written), returned."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {x.shape}")
    if out is None and tol > 0 and x.dtype == np.float32 and x.flags.c_contiguous and _kept_rows_seq(x, float(tol)):
        return x
    x = _f32c(x)
    if out is None:
        out = np.empty(x.shape, dtype=np.float32)
    elif out.shape != x.shape or out.dtype != np.float32 or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"out must be a writable C-contiguous float32 array of shape {x.shape}")
    _unit_rows_seq(x, float(tol), out, np.empty(x.shape[0], dtype=np.bool_))
    return out


UNIT_TOL = 1e-5  # rows whose squared norm is within this of 1 count as unit rows


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (canonical: the same bits on every machine, see
    :func:`unit_rows_exact`), as a new C-contiguous float32 array; zero rows stay zero."""
    return unit_rows_exact(x, tol=0.0)


def unit_rows(x: np.ndarray, tol: float = UNIT_TOL) -> np.ndarray:
    """Canonical unit rows of ``x``: a row whose exact squared norm is within ``tol`` of 1 (as
    most encoders return) is kept as it is, the others are normalised; ``x`` itself when every
    row is kept (no copy of large inputs). Callers must not modify the result in place."""
    return unit_rows_exact(x, tol=tol)
