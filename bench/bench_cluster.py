"""One evaluation grid on ``local``, ``processes:2`` and a 2-node Ray cluster on this machine, in
one run: wall time, CPU time (driver and workers), the driver's share, bytes shipped per task.

The grid: emoji-cldr, 20 directed language pairs, 5 models, 3 seeds, N = 1,500, image model
color-hist, embeddings cached (a first, untimed pass fills the cache; each timed run starts from a
fresh output folder, so every record is computed). The Ray cluster is started here as the tests
start theirs (tests/raycluster.py): a head node without CPUs and two worker nodes with one CPU
each, all on 127.0.0.1, stopped at the end. The driver is this process, on the head node.

* wall: seconds of ``evaluate`` (the driver's whole run: reading data and cache, tasks, writing).
* driver CPU: user + system seconds of this process during the run.
* worker CPU: ``processes``: the pool's children (``RUSAGE_CHILDREN``); Ray: every process of the
  cluster's nodes (``/proc``, workers, raylets and GCS included), before vs after.
* shipped per task: the pickled task (protocol 5; for ``local`` the size of the task's arrays,
  which stay in the process) and its result; ``processes`` and Ray tasks carry row positions, and
  the matrices are shared once per grid (``processes``: .npy files the workers map; Ray: the object
  store, fetched once per node), counted apart.

    python bench/bench_cluster.py                       # the full grid
    python bench/bench_cluster.py --pairs 4 --n 300     # a reduced grid (proves the script works)
    python bench/bench_cluster.py --write               # also write BENCHMARKS.md's rows
"""
from __future__ import annotations

import argparse
import os
import pickle
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))

PAIRS = ("en-de,de-en,en-ja,ja-en,en-ru,ru-en,en-ar,ar-en,en-fr,fr-en,en-es,es-en,en-zh,zh-en,de-ja,ja-de,"
         "de-ru,ru-de,fr-ja,ja-fr")
MODELS = "use-m,e5-small,minilm-en,tfidf-char,random"
OBJECT_STORE = 2_000_000_000  # bytes per node: every language's embeddings of every model fit without spilling


def _shipped(x):
    """``x`` as it travels: a ``RowsRef`` (processes, Ray) as its row positions (the reference
    itself is a few dozen bytes), everything else as it is."""
    import dataclasses

    from backretrieval.analysis.executors import RowsRef

    if isinstance(x, RowsRef):
        return x.rows
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: _shipped(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init})
    if isinstance(x, dict):
        return {k: _shipped(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_shipped(v) for v in x)
    return x


class Measured:
    """Wraps an executor: counts the bytes of each task and result as pickled (protocol 5)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.encode_chunk = inner.encode_chunk
        self.task_bytes: list[int] = []
        self.result_bytes: list[int] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def text_encoder(self, spec):
        return self.inner.text_encoder(spec)

    def imap(self, fn, tasks):
        def measured(it):
            for t in it:
                self.task_bytes.append(len(pickle.dumps(_shipped(t), protocol=5)))
                yield t

        for r in self.inner.imap(fn, measured(tasks)):
            self.result_bytes.append(len(pickle.dumps(r, protocol=5)))
            yield r


def cluster_cpu(cluster) -> float:
    """User + system seconds of every process of the cluster's nodes (children reaped included)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for node in cluster.nodes.values():
        for pid in node.processes():
            try:
                fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return total / tick


def run_one(cfg, spec, cluster=None) -> dict:
    from backretrieval.analysis import run_grid
    from backretrieval.analysis.executors import get_executor

    ex = Measured(get_executor(spec))
    before_self = resource.getrusage(resource.RUSAGE_SELF)
    before_kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    before_cluster = cluster_cpu(cluster) if cluster else 0.0
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        res = run_grid(cfg, out, progress=False, executor=ex)
        wall = time.perf_counter() - t0
    after_self = resource.getrusage(resource.RUSAGE_SELF)
    after_kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    driver = (after_self.ru_utime - before_self.ru_utime) + (after_self.ru_stime - before_self.ru_stime)
    workers = (after_kids.ru_utime - before_kids.ru_utime) + (after_kids.ru_stime - before_kids.ru_stime)
    if cluster:
        workers = cluster_cpu(cluster) - before_cluster
    n_tasks = len(ex.task_bytes)
    shared = getattr(ex.inner, "shared_bytes", None)
    return {
        "executor": spec if cluster is None else "ray (2 nodes x 1 CPU)",
        "records": len(res.records),
        "tasks": n_tasks,
        "wall": wall,
        "driver_cpu": driver,
        "worker_cpu": workers,
        "task_mb": sum(ex.task_bytes) / max(n_tasks, 1) / 1e6,
        "result_mb": sum(ex.result_bytes) / max(n_tasks, 1) / 1e6,
        "shared_mb": None if shared is None else shared / 1e6,
        "nodes": len(getattr(ex.inner, "nodes", []) or []),
        "records_list": res.records,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=PAIRS, help="comma list, or a number: the first K of the 20 default pairs")
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--image-model", default="color-hist")
    ap.add_argument("--executors", default="local,processes:2,ray")
    ap.add_argument("--no-warm", action="store_true", help="skip filling the embedding cache first")
    ap.add_argument("--write", action="store_true", help="write the rows into BENCHMARKS.md (section ray-cluster-measured)")
    args = ap.parse_args()
    os.environ.setdefault("BACKRETRIEVAL_EMOJI_DIR", str(ROOT.parent / "shared" / "data" / "npm"))
    from backretrieval.analysis import EvalConfig, parse_pairs

    pairs = ",".join(PAIRS.split(",")[: int(args.pairs)]) if args.pairs.isdigit() else args.pairs
    cfg = EvalConfig(dataset="emoji-cldr", pairs=parse_pairs(pairs), models=args.models.split(","),
                     image_model=args.image_model, n=args.n, seeds=list(range(args.seeds)))
    if not args.no_warm:
        from bench_meta import warm_cache

        warm_cache(cfg)
        from backretrieval.analysis import run_grid

        with tempfile.TemporaryDirectory() as out:  # the image features and the fitted models' first pass
            run_grid(EvalConfig(**{**cfg.__dict__, "seeds": [0]}), out, progress=False)

    rows = []
    timing = {"seconds", "encode_seconds"}
    for spec in args.executors.split(","):
        if spec == "ray":
            rows.append(run_ray(cfg))
        else:
            rows.append(run_one(cfg, spec))
        r = rows[-1]
        print(f"{r['executor']:<24} wall {r['wall']:7.1f} s  driver CPU {r['driver_cpu']:7.1f} s  workers CPU "
              f"{r['worker_cpu']:7.1f} s  {r['tasks']} tasks, {r['task_mb']:.2f} MB/task shipped, "
              f"{r['result_mb']:.3f} MB/result" + (f", {r['shared_mb']:.1f} MB shared once" if r["shared_mb"] else ""),
              file=sys.stderr)
    strip = [[{k: v for k, v in rec.items() if k not in timing} for rec in r["records_list"]] for r in rows]
    same = all(s == strip[0] for s in strip)
    print(f"records identical on every executor: {same}", file=sys.stderr)
    if not same:
        sys.exit("records differ between executors")
    if args.write:
        write(cfg, pairs, rows)


def run_ray(cfg) -> dict:
    """The grid on a 2-node cluster started here (tests/raycluster.py), driver in this process."""
    from raycluster import LocalCluster

    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        cluster = LocalCluster(Path(tmp), object_store_bytes=OBJECT_STORE, client=False)
        try:
            cluster.add_worker("w1")
            cluster.add_worker("w2")
            for key in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED"):
                os.environ[key] = cluster.env[key]
            from backretrieval.analysis.executors.ray import ray_init

            ray_init(cluster.address)  # connect first: the run's time is the grid's, not Ray's start
            row = run_one(cfg, f"ray:{cluster.address}", cluster)
            import ray

            ray.shutdown()
            return row
        finally:
            cluster.stop()


def write(cfg, pairs: str, rows: list[dict]) -> None:
    from _md import machine, write_section

    lines = [
        "### Measured (bench/bench_cluster.py)",
        "",
        f"emoji-cldr, {len(cfg.pairs)} pairs ({pairs}), models {', '.join(cfg.models)}, {len(cfg.seeds)} seeds, "
        f"N = {cfg.n}, image model {cfg.image_model}, embeddings cached. {machine()}.",
        "",
        "| executor | records | tasks | wall s | driver CPU s | workers CPU s | driver share | MB shipped / task | MB / result | MB shared once (.npy files / object store) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        total = r["driver_cpu"] + r["worker_cpu"]
        shared = "" if r["shared_mb"] is None else f"{r['shared_mb']:.1f}"
        lines.append(
            f"| {r['executor']} | {r['records']} | {r['tasks']} | {r['wall']:.1f} | {r['driver_cpu']:.1f} | {r['worker_cpu']:.1f} | "
            f"{r['driver_cpu'] / total:.0%} | {r['task_mb']:.2f} | {r['result_mb']:.3f} | "
            f"{shared} |"
        )
    lines += ["", "Command: `python bench/bench_cluster.py --write`"]
    write_section("ray-cluster-measured", "\n".join(lines))


if __name__ == "__main__":
    main()
