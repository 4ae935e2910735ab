"""Compiled conjugate gradients for Cr5's per-language systems ``(X_l^T X_l + lam I) x = b``
(numba; compiled on first use and cached on disk).

Why hand-written: scipy's ``cg`` is a Python loop around a ``LinearOperator``; on DDTP the
per-language systems need ~10-20 iterations of ~1 ms each, so the interpreter, the two separate
sparse products (``X v`` then ``X^T (X v)``, reading the matrix twice) and the temporaries cost
as much as the arithmetic (profile in docs/cr5.md, "Solver"). These kernels

* apply ``X^T X v + lam v`` in one pass over the CSR rows of X (each row read once, used twice);
* precondition with Jacobi plus a low-rank spectral correction: with ``s = diag(B)^-1/2`` and the
  top-k eigenpairs ``(theta, V)`` of ``S B S``, ``z = S (t + V ((1/theta - 1) * (V^T t)))``,
  ``t = S r``, which maps the k largest eigenvalues of the Jacobi-scaled system to 1 (symmetric
  positive definite because ``theta > 0``). ``k = 0`` is plain Jacobi;
* start from a caller-given ``x`` (warm starts, see ``Cr5Problem.embedding``);
* stop on the relative residual ``||b - A x|| <= rtol ||b||`` or after ``maxiter`` iterations --
  scipy's criterion with ``atol=0``.

Every sum runs in a fixed order (no fastmath, no threads inside), so results are the same bits
whatever the number of BLAS or caller threads; the kernels release the GIL, so the caller runs
independent systems (languages, right-hand sides) in threads.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_opts = dict(nogil=True, cache=True, boundscheck=False, fastmath=False, error_model="numpy")


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
    """``z = s * (t + V (f * (V^T t)))`` with ``t = s * r`` (fixed summation order)."""
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
    for j in range(p):
        tj = t[j]
        for q in range(k):
            c[q] += V[j, q] * tj
    for q in range(k):
        c[q] *= f[q]
    for j in range(p):
        acc = t[j]
        for q in range(k):
            acc += V[j, q] * c[q]
        z[j] = s[j] * acc


@njit(**_opts)
def _dot(a, b):  # pragma: no cover - compiled
    acc = 0.0
    for j in range(a.size):
        acc += a[j] * b[j]
    return acc


@njit(**_opts)
def pcg(indptr, indices, data, lam, b, x, s, V, f, rtol, maxiter):  # pragma: no cover - compiled
    """Preconditioned CG on ``(X^T X + lam I) x = b`` from the start ``x`` (updated in place).

    Returns ``(iterations, converged)``. ``b == 0`` gives ``x = 0`` in 0 iterations."""
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
def pcg_rows(indptr, indices, data, lam, Bt, Xt, s, V, f, rtol, maxiter, its, conv):  # pragma: no cover - compiled
    """:func:`pcg` for every row of ``Bt`` (one right-hand side per row, C order), starting from
    and writing to the rows of ``Xt``; per-row iterations and convergence go to ``its``/``conv``."""
    for i in range(Bt.shape[0]):
        its[i], conv[i] = pcg(indptr, indices, data, lam, Bt[i], Xt[i], s, V, f, rtol, maxiter)
