"""The executors: every row of the executor table holds to one contract (the local executor's
records, a failing task's error with the task named, nothing left after Ctrl-C), every executor
module of the package has its row, and a new executor is one module and one row (a scratch
executor is picked up by the contract and the docs' generator; without its row it is caught);
the processes executor's shared matrices are written once per grid, mapped by the workers, tasks
carry row positions, nothing left behind (also after a failing task or a killed grid)."""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import backretrieval
import backretrieval.analysis.executors as executors
from backretrieval.analysis.executors import (
    EXECUTORS, SHARED_PREFIX, ExecutorEntry, ProcessExecutor, RowsRef, executor_usage, get_executor, resolve_rows, task_label,
)
from backretrieval.core import BackretrievalError
from commands import default_sigint

SRC = Path(backretrieval.__file__).resolve().parents[1]


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


# --------------------------------------------------------------- the contract, for every executor of the table
TIMING = {"seconds", "encode_seconds"}
NAMES = [entry.name for entry in EXECUTORS]
UNKNOWN = "threads"  # no executor of the table is named so


@pytest.fixture(scope="module", autouse=True)
def _no_ray_left():
    """The Ray executor starts a local Ray in this process: end it with this module."""
    yield
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """40 concepts in en and de with precomputed image features: a grid that encodes no image."""
    d = tmp_path_factory.mktemp("executor-data")
    rng = np.random.default_rng(0)
    np.save(d / "feats.npy", rng.standard_normal((40, 8)).astype(np.float32))
    words = {"en": "red cat number", "de": "rote Katze Nummer"}
    rows = [{"id": f"{lang}{i}", "lang": lang, "text": f"{words[lang]} {i * 7 % 13} {i}", "concept": f"c{i}",
             "image_feature_row": i} for lang in ("en", "de") for i in range(40)]
    (d / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(d / "items.jsonl"), {"image_features": str(d / "feats.npy")}


def _listed(usages: list[str]) -> str:
    return usages[0] if len(usages) == 1 else f"{', '.join(usages[:-1])} or {usages[-1]}"


def holds_the_row_contract(entry: ExecutorEntry) -> None:
    """The row builds its executor by name, which is ready here and has the executor's methods."""
    ex = get_executor(entry.name)
    assert isinstance(ex, entry.load()) and ex.check() == []
    assert callable(ex.imap) and callable(ex.text_encoder) and ex.name.startswith(entry.name)


def gives_the_local_records(name: str, data: tuple[str, dict[str, str]]) -> None:
    """The executor's records equal the local executor's, timings aside."""
    from backretrieval.analysis import EvalConfig, run_grid

    dataset, options = data
    cfg = EvalConfig(dataset=dataset, dataset_options=options, pairs=[("en", "de"), ("de", "en")],
                     models=["random", "tfidf-char"], image_model="precomputed", n=15, k=5, seeds=[0, 1])
    local = run_grid(cfg, None, progress=False).records
    other = run_grid(cfg, None, progress=False, executor=get_executor(name)).records
    assert len(local) == 2 * 2 * 2 and any(r["bkr@1"] > 0 for r in local)
    strip = lambda recs: [{k: v for k, v in r.items() if k not in TIMING} for r in recs]  # noqa: E731
    assert strip(other) == strip(local)


def names_a_failing_task(name: str) -> None:
    """A task's exception comes out of the executor with the task named."""
    ex = get_executor(name)
    with pytest.raises(ValueError) as e:
        list(ex.imap(float, ["1.5", "2", "oops", "3"]))
    assert "could not convert string to float: 'oops'" in str(e.value)
    assert "in task 'oops'" in getattr(e.value, "__notes__", []), e.value


def modules_without_a_row() -> list[str]:
    """The executors (classes built by name: ``from_arg``) defined in a module of the executors'
    package that no row of the table names."""
    import importlib
    import inspect
    import pkgutil

    rows = {(e.module, e.class_name) for e in executors.EXECUTORS}
    missing = []
    for info in pkgutil.iter_modules(executors.__path__):
        module = importlib.import_module(f"{executors.__name__}.{info.name}")
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and hasattr(cls, "from_arg") and (info.name, cls_name) not in rows:
                missing.append(f"{info.name}.{cls_name}")
    return missing


def test_the_table_names_every_executor():
    usages = [e.usage for e in EXECUTORS]
    assert executor_usage() == _listed(usages)
    for entry in EXECUTORS:
        holds_the_row_contract(entry)
    with pytest.raises(BackretrievalError, match=f"^{re.escape(f'unknown executor {UNKNOWN!r}: use {_listed(usages)}')}$"):
        get_executor(UNKNOWN)
    with pytest.raises(BackretrievalError, match="^bad executor 'local:3': local takes no argument$"):
        get_executor("local:3")


def test_every_executor_module_has_its_row():
    assert modules_without_a_row() == []


@pytest.mark.parametrize("name", NAMES)
def test_an_executor_gives_the_local_records(name, small_data):
    gives_the_local_records(name, small_data)


@pytest.mark.parametrize("name", NAMES)
def test_an_executor_raises_a_tasks_error_with_the_task_named(name):
    names_a_failing_task(name)


SCRATCH = '''"""A scratch executor: tasks in this process, as local."""
from backretrieval.analysis.executors.local import LocalExecutor


class ScratchExecutor(LocalExecutor):
    """The scratch executor."""

    name = "scratch"
'''


def test_a_new_executor_is_one_module_and_one_row(tmp_path, monkeypatch, small_data):
    """A module in the executors' package (its folder extended by a scratch folder) and one row:
    the contract runs it and the docs' generator lists it (the docs are out of date until they are
    regenerated); the module without its row is caught."""
    from backretrieval.report import catalogue

    (tmp_path / "scratch.py").write_text(SCRATCH, encoding="utf-8")
    monkeypatch.setattr(executors, "__path__", [*executors.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, f"{executors.__name__}.scratch", raising=False)
    assert modules_without_a_row() == ["scratch.ScratchExecutor"]  # the module alone is caught
    row = ExecutorEntry("scratch", "", "scratch", "ScratchExecutor", "tasks in this process, as local")
    monkeypatch.setattr(executors, "EXECUTORS", (*EXECUTORS, row))
    assert modules_without_a_row() == []
    holds_the_row_contract(row)
    gives_the_local_records("scratch", small_data)
    names_a_failing_task("scratch")
    assert executor_usage().endswith(" or scratch")
    assert "| `scratch` | tasks in this process, as local |" in catalogue.executors_markdown()
    assert "\\|scratch` |" in catalogue.executor_option_row() and "or scratch` |" in catalogue.unknown_executor_row()
    scale = (SRC.parent / "docs" / "scale.md").read_text(encoding="utf-8")
    assert catalogue.generated_block(scale, "executors") != catalogue.executors_markdown()  # the docs' test fails


def test_a_grid_task_is_named_by_its_pair_and_seed():
    from backretrieval.analysis.evaluate.tasks import SampleTask

    task = SampleTask("en", "de", 3, 10, 5, "cosine", 10, [], None, None, {})
    assert task_label(task) == "en->de seed 3" and task_label("oops") == "'oops'"


CTRL_C_SCRIPT = """
import sys
import numpy as np
from backretrieval.analysis.executors import get_executor
from slowtask import task

ex = get_executor(sys.argv[1])
m = np.ones((50, 4), np.float32)
share = getattr(ex, "rows_of", lambda m, rows: m[rows])
for out in ex.imap(task, ((share(m, np.arange(3)), i) for i in range(8))):
    print(out, flush=True)
"""


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                parents[int(d)] = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
        out |= frontier
    return out


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("name", NAMES)
def test_ctrl_c_ends_the_grid_and_leaves_nothing_behind(name, tmp_path):
    """Ctrl-C (SIGINT to the run's process group, as a terminal sends it) while tasks run: the
    run ends within a minute, no process it started outlives it, no shared-matrix folder stays."""
    import signal
    import time

    (tmp_path / "slowtask.py").write_text(
        "import os, time\nfrom pathlib import Path\n\n"
        f"def task(x):\n    Path({str(tmp_path)!r}, f'started-{{os.getpid()}}-{{x[1]}}').touch()\n"
        "    time.sleep(300)\n    return x[1]\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    children: set[int] = set()
    for attempt in range(3):
        proc = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT, name], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, cwd=tmp_path, start_new_session=True,
                                preexec_fn=default_sigint)
        deadline = time.monotonic() + 300  # workers start (spawn, imports; Ray starts its processes)
        while not list(tmp_path.glob("started-*")) and proc.poll() is None:
            assert time.monotonic() < deadline, "no task started"
            time.sleep(0.2)
        if proc.poll() is None:
            break
        _, err = proc.communicate()
        # a local Ray waits a fixed 30 s for its node to start, which a loaded machine can exceed
        assert b"timed out during startup" in err and attempt < 2, err[-3000:]
    try:
        children = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0 and b"KeyboardInterrupt" in err, err[-2000:]
        deadline = time.monotonic() + 60
        while [p for p in children if _alive(p)]:
            assert time.monotonic() < deadline, f"outlived the run: {[p for p in children if _alive(p)]}"
            time.sleep(0.5)
        assert not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"{SHARED_PREFIX}{proc.pid}-")]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(OSError):
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
