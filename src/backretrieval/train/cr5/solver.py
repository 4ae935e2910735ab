"""Cr5's solver entry point: :func:`solve` runs :class:`.problem.Cr5Problem` (eigenvectors of Eq.
12, then Eq. 14-15) under one BLAS thread, with the values of one :class:`SolverSettings`, and
returns a :class:`Cr5Solution`."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

# Imported here, before solve() holds BLAS to one thread: threadpoolctl limits only the libraries
# loaded when the limit is set, and these imports load scipy's own BLAS/LAPACK (eigsh, and
# eigh_tridiagonal of the Lanczos step). Loaded lazily inside the limit, a process's first fit
# would run scipy's BLAS multi-threaded and its bits would depend on the thread count (Phi differs
# in the last float32 bits with 1 and 2 BLAS threads); tests/train/test_cr5.py checks that nothing is
# loaded later.
import scipy.sparse.linalg  # noqa: F401

from . import _lanczos  # noqa: F401
from .problem import Cr5Problem, SolverStats
from .settings import SolverSettings
from .spectral import release_free_heap


@dataclasses.dataclass
class Cr5Solution:
    """What :func:`solve` returns: the factors of the rank-r coefficient matrix ``W = H Phi``.

    Attributes:
        phi: per language (in the order of the blocks) ``Phi_l``, float64 (r x p_l, the transposed
            view of a p_l x r array: Fortran order); the rows
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
    settings: SolverSettings,
    *,
    names: Sequence[str] | None = None,
) -> Cr5Solution:
    """Cr5's reduced-rank ridge regression (Eq. 8) by the iterative route of Sec. 3.2 / 5.

    ``settings.n_jobs`` threads run the independent per-language (and Eq. 14 per-column) CG
    solves; BLAS is held to one thread and every kernel sums in a fixed order, so the result is
    the same bits for any ``n_jobs`` and any BLAS thread setting. ``names`` (the languages) only
    label progress.

    Args:
        blocks: per language ``X_l``, the n_l x p_l bag-of-words rows (any scipy sparse
            format; used as float64 CSR, never densified). Stacked block-diagonally they are X.
        labels: per language, the class (concept) index in ``0 .. n_classes - 1`` of each row
            of its block (int); the same concept in two languages has the same index.
        n_classes: K, the number of concepts (columns of the one-hot ``Y``).
        settings: rank, lambda, tolerances, threads (:class:`SolverSettings`).
        names: one name per block for the progress messages (default: numbers).

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

    st = settings
    prob = Cr5Problem(blocks, labels, n_classes, st.lam, cg_tol=st.cg_tol, cg_maxiter=st.cg_maxiter, woodbury=st.woodbury,
                      n_jobs=st.n_jobs, deflation=st.deflation, names=names, progress=st.progress)
    try:
        # one BLAS thread: the same bits whatever the thread settings (and BLAS threads only slow
        # down the many small vector operations of CG)
        with threadpool_limits(1):
            vals, P = prob.top_eigenvectors(st.rank, tol=st.eig_tol, maxiter=st.eig_maxiter, seed=st.seed,
                                            progress=st.progress)
            release_free_heap()
            phis, sv, Q = prob.embedding(P)
    finally:
        prob.close()
    release_free_heap()
    H = P @ Q
    H *= sv  # in place: no second K x r array
    return Cr5Solution(phis, sv, vals, H, prob.stats)

