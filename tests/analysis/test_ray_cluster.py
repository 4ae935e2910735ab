"""``evaluate`` on a real multi-node Ray cluster started by these tests (tests/raycluster.py): a
head node without CPUs and two worker nodes with one CPU each, separate ``ray start`` process
trees, everything on 127.0.0.1. Worker ``w2`` runs from a Python environment that has every
dependency but not ``backretrieval``, so the package reaches it only by being shipped
(``runtime_env={"py_modules": ...}``).

The drivers are the ``backretrieval`` command line, as a user runs it on the head node
(``--executor ray:auto`` with ``RAY_ADDRESS``) and through Ray Client (``ray:ray://HOST:PORT``);
their records must equal the local executor's. One cluster serves the whole module; the faults
(an interrupted driver, a worker node killed mid-grid) are one test, last, since it takes a node
away.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from backretrieval.analysis import EvalConfig, run_grid
from backretrieval.encoders.registry import get_text_encoder
from commands import default_sigint
from raycluster import LOOPBACK, LocalCluster, env_without

TIMING = {"seconds", "encode_seconds"}
GRID = ["--dataset", "emoji-cldr", "--pairs", "en-de,de-ja", "--models", "tfidf-char,random", "--image-model", "color-hist",
        "--n", "120", "--seeds", "0,1,2"]
CFG = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de"), ("de", "ja")], models=["tfidf-char", "random"],
                 image_model="color-hist", n=120, seeds=[0, 1, 2])
# a grid long enough to interrupt: each task runs for a while on its one-CPU node
FAULT_GRID = ["--dataset", "emoji-cldr", "--pairs", "en-de,de-ja,en-ja", "--models", "tfidf-char,random", "--image-model",
              "color-hist", "--n", "400", "--seeds", "0,1,2,3"]
FAULT_CFG = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de"), ("de", "ja"), ("en", "ja")], models=["tfidf-char", "random"],
                       image_model="color-hist", n=400, seeds=[0, 1, 2, 3])


def _strip(records):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("raycluster")
    c = LocalCluster(root, system_config={"health_check_period_ms": 1000, "health_check_failure_threshold": 5})
    try:
        c.add_worker("w1")
        c.nobr_python = env_without(root / "env-without-backretrieval", {"backretrieval"})
        c.add_worker("w2", python=c.nobr_python, pythonpath="")
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def local_records(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("local")
    return _strip(run_grid(CFG, out, progress=False).records)


def _driver_env(cluster: LocalCluster, **extra: str) -> dict[str, str]:
    env = dict(cluster.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(Path(__file__).resolve().parents[2] / "src"), os.environ.get("PYTHONPATH", "")] if p)
    env.update(extra)
    return env


def _evaluate(cluster: LocalCluster, executor: str, out: Path, grid=GRID, quiet=True, **env) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "backretrieval.cli", "evaluate", *grid, "--out", str(out), "--executor", executor]
    return subprocess.run(cmd + ["--quiet"] * quiet, env=_driver_env(cluster, **env), capture_output=True, text=True, timeout=300)


def _popen(cluster: LocalCluster, executor: str, out: Path, grid=FAULT_GRID) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "backretrieval.cli", "evaluate", *grid, "--out", str(out), "--executor", executor, "--quiet"]
    return subprocess.Popen(cmd, env=_driver_env(cluster, RAY_ADDRESS=cluster.address), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=default_sigint)


def _ray_lines(stderr: str) -> list[str]:
    """Lines of Ray's own logging (``... INFO ...`` records, Ray Data's progress and notices)."""
    return [line for line in stderr.splitlines() if " INFO " in line or "INFO " in line[:40] or "Running Dataset" in line
            or "ray.data" in line or "Started a local Ray" in line or "Connected to Ray cluster" in line]


def test_worker_w2_cannot_import_backretrieval_by_itself(cluster):
    env = {k: v for k, v in cluster.env.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(cluster.nobr_python), "-c", "import backretrieval"], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "No module named 'backretrieval'" in r.stderr
    ok = subprocess.run([str(cluster.nobr_python), "-c", "import numpy, scipy, ray"], env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("route", ["auto", "client"])
def test_grid_on_the_cluster_equals_local(cluster, local_records, tmp_path, route):
    executor, env = ("ray:auto", {"RAY_ADDRESS": cluster.address}) if route == "auto" else (f"ray:{cluster.client_address}", {})
    r = _evaluate(cluster, executor, tmp_path / "out", **env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _strip(_records(tmp_path / "out")) == local_records
    # --quiet: nothing of Ray's own logging reaches the terminal
    assert _ray_lines(r.stderr) == [], r.stderr
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["executor"] == executor
    ran = {n["node_id"]: n for n in run["nodes"]["tasks"]}
    # both worker nodes ran tasks, w2 among them: the shipped package is what it imported
    assert set(ran) == {cluster.nodes["w1"].node_id(), cluster.nodes["w2"].node_id()}
    assert sum(n["tasks"] for n in ran.values()) == len(CFG.pairs) * len(CFG.seeds)
    assert all(n["ip"] == LOOPBACK and n["hostname"] for n in ran.values())


@pytest.mark.parametrize("route", ["auto", "client"])
def test_ray_data_encoding_runs_on_both_nodes_and_equals_local(cluster, tmp_path, route):
    """Ray Data batch inference (on Ray Client, inside one task on the cluster): both worker
    nodes embed texts, and the vectors equal the model's in this process."""
    texts = [f"cluster text number {i}" for i in range(400)]
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    script = (
        "import json, sys, numpy as np\n"
        "from backretrieval.analysis.executors import RayExecutor\n"
        "ex = RayExecutor(address=sys.argv[1])\n"
        "enc = ex.text_encoder('use-m')\n"
        "enc.batch_size = 50\n"
        "texts = json.load(open(sys.argv[2]))\n"
        "np.save(sys.argv[3], enc.encode(texts, 'en'))\n"
        "print(json.dumps({'type': type(enc).__name__, 'nodes': ex.encode_nodes}))\n"
    )
    address = cluster.client_address if route == "client" else cluster.address
    r = subprocess.run([sys.executable, "-c", script, address, str(tmp_path / "texts.json"), str(tmp_path / "v.npy")],
                       env=_driver_env(cluster), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _ray_lines(r.stderr) == [], r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["type"] == "RayDataTextEncoder"
    assert {n["node_id"] for n in report["nodes"]} == {cluster.nodes["w1"].node_id(), cluster.nodes["w2"].node_id()}
    assert sum(n["texts"] for n in report["nodes"]) == len(texts)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), get_text_encoder("use-m").encode(texts, "en"), atol=1e-6)


def test_a_node_missing_a_dependency_is_named(cluster, tmp_path):
    """A third worker whose environment lacks scipy (a dependency the tasks import): the run
    stops before any task, naming that node and scipy."""
    py = env_without(cluster.tmp / "env-without-scipy", {"backretrieval", "scipy"})
    w3 = cluster.add_worker("w3", python=py, pythonpath="")
    w3_id = w3.node_id()
    try:
        r = _evaluate(cluster, "ray:auto", tmp_path / "out", RAY_ADDRESS=cluster.address)
    finally:
        cluster.stop_node("w3")
    assert r.returncode != 0
    msg = " ".join(r.stderr.split())
    assert f"node {w3_id}" in msg and "cannot import 'scipy'" in msg, r.stderr[-3000:]
    assert not (tmp_path / "out" / "results.jsonl").exists()


def _partial_records(out: Path) -> int:
    partial = out / ".partial"
    return len([p for p in partial.glob("*.json")]) if partial.exists() else 0


def _wait_for_task_on(node, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until a grid task runs on ``node`` (a worker process titled ``ray::_run_on_node``)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if node.running("_run_on_node"):
            return
        time.sleep(0.05)
    raise AssertionError(f"no grid task started on node {node.name}")


def test_faults_interrupted_driver_and_killed_worker_node(cluster, tmp_path, shared_data):
    """Ctrl-C in the driver leaves the cluster usable (the rerun resumes and completes); a
    worker node killed mid-grid (its raylet SIGKILLed while it runs a task) costs nothing: the
    grid completes on the other node, or a rerun resumes it, with the local records and no
    half-written file."""
    expected = _strip(run_grid(FAULT_CFG, tmp_path / "local", progress=False).records)
    n_records = len(expected)

    # 1. SIGINT to the driver while tasks run
    out = tmp_path / "sigint"
    proc = _popen(cluster, "ray:auto", out)
    _wait_for_task_on(cluster.nodes["w1"], proc)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, err[-3000:]
    assert not (out / "results.jsonl").exists()
    r = _evaluate(cluster, "ray:auto", out, grid=FAULT_GRID, RAY_ADDRESS=cluster.address)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _strip(_records(out)) == expected

    # 2. kill worker node w1 (its raylet) while it runs a task
    out = tmp_path / "kill"
    proc = _popen(cluster, "ray:auto", out)
    w1 = cluster.nodes["w1"]
    _wait_for_task_on(w1, proc)
    done_at_kill = _partial_records(out)
    os.kill(w1.raylet(), signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    assert done_at_kill < n_records
    if proc.returncode != 0:  # the grid did not survive the node: the rerun resumes it
        r = _evaluate(cluster, "ray:auto", out, grid=FAULT_GRID, RAY_ADDRESS=cluster.address)
        assert r.returncode == 0, r.stderr[-3000:]
    assert _strip(_records(out)) == expected
    assert not list(out.rglob("*.tmp-*"))
    run = json.loads((out / "run.json").read_text())
    assert cluster.nodes["w2"].node_id() in {n["node_id"] for n in run["nodes"]["tasks"]}
    cluster.stop_node("w1")
