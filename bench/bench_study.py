"""Throughput and latency of the study's rating server (`backretrieval study serve`) on loopback.

Builds a small real study (emoji-cldr en->ru, use-m vs random, 20 queries x 5 per model, pool
600), registers raters, starts the server in its own process, and posts 1,000 ratings (each a
fresh (rater, suggestion), with an event id) from C concurrent clients (threads with
http.client). Reports ratings/s and latency percentiles per C, and checks afterwards that every
rating is stored exactly once. Every rating is one fsync'ed SQLite transaction (WAL,
synchronous=FULL), so the numbers mostly measure the disk's fsync rate.

    .venv/bin/python bench/bench_study.py            # writes the "study" section of BENCHMARKS.md
"""
from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _md import machine, write_section  # noqa: E402

from backretrieval.study import StudyConfig, create_study, store  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "npm"
N_RATINGS = 1000
CLIENTS = (1, 8, 32)


def serve(db: Path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "backretrieval.cli", "study", "serve", str(db), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    m = re.search(r"http://127\.0\.0\.1:(\d+)/", proc.stdout.readline())
    assert m, "server did not start"
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, int(m.group(1))


def run(db: Path, clients: int) -> dict:
    con = store.connect(db)
    try:
        tokens = [store.add_rater(con, f"c{clients}-{i}")["token"] for i in range(6)]
        sids = [s["sid"] for qq in store.rater_state(con, tokens[0])["queries"] for s in qq["suggestions"]]
    finally:
        con.close()
    jobs = [(t, s, 1 + i % 4, f"b{clients}-{i}") for i, (t, s) in enumerate(itertools.product(tokens, sids))][:N_RATINGS]
    proc, port = serve(db)
    lat: list[float] = []
    lock = threading.Lock()

    def send(job):
        t, s, sc, ev = job
        t0 = time.perf_counter()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", f"/r/{t}/rate", json.dumps({"sid": s, "score": sc, "event": ev}), {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        c.close()
        with lock:
            lat.append(time.perf_counter() - t0)
        return r.status

    try:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=clients) as pool:
            statuses = list(pool.map(send, jobs))
        wall = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait()
    assert all(s == 200 for s in statuses)
    con = sqlite3.connect(db)
    stored = con.execute(
        "SELECT COUNT(*) FROM ratings g JOIN raters r USING (rater_id) WHERE r.name LIKE ?", (f"c{clients}-%",)
    ).fetchone()[0]
    con.close()
    assert stored == N_RATINGS, stored
    ms = np.array(lat) * 1000
    return {"clients": clients, "wall": wall, "rps": N_RATINGS / wall, "p50": np.percentile(ms, 50), "p95": np.percentile(ms, 95), "max": ms.max()}


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-study-"))
    try:
        db = tmp / "study.db"
        cfg = StudyConfig("emoji-cldr", "en", "ru", ["use-m", "random"], pool_size=600, dataset_options={"source_dir": str(DATA)})
        create_study(cfg, db, raters=0, progress=False)
        rows = [run(db, c) for c in CLIENTS]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()
    lines = [
        "## Study rating server (bench/bench_study.py)",
        "",
        f"Machine: {machine()}. Load average at the end: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} "
        "(other processes share the cores).",
        "",
        f"`.venv/bin/python bench/bench_study.py`: {N_RATINGS} ratings posted to `backretrieval study serve` on "
        "127.0.0.1 (Werkzeug threaded server, one SQLite transaction with fsync per rating), each stored exactly "
        "once (checked).",
        "",
        "| concurrent clients | wall s | ratings/s | p50 ms | p95 ms | max ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['clients']} | {r['wall']:.2f} | {r['rps']:.0f} | {r['p50']:.1f} | {r['p95']:.1f} | {r['max']:.1f} |")
    body = "\n".join(lines)
    print(body)
    write_section("study", body)


if __name__ == "__main__":
    main()
