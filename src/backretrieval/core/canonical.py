"""Canonical float arithmetic: results defined by a fixed sequence of IEEE operations, so that
every machine computes the same bits whatever its BLAS kernel, vector width or thread count.

* ``dot64(x, y)`` of two float32 vectors: the exact float64 products added in index order
  (:func:`dots_kernel`; each product of two float32 numbers is exact in float64, so fused
  multiply-add or not gives the same bits).
* :func:`matmul`: ``float32(dot64(A_i, B_j))`` for every element of a float32 matrix product.
  A float64 BLAS product of the same inputs (any summation order) is within
  ``2 (k + 2) 2**-53 |A_i| |B_j|`` of ``dot64``; where both ends of that interval round to the
  same float32 (all but about one element in a thousand) that float32 is the canonical value
  (:func:`round_checked_kernel`), and the other elements are summed canonically. The cost is a
  float64 product instead of a float32 one, plus one pass over the result.

The loops are compiled with numba without ``fastmath``, so LLVM keeps their order. The search
layer's canonical scores (``search/exact.py``) and encoders whose last steps are matrix products
(``use-m``) are built on these kernels.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

U32 = 2.0**-24  # unit roundoff of float32
U64 = 2.0**-53  # unit roundoff of float64
_jit = dict(nogil=True, cache=True, boundscheck=False, fastmath=False, error_model="numpy")


@njit(**_jit)
def dots_kernel(A, B, qi, dj, out):  # pragma: no cover - compiled
    """``out[p] = dot64(A[qi[p]], B[dj[p]])``: float64, index order. Four pairs are interleaved for
    instruction-level parallelism; each pair's own additions stay in order."""
    n = qi.shape[0]
    d = A.shape[1]
    p = 0
    while p + 4 <= n:
        a0, a1, a2, a3 = qi[p], qi[p + 1], qi[p + 2], qi[p + 3]
        b0, b1, b2, b3 = dj[p], dj[p + 1], dj[p + 2], dj[p + 3]
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for k in range(d):
            s0 += np.float64(A[a0, k]) * np.float64(B[b0, k])
            s1 += np.float64(A[a1, k]) * np.float64(B[b1, k])
            s2 += np.float64(A[a2, k]) * np.float64(B[b2, k])
            s3 += np.float64(A[a3, k]) * np.float64(B[b3, k])
        out[p] = s0
        out[p + 1] = s1
        out[p + 2] = s2
        out[p + 3] = s3
        p += 4
    while p < n:
        s0 = 0.0
        for k in range(d):
            s0 += np.float64(A[qi[p], k]) * np.float64(B[dj[p], k])
        out[p] = s0
        p += 1


@njit(**_jit)
def round_checked_kernel(v, nq, nd, qb, db, has_bias, scale, d, out, bi, bj):  # pragma: no cover - compiled
    """Element (i, j) of a float64 product ``v`` (any summation order): the canonical formula
    applied to it, rounded to float32 where both ends of its error interval round alike. Lists
    the undecided elements in ``bi``/``bj`` (up to their length); returns how many there are."""
    n, m = v.shape
    u64 = 2.0**-53
    c = abs(scale) * 2.0 * (d + 2) * u64
    k = 0
    for i in range(n):
        for j in range(m):
            nn = nq[i] * nd[j]
            w = v[i, j] * scale if scale != 1.0 else v[i, j]
            mag = abs(scale) * nn
            if has_bias:
                b = qb[i] + db[j]
                w = w - b
                mag += abs(b)
            err = 1.25 * (c * nn + 8.0 * u64 * mag) + 1e-300
            lo = np.float32(w - err)
            out[i, j] = lo
            if lo != np.float32(w + err):
                if k < bi.shape[0]:
                    bi[k] = i
                    bj[k] = j
                k += 1
    return k


class Factor(NamedTuple):
    """The right-hand factor ``B`` (k, m) of :func:`matmul`, prepared once (model weights)."""

    t32: np.ndarray  # B.T as C-contiguous float32 (m, k): the canonical sums walk its rows
    f64: np.ndarray  # B as float64 (k, m): the checked BLAS product
    norms: np.ndarray  # float64 (m,): the column norms of B (for the error bound)


def factor(B: np.ndarray) -> Factor:
    """``B`` (k, m) prepared for :func:`matmul` (float32 values; a float64 ``B`` is rounded first).

    Args:
        B: the right-hand matrix.

    Returns:
        Its :class:`Factor`.
    """
    b32 = np.asarray(B, dtype=np.float32)
    if b32.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {b32.shape}")
    f64 = b32.astype(np.float64)
    return Factor(np.ascontiguousarray(b32.T), f64, np.sqrt(np.einsum("ij,ij->j", f64, f64)))


def matmul(A: np.ndarray, B: np.ndarray | Factor) -> np.ndarray:
    """The canonical float32 product ``A @ B``: element (i, j) is ``float32(dot64(A_i, B[:, j]))``,
    the same bits on every machine (see the module doc).

    Args:
        A: (n, k) float32 (other float types are rounded to float32 first).
        B: (k, m) float32, or its :class:`Factor`.

    Returns:
        float32 (n, m).
    """
    F = B if isinstance(B, Factor) else factor(B)
    a32 = np.ascontiguousarray(A, dtype=np.float32)
    if a32.ndim != 2 or a32.shape[1] != F.f64.shape[0]:
        raise ValueError(f"shapes {a32.shape} and {F.f64.shape} do not multiply")
    a64 = a32.astype(np.float64)
    v = a64 @ F.f64
    na = np.sqrt(np.einsum("ij,ij->i", a64, a64))
    out = np.empty(v.shape, dtype=np.float32)
    none = np.zeros(1, dtype=np.float64)
    cap = 64 + v.size // 256
    while True:
        bi = np.empty(cap, dtype=np.int64)
        bj = np.empty(cap, dtype=np.int64)
        k = round_checked_kernel(v, na, F.norms, none, none, False, 1.0, a32.shape[1], out, bi, bj)
        if k <= cap:
            break
        cap = k
    if k:
        exact = np.empty(k, dtype=np.float64)
        dots_kernel(a32, F.t32, bi[:k], bj[:k], exact)
        out[bi[:k], bj[:k]] = exact.astype(np.float32)
    return out


def tanh(x: np.ndarray) -> np.ndarray:
    """``tanh`` of float32 values, correctly rounded to float32 (the same bits on every machine;
    numpy's float32 ``tanh`` has per-CPU vector variants). Computed in float64 (any libm: within
    a few float64 ulps); the few values whose float64 result lies too close to a float32
    rounding boundary to tell (about one in 10^8) are evaluated with 40 decimal digits.

    Args:
        x: float32 array (other float types are rounded to float32 first).

    Returns:
        float32 array of the same shape.
    """
    x32 = np.asarray(x, dtype=np.float32)
    t = np.tanh(x32.astype(np.float64))
    err = 16.0 * U64 * np.abs(t) + 1e-300
    out = (t - err).astype(np.float32)
    unsure = np.flatnonzero(out.ravel() != (t + err).astype(np.float32).ravel())
    flat = out.reshape(-1)
    for p in unsure:
        flat[p] = _tanh_decimal(float(x32.reshape(-1)[p]))
    return out


def _tanh_decimal(v: float) -> np.float32:
    """The float32 nearest to ``tanh(v)`` (v a float32 value), from 40-digit decimal arithmetic."""
    from decimal import Decimal, localcontext

    if not np.isfinite(v):
        return np.float32(np.tanh(v))
    with localcontext() as ctx:
        ctx.prec = 40
        e = (2 * Decimal(v)).exp()
        t = (e - 1) / (e + 1)
        f = np.float32(float(t))
        cands = (np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf)))
        return min(cands, key=lambda c: abs(Decimal(float(c)) - t))
