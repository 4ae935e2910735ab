"""Cr5 solver speed and progress: the compiled CG kernels against dense
linear algebra, the warm-started Eq. 14 against the cold one, the same bits whatever the BLAS
thread setting and ``n_jobs``, and what the progress output says.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from backretrieval.train.cr5 import _cg as _cr5_cg
from backretrieval.train.cr5 import Cr5Problem, SolverSettings, solve

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cr5 import synthetic  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _block(seed: int = 0, n: int = 120, p: int = 90) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    x = sp.random(n, p, density=0.1, random_state=rng, format="csr")
    x.data += 0.1
    return x


def _preconditioner(x: sp.csr_matrix, lam: float, k: int):
    """A naive spectral preconditioner: dense eigendecomposition of S B S."""
    B = (x.T @ x).toarray() + lam * np.eye(x.shape[1])
    s = 1.0 / np.sqrt(np.diag(B))
    theta, vecs = np.linalg.eigh(s[:, None] * B * s[None, :])
    V = np.ascontiguousarray(vecs[:, ::-1][:, :k])
    return B, s, V, 1.0 / theta[::-1][:k] - 1.0


def test_normal_matvec_equals_dense():
    x = _block()
    v = np.random.default_rng(1).standard_normal(x.shape[1])
    out = np.empty_like(v)
    _cr5_cg.normal_matvec(x.indptr, x.indices, x.data, 0.7, v, out)
    np.testing.assert_allclose(out, x.toarray().T @ (x.toarray() @ v) + 0.7 * v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["compiled", "scipy"])
@pytest.mark.parametrize("k", [0, 1, 8])
def test_pcg_solves_the_system_to_its_tolerance(k, method):
    x, lam = _block(seed=k), 0.5
    B, s, V, f = _preconditioner(x, lam, k)
    b = np.random.default_rng(2).standard_normal(x.shape[1])
    ref = np.linalg.solve(B, b)
    kw = dict(method=method)
    for rtol in (1e-12, 1e-2):
        sol = np.zeros_like(b)
        it, ok = _cr5_cg.pcg(x.indptr, x.indices, x.data, lam, b, sol, s, V, f, rtol, 1000, **kw)
        assert ok and it > 0
        assert np.linalg.norm(b - B @ sol) <= rtol * np.linalg.norm(b) * (1 + 1e-9)
        if rtol == 1e-12:
            np.testing.assert_allclose(sol, ref, rtol=1e-9, atol=1e-11)
    # a start that already meets the tolerance: no iteration, unchanged
    start = ref.copy()
    it, ok = _cr5_cg.pcg(x.indptr, x.indices, x.data, lam, b, start, s, V, f, 1e-6, 1000, **kw)
    assert (it, ok) == (0, True)
    np.testing.assert_array_equal(start, ref)
    # a warm start that does not: fewer iterations than from zero, same tolerance met
    near = ref + 1e-4 * np.random.default_rng(3).standard_normal(ref.size)
    it_warm, ok = _cr5_cg.pcg(x.indptr, x.indices, x.data, lam, b, near, s, V, f, 1e-10, 1000, **kw)
    it_cold, _ = _cr5_cg.pcg(x.indptr, x.indices, x.data, lam, b, np.zeros_like(b), s, V, f, 1e-10, 1000, **kw)
    assert ok and 0 < it_warm < it_cold
    assert np.linalg.norm(b - B @ near) <= 1e-10 * np.linalg.norm(b) * (1 + 1e-9)
    # b = 0 gives 0; too few iterations is reported as not converged
    z = np.ones_like(b)
    assert _cr5_cg.pcg(x.indptr, x.indices, x.data, lam, np.zeros_like(b), z, s, V, f, 1e-6, 10, **kw) == (0, True)
    assert not np.any(z)
    assert _cr5_cg.pcg(x.indptr, x.indices, x.data, lam, b, np.zeros_like(b), s, V, f, 1e-14, 2, **kw) == (2, False)


def test_compiled_and_scipy_products_agree():
    """The two ways of applying X^T X (one compiled pass; scipy's CSR product then the CSC view of
    the same arrays) run the same iteration: same counts, solutions equal to rounding, for one
    system and for the rows of a block of right-hand sides; ``auto`` picks by the entry count."""
    x, lam = _block(seed=11, n=400, p=150), 0.3
    _, s, V, f = _preconditioner(x, lam, 6)
    rng = np.random.default_rng(4)
    Bt = rng.standard_normal((5, 150))
    starts = np.zeros((5, 150))
    starts[2] = rng.standard_normal(150)  # one warm (here: arbitrary) start
    out, its, conv = {}, {}, {}
    for method in ("compiled", "scipy"):
        Xt = starts.copy()
        its[method], conv[method] = np.zeros(5, dtype=np.int64), np.zeros(5, dtype=np.bool_)
        _cr5_cg.pcg_rows(x.indptr, x.indices, x.data, lam, Bt, Xt, s, V, f, 1e-8, 500, its[method], conv[method], method=method)
        out[method] = Xt
        for i in range(5):  # the rows one by one: the same as the block call
            xi = starts[i].copy()
            assert _cr5_cg.pcg(x.indptr, x.indices, x.data, lam, Bt[i], xi, s, V, f, 1e-8, 500, method=method) == (its[method][i], True)
            np.testing.assert_array_equal(xi, Xt[i])
    np.testing.assert_array_equal(its["compiled"], its["scipy"])
    assert conv["compiled"].all() and conv["scipy"].all()
    np.testing.assert_allclose(out["compiled"], out["scipy"], rtol=1e-9, atol=1e-12)
    assert x.nnz <= _cr5_cg.COMPILED_MAX_NNZ and _cr5_cg._compiled(x.data, "auto")
    assert not _cr5_cg._compiled(np.zeros(_cr5_cg.COMPILED_MAX_NNZ + 1), "auto")
    with pytest.raises(ValueError, match="method"):
        _cr5_cg.pcg(x.indptr, x.indices, x.data, lam, Bt[0], np.zeros(150), s, V, f, 1e-8, 500, method="dense")


@pytest.mark.parametrize("p,k", [(90, 8), (91, 1), (93, 0), (3, 2)])
def test_preconditioner_kernel_equals_its_formula(p, k):
    """``z = S (t + V (f * (V^T t)))``, ``t = S r``, by the compiled kernel (four rows per pass
    and a remainder) against numpy."""
    rng = np.random.default_rng(p + k)
    r, s, V, f = rng.standard_normal(p), rng.random(p) + 0.5, rng.standard_normal((p, k)), rng.random(k)
    t, c, z = np.empty(p), np.empty(k), np.empty(p)
    _cr5_cg._precondition(r, s, np.ascontiguousarray(V), f, t, c, z)
    np.testing.assert_allclose(z, s * (s * r + V @ (f * (V.T @ (s * r)))), rtol=1e-12, atol=1e-12)


def test_deflation_cuts_iterations():
    """The spectral correction maps the k largest eigenvalues of the scaled system to 1: CG needs
    fewer iterations than with Jacobi alone on a system with a few large eigenvalues."""
    rng = np.random.default_rng(3)
    x = _block(seed=3, n=300, p=120)
    x = sp.csr_matrix(x.toarray() + np.outer(rng.random(300), rng.random(120) * (rng.random(120) < 0.3)))
    b = rng.standard_normal(120)
    its = {}
    for k in (0, 10):
        _, s, V, f = _preconditioner(x, 0.1, k)
        its[k], ok = _cr5_cg.pcg(x.indptr, x.indices, x.data, 0.1, b, np.zeros(120), s, V, f, 1e-8, 1000)
        assert ok
    assert its[10] < its[0], its


def test_problem_preconditioner_is_a_spectral_correction():
    blocks, labels, K = synthetic(seed=4, p=(80, 96, 64))
    prob = Cr5Problem(blocks, labels, K, 0.5, deflation=6)
    for i, x in enumerate(prob.X):
        s, V, f = prob.preconditioner(i)
        k = min(6, x.shape[1] // 8)
        assert V.shape == (x.shape[1], k) and f.shape == (k,)
        B = (x.T @ x).toarray() + 0.5 * np.eye(x.shape[1])
        Cs = s[:, None] * B * s[None, :]
        np.testing.assert_allclose(V.T @ V, np.eye(k), atol=1e-10)
        theta = 1.0 / (f + 1.0)
        ref = np.linalg.eigvalsh(Cs)[::-1][:k]
        np.testing.assert_allclose(np.sort(theta)[::-1], ref, rtol=1e-2)  # eigsh at tol 1e-2


@pytest.mark.parametrize("rank,eig_tol", [(3, 1e-10), (10, 0.1), (10, 1e-10)])
def test_warm_started_eq14_equals_cold(rank, eig_tol):
    """Eq. 14 warm-started from the eigsh solves gives the cold-start Phi to the CG tolerance, in
    fewer iterations. Every column is warm when ARPACK stopped after its first factorisation
    (all its matvec inputs kept); after restarts (eigsh tol 1e-10 here) Ritz vectors may leave the
    kept span (rank 10) and those columns start cold -- same result."""
    blocks, labels, K = synthetic(seed=5, p=(60, 80, 50))
    tight = dict(cg_tol=1e-11, cg_maxiter=5000)
    prob = Cr5Problem(blocks, labels, K, 1.0, **tight)
    _, P = prob.top_eigenvectors(rank, tol=eig_tol, maxiter=5000)
    ncv = max(2 * rank + 1, 20)
    restarted = prob.stats.matvecs > ncv + 1
    assert restarted == (eig_tol < 1e-3)  # the Sec. 4.1 tolerance needs no restart here
    warm_phi, warm_sv, _ = prob.embedding(P)
    if not restarted:
        assert prob.stats.phi_warm_columns == rank
    if rank == 10 and restarted:
        assert prob.stats.phi_warm_columns < rank
    warm_its = prob.stats.phi_cg_iterations
    cold = Cr5Problem(blocks, labels, K, 1.0, **tight)
    cold_phi, cold_sv, _ = cold.embedding(P)  # no eigsh history: cold starts
    assert cold.stats.phi_warm_columns == 0
    assert warm_its < cold.stats.phi_cg_iterations
    np.testing.assert_allclose(warm_sv, cold_sv, rtol=1e-8)
    for a, b in zip(warm_phi, cold_phi):
        np.testing.assert_allclose(a, b, atol=1e-7)


_CHILD = """
import hashlib, json, sys
import numpy as np
sys.path[:0] = [{tests!r}, {shared!r}]  # test_cr5 and the helpers it imports (tests/reference.py)
from test_cr5 import synthetic
from backretrieval.train.cr5 import _cg as _cr5_cg
from backretrieval.train.cr5 import SolverSettings, solve
_cr5_cg.COMPILED_MAX_NNZ = int(sys.argv[2])
blocks, labels, K = synthetic(seed=6, K=60, p=(70, 90, 50))
sol = solve(blocks, labels, K, SolverSettings(rank=6, lam=1.0, n_jobs=int(sys.argv[1])))
h = hashlib.sha256(b"".join(np.ascontiguousarray(p).tobytes() for p in sol.phi) + sol.H.tobytes()).hexdigest()
print(json.dumps({{"hash": h, "cg": sol.stats.cg_iterations}}))
"""


@pytest.mark.parametrize("compiled_max_nnz", [10**9, 0])
def test_same_bits_for_any_blas_threads_and_n_jobs(compiled_max_nnz):
    """The solution's bits do not depend on OPENBLAS_NUM_THREADS / OMP_NUM_THREADS nor n_jobs (each
    run in a fresh interpreter, so the thread settings take effect), with either product (all
    blocks compiled / all through scipy)."""
    here = Path(__file__).resolve().parent
    code = _CHILD.format(tests=str(here), shared=str(here.parent))
    out = []
    for threads, n_jobs in (("1", 1), ("2", 1), ("2", 2), ("1", 2)):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads,
                   PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        res = subprocess.run([sys.executable, "-c", code, str(n_jobs), str(compiled_max_nnz)], env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        out.append(json.loads(res.stdout.strip().splitlines()[-1]))
    assert len({o["hash"] for o in out}) == 1, out
    assert len({o["cg"] for o in out}) == 1, out


_CHILD_THREADS = """
import json, sys
import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_info
from backretrieval.train import cr5
seen = []
embedding = cr5.Cr5Problem.embedding
def spy(self, P):
    seen.extend((i["filepath"], i["num_threads"]) for i in threadpool_info())
    return embedding(self, P)
cr5.Cr5Problem.embedding = spy
rng = np.random.default_rng(0)
K = 40
labels = [np.sort(rng.choice(K, 32, replace=False)) for _ in range(3)]
blocks = [sp.random(32, p, density=0.3, random_state=rng, format="csr") + sp.eye(32, p, format="csr") for p in (30, 45, 25)]
cr5.solve(blocks, labels, K, cr5.SolverSettings(rank=4, lam=1.0))
print(json.dumps(seen))
"""


def test_every_blas_is_held_to_one_thread_inside_solve():
    """Every BLAS loaded while ``solve`` runs (numpy's and scipy's own, which ARPACK and the
    Lanczos use) runs one thread in a fresh interpreter with 2 threads asked for (the solver loads
    scipy's BLAS when imported: test_solver_loads_every_blas_before_limiting_threads)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2",
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", _CHILD_THREADS], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen and all(n == 1 for _, n in seen), seen


def test_progress_says_what_runs(monkeypatch, capsys):
    """#20 item 2: the eigenvector bar has a total (the matvecs of the Lanczos factorisation) and
    moves per matvec up to it; every phase after it says what runs; Eq. 14 has its own bar."""
    monkeypatch.setattr(Cr5Problem, "bar_options", {"mininterval": 0, "miniters": 1})
    blocks, labels, K = synthetic(seed=7)
    rank = 5
    solve(blocks, labels, K, SolverSettings(rank=rank, lam=1.0, progress=True), names=["de", "en", "fr"])
    err = capsys.readouterr().err
    frames = [f for f in re.split(r"[\r\n]", err) if f.strip()]
    ncv = max(2 * rank + 1, 20)
    eig = [int(m.group(1)) for f in frames if f.startswith("Cr5 Lanczos") and (m := re.search(rf"\| *(\d+)/{ncv + 1} \[", f))]
    assert eig == sorted(eig) and sorted(set(eig)) == list(range(ncv + 2)), eig  # every matvec, against the total
    assert any("basis complete; forming the Ritz vectors" in f for f in frames)
    i_pre = next(i for i, f in enumerate(frames) if f.startswith("Cr5: preconditioners"))
    i_eig = next(i for i, f in enumerate(frames) if f.startswith("Cr5 Lanczos"))
    i_14 = next(i for i, f in enumerate(frames) if f.startswith("Cr5: solving Eq. 14 for de+en+fr (5 right-hand sides each"))
    i_15 = next(i for i, f in enumerate(frames) if f.startswith("Cr5: Eq. 15"))
    assert i_pre < i_eig < i_14 < i_15
    eq14 = [int(m.group(1)) for f in frames if f.startswith("Cr5 Eq. 14") and (m := re.search(rf"\| *(\d+)/{rank} \[", f))]
    assert eq14[0] == 0 and eq14[-1] == rank, eq14
    # progress off: nothing on stderr
    solve(blocks, labels, K, SolverSettings(rank=rank, lam=1.0))
    assert capsys.readouterr().err == ""


def _dense_M(seed: int):
    blocks, labels, K = synthetic(seed=seed, K=80, p=(60, 80, 50))
    prob = Cr5Problem(blocks, labels, K, 1.0, cg_tol=1e-12, cg_maxiter=5000)
    M = np.stack([prob.matvec_M(e) for e in np.eye(K)], axis=1)
    return (M + M.T) / 2


@pytest.mark.parametrize("rank", [2, 4, 6, 12])
def test_lanczos_equals_arpack_at_the_paper_tolerance(rank):
    """One factorisation from ARPACK's start gives ARPACK's Ritz pairs (same Krylov subspace) at
    eigsh tol 0.1 -- eigenvalues and vectors up to sign -- within tol of the dense top eigenvalues;
    it declines (None) exactly when ARPACK needed a restart."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    from backretrieval.train.cr5._lanczos import lanczos_top

    M = _dense_M(8)
    K = M.shape[0]
    v0 = np.random.default_rng(0).standard_normal(K)
    ncv = max(2 * rank + 1, 20)
    calls, arpack_calls = [], []
    res = lanczos_top(lambda u: calls.append(1) or M @ u, v0, rank, ncv, 0.1)
    assert len(calls) == ncv + 1
    op = LinearOperator((K, K), matvec=lambda u: arpack_calls.append(1) or M @ u, dtype=np.float64)
    ref_vals, ref_vecs = eigsh(op, k=rank, which="LA", tol=0.1, v0=v0, ncv=ncv)
    if res is None:
        assert len(arpack_calls) > ncv + 1
        return
    assert len(arpack_calls) == ncv + 1
    vals, vecs = res
    order = np.argsort(-ref_vals)
    np.testing.assert_allclose(vals, ref_vals[order], rtol=1e-8)
    np.testing.assert_allclose(np.abs(np.sum(vecs * ref_vecs[:, order], axis=0)), 1.0, atol=1e-6)
    dense = np.linalg.eigvalsh(M)[::-1][:rank]
    assert np.all(vals <= dense * (1 + 1e-12)) and np.all(vals >= dense * (1 - 0.1))  # Ritz values: within tol, below
    np.testing.assert_allclose(vecs.T @ vecs, np.eye(rank), atol=1e-10)


@pytest.mark.parametrize("tol", [0.1, 1e-3, 1e-8])
@pytest.mark.parametrize("rank", [2, 6, 12, 20])
def test_thick_restarts_match_arpack(rank, tol):
    """Where one factorisation is not enough, the thick restarts (ARPACK's rule for how many Ritz
    vectors to keep) converge in no more matvecs than ARPACK's implicit restarts from the same
    start, to Ritz pairs that meet the tolerance against the dense operator (at a loose tolerance
    a Ritz value may stand for a lower eigenvalue than the k-th, for ARPACK too)."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    from backretrieval.train.cr5._lanczos import lanczos_top

    M = _dense_M(8)
    K = M.shape[0]
    v0 = np.random.default_rng(0).standard_normal(K)
    ncv = max(2 * rank + 1, 20)
    calls, arpack_calls = [], []
    vals, vecs = lanczos_top(lambda u: calls.append(1) or M @ u, v0, rank, ncv, tol, maxiter=250)
    op = LinearOperator((K, K), matvec=lambda u: arpack_calls.append(1) or M @ u, dtype=np.float64)
    ref = np.sort(eigsh(op, k=rank, which="LA", tol=tol, v0=v0, ncv=ncv, maxiter=250, return_eigenvectors=False))[::-1]
    assert len(calls) <= len(arpack_calls)
    if tol < 1e-6:
        assert len(calls) > ncv + 1  # the restarts ran
    assert np.all(np.diff(vals) <= 0)
    assert np.all(np.abs(vals - ref) <= tol * np.abs(ref))
    np.testing.assert_allclose(vecs.T @ vecs, np.eye(rank), atol=1e-10)
    resid = np.linalg.norm(M @ vecs - vecs * vals, axis=0)
    assert np.all(resid <= tol * np.abs(vals) * (1 + 1e-6) + 1e-12)  # ARPACK's test, on the true residual
    dense = np.linalg.eigvalsh(M)
    assert np.all(np.min(np.abs(dense[:, None] - vals[None, :]), axis=0) <= resid + 1e-12)  # an eigenvalue within ||r||
    if tol < 1e-6:
        np.testing.assert_allclose(vals, dense[::-1][:rank], rtol=1e-8)


def test_lanczos_declines_what_it_cannot_converge():
    """A tolerance one factorisation cannot meet: None without restarts, and None after the allowed
    restarts (the solver then runs eigsh, and says so)."""
    from backretrieval.train.cr5._lanczos import lanczos_top

    rng = np.random.default_rng(1)
    d = np.linspace(1.0, 1.001, 400)  # no gap: the Ritz values converge slowly
    assert lanczos_top(lambda u: d * u, rng.standard_normal(400), 10, 21, 1e-12) is None
    calls = []
    assert lanczos_top(lambda u: calls.append(1) or d * u, rng.standard_normal(400), 10, 21, 1e-12, maxiter=3) is None
    assert 22 + 3 * 1 <= len(calls) <= 22 + 3 * (21 - 10)  # the first factorisation and three restarts, no more
    with pytest.raises(ValueError, match="ncv"):
        lanczos_top(lambda u: d * u, rng.standard_normal(400), 30, 21, 0.1)


def test_inputs_written_over_the_basis_are_the_float32_inputs():
    """The float32 ``[v0; V]`` written in place over the float64 basis (with its spare row) equals
    the plain conversion, row for row, and it and the spare half share the basis' memory."""
    from backretrieval.train.cr5.spectral import _inputs_in_place

    rng = np.random.default_rng(3)
    for ncv, K in ((1, 5), (2, 7), (21, 301), (9, 4)):
        basis = rng.standard_normal((ncv + 1, K))
        v0 = rng.standard_normal(K) * 30
        want = np.vstack([v0[None, :], basis[:ncv]]).astype(np.float32)
        U, spare = _inputs_in_place(basis, v0)
        assert U.dtype == np.float32 and U.shape == (ncv + 1, K) and U.flags.c_contiguous
        assert np.shares_memory(U, basis) and np.shares_memory(spare, basis) and not np.shares_memory(U, spare)
        assert spare.dtype == np.float32 and spare.size == (ncv + 1) * K
        assert np.array_equal(U, want)


@pytest.mark.parametrize("eig_tol", [0.1, 1e-10])
def test_warm_coefficients_are_those_of_the_operators_inputs(eig_tol):
    """The warm-start coefficients of Eq. 14 are those of the operator's first ncv + 1 inputs as
    float32, bit for bit, whether made from the inputs written over the Lanczos basis as the
    factorisation ends (one factorisation) or from the copy kept before a restart (tol 1e-10)."""
    blocks, labels, K = synthetic(seed=5, p=(60, 80, 50))
    prob = Cr5Problem(blocks, labels, K, 1.0, cg_tol=1e-11, cg_maxiter=5000)
    seen = []
    matvec = prob.matvec_M
    prob.matvec_M = lambda u: seen.append(np.array(u, dtype=np.float64)) or matvec(u)
    rank = 10
    _, P = prob.top_eigenvectors(rank, tol=eig_tol, maxiter=5000)
    ncv = max(2 * rank + 1, 20)
    restarted = len(seen) > ncv + 1
    assert restarted == (eig_tol < 1e-3)
    assert prob._hist_n == ncv + 1 and all(h.shape[0] == ncv + 1 for h in prob._hist_x)
    plain = Cr5Problem(blocks, labels, K, 1.0)
    plain._hist_u, plain._hist_n = np.array(seen[: ncv + 1], dtype=np.float32), ncv + 1
    want_C, want_ok = plain._warm_coefficients(P)
    if restarted:
        assert prob._warm == (None, None) and np.array_equal(prob._hist_u, plain._hist_u)
        got_C, got_ok = prob._warm_coefficients(P)
    else:
        assert prob._hist_u is None  # the basis (and the inputs over it) already freed
        warm_p, (got_C, got_ok) = prob._warm
        assert warm_p is P
        assert want_ok == rank
    assert got_ok == want_ok and np.array_equal(got_C, want_C)
