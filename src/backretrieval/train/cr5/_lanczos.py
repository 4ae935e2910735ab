"""ARPACK's Lanczos factorisation (thick-restarted when needed), with the Ritz vectors made by one matrix product.

Why hand-written: at Sec. 4.1's eigsh tolerance (0.1) ARPACK stops after its first
Lanczos factorisation of length ``ncv = 2r + 1``, but its own work around the matvecs is large at
rank 300 (on DDTP en,de a large share of the solver's CPU time; BENCHMARKS.md). ``dseupd`` forms the
Ritz vectors by applying ``ncv`` Householder reflectors to the K x ncv basis one at a time
(level-2 BLAS); here they are one product ``V^T Y`` (level 3). scipy's other symmetric
eigensolver, ``lobpcg``, works on blocks and does not reproduce ARPACK's subspace.

:func:`lanczos_top` builds exactly ARPACK's subspace: ARPACK (mode 1) first applies the operator
to the start vector ``v0`` ("force it into the range of OP") and starts the Lanczos recurrence
from the normalised result, then takes ``ncv`` steps. The recurrence here reorthogonalises fully
(the three-term recurrence, then classical Gram-Schmidt against the whole basis, a second pass
only where ARPACK's DGKS test asks for it) and checks ARPACK's convergence test (``dsconv``: the
Ritz estimate ``|beta_m y_m| <= tol max(eps^(2/3), |theta|)``) for the top ``k``. If a Ritz pair
has not converged it thick-restarts (keeping ARPACK's number of Ritz vectors, so the same matvec
count as ARPACK's implicit restarts; tested), up to ``maxiter`` times, instead of handing a
problem to ``eigsh`` that would redo the first factorisation from scratch (and so spend about
twice ARPACK's matvecs where one factorisation is not enough). ``None`` (the caller then runs ``eigsh``) only
after a breakdown or ``maxiter`` restarts. The Lanczos vectors are all the operator's inputs, so
the caller's warm starts of Eq. 14 see the same history.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.linalg import eigh, eigh_tridiagonal


def _extend(matvec, V: np.ndarray, T: np.ndarray, v: np.ndarray, l: int, coupling: np.ndarray | None) -> tuple[np.ndarray, float] | None:
    """Lanczos steps ``l .. ncv-1`` from the unit vector ``v`` (orthogonal to ``V[:l]``), filling the
    rows of ``V`` and the projected matrix ``T``; returns the residual ``(w, ||w||)`` or ``None`` on
    breakdown. Each step subtracts the known recurrence terms first (``beta v_{j-1}``, or the
    kept Ritz vectors' coupling after a restart), then one classical Gram-Schmidt pass against the
    whole basis, and a second one only where the first removed much (DGKS, ARPACK's rule: norm
    below 0.717 of the norm before the pass) -- orthogonal to working precision at half the
    passes of always reorthogonalising twice (the basis is read twice per pass)."""
    ncv = V.shape[0]
    w, beta = None, 0.0
    for j in range(l, ncv):
        V[j] = v
        w = np.asarray(matvec(v), dtype=np.float64).copy()
        if j == l and coupling is not None:
            w -= coupling @ V[:l]
        elif j > 0:
            w -= T[j, j - 1] * V[j - 1]
        a = float(v @ w)
        w -= a * v
        wnorm = float(np.linalg.norm(w))
        h = V[: j + 1] @ w
        w -= h @ V[: j + 1]
        a += h[j]
        beta = float(np.linalg.norm(w))
        if beta < 0.717 * wnorm:
            h = V[: j + 1] @ w
            w -= h @ V[: j + 1]
            a += h[j]
            beta = float(np.linalg.norm(w))
        T[j, j] = a
        if j + 1 < ncv:
            if not beta > 1e-12 * max(np.abs(np.diag(T)[: j + 1]).max(), 1e-300):
                return None  # invariant subspace: leave the bookkeeping to ARPACK
            T[j, j + 1] = T[j + 1, j] = beta
            v = w / beta
    return w, beta


def lanczos_top(
    matvec: Callable[[np.ndarray], np.ndarray], v0: np.ndarray, k: int, ncv: int, tol: float, maxiter: int = 0, *,
    basis: np.ndarray | None = None, before_restart: Callable[[np.ndarray], None] | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Top-``k`` (largest algebraic) Ritz pairs of a symmetric operator from a Lanczos basis of
    ``ncv`` vectors started like ARPACK's (``matvec(v0)`` normalised), thick-restarted up to
    ``maxiter`` times.

    Args:
        matvec: the operator, ``u -> M u`` (K,) -> (K,); called ``ncv + 1`` times, plus ``ncv - l``
            per restart.
        v0: start vector (K,).
        k: number of eigenpairs, ``1 <= k < ncv <= K``.
        ncv: basis length.
        tol: ARPACK's relative convergence tolerance.
        maxiter: restarts allowed when a Ritz pair misses ``tol`` (0: the first factorisation only).
        basis: where to build the basis: a C-contiguous float64 array of at least ``ncv`` rows of
            length K (its first ``ncv`` rows are used; default: a new array). When no restart was
            needed it holds the Lanczos vectors afterwards, so a caller can reuse them (the
            operator's inputs after ``v0``) without keeping a copy of its own.
        before_restart: called with the basis (``ncv`` x K) before the first restart overwrites it.

    Returns:
        ``(values, vectors)``: eigenvalues descending, vectors K x k with orthonormal columns;
        ``None`` when a Ritz pair still misses the tolerance after ``maxiter`` restarts or the
        recurrence breaks down.

    A restart keeps the top ``l = k + min(n_converged, (ncv - k) // 2)`` Ritz vectors (ARPACK's
    choice of how many to keep) and the residual direction, and extends the basis to ``ncv``
    again (thick restart, Wu and Simon 2000: the same subspace as ARPACK's implicit restart with
    exact shifts, without redoing a factorisation from a new start vector). The projected matrix
    is then the kept Ritz values on the diagonal with the coupling ``beta_m y_m`` to the next
    Lanczos vector, tridiagonal after it.
    """
    K = v0.shape[0]
    if not 1 <= k < ncv <= K:
        raise ValueError(f"lanczos_top: need 1 <= k < ncv <= K, got k={k}, ncv={ncv}, K={K}")
    r = np.asarray(matvec(np.asarray(v0, dtype=np.float64)), dtype=np.float64)
    beta0 = np.linalg.norm(r)
    if not beta0 > 0:
        return None
    if basis is None:
        V = np.empty((ncv, K))
    else:
        if basis.dtype != np.float64 or basis.ndim != 2 or basis.shape[0] < ncv or basis.shape[1] != K or not basis.flags.c_contiguous:
            raise ValueError(f"lanczos_top: basis must be C-contiguous float64 with >= {ncv} rows of {K}, got {basis.dtype} {basis.shape}")
        V = basis[:ncv]
    T = np.zeros((ncv, ncv))
    v, l, coupling = r / beta0, 0, None
    eps23 = np.finfo(np.float64).eps ** (2.0 / 3.0)
    for restart in range(maxiter + 1):
        res = _extend(matvec, V, T, v, l, coupling)
        if res is None:
            return None
        w, beta = res
        if l == 0:
            theta, Y = eigh_tridiagonal(np.diag(T).copy(), np.diag(T, 1).copy())
        else:
            theta, Y = eigh(T)
        order = np.argsort(-theta, kind="stable")
        theta, Y = theta[order], Y[:, order]
        bounds = np.abs(beta * Y[-1])
        ok = bounds[:k] <= tol * np.maximum(eps23, np.abs(theta[:k]))
        if ok.all():
            return theta[:k], V.T @ Y[:, :k]
        if restart == maxiter or not beta > 0:
            return None
        if restart == 0 and before_restart is not None:
            before_restart(V)
        l = min(k + min(int(ok.sum()), (ncv - k) // 2), ncv - 1)
        V[:l] = Y[:, :l].T @ V
        coupling = beta * Y[-1, :l]
        T[:] = 0.0
        T[np.arange(l), np.arange(l)] = theta[:l]
        T[:l, l] = T[l, :l] = coupling
        v = w / beta
    return None
