"""ARPACK's first Lanczos factorisation, with the Ritz vectors made by one matrix product.

Why hand-written (issue #19): at Sec. 4.1's eigsh tolerance (0.1) ARPACK stops after its first
Lanczos factorisation of length ``ncv = 2r + 1``, but its own work around the matvecs is large at
rank 300: on DDTP en,de (K = 11,067 concepts) ``dsaupd``/``dseupd`` took 22.5 s of the new
solver's 59 s CPU (the matvecs 33 s, Eq. 14-15 3 s; measured with ``process_time`` around the
matvecs, load average 10 on 2 cores), more than the 2.3x target allows. ``dseupd`` forms the
Ritz vectors by applying ``ncv`` Householder reflectors to the K x ncv basis one at a time
(level-2 BLAS); here they are one product ``V^T Y`` (level 3). scipy's other symmetric
eigensolver, ``lobpcg``, works on blocks and does not reproduce ARPACK's subspace.

:func:`lanczos_top` builds exactly ARPACK's subspace: ARPACK (mode 1) first applies the operator
to the start vector ``v0`` ("force it into the range of OP") and starts the Lanczos recurrence
from the normalised result, then takes ``ncv`` steps. The recurrence here reorthogonalises fully
(classical Gram-Schmidt, twice), which is what ARPACK's DGKS correction approximates, and checks
ARPACK's convergence test (``dsconv``: the Ritz estimate ``|beta_m y_m| <= tol max(eps^(2/3),
|theta|)``) for the top ``k``. If a Ritz pair has not converged, or the recurrence breaks down,
it returns ``None`` and the caller falls back to ``eigsh`` (which restarts). The Lanczos vectors
are all the operator's inputs, so the caller's warm starts of Eq. 14 see the same history.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.linalg import eigh_tridiagonal


def lanczos_top(
    matvec: Callable[[np.ndarray], np.ndarray], v0: np.ndarray, k: int, ncv: int, tol: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Top-``k`` (largest algebraic) Ritz pairs of a symmetric operator from a Lanczos basis of
    ``ncv`` vectors started like ARPACK's (``matvec(v0)`` normalised).

    Args:
        matvec: the operator, ``u -> M u`` (K,) -> (K,); called ``ncv + 1`` times.
        v0: start vector (K,).
        k: number of eigenpairs, ``1 <= k < ncv <= K``.
        ncv: basis length.
        tol: ARPACK's relative convergence tolerance.

    Returns:
        ``(values, vectors)``: eigenvalues descending, vectors K x k with orthonormal columns;
        ``None`` when a Ritz pair misses the tolerance or the recurrence breaks down.
    """
    K = v0.shape[0]
    if not 1 <= k < ncv <= K:
        raise ValueError(f"lanczos_top: need 1 <= k < ncv <= K, got k={k}, ncv={ncv}, K={K}")
    r = np.asarray(matvec(np.asarray(v0, dtype=np.float64)), dtype=np.float64)
    beta0 = np.linalg.norm(r)
    if not beta0 > 0:
        return None
    V = np.empty((ncv, K))
    alpha = np.empty(ncv)
    beta = np.empty(ncv)
    v = r / beta0
    for j in range(ncv):
        V[j] = v
        w = np.asarray(matvec(v), dtype=np.float64)
        h = V[: j + 1] @ w
        w -= h @ V[: j + 1]
        h2 = V[: j + 1] @ w  # second pass (DGKS): orthogonal to working precision
        w -= h2 @ V[: j + 1]
        alpha[j] = h[j] + h2[j]
        beta[j] = np.linalg.norm(w)
        if j + 1 < ncv:
            if not beta[j] > 1e-12 * max(abs(alpha[: j + 1]).max(), 1e-300):
                return None  # invariant subspace: leave the bookkeeping to ARPACK
            v = w / beta[j]
    theta, Y = eigh_tridiagonal(alpha, beta[:-1])
    top = np.argsort(-theta, kind="stable")[:k]
    theta, Y = theta[top], Y[:, top]
    eps23 = np.finfo(np.float64).eps ** (2.0 / 3.0)
    bounds = np.abs(beta[-1] * Y[-1])
    if np.any(bounds > tol * np.maximum(eps23, np.abs(theta))):
        return None
    return theta, V.T @ Y
