"""Cr5: crosslingual reduced-rank ridge regression (Josifoski, Paskov, Paskov, Jaggi, West; WSDM 2019).

Documents of several languages carry concept labels (the same concept in two languages = a
document and its translation). Cr5 fits one-vs-all ridge regression of the concept one-hot
matrix ``Y`` (n x K) on the stacked bag-of-words matrix ``X`` (n x p, p = sum of the languages'
vocabularies; a row is non-zero only in its own language's block), with the coefficient matrix
``W`` (K x p) constrained to rank r (Eq. 8). ``W = H Phi``; the rows of ``Phi`` (r x p),
made orthonormal, are the embedding map, and its block ``Phi_l`` embeds language ``l``.

Solver (Sec. 3.2 and 5), never densifying X (CSR blocks, one per language):

* ``M = Y^T Xc (Xc^T Xc + lam I)^-1 Xc^T Y`` (Eq. 12; ``Xc`` = column-centred X). Its top-r
  eigenvectors ``P`` come from ``scipy.sparse.linalg.eigsh`` on a LinearOperator whose matvec
  solves Eq. 13 ``(Xc^T Xc + lam I) x = Xc^T Y u`` with conjugate gradients and returns
  ``Y^T Xc x``. Centring ``Y`` (``Y-hat`` in the paper) changes nothing because
  ``Xc^T 1 = 0``, so ``Y`` itself is used.
* ``Xc^T Xc + lam I = B - n mu mu^T`` with ``B = X^T X + lam I`` block-diagonal over
  languages and ``mu = X^T 1 / n``. Woodbury: ``(B - n mu mu^T)^-1 u = B^-1 u + c w (w^T u)``
  with ``w = B^-1 mu`` and ``c = n / (1 - n mu^T w)``, so every solve splits into independent
  per-language CG solves ``B_l x_l = u_l`` (Sec. 5 writes the same as "block-diagonal minus
  rank 1" ``B^-1 - zeta zeta^T``; since ``1 - n mu^T w > 0`` for a positive definite system,
  that ``zeta`` would be imaginary, and the real form is the plus sign used here). The direct
  path (``woodbury=False``) runs one CG on the whole centred system instead; both are checked
  against each other and against a dense closed form in the tests.
* ``Phi* = P^T Y^T Xc (Xc^T Xc + lam I)^-1`` (Eq. 14), solved for all r right-hand sides at
  once with a column-wise (block-vectorised) Jacobi-preconditioned CG per language.
* ``Phi* Phi*^T = Q Lam Q^T`` (Eq. 15); ``Phi = Lam^-1/2 Q^T Phi*`` has orthonormal rows and
  ``W = (P Q) Lam^1/2 Phi`` is the SVD of W. Row signs are fixed (largest entry positive).

CG uses a Jacobi (diagonal) preconditioner, the relative residual tolerance and iteration cap
of Sec. 4.1 (``cg_tol=0.01``, ``cg_maxiter=500``), and eigsh ``tol=0.1``, ``maxiter=250``.

Preprocessing (Sec. 4.1, :mod:`backretrieval.encoders._bow`): lower-cased TF-IDF bag of words,
IDF from the training documents only, vocabulary = the ``max_vocab`` most frequent tokens
after dropping those in fewer than ``min_df`` (3) documents, rows L2-normalised; Japanese and
Chinese as character bigrams. Training documents are filtered by their number of distinct
tokens (``min_words``/``max_words``; the paper keeps Wikipedia articles with 50-1,000 distinct
words; DDTP descriptions have a median of ~37 distinct words and a 5th percentile of ~16, so
the defaults are 5-1,000, which drops only near-empty descriptions), and only concepts present
in at least two languages are kept (the union of pairwise intersections, Fig. 1(a)).

Training regimes (Sec. 4.2, Fig. 1) over a concept-level split (:func:`make_split`): joint
(all languages, one model), pairwise (one language pair), transitive (two languages that share
no training concept, each overlapping with a pivot). Lambda is chosen by validation retrieval
(:func:`select_lambda`). Evaluation (:func:`evaluate_retrieval`): P@1/5/10 with cosine and
CSLS, both directions, held-out queries against a candidate pool of held-out documents.
Word retrieval (:func:`word_retrieval`) ranks the columns of ``Phi``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..core import BackretrievalError, DataError, atomic_write_text
from ..data import Corpus, Dataset
from ..encoders._bow import TfidfBow, fit_tfidf, n_unique_tokens
from ..encoders.cr5 import Cr5Model
from ..search import csls_penalty, rank_of_true
from . import _cr5_cg as _cg

# ====================================================================================== solver


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
        return dataclasses.asdict(self)


def _counter() -> tuple[dict[str, int], Callable]:
    it = {"n": 0}

    def cb(_xk: np.ndarray) -> None:
        it["n"] += 1

    return it, cb


class Cr5Problem:
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
        cg_tol: float = 0.01,
        cg_maxiter: int = 500,
        woodbury: bool = True,
        n_jobs: int = 1,
        deflation: int = 16,
        names: Sequence[str] | None = None,
        progress: bool = False,
    ) -> None:
        if len(blocks) != len(labels) or not blocks:
            raise DataError("Cr5Problem: one label array per block, at least one block")
        if not lam > 0:
            raise DataError(f"Cr5: lam must be positive, got {lam!r}")
        self.X = [sp.csr_matrix(b, dtype=np.float64) for b in blocks]
        self.XT = [x.T.tocsr() for x in self.X]
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
        """``(s, V, f)`` of language ``i`` for :func:`._cr5_cg.pcg`: ``s = diag(B_l)^-1/2`` and the
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
        (:mod:`._cr5_cg`; in ``n_jobs`` threads, which the kernels let run in parallel)."""
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
        """Keep ``u`` and ``B_l^-1 b_l(u)`` (float32) while there is room (warm starts of Eq. 14)."""
        if self._hist_u is not None and self._hist_n < self._hist_u.shape[0]:
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

    def top_eigenvectors(
        self, rank: int, *, tol: float = 0.1, maxiter: int = 250, seed: int = 0, ncv: int | None = None, progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``rank`` eigenpairs of M (eigenvalues descending, vectors K x rank).

        First ARPACK's first Lanczos factorisation (``ncv`` vectors, eigsh's default ``2 rank + 1``)
        by :func:`._cr5_lanczos.lanczos_top`, which is all ARPACK does at Sec. 4.1's tolerance;
        when a Ritz pair misses ``tol`` there, thick restarts from the kept Ritz vectors (up to
        ``maxiter``, ARPACK's matvec count); ``eigsh`` only after a breakdown or ``maxiter``. With
        ``progress`` a bar counts the matvecs against the factorisation's ``ncv + 1`` (a restart
        adds ``ncv - rank``) and says when the Ritz vectors are formed. The matvec inputs and their
        per-language solutions are kept (float32, at most ``ncv + 1`` of them) for the warm starts
        of :meth:`embedding`."""
        from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh
        from tqdm.auto import tqdm

        from ._cr5_lanczos import lanczos_top

        if not 1 <= rank < self.K:
            raise DataError(f"Cr5: rank must be between 1 and the number of training concepts - 1 = {self.K - 1}, got {rank}")
        t0 = time.perf_counter()
        ncv_ = ncv if ncv is not None else min(max(2 * rank + 1, 20), self.K)  # eigsh's default
        if progress:
            self.progress = True
        if self.woodbury:
            self._hist_u = np.empty((ncv_ + 1, self.K), dtype=np.float32)
            self._hist_x = [np.empty((ncv_ + 1, p), dtype=np.float32) for p in self.p]
            self._hist_n = 0
            k = min(self.deflation, min(self.p) // 8)
            self.say(f"Cr5: preconditioners (Jacobi + top-{k} eigenpairs per language) and w = B^-1 mu...")
            self._map(self.preconditioner, range(len(self.X)))
            self._woodbury_terms()

        def new_bar(what: str):
            return tqdm(total=ncv_ + 1, desc=f"Cr5 {what} (rank {rank}, K {self.K:,})", unit="matvec", disable=not progress,
                        **self.bar_options)

        bar = new_bar("Lanczos")

        def mv(u: np.ndarray) -> np.ndarray:
            out = self.matvec_M(u)
            if bar.n >= bar.total:  # ARPACK restarted: ncv - rank more per restart
                bar.total += max(ncv_ - rank, 1)
            bar.update(1)
            if bar.n == ncv_ + 1:
                bar.set_postfix_str("basis complete; forming the Ritz vectors", refresh=True)
            return out

        v0 = np.random.default_rng(seed).standard_normal(self.K)
        res = lanczos_top(mv, v0, rank, ncv_, tol, maxiter=maxiter) if rank < ncv_ < self.K else None
        bar.close()
        if res is not None:
            vals, vecs = res
            self.stats.eig_converged = rank
            self.stats.eig_method = "lanczos"
        else:
            self.stats.eig_method = "arpack"
            self._hist_n = 0
            self.say(f"Cr5: the Lanczos broke down or missed tol={tol:g} after {maxiter} restarts; eigsh (ARPACK)...")
            bar = new_bar("eigsh")
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
                warnings.warn(f"Cr5: eigsh converged to {len(vals)} of {rank} eigenvectors; using those", RuntimeWarning, stacklevel=2)
            finally:
                bar.close()
        order = np.argsort(-vals, kind="stable")
        self.stats.eig_seconds += time.perf_counter() - t0
        return vals[order], vecs[:, order]

    # ------------------------------------------------------------------ Eq. 14 / 15
    def _cg_rows(self, i: int, Bt: np.ndarray, Xt: np.ndarray) -> None:
        """:func:`._cr5_cg.pcg` for every row of ``Bt`` (right-hand sides) from the rows of ``Xt``."""
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

    def _warm_coefficients(self, P: np.ndarray) -> np.ndarray | None:
        """``C`` with ``P ~= U^T C`` over the kept matvec inputs ``U`` (rows): the Ritz vectors lie in
        the span of ARPACK's orthonormal Lanczos basis, so ``C = U P`` and, by linearity,
        ``B_l^-1 b_l(P) ~= C^T H_l`` for the kept solutions ``H_l``. A column of P outside that span
        (its coefficients' norm is not ~1, e.g. after an ARPACK restart overflowed the kept rows)
        gets ``None``-like zero coefficients: a cold start."""
        if self._hist_u is None or self._hist_n == 0:
            return None
        U = self._hist_u[: self._hist_n]
        # ARPACK's first matvec is on the unnormalised start vector (to bring it into the range of M):
        # only the unit-norm Lanczos vectors form the orthonormal basis
        unit = np.abs(np.linalg.norm(U, axis=1) - 1.0) <= 1e-4
        C = U @ P.astype(np.float32)  # (m, r)
        C[~unit] = 0.0
        ok = np.abs(np.linalg.norm(C, axis=0) - np.linalg.norm(P, axis=0)) <= 1e-3 * np.linalg.norm(P, axis=0)
        C[:, ~ok] = 0.0
        self.stats.phi_warm_columns += int(ok.sum())
        return C

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

    def embedding(self, P: np.ndarray) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """``Phi`` with orthonormal rows per language (r x p_l), the singular values of W and
        the (sign-adjusted) eigenvectors ``Q`` of ``Phi* Phi*^T`` (Eq. 15)."""
        from tqdm.auto import tqdm

        t0 = time.perf_counter()
        r = P.shape[1]
        C = self._warm_coefficients(P) if self.woodbury else None
        m = self._hist_n
        Zs = [np.empty((p, r)) for p in self.p]  # Phi*^T per language (p_l x r)
        chunk = max(8, 8 * self.n_jobs)
        self.say(f"Cr5: solving Eq. 14 for {'+'.join(self.names)} ({r} right-hand sides each, {chunk} at a time, "
                 f"{'warm-started from the eigsh solves' if C is not None else 'cold start'})...")
        bar = tqdm(total=r, desc="Cr5 Eq. 14", unit="rhs", disable=not self.progress, **self.bar_options)
        for j0 in range(0, r, chunk):
            cols = slice(j0, min(r, j0 + chunk))
            bs = self.xhat_t(P[self.y, cols])  # Xc^T Y P, these columns
            warm = None if C is None else [(C[:, cols].T @ h[:m]).T for h in self._hist_x]
            for z, x in zip(Zs, self.solve_A_multi(bs, warm)):
                z[:, cols] = x
            bar.update(cols.stop - cols.start)
        bar.close()
        self._hist_u, self._hist_x = None, []  # free the eigsh history
        self.say("Cr5: Eq. 15 (eigendecomposition of Phi* Phi*^T, orthonormal Phi)...")
        G = sum(z.T @ z for z in Zs)  # Phi* Phi*^T
        lam_, Q = np.linalg.eigh(G)
        order = np.argsort(-lam_, kind="stable")
        lam_, Q = lam_[order], Q[:, order]
        if lam_[-1] <= 0:
            raise BackretrievalError("Cr5: Phi* is rank deficient (an eigenvalue of Phi* Phi*^T is not positive)")
        T = Q / np.sqrt(lam_)  # (r x r): Phi = T^T Phi*
        phis = []
        for i in range(len(Zs)):  # one language at a time: Phi*^T is freed as Phi is made
            phis.append(np.ascontiguousarray((Zs[i] @ T).T))
            Zs[i] = None
        # sign convention: the largest-magnitude entry of each row (over all languages; the first
        # one on ties) is positive
        best, val = np.full(r, -1.0), np.zeros(r)
        for ph in phis:
            v = ph[np.arange(r), np.argmax(np.abs(ph), axis=1)]
            better = np.abs(v) > best
            best[better], val[better] = np.abs(v[better]), v[better]
        sign = np.sign(val)
        sign[sign == 0] = 1.0
        for ph in phis:
            ph *= sign[:, None]
        self.stats.phi_seconds += time.perf_counter() - t0
        return phis, np.sqrt(lam_), Q * sign

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


@dataclasses.dataclass
class Cr5Solution:
    """``phi``: per language ``Phi_l`` (r x p_l, rows orthonormal across languages);
    ``singular_values``: of W (descending); ``eigenvalues``: the top of M (Eq. 12);
    ``H``: K x r with ``W = H Phi`` (Eq. 3), i.e. ``H = P Q Lam^1/2``; ``stats``."""

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
    ``deflation`` is the rank of the preconditioner's spectral correction (0: Jacobi only)."""
    try:  # installed with scikit-learn
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        import contextlib

        def threadpool_limits(_n: int) -> contextlib.AbstractContextManager:  # type: ignore[misc]
            return contextlib.nullcontext()

    # scipy's own BLAS (loaded by scipy.linalg, which ARPACK and the Lanczos use) must be loaded before the
    # limit below: threadpoolctl limits only the libraries already loaded (measured: 2 threads otherwise)
    import scipy.sparse.linalg  # noqa: F401

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


# ====================================================================================== estimator


def _corpora(corpus: Dataset | Mapping[str, Corpus]) -> dict[str, Corpus]:
    if isinstance(corpus, Dataset):
        return dict(corpus.corpora)
    if isinstance(corpus, Mapping):
        for lang, c in corpus.items():
            if not isinstance(c, Corpus):
                raise DataError(f"Cr5.fit: the value for language {lang!r} is {type(c).__name__}, not a Corpus")
        return dict(corpus)
    raise DataError(f"Cr5.fit: expected a Dataset or a mapping language -> Corpus, got {type(corpus).__name__}")


class Cr5:
    """Crosslingual reduced-rank ridge regression, scikit-learn style.

    >>> model = Cr5(rank=300, lam=1.0).fit(dataset)          # doctest: +SKIP
    >>> vecs = model.transform(["a text"], "en")             # doctest: +SKIP
    >>> model.save("models/cr5-ddtp")                         # doctest: +SKIP

    ``fit`` takes a :class:`~backretrieval.data.Dataset` or a mapping language -> Corpus whose
    items carry concepts. Learned attributes: ``languages_``, ``vocabulary_`` and ``idf_`` (per
    language), ``components_`` (per language, ``Phi_l``: rank x |V_l| float32, orthonormal rows
    across languages), ``singular_values_`` (of W), ``eigenvalues_`` (top of M, Eq. 12),
    ``n_documents_`` (per language), ``n_concepts_``, ``stats_`` and ``fit_seconds_``.
    """

    def __init__(
        self,
        rank: int = 300,
        lam: float = 1.0,
        *,
        max_vocab: int | None = 200_000,
        min_df: int = 3,
        min_words: int = 5,
        max_words: int | None = 1000,
        min_languages: int = 2,
        cg_tol: float = 0.01,
        cg_maxiter: int = 500,
        eig_tol: float = 0.1,
        eig_maxiter: int = 250,
        woodbury: bool = True,
        seed: int = 0,
        n_jobs: int = 1,
        progress: bool = False,
    ) -> None:
        self.rank = rank
        self.lam = lam
        self.max_vocab = max_vocab
        self.min_df = min_df
        self.min_words = min_words
        self.max_words = max_words
        self.min_languages = min_languages
        self.cg_tol = cg_tol
        self.cg_maxiter = cg_maxiter
        self.eig_tol = eig_tol
        self.eig_maxiter = eig_maxiter
        self.woodbury = woodbury
        self.seed = seed
        self.n_jobs = n_jobs
        self.progress = progress

    def get_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _HYPER}

    def _check(self) -> None:
        def pos_int(name: str, allow_none: bool = False) -> None:
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise DataError(f"Cr5: {name} must be a positive integer, got {v!r}")

        for name in ("rank", "min_df", "cg_maxiter", "eig_maxiter", "n_jobs", "min_languages"):
            pos_int(name)
        for name in ("max_vocab", "max_words"):
            pos_int(name, allow_none=True)
        if not isinstance(self.min_words, (int, np.integer)) or self.min_words < 0:
            raise DataError(f"Cr5: min_words must be a non-negative integer, got {self.min_words!r}")
        if self.max_words is not None and self.max_words < self.min_words:
            raise DataError(f"Cr5: max_words={self.max_words} is below min_words={self.min_words}")
        for name in ("lam", "cg_tol", "eig_tol"):
            v = getattr(self, name)
            if not isinstance(v, (int, float, np.floating)) or isinstance(v, bool) or not v > 0 or not math.isfinite(v):
                raise DataError(f"Cr5: {name} must be a positive number, got {v!r}")

    # ------------------------------------------------------------------ fit
    def select_documents(self, corpus: Dataset | Mapping[str, Corpus]) -> dict[str, np.ndarray]:
        """Rows of each language used for training: a concept, ``min_words`` <= distinct tokens
        <= ``max_words``, and a concept present in at least ``min_languages`` languages."""
        corpora = _corpora(corpus)
        rows: dict[str, np.ndarray] = {}
        for lang, c in corpora.items():
            if c.concepts is None:
                raise DataError(f"Cr5.fit: corpus {c.dataset}/{lang} has no concepts (cross-lingual labels)")
            has = np.fromiter((x is not None for x in c.concepts), dtype=bool, count=len(c))
            nw = n_unique_tokens(c.texts)
            ok = has & (nw >= self.min_words)
            if self.max_words is not None:
                ok &= nw <= self.max_words
            rows[lang] = np.flatnonzero(ok)
        count: dict[str, int] = {}
        for lang, r in rows.items():
            for cpt in {corpora[lang].concepts[i] for i in r}:
                count[cpt] = count.get(cpt, 0) + 1
        return {
            lang: r[np.fromiter((count[corpora[lang].concepts[i]] >= self.min_languages for i in r), dtype=bool, count=len(r))]
            for lang, r in rows.items()
        }

    def fit(self, corpus: Dataset | Mapping[str, Corpus]) -> "Cr5":
        """Learn vocabularies, IDF and ``Phi`` from concept-labelled documents (see the class doc)."""
        self._check()
        t0 = time.perf_counter()
        corpora = _corpora(corpus)
        if len(corpora) < 2:
            raise DataError(f"Cr5.fit: needs at least two languages, got {sorted(corpora)}")
        langs = sorted(corpora)
        rows = self.select_documents(corpora)
        blocks, labels, vocab, idf, ndocs = [], [], {}, {}, {}
        concept_index: dict[str, int] = {}
        for lang in langs:
            c = corpora[lang]
            r = rows[lang]
            if r.size == 0:
                raise DataError(
                    f"Cr5.fit: no training document left for {c.dataset}/{lang} (concepts shared with another "
                    f"language and {self.min_words}-{self.max_words} distinct tokens)"
                )
            texts = [c.texts[i] for i in r]
            vocab[lang], idf[lang] = fit_tfidf(texts, min_df=self.min_df, max_features=self.max_vocab)
            x = TfidfBow(vocab[lang], idf[lang]).transform(texts)
            nonzero = np.diff(x.indptr) > 0
            x = x[nonzero]
            cpts = [c.concepts[i] for i, keep in zip(r, nonzero) if keep]
            blocks.append(x)
            labels.append(np.fromiter((concept_index.setdefault(k, len(concept_index)) for k in cpts), dtype=np.int64, count=len(cpts)))
            ndocs[lang] = int(x.shape[0])
        t_prep = time.perf_counter() - t0
        sol = solve(
            blocks,
            labels,
            len(concept_index),
            rank=int(self.rank),
            lam=float(self.lam),
            cg_tol=float(self.cg_tol),
            cg_maxiter=int(self.cg_maxiter),
            eig_tol=float(self.eig_tol),
            eig_maxiter=int(self.eig_maxiter),
            woodbury=bool(self.woodbury),
            seed=int(self.seed),
            n_jobs=int(self.n_jobs),
            progress=bool(self.progress),
            names=langs,
        )
        self.languages_ = langs
        self.vocabulary_ = vocab
        self.idf_ = idf
        self.components_ = {lang: ph.astype(np.float32) for lang, ph in zip(langs, sol.phi)}
        self.singular_values_ = sol.singular_values
        self.eigenvalues_ = sol.eigenvalues
        self.n_documents_ = ndocs
        self.n_concepts_ = len(concept_index)
        self.stats_ = sol.stats.as_dict()
        self.preprocess_seconds_ = round(t_prep, 3)
        self.fit_seconds_ = round(time.perf_counter() - t0, 3)
        self._model = self._make_model()
        return self

    # ------------------------------------------------------------------ use
    def _make_model(self) -> Cr5Model:
        meta = {
            "hyper_parameters": self.get_params(),
            "training": {
                "n_documents": self.n_documents_,
                "n_concepts": self.n_concepts_,
                "eigenvalues": [float(v) for v in self.eigenvalues_],
                "fit_seconds": self.fit_seconds_,
                "preprocess_seconds": self.preprocess_seconds_,
                "solver": self.stats_,
            },
        }
        meta.update(getattr(self, "extra_meta_", {}))
        return Cr5Model(self.vocabulary_, self.idf_, self.components_, self.singular_values_, meta)

    def _fitted(self) -> Cr5Model:
        model = getattr(self, "_model", None)
        if model is None:
            raise BackretrievalError("Cr5: not fitted yet (call fit or Cr5.load)")
        return model

    @property
    def model_(self) -> Cr5Model:
        return self._fitted()

    def transform(self, texts: Sequence[str], lang: str) -> np.ndarray:
        """float32 (n, rank) embeddings ``Phi_l x`` (all-zero for a text without a known token)."""
        return self._fitted().transform(texts, lang)

    def word_vectors(self, lang: str) -> tuple[list[str], np.ndarray]:
        """Vocabulary of ``lang`` and its word vectors (columns of ``Phi_l``, as rows)."""
        return self._fitted().word_vectors(lang)

    def save(self, path: str | Path, **extra_meta: Any) -> Path:
        """Write the model directory (``encoders/cr5.py`` format; usable as ``cr5:PATH``)."""
        model = self._fitted()
        if extra_meta:
            model.meta.update(extra_meta)
        return model.save(path)

    @classmethod
    def load(cls, path: str | Path) -> "Cr5":
        """An estimator holding the model of a saved directory (hyper-parameters restored)."""
        model = Cr5Model.load(path)
        hp = {k: v for k, v in model.meta.get("hyper_parameters", {}).items() if k in _HYPER}
        est = cls(**hp)
        tr = model.meta.get("training", {})
        est.languages_ = list(model.languages)
        est.vocabulary_ = {lang: model.bow[lang].vocabulary for lang in model.languages}
        est.idf_ = {lang: model.bow[lang].idf for lang in model.languages}
        est.components_ = dict(model.phi)
        est.singular_values_ = model.singular_values
        est.eigenvalues_ = np.asarray(tr.get("eigenvalues", []), dtype=np.float64)
        est.n_documents_ = tr.get("n_documents", {})
        est.n_concepts_ = tr.get("n_concepts")
        est.stats_ = tr.get("solver", {})
        est.fit_seconds_ = tr.get("fit_seconds")
        est.preprocess_seconds_ = tr.get("preprocess_seconds")
        est._model = model
        return est


_HYPER = (
    "rank", "lam", "max_vocab", "min_df", "min_words", "max_words", "min_languages", "cg_tol", "cg_maxiter",
    "eig_tol", "eig_maxiter", "woodbury", "seed", "n_jobs", "progress",
)

# ====================================================================================== splits and regimes


def _pair_key(a: str, b: str) -> str:
    return f"{a}-{b}"


@dataclasses.dataclass
class Split:
    """A concept-level split (Sec. 4.2): per evaluated pair ``test`` and ``val`` query concepts,
    plus ``distractors`` held out only to enlarge the candidate pools. Every other concept may
    be trained on. Unordered pairs are keyed ``"a-b"`` in the order given."""

    languages: list[str]
    pairs: list[tuple[str, str]]
    test: dict[str, list[str]]
    val: dict[str, list[str]]
    distractors: list[str]
    seed: int
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def heldout(self) -> set[str]:
        out = set(self.distractors)
        for d in (self.test, self.val):
            for v in d.values():
                out.update(v)
        return out

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"pairs": [list(p) for p in self.pairs]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Split":
        return cls(
            languages=list(d["languages"]),
            pairs=[tuple(p) for p in d["pairs"]],
            test={k: list(v) for k, v in d["test"].items()},
            val={k: list(v) for k, v in d["val"].items()},
            distractors=list(d["distractors"]),
            seed=int(d["seed"]),
            options=dict(d.get("options", {})),
        )

    def save(self, path: str | Path) -> None:
        atomic_write_text(path, json.dumps(self.to_json()))

    @classmethod
    def load(cls, path: str | Path) -> "Split":
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def _concepts(c: Corpus) -> set[str]:
    return {x for x in (c.concepts or []) if x is not None}


def make_split(
    ds: Dataset | Mapping[str, Corpus],
    pairs: Sequence[tuple[str, str]],
    *,
    test_size: int = 1000,
    val_size: int = 500,
    max_test_frac: float = 0.2,
    max_val_frac: float = 0.1,
    distractor_frac: float = 0.05,
    seed: int = 0,
) -> Split:
    """Hold out, per unordered pair, ``min(test_size, max_test_frac * I)`` test and
    ``min(val_size, max_val_frac * I)`` validation concepts among the I concepts the two
    languages share, then ``distractor_frac`` of all other concepts as extra retrieval
    candidates. Every held-out concept is out of all training sets and has one role (test or
    validation) for all pairs. Pairs go in order of increasing I; a pair first reuses concepts
    smaller pairs already hold out in the same role, then draws new ones uniformly, so many
    overlapping languages do not strip the low-resource ones of their training data (the
    price: a large pair's queries over-represent concepts that small languages also have).
    Deterministic in ``seed``."""
    corpora = _corpora(ds)
    langs = sorted(corpora)
    rng = np.random.default_rng(seed)
    test: dict[str, list[str]] = {}
    val: dict[str, list[str]] = {}
    norm_pairs: list[tuple[str, str]] = []
    inters: dict[tuple[str, str], list[str]] = {}
    for a, b in pairs:
        for lang in (a, b):
            if lang not in corpora:
                raise DataError(f"make_split: pair {a}-{b}: language {lang!r} not loaded (have {', '.join(langs)})")
        if a == b:
            raise DataError(f"make_split: pair {a}-{b} has the same language twice")
        if (a, b) in inters or (b, a) in inters:
            continue
        norm_pairs.append((a, b))
        inters[(a, b)] = sorted(_concepts(corpora[a]) & _concepts(corpora[b]))
    # Smallest intersections first. A pair's queries are drawn first from the concepts that
    # smaller pairs already hold out in the same role (they are out of training anyway), then
    # uniformly from the rest: with many languages whose concepts overlap (DDTP), per-pair
    # sampling would otherwise strip most training data from the low-resource languages.
    role: dict[str, str] = {}
    for a, b in sorted(norm_pairs, key=lambda p: (len(inters[p]), p)):
        inter = inters[(a, b)]
        n_test = min(test_size, int(max_test_frac * len(inter)))
        n_val = min(val_size, int(max_val_frac * len(inter)))
        if n_test < 1:
            raise DataError(f"make_split: {a} and {b} share {len(inter)} concepts: too few to hold out test queries")
        key = _pair_key(a, b)
        for name, n, store in (("test", n_test, test), ("val", n_val, val)):
            reuse = [c for c in inter if role.get(c) == name]
            if len(reuse) >= n:
                chosen = [reuse[i] for i in rng.permutation(len(reuse))[:n]]
            else:
                fresh = [c for c in inter if c not in role]
                if len(fresh) < n - len(reuse):
                    raise DataError(f"make_split: {a}-{b}: not enough shared concepts left for {n} {name} queries")
                chosen = reuse + [fresh[i] for i in rng.permutation(len(fresh))[: n - len(reuse)]]
            for c in chosen:
                role[c] = name
            store[key] = sorted(chosen)
    taken = set(role)
    rest = sorted(set().union(*(_concepts(c) for c in corpora.values())) - taken)
    n_d = int(round(distractor_frac * len(rest)))
    distractors = sorted(rest[i] for i in rng.permutation(len(rest))[:n_d])
    return Split(
        langs,
        norm_pairs,
        test,
        val,
        distractors,
        seed,
        {
            "test_size": test_size, "val_size": val_size, "max_test_frac": max_test_frac,
            "max_val_frac": max_val_frac, "distractor_frac": distractor_frac,
        },
    )


REGIMES = ("joint", "pairwise", "transitive")


def training_corpora(
    ds: Dataset | Mapping[str, Corpus],
    split: Split,
    regime: str = "joint",
    *,
    pair: tuple[str, str] | None = None,
    pivot: str | None = None,
    languages: Sequence[str] | None = None,
) -> dict[str, Corpus]:
    """The training documents of a regime (Fig. 1), as corpora per language.

    * ``joint`` -- all ``languages`` (default: the split's); every non-held-out concept in at
      least two of them (the union of the pairwise intersections).
    * ``pairwise`` -- the two languages of ``pair``; their shared non-held-out concepts.
    * ``transitive`` -- ``pair`` and ``pivot``: concepts shared by a pair language and the pivot,
      minus every concept the two pair languages share, so they have no training concept in
      common and are linked only through the pivot.
    """
    corpora = _corpora(ds)
    held = split.heldout
    if regime not in REGIMES:
        raise DataError(f"unknown training regime {regime!r}; use one of {', '.join(REGIMES)}")
    if regime == "joint":
        langs = list(languages or split.languages)
        for lang in langs:
            if lang not in corpora:
                raise DataError(f"joint training: language {lang!r} not loaded")
        count: dict[str, int] = {}
        for lang in langs:
            for c in _concepts(corpora[lang]) - held:
                count[c] = count.get(c, 0) + 1
        allowed = {lang: {c for c in _concepts(corpora[lang]) - held if count[c] >= 2} for lang in langs}
    else:
        if pair is None or len(pair) != 2 or pair[0] == pair[1]:
            raise DataError(f"{regime} training needs a pair of two different languages, got {pair!r}")
        a, b = pair
        for lang in (a, b):
            if lang not in corpora:
                raise DataError(f"{regime} training: language {lang!r} not loaded")
        ca, cb = _concepts(corpora[a]) - held, _concepts(corpora[b]) - held
        if regime == "pairwise":
            both = ca & cb
            allowed = {a: both, b: both}
        else:
            if pivot is None or pivot in (a, b) or pivot not in corpora:
                raise DataError(f"transitive training of {a}-{b} needs a third, loaded pivot language, got {pivot!r}")
            cp = _concepts(corpora[pivot]) - held
            shared_ab = ca & cb
            a_p, b_p = (ca & cp) - shared_ab, (cb & cp) - shared_ab
            allowed = {a: a_p, b: b_p, pivot: a_p | b_p}
    out = {}
    for lang, keep in allowed.items():
        c = corpora[lang]
        idx = [i for i, k in enumerate(c.concepts) if k in keep]
        if not idx:
            raise DataError(f"{regime} training: no training document for {lang!r}")
        out[lang] = c.subset(idx)
    return out


# ====================================================================================== evaluation


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; an all-zero row (no known token) stays zero (scores 0)."""
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, n, out=np.zeros_like(x), where=n > 0)


def candidate_rows(ds: Dataset | Mapping[str, Corpus], split: Split, lang: str, phase: str = "test") -> np.ndarray:
    """Rows of ``lang`` in the retrieval pool of ``phase``: documents whose concept is not used for
    joint training -- the held-out concepts (minus the other phase's queries) and concepts that
    no other language of the split has."""
    corpora = _corpora(ds)
    c = corpora[lang]
    other = split.val if phase == "test" else split.test
    excluded = set().union(*other.values()) if other else set()
    held = split.heldout - excluded
    count: dict[str, int] = {}
    for lg in split.languages:
        for k in _concepts(corpora[lg]):
            count[k] = count.get(k, 0) + 1
    return np.array(
        [i for i, k in enumerate(c.concepts) if k is not None and (k in held or count.get(k, 0) < 2)], dtype=np.int64
    )


def retrieval_precision(
    q: np.ndarray, d: np.ndarray, truth: np.ndarray, *, q_pool: np.ndarray | None = None, sim: str = "cosine",
    csls_k: int = 10, ks: Sequence[int] = (1, 5, 10),
) -> dict[str, float]:
    """P@k (the share of queries whose true candidate ranks <= k; pessimistic ties) of queries
    ``q`` against candidates ``d``. CSLS: ``2 cos - r_D(q) - r_Q(d)`` with ``r`` the mean
    similarity to the ``csls_k`` nearest items of the other side (``q_pool``, default ``q``)."""
    Q, D = _unit(q), _unit(d)
    if sim == "cosine":
        kw: dict[str, Any] = {}
    elif sim == "csls":
        QP = Q if q_pool is None else _unit(q_pool)
        kw = {"scale": 2.0, "q_bias": csls_penalty(Q, D, min(csls_k, D.shape[0])),
              "d_bias": csls_penalty(D, QP, min(csls_k, QP.shape[0]))}
    else:
        raise DataError(f"unknown similarity {sim!r}; use cosine or csls")
    ranks = rank_of_true(Q, D, truth, **kw)
    out = {f"p@{k}": float(np.mean(ranks <= k)) for k in ks}
    out["mrr"] = float(np.mean(1.0 / ranks))
    return out


def evaluate_retrieval(
    embed: Callable[[Sequence[str], str], np.ndarray],
    ds: Dataset | Mapping[str, Corpus],
    split: Split,
    pairs: Sequence[tuple[str, str]] | None = None,
    *,
    phase: str = "test",
    sims: Sequence[str] = ("cosine", "csls"),
    csls_k: int = 10,
    ks: Sequence[int] = (1, 5, 10),
) -> list[dict[str, Any]]:
    """Document retrieval of Sec. 4.2 for each pair and both directions: the ``phase`` (test or
    val) queries of the pair against the target language's candidate pool. ``embed(texts,
    lang)`` gives the vectors (e.g. ``Cr5.transform``). One record per (pair, direction, sim)."""
    if phase not in ("test", "val"):
        raise DataError(f"phase must be 'test' or 'val', got {phase!r}")
    corpora = _corpora(ds)
    pairs = list(split.pairs if pairs is None else pairs)
    queries = split.test if phase == "test" else split.val
    pool_rows: dict[str, np.ndarray] = {}
    pool_vecs: dict[str, np.ndarray] = {}
    for a, b in pairs:
        for lang in (a, b):
            if lang not in pool_rows:
                pool_rows[lang] = candidate_rows(corpora, split, lang, phase)
                c = corpora[lang]
                pool_vecs[lang] = embed([c.texts[i] for i in pool_rows[lang]], lang)
    out = []
    for a, b in pairs:
        key = _pair_key(a, b) if _pair_key(a, b) in queries else _pair_key(b, a)
        if key not in queries:
            raise DataError(f"pair {a}-{b} has no {phase} queries in the split (pairs: {', '.join(queries)})")
        concepts = queries[key]
        for s, t in ((a, b), (b, a)):
            pos_s = {corpora[s].concepts[i]: j for j, i in enumerate(pool_rows[s])}
            pos_t = {corpora[t].concepts[i]: j for j, i in enumerate(pool_rows[t])}
            qi = np.array([pos_s[c] for c in concepts], dtype=np.int64)
            ti = np.array([pos_t[c] for c in concepts], dtype=np.int64)
            for sim in sims:
                rec = {"src": s, "tgt": t, "sim": sim, "phase": phase, "n_queries": len(concepts),
                       "n_candidates": int(len(pool_rows[t]))}
                rec.update(retrieval_precision(pool_vecs[s][qi], pool_vecs[t], ti, q_pool=pool_vecs[s], sim=sim,
                                               csls_k=csls_k, ks=ks))
                out.append(rec)
    return out


def mean_score(records: Sequence[Mapping[str, Any]], key: str = "p@1", sim: str | None = None) -> float:
    """Mean of ``key`` over records (optionally one similarity only): the lambda-selection score."""
    vals = [r[key] for r in records if sim is None or r["sim"] == sim]
    if not vals:
        raise DataError(f"no records to average ({key}, sim={sim})")
    return float(np.mean(vals))


def select_lambda(
    make: Callable[[float], Cr5],
    train: Mapping[str, Corpus],
    ds: Dataset | Mapping[str, Corpus],
    split: Split,
    lams: Sequence[float],
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    key: str = "p@1",
    sim: str | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> tuple[Cr5, float, list[dict[str, Any]]]:
    """Fit ``make(lam)`` on ``train`` for every lambda and keep the one with the best mean
    validation ``key`` (over pairs, directions and ``sim``; ties: the smaller lambda).
    Returns the chosen fitted model, its lambda and one record per lambda."""
    if not lams:
        raise DataError("select_lambda: no lambda given")
    best: tuple[float, float, Cr5] | None = None
    table = []
    for lam in sorted(set(float(x) for x in lams)):
        model = make(lam).fit(train)
        recs = evaluate_retrieval(model.transform, ds, split, pairs, phase="val")
        score = mean_score(recs, key, sim)
        table.append({"lam": lam, f"val_{key}": score, "fit_seconds": model.fit_seconds_})
        log(f"lambda={lam:g}: validation {key}={score:.4f} ({model.fit_seconds_:.0f}s)")
        if best is None or score > best[0]:
            best = (score, lam, model)
    assert best is not None
    return best[2], best[1], table


# ====================================================================================== word retrieval


def word_retrieval(
    model: Cr5 | Cr5Model,
    dictionary: Sequence[tuple[str, str]],
    src: str,
    tgt: str,
    *,
    sims: Sequence[str] = ("cosine", "csls"),
    csls_k: int = 10,
    ks: Sequence[int] = (1, 5, 10),
) -> list[dict[str, Any]]:
    """Word translation retrieval (Sec. 4.4) with the columns of ``Phi`` as word vectors: each
    dictionary source word (lower-cased, in the source vocabulary) queries the whole target
    vocabulary; a hit is any listed translation within the top k. Pairs whose words are not in
    the vocabularies are skipped (counted in ``n_skipped``)."""
    m = model.model_ if isinstance(model, Cr5) else model
    sv, sx = m.word_vectors(src)
    tv, tx = m.word_vectors(tgt)
    s_idx = {w: i for i, w in enumerate(sv)}
    t_idx = {w: i for i, w in enumerate(tv)}
    gold: dict[int, set[int]] = {}
    skipped = 0
    for a, b in dictionary:
        a, b = a.strip().lower(), b.strip().lower()
        if a in s_idx and b in t_idx:
            gold.setdefault(s_idx[a], set()).add(t_idx[b])
        else:
            skipped += 1
    if not gold:
        raise DataError(f"word retrieval {src}->{tgt}: no dictionary pair has both words in the vocabularies")
    qs = np.array(sorted(gold), dtype=np.int64)
    Q, D = _unit(sx[qs]), _unit(tx)
    out = []
    for sim in sims:
        kw: dict[str, Any] = {}
        if sim == "csls":
            kw = {"scale": 2.0, "q_bias": csls_penalty(Q, D, csls_k), "d_bias": csls_penalty(D, _unit(sx), csls_k)}
        # best (smallest) pessimistic rank among the listed translations
        best = np.full(len(qs), np.iinfo(np.int64).max)
        max_alts = max(len(v) for v in gold.values())
        for j in range(max_alts):
            truth = np.array([sorted(gold[q])[min(j, len(gold[q]) - 1)] for q in qs], dtype=np.int64)
            best = np.minimum(best, rank_of_true(Q, D, truth, **kw))
        rec = {"src": src, "tgt": tgt, "sim": sim, "n_queries": int(len(qs)), "n_skipped": skipped,
               "n_candidates": int(D.shape[0])}
        rec.update({f"p@{k}": float(np.mean(best <= k)) for k in ks})
        out.append(rec)
    return out


# ====================================================================================== experiments


def precision_table_md(records: Sequence[Mapping[str, Any]], ks: Sequence[int] = (1, 5, 10)) -> str:
    """Markdown table in the layout of the paper's Table 1: one row per directed pair, P@k
    (percent) with cosine then CSLS, and the number of queries and candidates."""
    by: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for r in records:
        by.setdefault((r["src"], r["tgt"]), {})[r["sim"]] = r
    sims = [s for s in ("cosine", "csls") if any(s in v for v in by.values())]
    head = "| query | target | " + " | ".join(f"{s} P@{k}" for s in sims for k in ks) + " | queries | candidates |"
    lines = [head, "|---|---|" + "---:|" * (len(sims) * len(ks) + 2)]
    for (s, t), recs in by.items():
        cells = [f"{100 * recs[sim][f'p@{k}']:.1f}" if sim in recs else "-" for sim in sims for k in ks]
        any_rec = next(iter(recs.values()))
        lines.append(f"| {s} | {t} | " + " | ".join(cells) + f" | {any_rec['n_queries']} | {any_rec['n_candidates']} |")
    return "\n".join(lines)


def default_eval_pairs(regime: str, languages: Sequence[str], pair: tuple[str, str] | None) -> list[tuple[str, str]]:
    """Pairs evaluated when none are given: the trained pair (pairwise, transitive), else the
    first language with every other one (joint)."""
    if regime in ("pairwise", "transitive"):
        if pair is None:
            raise DataError(f"{regime} training needs a pair")
        return [tuple(pair)]
    return [(languages[0], lang) for lang in languages[1:]]


def train_evaluate(
    ds: Dataset | Mapping[str, Corpus],
    *,
    regime: str = "joint",
    languages: Sequence[str] | None = None,
    pair: tuple[str, str] | None = None,
    pivot: str | None = None,
    eval_pairs: Sequence[tuple[str, str]] | None = None,
    lams: Sequence[float] = (1.0,),
    split: Split | None = None,
    split_options: Mapping[str, Any] | None = None,
    holdout: bool = True,
    params: Mapping[str, Any] | None = None,
    out_dir: str | Path | None = None,
    meta: Mapping[str, Any] | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> dict[str, Any]:
    """Split, train a regime (lambda by validation when several are given), evaluate on the
    test queries and (with ``out_dir``) write the model directory plus ``split.json``,
    ``eval.json``, ``eval.md`` and ``heldout.jsonl`` (:func:`write_heldout`). ``holdout=False`` trains on every concept (a model for use
    elsewhere; no evaluation, one lambda)."""
    corpora = _corpora(ds)
    langs = list(languages) if languages else sorted(corpora)
    if regime == "pairwise" and pair is None and len(langs) == 2:
        pair = (langs[0], langs[1])
    if regime == "transitive" and (pair is None or pivot is None) and len(langs) == 3 and pivot in langs:
        pair = tuple(x for x in langs if x != pivot)  # type: ignore[assignment]
    params = dict(params or {})
    lams = [float(x) for x in lams]
    t0 = time.perf_counter()
    result: dict[str, Any] = {"regime": regime, "languages": langs, "pair": pair, "pivot": pivot}
    if not holdout:
        if len(lams) != 1:
            raise DataError("training without held-out concepts cannot choose lambda: give one lambda")
        if regime == "joint":
            train = {lang: corpora[lang] for lang in langs}
        else:
            empty = Split(langs, [], {}, {}, [], 0)
            train = training_corpora(corpora, empty, regime, pair=pair, pivot=pivot)
        model = Cr5(lam=lams[0], **params).fit(train)
        result.update(model=model, lam=lams[0], lambda_table=[], test=[], split=None)
    else:
        pairs = list(eval_pairs) if eval_pairs else default_eval_pairs(regime, langs, pair)
        if split is None:
            split = make_split({lang: corpora[lang] for lang in langs}, pairs, **dict(split_options or {}))
        train = training_corpora(corpora, split, regime, pair=pair, pivot=pivot, languages=langs)
        log(f"{regime} training: " + ", ".join(f"{lang} {len(c)} docs" for lang, c in train.items()))
        model, lam, table = select_lambda(lambda lam: Cr5(lam=lam, **params), train, corpora, split, lams, pairs=pairs, log=log)
        test = evaluate_retrieval(model.transform, corpora, split, pairs, phase="test")
        result.update(model=model, lam=lam, lambda_table=table, test=test, split=split)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    if out_dir is not None:
        out = Path(out_dir)
        info = {
            **dict(meta or {}),
            "regime": regime,
            "pair": list(pair) if pair else None,
            "pivot": pivot,
            "lambda_selection": result["lambda_table"],
            "heldout": bool(holdout),
        }
        model.save(out, experiment=info)
        if result["split"] is not None:
            result["split"].save(out / "split.json")
            atomic_write_text(out / "eval.json", json.dumps({**info, "lam": result["lam"], "test": result["test"]}, indent=1))
            md = (
                f"# Cr5 {regime} ({', '.join(model.languages_)}), rank {model.rank}, lambda {result['lam']:g}\n\n"
                f"P@k in percent on held-out test concepts, query -> target candidate pool.\n\n"
                + precision_table_md(result["test"]) + "\n"
            )
            atomic_write_text(out / "eval.md", md)
            write_heldout(corpora, result["split"], out / "heldout.jsonl")
    return result


def write_heldout(ds: Dataset | Mapping[str, Corpus], split: Split, path: str | Path, phase: str = "test") -> int:
    """Write the documents of the ``phase`` candidate pools (held-out concepts only) of every
    language of the split as a ``generic`` dataset file (JSON lines: id, lang, text, concept), so
    that ``backretrieval evaluate --dataset PATH --models cr5:DIR,...`` compares models on
    concepts the Cr5 model never saw. Returns the number of rows."""
    corpora = _corpora(ds)
    lines = []
    for lang in split.languages:
        c = corpora[lang]
        for i in candidate_rows(corpora, split, lang, phase):
            lines.append(json.dumps({"id": c.ids[i], "lang": lang, "text": c.texts[i], "concept": c.concepts[i]}, ensure_ascii=False))
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


def single_token_dictionary(ds: Dataset | Mapping[str, Corpus], src: str, tgt: str, field: str | None = "title") -> list[tuple[str, str]]:
    """A bilingual word list from concept-aligned short texts: the pairs of items of the same
    concept whose text (``extra[field]``, else the text) is a single token (:func:`tokenize`) in
    both languages -- e.g. emoji-cldr names: 🐈 "cat" / "Katze". Sorted, without duplicates."""
    from ..encoders._bow import tokenize

    corpora = _corpora(ds)

    def single(c: Corpus) -> dict[str, set[str]]:
        col = c.extra.get(field) if field else None
        texts = col if col is not None else c.texts
        out: dict[str, set[str]] = {}
        for k, t in zip(c.concepts or [], texts):
            toks = tokenize(str(t))
            if k is not None and len(toks) == 1:
                out.setdefault(k, set()).add(toks[0])
        return out

    s, t = single(corpora[src]), single(corpora[tgt])
    return sorted({(a, b) for k in s.keys() & t.keys() for a in s[k] for b in t[k]})
