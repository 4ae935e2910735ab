"""The processes executor's shared matrices: written once per grid, mapped by the workers, tasks
carry row positions, nothing left behind (also after a failing task or a killed grid)."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from backretrieval.analysis.executors import SHARED_PREFIX, ProcessExecutor, RowsRef, resolve_rows
from backretrieval.core import BackretrievalError


def _ours() -> list[str]:
    """This process's shared-matrix folders."""
    tmp = tempfile.gettempdir()
    return [n for n in os.listdir(tmp) if n.startswith(f"{SHARED_PREFIX}{os.getpid()}-")]


def test_rows_travel_as_positions_and_equal_the_matrix_rows():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((500, 64)).astype(np.float32)
    b = rng.standard_normal((300, 16)).astype(np.float32)
    ex = ProcessExecutor(2)
    picks = [rng.integers(0, len(m), 40) for m in (a, b, a, b, a)]
    mats = [a, b, a, b, a]
    seen_dirs: list[list[str]] = []

    def tasks():
        for m, rows in zip(mats, picks):
            ref = ex.rows_of(m, rows)
            seen_dirs.append(_ours())
            # what travels: a path and 40 positions, not the 500 x 64 matrix
            assert len(pickle.dumps(ref, protocol=5)) < 1024
            yield ref

    got = list(ex.imap(np.asarray, tasks()))  # results in completion order
    want = [m[rows] for m, rows in zip(mats, picks)]
    assert sorted(g.tobytes() for g in got) == sorted(w.tobytes() for w in want)
    assert all(g.dtype == np.float32 for g in got)
    assert ex.shared_bytes == a.nbytes + b.nbytes  # each matrix written once
    assert seen_dirs[0] and all(d == seen_dirs[0] for d in seen_dirs)  # one folder per grid
    assert _ours() == []  # removed when the grid ends


def test_resolve_rows_rebuilds_nested_tasks():
    m = np.arange(12, dtype=np.float32).reshape(6, 2)
    task = {"x": (RowsRef("m", np.array([4, 1])), [RowsRef("m", np.array([0]))]), "n": 3}
    out = resolve_rows(task, {"m": m}.__getitem__)
    assert out["n"] == 3
    assert out["x"][0].tolist() == [[8, 9], [2, 3]] and out["x"][1][0].tolist() == [[0, 1]]


def test_folder_removed_when_a_task_fails():
    ex = ProcessExecutor(1)
    m = np.ones((10, 3), dtype=np.float32)

    def tasks():
        yield ex.rows_of(m, np.array([0, 1]))
        yield "not an array of numbers"

    with pytest.raises((TypeError, ValueError)):  # float() of a 2 x 3 array, and of that text, raise in the worker
        list(ex.imap(float, tasks()))
    assert _ours() == []


def test_a_killed_grids_folder_is_swept_and_a_live_ones_kept():
    tmp = tempfile.gettempdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(dead.stdout)
    stale = tempfile.mkdtemp(prefix=f"{SHARED_PREFIX}{dead_pid}-", dir=tmp)
    live = tempfile.mkdtemp(prefix=f"{SHARED_PREFIX}{os.getppid()}-", dir=tmp)
    try:
        ex = ProcessExecutor(1)
        ex.rows_of(np.zeros((2, 2), np.float32), np.array([0]))
        assert not os.path.exists(stale)
        assert os.path.exists(live)
        ex._unshare()
        assert _ours() == []
    finally:
        for d in (stale, live):
            if os.path.exists(d):
                os.rmdir(d)


def test_a_matrix_of_objects_is_refused():
    ex = ProcessExecutor(1)
    with pytest.raises(BackretrievalError, match="Python objects"):
        ex.rows_of(np.array([[object()]], dtype=object), np.array([0]))
    ex._unshare()
