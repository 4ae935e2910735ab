"""The ridge system of Cr5 (Eq. 8-13) over per-language CSR blocks: X-hat products, the
Woodbury and direct solves of ``Xc^T Xc + lam I``, the compiled preconditioned CG (:mod:`._cg`) and
the operator ``M`` of Eq. 12. The spectral steps (eigenvectors of M, Eq. 14-15) are in
:mod:`.spectral`; the package docstring has the mathematics."""
from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...core import BackretrievalError, DataError
from . import _cg
from .settings import DEFAULTS
from .spectral import SpectralSteps


@dataclasses.dataclass
class SolverStats:
    """What the solver did: operator applications, CG iterations, non-converged solves, times."""

    matvecs: int = 0
    cg_solves: int = 0
    cg_iterations: int = 0
    cg_not_converged: int = 0
    eig_seconds: float = 0.0
    phi_seconds: float = 0.0
    eig_converged: int | None = None
    precond_seconds: float = 0.0
    phi_cg_iterations: int = 0
    phi_warm_columns: int = 0
    eig_method: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The statistics as a plain dict."""
        return dataclasses.asdict(self)


def _counter() -> tuple[dict[str, int], Callable]:
    it = {"n": 0}

    def cb(_xk: np.ndarray) -> None:
        it["n"] += 1

    return it, cb


class Cr5Problem(SpectralSteps):
    """The ridge system of Eq. 8-15 over per-language CSR blocks.

    ``blocks[l]`` is ``X_l`` (n_l x p_l, float64 CSR), ``labels[l]`` the class index (0..K-1) of
    each of its rows. Rows are ordered language by language as given.
    """

    bar_options: dict[str, Any] = {}  # extra tqdm options of the progress bars (tests: draw every update)

    def __init__(
        self,
        blocks: Sequence[sp.spmatrix],
        labels: Sequence[np.ndarray],
        n_classes: int,
        lam: float,
        *,
        cg_tol: float = DEFAULTS.cg_tol,
        cg_maxiter: int = DEFAULTS.cg_maxiter,
        woodbury: bool = DEFAULTS.woodbury,
        n_jobs: int = DEFAULTS.n_jobs,
        deflation: int = DEFAULTS.deflation,
        names: Sequence[str] | None = None,
        progress: bool = False,
    ) -> None:
        if len(blocks) != len(labels) or not blocks:
            raise DataError("Cr5Problem: one label array per block, at least one block")
        if not lam > 0:
            raise DataError(f"Cr5: lam must be positive, got {lam!r}")
        self.X = [sp.csr_matrix(b, dtype=np.float64) for b in blocks]
        # X_l^T as the CSC view of X_l's own arrays (no copy): its products scatter over the rows of
        # X_l in ascending order, the order in which a CSR copy of X_l^T would gather them, so the
        # sums are the same bits at none of a copy's memory
        self.XT = [x.T for x in self.X]
        self.labels = [np.asarray(y, dtype=np.int64) for y in labels]
        for x, y in zip(self.X, self.labels):
            if y.shape != (x.shape[0],):
                raise DataError(f"Cr5Problem: {y.shape[0]} labels for a block of {x.shape[0]} rows")
        self.y = np.concatenate(self.labels)
        self.K = int(n_classes)
        if self.y.size and (self.y.min() < 0 or self.y.max() >= self.K):
            raise DataError("Cr5Problem: labels out of range")
        self.lam = float(lam)
        self.cg_tol, self.cg_maxiter = float(cg_tol), int(cg_maxiter)
        self.woodbury = bool(woodbury)
        self.n_jobs = max(1, int(n_jobs))
        self.n = int(sum(x.shape[0] for x in self.X))
        self.row_off = np.concatenate([[0], np.cumsum([x.shape[0] for x in self.X])])
        self.p = [x.shape[1] for x in self.X]
        self.col_off = np.concatenate([[0], np.cumsum(self.p)])
        self.mu = [np.asarray(xt @ np.ones(x.shape[0])).ravel() / self.n for x, xt in zip(self.X, self.XT)]
        # Jacobi preconditioners: diag(B_l) and diag(A) = diag(B) - n mu^2
        self.diag_B = [np.asarray(x.multiply(x).sum(axis=0)).ravel() + self.lam for x in self.X]
        self.stats = SolverStats()
        self._lock = threading.Lock()  # per-language solves may run in threads
        self._w: list[np.ndarray] | None = None
        self._c: float | None = None
        self._pool = None
        self.deflation = max(0, int(deflation))
        self.names = [str(x) for x in names] if names is not None else [str(i) for i in range(len(self.X))]
        self.progress = bool(progress)
        self._pre: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None] = [None] * len(self.X)
        # history of the eigsh phase (matvec inputs u and the per-language B_l^-1 solutions, float32)
        # for warm starts of Eq. 14; allocated by top_eigenvectors
        self._hist_u: np.ndarray | None = None
        self._hist_x: list[np.ndarray] = []
        self._hist_n = 0
        # (P, (C, warm columns)): the warm-start coefficients made for the eigenvectors P as soon as
        # the Lanczos phase ends (the basis is freed then); :meth:`embedding` takes them for that P
        self._warm: tuple = (None, None)

    # ------------------------------------------------------------------ X-hat products
    def xhat_t(self, v: np.ndarray) -> list[np.ndarray]:
        """``Xc^T v`` per language (v: (n,) or (n, m))."""
        s = v.sum(axis=0)
        out = []
        for i, xt in enumerate(self.XT):
            part = xt @ v[self.row_off[i] : self.row_off[i + 1]]
            out.append(part - (np.multiply.outer(self.mu[i], s) if v.ndim == 2 else self.mu[i] * s))
        return out

    def xhat(self, xs: Sequence[np.ndarray]) -> np.ndarray:
        """``Xc x`` for x given per language."""
        m = sum(mu @ x for mu, x in zip(self.mu, xs))
        return np.concatenate([x @ xl for x, xl in zip(self.X, xs)]) - m

    # ------------------------------------------------------------------ solves
    def _cg(self, op, b: np.ndarray, diag: np.ndarray, tol: float, maxiter: int) -> np.ndarray:
        from scipy.sparse.linalg import LinearOperator, cg

        if not np.any(b):
            return np.zeros_like(b)
        pre = LinearOperator(op.shape, matvec=lambda v: v / diag, dtype=np.float64)
        it, cb = _counter()
        x, info = cg(op, b, rtol=tol, atol=0.0, maxiter=maxiter, M=pre, callback=cb)
        with self._lock:
            self.stats.cg_solves += 1
            self.stats.cg_iterations += it["n"]
            self.stats.cg_not_converged += int(info != 0)
        return x

    def _map(self, fn: Callable[[int], np.ndarray], items: Sequence[int]) -> list[np.ndarray]:
        if self.n_jobs == 1 or len(items) == 1:
            return [fn(i) for i in items]
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.n_jobs)
        return list(self._pool.map(fn, items))

    def say(self, msg: str) -> None:
        """One line on stderr when progress is on (what runs next)."""
        if self.progress:
            from tqdm.auto import tqdm

            tqdm.write(msg, file=sys.stderr)

    def preconditioner(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(s, V, f)`` of language ``i`` for :func:`._cg.pcg`: ``s = diag(B_l)^-1/2`` and the
        top-k eigenpairs ``theta, V`` of ``S B_l S`` (eigsh, tol 1e-2, fixed start vector) with
        ``f = 1/theta - 1``; ``k = min(deflation, p_l // 8)`` (0: Jacobi only). On DDTP en/de
        (lam 1), k = 16 cuts CG from ~18 to ~12 iterations per solve."""
        pre = self._pre[i]
        if pre is None:
            from scipy.sparse.linalg import LinearOperator, eigsh

            t0 = time.perf_counter()
            s = 1.0 / np.sqrt(self.diag_B[i])
            p, k = self.p[i], min(self.deflation, self.p[i] // 8)
            V, f = np.zeros((p, 0)), np.zeros(0)
            if k >= 1:
                x, xt, lam = self.X[i], self.XT[i], self.lam
                op = LinearOperator((p, p), matvec=lambda v: s * (xt @ (x @ (s * v)) + lam * (s * v)), dtype=np.float64)
                theta, vecs = eigsh(op, k=k, which="LA", tol=1e-2, v0=np.ones(p))
                if np.all(theta > 0):  # always for a positive definite B_l; otherwise Jacobi only
                    V, f = np.ascontiguousarray(vecs), 1.0 / theta - 1.0
            pre = self._pre[i] = (s, V, f)
            with self._lock:
                self.stats.precond_seconds += time.perf_counter() - t0
        return pre

    def _pcg(self, i: int, b: np.ndarray, tol: float, maxiter: int) -> np.ndarray:
        s, V, f = self.preconditioner(i)
        x = np.zeros(self.p[i])
        X = self.X[i]
        it, ok = _cg.pcg(X.indptr, X.indices, X.data, self.lam, np.ascontiguousarray(b, dtype=np.float64), x, s, V, f, tol, maxiter)
        with self._lock:
            self.stats.cg_solves += 1
            self.stats.cg_iterations += int(it)
            self.stats.cg_not_converged += int(not ok)
        return x

    def solve_B(self, bs: Sequence[np.ndarray], tol: float | None = None, maxiter: int | None = None) -> list[np.ndarray]:
        """``B_l^-1 b_l`` for every language: independent compiled preconditioned CG solves
        (:mod:`._cg`; in ``n_jobs`` threads, which the kernels let run in parallel)."""
        tol = self.cg_tol if tol is None else tol
        maxiter = self.cg_maxiter if maxiter is None else maxiter
        return self._map(lambda i: self._pcg(i, bs[i], tol, maxiter), range(len(bs)))

    def _woodbury_terms(self) -> tuple[list[np.ndarray], float]:
        if self._w is None:
            # w = B^-1 mu enters every solve: solved once, to a tight tolerance
            self._w = self.solve_B(self.mu, tol=min(self.cg_tol, 1e-10), maxiter=max(self.cg_maxiter, 10 * max(self.p)))
            mw = sum(float(m @ w) for m, w in zip(self.mu, self._w))
            denom = 1.0 - self.n * mw
            if not denom > 0:
                raise BackretrievalError(f"Cr5: the centred system is not positive definite (1 - n mu^T w = {denom:g})")
            self._c = self.n / denom
        return self._w, self._c

    def solve_A(self, bs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``(Xc^T Xc + lam I)^-1 b`` (Eq. 13), b given per language."""
        if self.woodbury:
            w, c = self._woodbury_terms()
            xs = self.solve_B(bs)
            coef = c * sum(float(wi @ bi) for wi, bi in zip(w, bs))
            return [x + coef * wi for x, wi in zip(xs, w)]
        return self._split(self._solve_A_direct(np.concatenate(bs)))

    def _record(self, u: np.ndarray, xs: Sequence[np.ndarray]) -> None:
        """Keep ``B_l^-1 b_l(u)`` (float32) while there is room (warm starts of Eq. 14), and ``u``
        where a float32 store for the inputs exists (else the Lanczos basis holds them)."""
        if self._hist_x and self._hist_n < self._hist_x[0].shape[0]:
            if self._hist_u is not None:
                self._hist_u[self._hist_n] = u
            for h, x in zip(self._hist_x, xs):
                h[self._hist_n] = x
            self._hist_n += 1

    def _A_full(self):
        from scipy.sparse.linalg import LinearOperator

        mu = np.concatenate(self.mu)

        def mv(v: np.ndarray) -> np.ndarray:
            parts = self._split(v)
            out = np.concatenate([xt @ (x @ pv) for x, xt, pv in zip(self.X, self.XT, parts)])
            return out - self.n * mu * (mu @ v) + self.lam * v

        return LinearOperator((int(self.col_off[-1]),) * 2, matvec=mv, dtype=np.float64)

    def _solve_A_direct(self, b: np.ndarray) -> np.ndarray:
        mu = np.concatenate(self.mu)
        diag = np.concatenate(self.diag_B) - self.n * mu * mu
        return self._cg(self._A_full(), b, diag, self.cg_tol, self.cg_maxiter)

    def _split(self, v: np.ndarray) -> list[np.ndarray]:
        return [v[self.col_off[i] : self.col_off[i + 1]] for i in range(len(self.p))]

    # ------------------------------------------------------------------ Eq. 12
    def matvec_M(self, u: np.ndarray) -> np.ndarray:
        """``M u`` with ``M = Y^T Xc (Xc^T Xc + lam I)^-1 Xc^T Y`` (Eq. 12 via Eq. 13)."""
        u = np.asarray(u, dtype=np.float64).ravel()
        self.stats.matvecs += 1
        b = self.xhat_t(u[self.y])
        if self.woodbury:
            w, c = self._woodbury_terms()
            xs = self.solve_B(b)
            self._record(u, xs)
            coef = c * sum(float(wi @ bi) for wi, bi in zip(w, b))
            x = [xi + coef * wi for xi, wi in zip(xs, w)]
        else:
            x = self.solve_A(b)
        z = self.xhat(x)
        return np.bincount(self.y, weights=z, minlength=self.K)

    # ------------------------------------------------------------------ Eq. 14 / 15
    def _cg_rows(self, i: int, Bt: np.ndarray, Xt: np.ndarray) -> None:
        """:func:`._cg.pcg` for every row of ``Bt`` (right-hand sides) from the rows of ``Xt``."""
        s, V, f = self.preconditioner(i)
        X = self.X[i]
        its = np.zeros(Bt.shape[0], dtype=np.int64)
        conv = np.zeros(Bt.shape[0], dtype=np.bool_)
        _cg.pcg_rows(X.indptr, X.indices, X.data, self.lam, Bt, Xt, s, V, f, self.cg_tol, self.cg_maxiter, its, conv)
        with self._lock:
            self.stats.cg_solves += Bt.shape[0]
            self.stats.cg_iterations += int(its.sum())
            self.stats.phi_cg_iterations += int(its.sum())
            self.stats.cg_not_converged += int((~conv).sum())

    def solve_A_multi(self, bs: Sequence[np.ndarray], warm: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """``(Xc^T Xc + lam I)^-1`` applied to several right-hand sides (columns), per language.

        Woodbury path: one compiled CG per column and language (columns in ``n_jobs`` threads);
        ``warm[l]`` (columns, optional) are starting points for ``B_l^-1 b_l``."""
        if not self.woodbury:
            cols = [self._solve_A_direct(np.concatenate([b[:, j] for b in bs])) for j in range(bs[0].shape[1])]
            return self._split(np.stack(cols, axis=1))
        w, c = self._woodbury_terms()
        m = bs[0].shape[1]
        Bts = [np.ascontiguousarray(b.T) for b in bs]
        Xts = [np.zeros_like(bt) if warm is None else np.array(warm[i].T, dtype=np.float64, order="C") for i, bt in enumerate(Bts)]
        step = max(1, -(-m // self.n_jobs))
        tasks = [(i, j) for i in range(len(bs)) for j in range(0, m, step)]
        self._map(lambda t: self._cg_rows(t[0], Bts[t[0]][t[1] : t[1] + step], Xts[t[0]][t[1] : t[1] + step]), tasks)
        coef = c * sum(wi @ bi for wi, bi in zip(w, bs))  # (m,)
        return [x.T + np.multiply.outer(wi, coef) for x, wi in zip(Xts, w)]

    def close(self) -> None:
        """Shut down the thread pool of the per-language solves, if one was started."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

