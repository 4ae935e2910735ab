"""Cr5's solver entry point: :func:`solve` runs :class:`.problem.Cr5Problem` (eigenvectors of Eq.
12, then Eq. 14-15) under one BLAS thread and returns a :class:`Cr5Solution`."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

# Imported here, before solve() holds BLAS to one thread: threadpoolctl limits only the libraries
# loaded when the limit is set, and these imports load scipy's own BLAS/LAPACK (eigsh, and
# eigh_tridiagonal of the Lanczos step). Loaded lazily inside the limit, as before issue #16, a
# process's first fit ran scipy's BLAS multi-threaded, and its bits depended on the thread count
# (measured: Multi30K en/de/fr/cs, rank 300: Phi differed in the last float32 bits with 1 and 2
# BLAS threads; tests/train/test_cr5.py checks that nothing is loaded later).
import scipy.sparse.linalg  # noqa: F401

from . import _lanczos  # noqa: F401
from .problem import Cr5Problem, SolverStats


@dataclasses.dataclass
class Cr5Solution:
    """What :func:`solve` returns: the factors of the rank-r coefficient matrix ``W = H Phi``.

    Attributes:
        phi: per language (in the order of the blocks) ``Phi_l``, float64 (r x p_l); the rows
            of the stacked ``Phi = [Phi_1 ... Phi_L]`` are orthonormal (not those of one block);
            each row's largest-magnitude entry over all languages (the first on ties) is positive.
        singular_values: the r singular values of W, descending (``Lam^1/2`` of Eq. 15).
        eigenvalues: the top r eigenvalues of M (Eq. 12), descending.
        H: K x r with ``W = H Phi`` (Eq. 3), i.e. ``H = P Q Lam^1/2``.
        stats: what the solver did (matvecs, CG solves and iterations, non-converged solves,
            times).
    """

    phi: list[np.ndarray]
    singular_values: np.ndarray
    eigenvalues: np.ndarray
    H: np.ndarray
    stats: SolverStats


def solve(
    blocks: Sequence[sp.spmatrix],
    labels: Sequence[np.ndarray],
    n_classes: int,
    *,
    rank: int,
    lam: float,
    cg_tol: float = 0.01,
    cg_maxiter: int = 500,
    eig_tol: float = 0.1,
    eig_maxiter: int = 250,
    woodbury: bool = True,
    seed: int = 0,
    n_jobs: int = 1,
    progress: bool = False,
    names: Sequence[str] | None = None,
    deflation: int = 16,
) -> Cr5Solution:
    """Cr5's reduced-rank ridge regression (Eq. 8) by the iterative route of Sec. 3.2 / 5.

    ``n_jobs`` threads run the independent per-language (and Eq. 14 per-column) CG solves; BLAS is
    held to one thread and every kernel sums in a fixed order, so the result is the same bits for
    any ``n_jobs`` and any BLAS thread setting. ``names`` (the languages) only label progress;
    ``deflation`` is the rank of the preconditioner's spectral correction (0: Jacobi only).

    Args:
        blocks: per language ``X_l``, the n_l x p_l bag-of-words rows (any scipy sparse
            format; used as float64 CSR, never densified). Stacked block-diagonally they are X.
        labels: per language, the class (concept) index in ``0 .. n_classes - 1`` of each row
            of its block (int); the same concept in two languages has the same index.
        n_classes: K, the number of concepts (columns of the one-hot ``Y``).
        rank: r, between 1 and K - 1.
        lam: the ridge lambda, > 0.
        cg_tol, cg_maxiter: relative residual tolerance and iteration cap of every CG solve.
        eig_tol, eig_maxiter: tolerance and restart cap of the eigensolver (Eq. 12).
        woodbury: per-language solves through Woodbury (False: one CG on the centred system).
        seed: seeds the eigensolver's start vector.
        n_jobs: threads for the independent CG solves.
        progress: show progress bars on stderr.
        names: one name per block for the progress messages (default: numbers).
        deflation: per language, the number of top eigenpairs of the Jacobi-scaled ``B_l``
            the CG preconditioner corrects (at most p_l // 8; 0: Jacobi only); it changes the
            iterations, not the solution beyond ``cg_tol``.

    Returns:
        The :class:`Cr5Solution`.

    Raises:
        DataError: blocks and labels that do not match, labels out of range, ``lam`` not
            positive, or ``rank`` outside 1 .. K - 1.
        BackretrievalError: the eigensolver finds no eigenvector within ``eig_maxiter``, or
            ``Phi*`` is rank deficient.
    """
    try:  # installed with scikit-learn
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        import contextlib

        def threadpool_limits(_n: int) -> contextlib.AbstractContextManager:  # type: ignore[misc]
            return contextlib.nullcontext()

    prob = Cr5Problem(blocks, labels, n_classes, lam, cg_tol=cg_tol, cg_maxiter=cg_maxiter, woodbury=woodbury, n_jobs=n_jobs,
                      deflation=deflation, names=names, progress=progress)
    try:
        # one BLAS thread: the same bits whatever the thread settings (and BLAS threads only slow
        # down the many small vector operations of CG)
        with threadpool_limits(1):
            vals, P = prob.top_eigenvectors(rank, tol=eig_tol, maxiter=eig_maxiter, seed=seed, progress=progress)
            phis, sv, Q = prob.embedding(P)
    finally:
        prob.close()
    return Cr5Solution(phis, sv, vals, (P @ Q) * sv, prob.stats)

