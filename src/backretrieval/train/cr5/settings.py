"""Cr5's solver settings in one frozen object, and the one place their defaults are stated.

:class:`SolverSettings` is what :func:`.solver.solve` runs with; :data:`DEFAULTS` (the paper's
Sec. 4.1 tolerances, rank 300, lambda 1) gives the defaults of the :class:`~.estimator.Cr5`
estimator, of :class:`~.problem.Cr5Problem` and of its eigensolver step."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SolverSettings:
    """What :func:`.solver.solve` runs with (the defaults are Cr5's, stated here once).

    Attributes:
        rank: r, between 1 and K - 1.
        lam: the ridge lambda, > 0.
        cg_tol, cg_maxiter: relative residual tolerance and iteration cap of every CG solve
            (Sec. 4.1: 0.01 and 500).
        eig_tol, eig_maxiter: tolerance and restart cap of the eigensolver of Eq. 12 (Sec. 4.1:
            0.1 and 250).
        woodbury: per-language solves through Woodbury (False: one CG on the centred system).
        seed: seeds the eigensolver's start vector.
        n_jobs: threads for the independent CG solves.
        progress: show progress bars on stderr.
        deflation: per language, the number of top eigenpairs of the Jacobi-scaled ``B_l``
            the CG preconditioner corrects (at most p_l // 8; 0: Jacobi only); it changes the
            iterations, not the solution beyond ``cg_tol``.
    """

    rank: int = 300
    lam: float = 1.0
    cg_tol: float = 0.01
    cg_maxiter: int = 500
    eig_tol: float = 0.1
    eig_maxiter: int = 250
    woodbury: bool = True
    seed: int = 0
    n_jobs: int = 1
    progress: bool = False
    deflation: int = 16


DEFAULTS = SolverSettings()
