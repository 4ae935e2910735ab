"""Conjugate gradients for Cr5's per-language systems ``(X_l^T X_l + lam I) x = b``: scipy's
sparse products inside, compiled (numba, cached on disk) vector work around them.

Why hand-written: scipy's ``cg`` is a Python loop around a ``LinearOperator`` with a fixed
preconditioner interface, BLAS dot products (whose summation order depends on the BLAS build and
thread count) and fresh temporaries per iteration, while Cr5's per-language systems need only
tens of cheap iterations, so the overhead around each product matters (timings in BENCHMARKS.md,
"The solver's kernels"). Here

* ``X^T X v + lam v`` is applied by one of two equivalent products, chosen per block by its
  number of stored entries (:data:`COMPILED_MAX_NNZ`):

  - **scipy** (large blocks): ``X^T (X v)`` as two ``scipy.sparse`` products over the CSR arrays
    of X, the second through the CSC view of the same arrays (``X^T`` without a copy). On large
    blocks these are faster than the compiled one-pass kernel below and than a CSR copy of ``X^T``.
    The products release the GIL; the loop around them costs a few Python calls per iteration.
  - **compiled** (small blocks): everything, including ``X^T X v`` in one pass over the CSR rows
    (each row read once, used twice), inside one numba function -- no Python per iteration, which
    wins where a product takes microseconds.

  The crossover between the two lies at a few tens of thousands of stored entries
  (:data:`COMPILED_MAX_NNZ`); ``python bench/bench_cr5_speed.py --kernels en,de,fr,it`` measures
  both (numbers in BENCHMARKS.md).

* the preconditioner is Jacobi plus a low-rank spectral correction: with ``s = diag(B)^-1/2`` and
  the top-k eigenpairs ``(theta, V)`` of ``S B S``, ``z = S (t + V ((1/theta - 1) * (V^T t)))``,
  ``t = S r``, which maps the k largest eigenvalues of the Jacobi-scaled system to 1 (symmetric
  positive definite because ``theta > 0``). ``k = 0`` is plain Jacobi;
* CG starts from a caller-given ``x`` (warm starts, see ``Cr5Problem.embedding``); a zero start
  skips the product for the first residual;
* it stops on the relative residual ``||b - A x|| <= rtol ||b||`` or after ``maxiter`` iterations
  -- scipy's criterion with ``atol=0``.

Every sum runs in a fixed order (compiled loops without fastmath, scipy's sparse products are plain
loops, no threads inside), so results are the same bits whatever the number of BLAS or caller
threads; the caller runs independent systems (languages, right-hand sides) in threads.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

_opts = dict(nogil=True, cache=True, boundscheck=False, fastmath=False, error_model="numpy")

#: Blocks with at most this many stored entries use the all-compiled CG, larger ones scipy's
#: products (the crossover measured by ``bench/bench_cr5_speed.py --kernels``; BENCHMARKS.md).
COMPILED_MAX_NNZ = 30_000


@njit(**_opts)
def normal_matvec(indptr, indices, data, lam, v, out):  # pragma: no cover - compiled
    """``out = X^T (X v) + lam v`` for CSR ``X`` (one pass over its rows)."""
    n = indptr.size - 1
    for j in range(out.size):
        out[j] = lam * v[j]
    for i in range(n):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * v[indices[k]]
        if s != 0.0:
            for k in range(indptr[i], indptr[i + 1]):
                out[indices[k]] += data[k] * s


@njit(**_opts)
def _precondition(r, s, V, f, t, c, z):  # pragma: no cover - compiled
    """``z = s * (t + V (f * (V^T t)))`` with ``t = s * r``. Both products sum over their index in
    ascending order; four rows of V are taken per pass (four independent sums in flight, each
    still in that order), which keeps more independent work in flight than one row at a time."""
    p = r.size
    k = f.size
    for j in range(p):
        t[j] = s[j] * r[j]
    if k == 0:
        for j in range(p):
            z[j] = s[j] * t[j]
        return
    for q in range(k):
        c[q] = 0.0
    j = 0
    while j + 4 <= p:
        t0, t1, t2, t3 = t[j], t[j + 1], t[j + 2], t[j + 3]
        for q in range(k):
            c[q] = (((c[q] + V[j, q] * t0) + V[j + 1, q] * t1) + V[j + 2, q] * t2) + V[j + 3, q] * t3
        j += 4
    while j < p:
        tj = t[j]
        for q in range(k):
            c[q] += V[j, q] * tj
        j += 1
    for q in range(k):
        c[q] *= f[q]
    j = 0
    while j + 4 <= p:
        a0, a1, a2, a3 = t[j], t[j + 1], t[j + 2], t[j + 3]
        for q in range(k):
            cq = c[q]
            a0 += V[j, q] * cq
            a1 += V[j + 1, q] * cq
            a2 += V[j + 2, q] * cq
            a3 += V[j + 3, q] * cq
        z[j], z[j + 1], z[j + 2], z[j + 3] = s[j] * a0, s[j + 1] * a1, s[j + 2] * a2, s[j + 3] * a3
        j += 4
    while j < p:
        acc = t[j]
        for q in range(k):
            acc += V[j, q] * c[q]
        z[j] = s[j] * acc
        j += 1


@njit(**_opts)
def _dot(a, b):  # pragma: no cover - compiled
    """``a . b`` as four interleaved partial sums (``j mod 4``, ascending), added as ``(s0 + s1) +
    (s2 + s3)``: a fixed order that, unlike one running sum, does not serialise every addition."""
    n = a.size
    s0 = s1 = s2 = s3 = 0.0
    j = 0
    while j + 4 <= n:
        s0 += a[j] * b[j]
        s1 += a[j + 1] * b[j + 1]
        s2 += a[j + 2] * b[j + 2]
        s3 += a[j + 3] * b[j + 3]
        j += 4
    while j < n:
        s0 += a[j] * b[j]
        j += 1
    return (s0 + s1) + (s2 + s3)


@njit(**_opts)
def _pcg_compiled(indptr, indices, data, lam, b, x, s, V, f, rtol, maxiter):  # pragma: no cover - compiled
    """The whole of :func:`pcg` compiled (products by :func:`normal_matvec`)."""
    p = b.size
    bnorm = np.sqrt(_dot(b, b))
    if bnorm == 0.0:
        for j in range(p):
            x[j] = 0.0
        return 0, True
    tol = rtol * bnorm
    r = np.empty(p)
    normal_matvec(indptr, indices, data, lam, x, r)
    for j in range(p):
        r[j] = b[j] - r[j]
    if np.sqrt(_dot(r, r)) <= tol:
        return 0, True
    t = np.empty(p)
    c = np.empty(f.size)
    z = np.empty(p)
    _precondition(r, s, V, f, t, c, z)
    d = z.copy()
    q = np.empty(p)
    rz = _dot(r, z)
    for it in range(1, maxiter + 1):
        normal_matvec(indptr, indices, data, lam, d, q)
        alpha = rz / _dot(d, q)
        for j in range(p):
            x[j] += alpha * d[j]
            r[j] -= alpha * q[j]
        if np.sqrt(_dot(r, r)) <= tol:
            return it, True
        _precondition(r, s, V, f, t, c, z)
        rz_new = _dot(r, z)
        beta = rz_new / rz
        rz = rz_new
        for j in range(p):
            d[j] = z[j] + beta * d[j]
    return maxiter, False


@njit(**_opts)
def _pcg_rows_compiled(indptr, indices, data, lam, Bt, Xt, s, V, f, rtol, maxiter, its, conv):  # pragma: no cover - compiled
    for i in range(Bt.shape[0]):
        its[i], conv[i] = _pcg_compiled(indptr, indices, data, lam, Bt[i], Xt[i], s, V, f, rtol, maxiter)


# --------------------------------------------------------------- the loop around scipy's products
@njit(**_opts)
def _residual(b, Ax, lam, x, r):  # pragma: no cover - compiled
    """``r = b - (Ax + lam x)``; returns ``||r||``."""
    for j in range(b.size):
        r[j] = b[j] - (Ax[j] + lam * x[j])
    return np.sqrt(_dot(r, r))


@njit(**_opts)
def _first_direction(r, s, V, f, t, c, z, d):  # pragma: no cover - compiled
    """``z = M^-1 r``, ``d = z``; returns ``r^T z``."""
    _precondition(r, s, V, f, t, c, z)
    for j in range(r.size):
        d[j] = z[j]
    return _dot(r, z)


@njit(**_opts)
def _step(lam, rz, d, q, x, r):  # pragma: no cover - compiled
    """``q += lam d`` (so ``q = A d``), then the CG update of ``x`` and ``r``; returns ``||r||``."""
    for j in range(d.size):
        q[j] += lam * d[j]
    alpha = rz / _dot(d, q)
    for j in range(d.size):
        x[j] += alpha * d[j]
        r[j] -= alpha * q[j]
    return np.sqrt(_dot(r, r))


@njit(**_opts)
def _next_direction(rz, r, s, V, f, t, c, z, d):  # pragma: no cover - compiled
    """``z = M^-1 r``, ``d = z + beta d``; returns the new ``r^T z``."""
    _precondition(r, s, V, f, t, c, z)
    rz_new = _dot(r, z)
    beta = rz_new / rz
    for j in range(d.size):
        d[j] = z[j] + beta * d[j]
    return rz_new


def _pcg_scipy(X: sp.csr_matrix, XT: sp.csc_matrix, lam: float, b: np.ndarray, x: np.ndarray, s: np.ndarray,
               V: np.ndarray, f: np.ndarray, rtol: float, maxiter: int) -> tuple[int, bool]:
    """:func:`pcg` with the products ``XT @ (X @ v)`` by scipy (same iteration as :func:`_pcg_compiled`)."""
    p = b.size
    bnorm = float(np.sqrt(_dot(b, b)))
    if bnorm == 0.0:
        x[:] = 0.0
        return 0, True
    tol = rtol * bnorm
    r = np.empty(p)
    Ax = XT @ (X @ x) if x.any() else np.zeros(p)
    if _residual(b, Ax, lam, x, r) <= tol:
        return 0, True
    t, c, z, d = np.empty(p), np.empty(f.size), np.empty(p), np.empty(p)
    rz = _first_direction(r, s, V, f, t, c, z, d)
    for it in range(1, maxiter + 1):
        q = XT @ (X @ d)
        if _step(lam, rz, d, q, x, r) <= tol:
            return it, True
        rz = _next_direction(rz, r, s, V, f, t, c, z, d)
    return maxiter, False


def _matrices(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, p: int) -> tuple[sp.csr_matrix, sp.csc_matrix]:
    """``X`` (CSR) and ``X^T`` (its CSC view) over the caller's arrays, no copies."""
    shape = (indptr.size - 1, p)
    return (sp.csr_matrix((data, indices, indptr), shape=shape, copy=False),
            sp.csc_matrix((data, indices, indptr), shape=shape[::-1], copy=False))


def _compiled(data: np.ndarray, method: str) -> bool:
    if method not in ("auto", "compiled", "scipy"):
        raise ValueError(f"pcg: method must be 'auto', 'compiled' or 'scipy', got {method!r}")
    return method == "compiled" or (method == "auto" and data.size <= COMPILED_MAX_NNZ)


def pcg(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, lam: float, b: np.ndarray, x: np.ndarray,
        s: np.ndarray, V: np.ndarray, f: np.ndarray, rtol: float, maxiter: int, *, method: str = "auto") -> tuple[int, bool]:
    """Preconditioned CG on ``(X^T X + lam I) x = b`` (``X`` CSR by its arrays) from the start ``x``
    (float64, updated in place), preconditioner ``(s, V, f)`` as in the module docstring.

    ``method``: ``"auto"`` (by :data:`COMPILED_MAX_NNZ`), ``"compiled"`` or ``"scipy"`` -- the same
    iteration, products summed in a different order. Returns ``(iterations, converged)``;
    ``b == 0`` gives ``x = 0`` in 0 iterations."""
    if _compiled(data, method):
        it, ok = _pcg_compiled(indptr, indices, data, lam, b, x, s, V, f, rtol, maxiter)
        return int(it), bool(ok)
    X, XT = _matrices(indptr, indices, data, b.size)
    return _pcg_scipy(X, XT, lam, b, x, s, V, f, rtol, maxiter)


def pcg_rows(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, lam: float, Bt: np.ndarray, Xt: np.ndarray,
             s: np.ndarray, V: np.ndarray, f: np.ndarray, rtol: float, maxiter: int, its: np.ndarray, conv: np.ndarray,
             *, method: str = "auto") -> None:
    """:func:`pcg` for every row of ``Bt`` (one right-hand side per row, C order), starting from
    and writing to the rows of ``Xt``; per-row iterations and convergence go to ``its``/``conv``."""
    if _compiled(data, method):
        _pcg_rows_compiled(indptr, indices, data, lam, Bt, Xt, s, V, f, rtol, maxiter, its, conv)
        return
    X, XT = _matrices(indptr, indices, data, Bt.shape[1])
    for i in range(Bt.shape[0]):
        its[i], conv[i] = _pcg_scipy(X, XT, lam, Bt[i], Xt[i], s, V, f, rtol, maxiter)
