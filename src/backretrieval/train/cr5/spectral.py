"""The spectral steps of :class:`.problem.Cr5Problem`: the top eigenvectors of ``M`` (Eq. 12, Lanczos
by :mod:`._lanczos`, else ARPACK's eigsh) and ``Phi`` from them (Eq. 14, warm-started from the
eigsh solves, and Eq. 15). A mixin: it relies on the problem's solves (``matvec_M``,
``solve_A_multi``, ``xhat_t``) and state; kept apart only to keep each module short."""
from __future__ import annotations

import time
import warnings

import numpy as np

from ...core import BackretrievalError, DataError
from .settings import DEFAULTS


_TRIM = []


def release_free_heap() -> None:
    """Give the free pages of the C heap back to the system (glibc's ``malloc_trim``; nothing
    where it is missing). Between the solver's phases the arrays just freed sit in the heap --
    glibc raises its mmap threshold to the size of a freed large array, so later arrays below it
    come from the heap -- and would otherwise count in the process's memory at the next peak."""
    if not _TRIM:
        try:
            import ctypes

            _TRIM.append(ctypes.CDLL(None).malloc_trim)
        except (OSError, AttributeError):  # not glibc
            _TRIM.append(None)
    if _TRIM[0] is not None:
        _TRIM[0](0)


#: Rows of ``Phi*^T`` turned into ``Phi`` per product in :meth:`SpectralSteps.embedding`.
_PHI_ROWS = 2048


def _inputs_in_place(basis: np.ndarray, v0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Lanczos operator's inputs ``[v0; V]`` as float32 ((ncv + 1) x K), written over the
    float64 ``basis`` ((ncv + 1) x K, the Lanczos vectors ``V`` in its first ``ncv`` rows), and
    the unused second half of the basis' bytes; both are views of the basis (flat float32).
    Float32 row ``i + 1`` ends at or before float64 row ``i + 1`` begins, so going down the rows
    (each converted through a temporary) never overwrites a row not yet read; ``v0`` goes last,
    over the first row."""
    ncv1, K = basis.shape
    flat = basis.reshape(-1).view(np.float32)
    U = flat[: ncv1 * K].reshape(ncv1, K)
    for i in range(ncv1 - 1):
        U[i + 1] = basis[i].astype(np.float32)
    U[0] = v0
    return U, flat[ncv1 * K :]


def _column_norms(P: np.ndarray, cols: int = 8) -> np.ndarray:
    """The norms of P's columns, each summed as over a Fortran-order P (its columns contiguous),
    whatever P's layout, ``cols`` columns at a time."""
    return np.concatenate([np.linalg.norm(np.asfortranarray(P[:, a : a + cols]), axis=0) for a in range(0, P.shape[1], cols)])


#: Rows of the kept inputs whose norms are taken per pass in :meth:`SpectralSteps._warm_coefficients`.
_NORM_ROWS = 64


class SpectralSteps:
    """Eq. 12 eigenvectors and Eq. 14-15 of a :class:`~.problem.Cr5Problem` (mixin)."""

    def top_eigenvectors(
        self, rank: int, *, tol: float = DEFAULTS.eig_tol, maxiter: int = DEFAULTS.eig_maxiter, seed: int = DEFAULTS.seed,
        ncv: int | None = None, progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``rank`` eigenpairs of M (eigenvalues descending, vectors K x rank).

        First ARPACK's first Lanczos factorisation (``ncv`` vectors, eigsh's default ``2 rank + 1``)
        by :func:`._lanczos.lanczos_top`, which is all ARPACK does at Sec. 4.1's tolerance;
        when a Ritz pair misses ``tol`` there, thick restarts from the kept Ritz vectors (up to
        ``maxiter``, ARPACK's matvec count); ``eigsh`` only after a breakdown or ``maxiter``. With
        ``progress`` a bar counts the matvecs against the factorisation's ``ncv + 1`` (a restart
        adds ``ncv - rank``) and says when the Ritz vectors are formed. The matvec inputs and their
        per-language solutions are kept (float32, at most ``ncv + 1`` of them) for the warm starts
        of :meth:`embedding`: the solutions as they come, the inputs as the Lanczos basis itself
        (rewritten in place as float32 once the Ritz vectors are formed, so no second copy of the
        basis is held; a restart or ARPACK keeps a float32 copy of them instead)."""
        from tqdm.auto import tqdm

        from ._lanczos import lanczos_top

        if not 1 <= rank < self.K:
            raise DataError(f"Cr5: rank must be between 1 and the number of training concepts - 1 = {self.K - 1}, got {rank}")
        t0 = time.perf_counter()
        ncv_ = ncv if ncv is not None else min(max(2 * rank + 1, 20), self.K)  # eigsh's default
        if progress:
            self.progress = True
        if self.woodbury:
            self._hist_u = None  # the inputs: the Lanczos basis (below), or a copy made before a restart
            self._hist_x = [np.empty((ncv_ + 1, p), dtype=np.float32) for p in self.p]
            self._hist_n = 0
            k = min(self.deflation, min(self.p) // 8)
            self.say(f"Cr5: preconditioners (Jacobi + top-{k} eigenpairs per language) and w = B^-1 mu...")
            self._map(self.preconditioner, range(len(self.X)))
            self._woodbury_terms()

        bars: list = []  # the bar the matvecs count on is the last (eigsh's after a fall-back)

        def start_bar(what: str):
            bars.append(tqdm(total=ncv_ + 1, desc=f"Cr5 {what} (rank {rank}, K {self.K:,})", unit="matvec",
                             disable=not progress, **self.bar_options))
            return bars[-1]

        start_bar("Lanczos")

        def mv(u: np.ndarray) -> np.ndarray:
            out = self.matvec_M(u)
            bar = bars[-1]
            if bar.n >= bar.total:  # ARPACK restarted: ncv - rank more per restart
                bar.total += max(ncv_ - rank, 1)
            bar.update(1)
            if bar.n == ncv_ + 1:
                bar.set_postfix_str("basis complete; forming the Ritz vectors", refresh=True)
            return out

        v0 = np.random.default_rng(seed).standard_normal(self.K)

        def keep_inputs(V: np.ndarray) -> None:  # the first ncv + 1 inputs, before a restart overwrites V
            self._hist_u = np.empty((ncv_ + 1, self.K), dtype=np.float32)
            self._hist_u[0], self._hist_u[1:] = v0, V

        res, warm = None, None
        if rank < ncv_ < self.K:
            # one spare row: the float32 inputs [v0; V] fit in the float64 basis' own bytes
            basis = np.empty((ncv_ + 1, self.K)) if self.woodbury else None
            res = lanczos_top(mv, v0, rank, ncv_, tol, maxiter=maxiter, basis=basis,
                              before_restart=keep_inputs if self.woodbury else None)
            if res is not None and self.woodbury and self._hist_u is None:
                # the warm-start coefficients now, from the inputs written over the basis (and the
                # eigenvectors in float32 in its spare half), so that the basis is freed before the
                # eigenvectors are copied below
                U, spare = _inputs_in_place(basis, v0)
                self._hist_u = U
                warm = self._warm_coefficients(res[1], spare)
                self._hist_u = None
                del U, spare
            del basis
            release_free_heap()
        bars[-1].close()
        if res is not None:
            (vals, vecs), res = res, None
            self.stats.eig_converged = rank
            self.stats.eig_method = "lanczos"
        else:
            vals, vecs = self._eigsh(mv, rank, tol, maxiter, v0, ncv, ncv_, start_bar)
        order = np.argsort(-vals, kind="stable")
        self.stats.eig_seconds += time.perf_counter() - t0
        P = np.asfortranarray(vecs[:, order])  # K x rank, Fortran order (what the products below are summed for)
        del vecs
        if warm is not None:
            self._warm = (P, warm)
        return vals[order], P

    def _eigsh(self, mv, rank: int, tol: float, maxiter: int, v0: np.ndarray, ncv: int | None, ncv_: int, start_bar):
        """The fall-back of :meth:`top_eigenvectors`: ARPACK's ``eigsh`` from ``v0`` (the matvecs
        counted on the bar ``start_bar("eigsh")`` starts); the eigenpairs it converged to, at least one."""
        from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

        self.stats.eig_method = "arpack"
        self._hist_n = 0
        if self.woodbury and self._hist_u is None:
            self._hist_u = np.empty((ncv_ + 1, self.K), dtype=np.float32)
        self.say(f"Cr5: the Lanczos broke down or missed tol={tol:g} after {maxiter} restarts; eigsh (ARPACK)...")
        bar = start_bar("eigsh")
        op = LinearOperator((self.K, self.K), matvec=mv, dtype=np.float64)
        try:
            vals, vecs = eigsh(op, k=rank, which="LA", tol=tol, maxiter=maxiter, v0=v0, ncv=ncv)
            self.stats.eig_converged = rank
        except ArpackNoConvergence as e:
            vals, vecs = e.eigenvalues, e.eigenvectors
            self.stats.eig_converged = len(vals)
            if len(vals) == 0:
                raise BackretrievalError(
                    f"Cr5: eigsh converged to no eigenvector in {maxiter} iterations; raise eig_maxiter or eig_tol"
                ) from None
            warnings.warn(f"Cr5: eigsh converged to {len(vals)} of {rank} eigenvectors; using those", RuntimeWarning, stacklevel=3)
        finally:
            bar.close()
        return vals, vecs

    def _warm_coefficients(self, P: np.ndarray, room: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """``(C, warm columns)`` with ``P ~= U^T C`` over the kept matvec inputs ``U`` (rows): the
        Ritz vectors lie in the span of ARPACK's orthonormal Lanczos basis, so ``C = U P`` and, by
        linearity, ``B_l^-1 b_l(P) ~= C^T H_l`` for the kept solutions ``H_l``. A column of P
        outside that span (its coefficients' norm is not ~1, e.g. after an ARPACK restart
        overflowed the kept rows) gets zero coefficients: a cold start. ``room``: flat float32
        memory of at least K x r entries for P's float32 copy (Fortran order, as
        :meth:`top_eigenvectors` returns P; else one is allocated); the rows' norms are taken a few
        rows at a time (no temporary the size of U)."""
        if self._hist_u is None or self._hist_n == 0:
            return None
        U = self._hist_u[: self._hist_n]
        # ARPACK's first matvec is on the unnormalised start vector (to bring it into the range of M):
        # only the unit-norm Lanczos vectors form the orthonormal basis
        norms = np.concatenate([np.linalg.norm(U[a : a + _NORM_ROWS], axis=1) for a in range(0, U.shape[0], _NORM_ROWS)])
        unit = np.abs(norms - 1.0) <= 1e-4
        if room is not None and room.size >= P.size:
            P32 = room[: P.size].reshape(P.shape[::-1]).T  # Fortran order, as the eigenvectors returned
            P32[...] = P
        else:
            P32 = np.asfortranarray(P, dtype=np.float32)
        C = U @ P32  # (m, r)
        del P32
        C[~unit] = 0.0
        pn = _column_norms(P)
        ok = np.abs(np.linalg.norm(C, axis=0) - pn) <= 1e-3 * pn
        C[:, ~ok] = 0.0
        return C, int(ok.sum())

    def embedding(self, P: np.ndarray) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """``Phi`` with orthonormal rows per language (r x p_l), the singular values of W and
        the (sign-adjusted) eigenvectors ``Q`` of ``Phi* Phi*^T`` (Eq. 15)."""
        from tqdm.auto import tqdm

        t0 = time.perf_counter()
        r = P.shape[1]
        warm_p, got = self._warm
        self._warm = (None, None)
        if got is None or warm_p is not P:
            got = self._warm_coefficients(P) if self.woodbury else None
        C = None
        if got is not None:
            C, n_ok = got
            self.stats.phi_warm_columns += n_ok
        m = self._hist_n
        self._hist_u = None  # the matvec inputs are done with once C is known; only the solutions stay
        chunk = max(8, 8 * self.n_jobs)
        chunks = [slice(j0, min(r, j0 + chunk)) for j0 in range(0, r, chunk)]
        # every chunk's warm starts (r x p_l float32 in all, where the kept solutions are (2r + 2) x p_l),
        # then the eigsh history is freed before Phi*^T is allocated; each chunk's are freed once used
        warms = [None] * len(chunks) if C is None else [[(C[:, cols].T @ h[:m]).T for h in self._hist_x] for cols in chunks]
        self._hist_u, self._hist_x = None, []  # free the eigsh history
        release_free_heap()
        Zs = [np.empty((p, r)) for p in self.p]  # Phi*^T per language (p_l x r)
        self.say(f"Cr5: solving Eq. 14 for {'+'.join(self.names)} ({r} right-hand sides each, {chunk} at a time, "
                 f"{'warm-started from the eigsh solves' if C is not None else 'cold start'})...")
        bar = tqdm(total=r, desc="Cr5 Eq. 14", unit="rhs", disable=not self.progress, **self.bar_options)
        for k, cols in enumerate(chunks):
            bs = self.xhat_t(P[self.y, cols])  # Xc^T Y P, these columns
            warm, warms[k] = warms[k], None
            for z, x in zip(Zs, self.solve_A_multi(bs, warm)):
                z[:, cols] = x
            bar.update(cols.stop - cols.start)
        bar.close()
        self.say("Cr5: Eq. 15 (eigendecomposition of Phi* Phi*^T, orthonormal Phi)...")
        release_free_heap()
        G = sum(z.T @ z for z in Zs)  # Phi* Phi*^T
        lam_, Q = np.linalg.eigh(G)
        order = np.argsort(-lam_, kind="stable")
        lam_, Q = lam_[order], Q[:, order]
        if lam_[-1] <= 0:
            raise BackretrievalError("Cr5: Phi* is rank deficient (an eigenvalue of Phi* Phi*^T is not positive)")
        T = Q / np.sqrt(lam_)  # (r x r): Phi = T^T Phi*
        # Phi_l^T = Phi*_l^T T in place, in row blocks of Phi*^T (no second p_l x r array); Phi_l is
        # its transposed view (r x p_l, Fortran order)
        for z in Zs:
            for a in range(0, z.shape[0], _PHI_ROWS):
                z[a : a + _PHI_ROWS] = z[a : a + _PHI_ROWS] @ T
        phis = [z.T for z in Zs]
        del Zs
        # sign convention: the largest-magnitude entry of each row (over all languages; the first
        # one on ties) is positive
        best, val = np.full(r, -1.0), np.zeros(r)
        for ph in phis:
            v = np.array([row[np.argmax(np.abs(row))] for row in ph])  # row by row: no |Phi_l| temporary
            better = np.abs(v) > best
            best[better], val[better] = np.abs(v[better]), v[better]
        sign = np.sign(val)
        sign[sign == 0] = 1.0
        for ph in phis:
            ph *= sign[:, None]
        release_free_heap()
        self.stats.phi_seconds += time.perf_counter() - t0
        return phis, np.sqrt(lam_), Q * sign
