"""Blind human study: study creation against naive top-k, blinding, rating storage
semantics, the HTTP API's answers to bad input, a 1,000-rating concurrent load test on the real
server, the analysis against naive recomputation, and Krippendorff's alpha against published
values and a naive pairwise reference. The browser test is in test_study_browser.py."""
from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from backretrieval.cli import main
from backretrieval.core import BackretrievalError, DataError
from backretrieval.data import load_dataset
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.encoders.cache import CachedTextEncoder
from backretrieval.study import StudyConfig, create_study, krippendorff_alpha, store
from backretrieval.report.study_analysis import format_study_analysis
from backretrieval.study.analyze import analyze, sign_flip_test
from backretrieval.study.export import write_outputs
from backretrieval.study.build import sample
from backretrieval.study.server import StudyServer

MODELS = ["use-m", "random"]
POOL = 600


def npm_dir(shared_data: Path) -> str:
    return str(shared_data / "npm")


def make_study(out: Path, shared_data: Path, *, models=MODELS, queries=20, per_model=5, seed=0, pool_size=POOL,
               raters=1, **kw) -> Path:
    cfg = StudyConfig(
        dataset="emoji-cldr", src="en", tgt="ru", models=list(models), queries=queries, per_model=per_model,
        seed=seed, pool_size=pool_size, dataset_options={"source_dir": npm_dir(shared_data)}, **kw,
    )
    create_study(cfg, out, raters=raters, progress=False)
    return out


@pytest.fixture(scope="module")
def base_study(tmp_path_factory, shared_data) -> Path:
    return make_study(tmp_path_factory.mktemp("study") / "base.db", shared_data)


@pytest.fixture
def study(base_study, tmp_path) -> Path:
    """A fresh copy of the module's study (no ratings yet)."""
    dst = tmp_path / "study.db"
    shutil.copy(base_study, dst)
    return dst


def q(db: Path, sql: str, *args):
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def token_of(db: Path, name: str = "rater1") -> str:
    return q(db, "SELECT token FROM raters WHERE name = ?", name)[0][0]


# --------------------------------------------------------------------------------- agreement


NAN = np.nan
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": 4 observers, 12 units
K2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
    [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
]
# the example of the Wikipedia article "Krippendorff's alpha" (3 raters, 15 units)
WIKI = [
    [NAN, NAN, NAN, NAN, NAN, 3, 4, 1, 2, 1, 1, 3, 3, NAN, 3],
    [1, NAN, 2, 1, 3, 3, 4, 3, NAN, NAN, NAN, NAN, NAN, NAN, NAN],
    [NAN, NAN, 2, 1, 3, 4, 4, NAN, 2, 1, 1, 3, 3, NAN, 4],
]


def test_krippendorff_alpha_published_values():
    assert krippendorff_alpha(K2011, "nominal") == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha(K2011, "ordinal") == pytest.approx(0.815, abs=5e-4)
    assert krippendorff_alpha(K2011, "interval") == pytest.approx(0.849, abs=5e-4)
    assert krippendorff_alpha(WIKI, "nominal") == pytest.approx(0.691358, abs=1e-6)
    assert krippendorff_alpha(WIKI, "interval") == pytest.approx(0.810845, abs=1e-6)


def naive_alpha(data, level, values):
    """Definition: 1 - D_o / D_e over pairable values, by explicit loops over value pairs."""
    data = np.asarray(data, float)
    units = [[v for v in data[:, u] if not np.isnan(v)] for u in range(data.shape[1])]
    units = [u for u in units if len(u) >= 2]
    pooled = [v for u in units for v in u]
    n = len(pooled)
    freq = {v: pooled.count(v) for v in values}

    def delta(c, k):
        if level == "nominal":
            return float(c != k)
        if level == "interval":
            return (c - k) ** 2
        lo, hi = min(c, k), max(c, k)
        return (sum(freq[g] for g in values if lo <= g <= hi) - (freq[c] + freq[k]) / 2) ** 2

    d_o = sum(
        sum(delta(u[i], u[j]) for i in range(len(u)) for j in range(len(u)) if i != j) / (len(u) - 1) for u in units
    ) / n
    d_e = sum(delta(pooled[i], pooled[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    return 1 - d_o / d_e


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_krippendorff_alpha_matches_naive_definition(level):
    rng = np.random.default_rng(7)
    for trial in range(5):
        truth = rng.integers(1, 5, size=25)
        data = np.array([np.where(rng.random(25) < 0.7, truth, rng.integers(1, 5, size=25)) for _ in range(3)], float)
        data[rng.random(data.shape) < 0.2] = np.nan
        assert krippendorff_alpha(data, level, (1, 2, 3, 4)) == pytest.approx(naive_alpha(data, level, (1, 2, 3, 4)), abs=1e-12)
    assert krippendorff_alpha([[1, 2, 3, 4], [1, 2, 3, 4]], "ordinal") == 1.0
    assert np.isnan(krippendorff_alpha([[1, 1], [1, 1]], "nominal"))  # no variation: undefined


# --------------------------------------------------------------------------------- sign-flip test


def test_sign_flip_exact_matches_enumeration():
    rng = np.random.default_rng(3)
    for n in (1, 4, 9, 13):
        d = rng.integers(-3, 4, size=n) / 5.0
        nz = d[d != 0]
        obs = abs(nz.sum())
        pats = np.array(list(itertools.product((-1.0, 1.0), repeat=nz.size))) if nz.size else np.ones((1, 0))
        expected = np.mean(np.abs(pats @ nz) >= obs - 1e-9) if nz.size else 1.0
        got = sign_flip_test(d)
        assert got["p"] == pytest.approx(expected)
        assert got["method"] == "exact sign-flip"
    assert sign_flip_test(np.zeros(5))["p"] == 1.0
    assert sign_flip_test(np.ones(10))["p"] == pytest.approx(2 / 1024)  # all of one sign: 2 extreme patterns
    # above 20 non-zero differences: Monte Carlo, close to the exact value (all 25 positive: 2/2^25)
    mc = sign_flip_test(np.ones(25), seed=1)
    assert mc["method"].startswith("sign-flip,") and mc["p"] < 1e-4


# --------------------------------------------------------------------------------- create


def test_create_structure_credits_and_naive_topk(base_study, shared_data):
    meta = q(base_study, "SELECT key, value FROM meta")
    meta = {k: json.loads(v) for k, v in meta}
    assert meta["models"] == MODELS and meta["queries"] == 20 and meta["per_model"] == 5 and meta["pool_n"] == POOL
    assert q(base_study, "SELECT COUNT(*) FROM queries")[0][0] == 20
    # every model has exactly 5 credits per query, ranks 1..5
    for model_id, in q(base_study, "SELECT model_id FROM models"):
        rows = q(base_study, "SELECT s.query_id, c.rank FROM credits c JOIN suggestions s USING (sugg_id) WHERE c.model_id = ?", model_id)
        by_q: dict[int, list[int]] = {}
        for qid, rank in rows:
            by_q.setdefault(qid, []).append(rank)
        assert len(by_q) == 20 and all(sorted(v) == [1, 2, 3, 4, 5] for v in by_q.values())
    n_sugg = q(base_study, "SELECT COUNT(*) FROM suggestions")[0][0]
    n_dup = q(base_study, "SELECT COUNT(*) FROM (SELECT sugg_id FROM credits GROUP BY sugg_id HAVING COUNT(*) > 1)")[0][0]
    assert n_sugg == 2 * 5 * 20 - n_dup
    # the disjoint pool: no query's own emoji (concept = id in emoji-cldr) is ever suggested
    assert q(base_study, "SELECT COUNT(*) FROM suggestions s JOIN queries q USING (query_id) WHERE s.item_id = q.item_id")[0][0] == 0

    # naive reference: recompute the sample and every model's top 5 with a full argsort
    ds = load_dataset("emoji-cldr", langs=["en", "ru"], source_dir=npm_dir(shared_data))
    cfg = StudyConfig("emoji-cldr", "en", "ru", MODELS, pool_size=POOL)
    q_rows, pool = sample(cfg, ds["en"], ds["ru"])
    assert [ds["en"].ids[i] for i in q_rows] == [r[0] for r in q(base_study, "SELECT item_id FROM queries ORDER BY query_id")]
    assert len(pool) == POOL and len(set(pool.tolist())) == POOL
    assert not {ds["ru"].ids[j] for j in pool} & {ds["en"].ids[i] for i in q_rows}
    for model_id, spec in q(base_study, "SELECT model_id, spec FROM models"):
        enc = CachedTextEncoder(get_text_encoder(spec))
        qv = enc.encode([ds["en"].texts[i] for i in q_rows], "en")
        dv = enc.encode([ds["ru"].texts[j] for j in pool], "ru")
        qv = qv / np.linalg.norm(qv, axis=1, keepdims=True)
        dv = dv / np.linalg.norm(dv, axis=1, keepdims=True)
        sims = qv.astype(np.float64) @ dv.astype(np.float64).T
        for qi in range(20):
            want = [ds["ru"].ids[pool[j]] for j in np.argsort(-sims[qi], kind="stable")[:5]]
            got = [r[0] for r in q(base_study, "SELECT s.item_id FROM credits c JOIN suggestions s USING (sugg_id) "
                                   "WHERE s.query_id = ? AND c.model_id = ? ORDER BY c.rank", qi + 1, model_id)]
            assert got == want, (spec, qi)


def study_content(db: Path):
    return (
        q(db, "SELECT item_id, text, image_id FROM queries ORDER BY query_id"),
        q(db, "SELECT query_id, item_id, text, image_id FROM suggestions ORDER BY sugg_id"),
        q(db, "SELECT s.query_id, s.item_id, m.spec, c.rank, round(c.score, 5) FROM credits c JOIN suggestions s USING (sugg_id) "
              "JOIN models m USING (model_id) ORDER BY 1, 2, 3"),
    )


def test_same_seed_same_study_and_duplicates_credited_to_both(tmp_path, shared_data, base_study):
    again = make_study(tmp_path / "again.db", shared_data)
    assert study_content(again) == study_content(base_study)
    assert q(again, "SELECT public_id FROM suggestions") != q(base_study, "SELECT public_id FROM suggestions")  # opaque ids are fresh
    other = make_study(tmp_path / "other.db", shared_data, seed=1, queries=3, pool_size=100)
    assert study_content(other)[0][:3] != study_content(base_study)[0][:3]
    # two models that agree often: a shared suggestion is stored once with both credits
    dup = make_study(tmp_path / "dup.db", shared_data, models=["use-m", "use-m@trunc=256"], queries=5, pool_size=150, raters=0)
    shared = q(dup, "SELECT sugg_id, COUNT(*) FROM credits GROUP BY sugg_id HAVING COUNT(*) = 2")
    assert shared, "use-m and its 256-d truncation should share suggestions"
    n_sugg = q(dup, "SELECT COUNT(*) FROM suggestions")[0][0]
    assert n_sugg == 2 * 5 * 5 - len(shared)
    assert q(dup, "SELECT COUNT(*) FROM (SELECT query_id, item_id FROM suggestions GROUP BY 1, 2 HAVING COUNT(*) > 1)")[0][0] == 0


def test_pool_all_keeps_translations(shared_data):
    ds = load_dataset("emoji-cldr", langs=["en", "ru"], source_dir=npm_dir(shared_data))
    qa, pool_all = sample(StudyConfig("emoji-cldr", "en", "ru", MODELS, pool="all"), ds["en"], ds["ru"])
    qd, pool_dis = sample(StudyConfig("emoji-cldr", "en", "ru", MODELS), ds["en"], ds["ru"])
    assert (qa == qd).all()
    own = {ds["en"].ids[i] for i in qa}
    assert own <= {ds["ru"].ids[j] for j in pool_all}
    assert not own & {ds["ru"].ids[j] for j in pool_dis}
    assert len(pool_all) == len(ds["ru"]) and len(pool_dis) == len(ds["ru"]) - len(own & set(ds["ru"].ids))


def test_create_bad_input(tmp_path, shared_data, base_study):
    with pytest.raises(BackretrievalError, match="at least two models"):
        make_study(tmp_path / "a.db", shared_data, models=["use-m"])
    with pytest.raises(BackretrievalError, match="duplicate model"):
        make_study(tmp_path / "a.db", shared_data, models=["use-m", "use-m"])
    with pytest.raises(DataError, match="queries asked for"):
        make_study(tmp_path / "a.db", shared_data, queries=10**6)
    with pytest.raises(DataError, match="per_model=7 exceeds the pool of 5"):
        make_study(tmp_path / "a.db", shared_data, per_model=7, pool_size=5, queries=2)
    with pytest.raises(BackretrievalError, match="unknown text model 'nope'"):
        make_study(tmp_path / "a.db", shared_data, models=["nope", "use-m"], queries=2)
    with pytest.raises(DataError, match="exists"):
        make_study(base_study, shared_data)
    assert list(tmp_path.iterdir()) == []  # nothing half-written is left behind
    with pytest.raises(store.StudyError, match="not a study file"):
        (tmp_path / "junk.db").write_text("not sqlite")
        store.connect(tmp_path / "junk.db")


# --------------------------------------------------------------------------------- blinding


def all_strings(x):
    if isinstance(x, dict):
        for k, v in x.items():
            yield k
            yield from all_strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from all_strings(v)
    elif isinstance(x, str):
        yield x


def test_rater_state_is_blinded_and_shuffled_per_rater(study):
    con = store.connect(study)
    try:
        r2 = store.add_rater(con, "second")
        a, a2 = store.rater_state(con, token_of(study)), store.rater_state(con, token_of(study))
        b = store.rater_state(con, r2["token"])
    finally:
        con.close()
    assert a == a2  # a rater's order is stable (resume)
    strings = set(all_strings(a))
    for spec in MODELS:
        assert spec not in strings
    assert not {"model", "models", "rank", "credits", "item_id", "sugg_id", "spec"} & strings
    assert [s["label"] for s in a["scale"]] == [label for _, label in store.SCALE]
    for query in a["queries"]:
        assert set(query) == {"qid", "text", "image", "suggestions"}
        for s in query["suggestions"]:
            assert set(s) == {"sid", "text", "image"} and re.fullmatch(r"[0-9a-f]{12}", s["sid"])
    sids = lambda st: [s["sid"] for qq in st["queries"] for s in qq["suggestions"]]  # noqa: E731
    assert sorted(sids(a)) == sorted(sids(b)) and len(sids(a)) == a["total"]
    assert sids(a) != sids(b)  # each rater has an own order
    # positions are not tied to the models: over all queries both models appear at slot 1
    first = {s[0] for s in q(study, "SELECT public_id FROM suggestions")}
    assert first  # (sanity) and which model is first varies
    slot1 = [qq["suggestions"][0]["sid"] for qq in a["queries"]]
    owners = {m for sid in slot1 for (m,) in q(study, "SELECT c.model_id FROM credits c JOIN suggestions s USING (sugg_id) WHERE s.public_id = ?", sid)}
    assert owners == {1, 2}


# --------------------------------------------------------------------------------- storage


def table_counts(db: Path):
    return q(db, "SELECT (SELECT COUNT(*) FROM ratings), (SELECT COUNT(*) FROM events), (SELECT COALESCE(SUM(n_changes), 0) FROM ratings)")[0]


def test_record_rating_overwrite_idempotency_and_bad_input(study):
    tok = token_of(study)
    con = store.connect(study)
    try:
        st = store.rater_state(con, tok)
        sid, sid2 = st["queries"][0]["suggestions"][0]["sid"], st["queries"][0]["suggestions"][1]["sid"]
        assert store.record_rating(con, tok, sid, 3, "e1") == {"sid": sid, "score": 3, "rated": 1, "total": st["total"], "duplicate": False}
        assert store.record_rating(con, tok, sid, 3, "e1")["duplicate"] is True  # a retried request: stored once
        assert store.record_rating(con, tok, sid, 1, "e2")["rated"] == 1  # re-rating overwrites
        assert table_counts(study) == (1, 2, 2)
        assert q(study, "SELECT score, n_changes FROM ratings")[0] == (1, 2)
        before = table_counts(study)
        bad = [
            (dict(score=0), store.StudyError), (dict(score=5), store.StudyError), (dict(score="1"), store.StudyError),
            (dict(score=1.0), store.StudyError), (dict(score=True), store.StudyError), (dict(score=None), store.StudyError),
            (dict(sid="zz"), store.StudyError), (dict(sid=12), store.StudyError), (dict(sid="0" * 12), store.NotFound),
            (dict(token="x" * 43), store.NotFound), (dict(token=""), store.NotFound),
            (dict(event="bad event!"), store.StudyError), (dict(event="e1", score=2), store.Conflict),
        ]
        for change, err in bad:
            args = {"token": tok, "sid": sid2, "score": 2, "event": None} | change
            with pytest.raises(err):
                store.record_rating(con, args["token"], args["sid"], args["score"], args["event"])
        assert table_counts(study) == before
        with pytest.raises(store.Conflict):
            store.add_rater(con, "rater1")
        with pytest.raises(store.StudyError, match="bad rater name"):
            store.add_rater(con, "<script>")
    finally:
        con.close()


# --------------------------------------------------------------------------------- HTTP


@contextlib.contextmanager
def running(db: Path):
    srv = StudyServer(db, "127.0.0.1", 0).start()
    try:
        yield srv
    finally:
        srv.stop()


def req(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()
    finally:
        c.close()


def post(port, path, obj, ctype="application/json"):
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return req(port, "POST", path, body, {"Content-Type": ctype})


def test_http_api_status_codes_change_nothing_on_bad_input(study):
    tok = token_of(study)
    with running(study) as srv:
        p, base = srv.port, f"/r/{tok}"
        status, ctype, page = req(p, "GET", base)
        assert status == 200 and ctype.startswith("text/html") and b"study.js" in page
        status, _, raw = req(p, "GET", base + "/state")
        st = json.loads(raw)
        assert status == 200
        sid = st["queries"][0]["suggestions"][0]["sid"]
        img = st["queries"][0]["image"]
        assert post(p, base + "/rate", {"sid": sid, "score": 2, "event": "ok1"})[0] == 200
        before = table_counts(study)
        wrong = tok[:-1] + ("B" if tok.endswith("A") else "A")  # one character off (a random token may itself end in A)
        cases = [
            (post(p, base + "/rate", {"sid": sid, "score": 0}), 400),
            (post(p, base + "/rate", {"sid": sid, "score": 5}), 400),
            (post(p, base + "/rate", {"sid": sid, "score": "3"}), 400),
            (post(p, base + "/rate", {"sid": sid, "score": 2.5}), 400),
            (post(p, base + "/rate", {"sid": sid}), 400),
            (post(p, base + "/rate", {"sid": sid, "score": 1, "model": "use-m"}), 400),
            (post(p, base + "/rate", [sid, 1]), 400),
            (post(p, base + "/rate", b"{not json"), 400),
            (post(p, base + "/rate", f"sid={sid}&score=1".encode(), "application/x-www-form-urlencoded"), 415),
            (post(p, base + "/rate", {"sid": "0123456789ab", "score": 1}), 404),
            (post(p, base + "/rate", {"sid": sid, "score": 1, "event": "ok1"}), 409),
            (post(p, base + "/rate", {"sid": sid, "score": 1, "event": "x" * 5000}), 413),
            (post(p, f"/r/{wrong}/rate", {"sid": sid, "score": 1}), 404),
            (post(p, "/r/nope/rate", {"sid": sid, "score": 1}), 404),
            (req(p, "GET", base + "/rate"), 405),
            (req(p, "GET", f"/r/{wrong}"), 404),
            (req(p, "GET", f"/r/{wrong}/state"), 404),
            (req(p, "GET", "/"), 404),
            (req(p, "GET", f"/r/{wrong}/img/{img}"), 404),
            (req(p, "GET", f"{base}/img/{'0' * 32}"), 404),
            (req(p, "GET", f"{base}/img/..%2F..%2Fetc%2Fpasswd"), 404),
            (req(p, "GET", f"{base}/img/../../../etc/passwd"), 404),
        ]
        for (status, ctype, body), want in cases:
            assert status == want, (status, body)
        assert table_counts(study) == before
        status, ctype, data = req(p, "GET", f"{base}/img/{img}")
        assert status == 200 and ctype == "image/png" and data[:8] == b"\x89PNG\r\n\x1a\n"
        for path in (base, base + "/state", "/static/study.js", "/static/study.css"):
            assert b"use-m" not in req(p, "GET", path)[2]


# --------------------------------------------------------------------------------- load


@contextlib.contextmanager
def serve_process(db: Path, port: int = 0):
    """``backretrieval study serve DB --port PORT`` in its own process; yields (process, port)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "backretrieval.cli", "study", "serve", str(db), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m, f"server did not start: {line!r} {proc.stdout.read() if proc.poll() is not None else ''}"
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain the pipe
        yield proc, int(m.group(1))
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_load_1000_concurrent_ratings_stored_exactly_once(study):
    con = store.connect(study)
    try:
        tokens = [token_of(study)] + [store.add_rater(con, f"load{i}")["token"] for i in range(2, 7)]
        sids = [s["sid"] for qq in store.rater_state(con, tokens[0])["queries"] for s in qq["suggestions"]]
    finally:
        con.close()
    assert len(tokens) * len(sids) >= 1000
    rng = random.Random(0)
    jobs = [(t, s, rng.randint(1, 4), f"ev{i}") for i, (t, s) in enumerate(itertools.product(tokens, sids))][:1000]
    rng.shuffle(jobs)
    with serve_process(study) as (_, port):
        def send(job):
            t, s, sc, ev = job
            for attempt in range(5):
                try:
                    status, _, body = post(port, f"/r/{t}/rate", {"sid": s, "score": sc, "event": ev})
                    return status, json.loads(body)
                except (ConnectionError, http.client.HTTPException):  # retry like the page does
                    time.sleep(0.2 * (attempt + 1))
            raise AssertionError(f"request {ev} failed 5 times")

        with ThreadPoolExecutor(max_workers=24) as pool:
            results = list(pool.map(send, jobs))
        assert all(status == 200 for status, _ in results), [r for r in results if r[0] != 200][:3]
        # a second wave: 100 exact retries (same event ids) while other clients post new clicks
        retries = rng.sample(jobs, 100)
        with ThreadPoolExecutor(max_workers=24) as pool:
            again = list(pool.map(send, retries))
        assert all(status == 200 and body["duplicate"] for status, body in again)
    rows = q(study, "SELECT r.token, s.public_id, g.score, g.n_changes FROM ratings g JOIN raters r USING (rater_id) "
                    "JOIN suggestions s USING (sugg_id)")
    assert len(rows) == 1000
    want = {(t, s): sc for t, s, sc, _ in jobs}
    assert {(t, s): sc for t, s, sc, _ in rows} == want
    assert all(n == 1 for *_, n in rows)
    events = q(study, "SELECT r.token, s.public_id, e.score, e.client_event FROM events e JOIN raters r USING (rater_id) "
                      "JOIN suggestions s USING (sugg_id)")
    assert sorted(events) == sorted(jobs)  # every click once, none lost, none doubled


# --------------------------------------------------------------------------------- analysis


def scripted_ratings(db: Path, raters: dict[str, callable]) -> dict[tuple[str, int], int]:
    """Rate every suggestion by each rater's rule f(sugg_id, models) -> score; returns them."""
    con = store.connect(db)
    out = {}
    try:
        have = {r["name"] for r in store.list_raters(con)}
        for name in raters:
            if name not in have:
                store.add_rater(con, name)
        credit = {}
        for sugg_id, model_id in con.execute("SELECT sugg_id, model_id FROM credits"):
            credit.setdefault(sugg_id, set()).add(model_id)
        pub = dict(con.execute("SELECT sugg_id, public_id FROM suggestions"))
        for name, rule in raters.items():
            tok = con.execute("SELECT token FROM raters WHERE name = ?", (name,)).fetchone()[0]
            for sugg_id, models in sorted(credit.items()):
                sc = rule(sugg_id, models)
                store.record_rating(con, tok, pub[sugg_id], sc)
                out[(name, sugg_id)] = sc
    finally:
        con.close()
    return out


def test_analyze_against_naive_recomputation(study, tmp_path):
    # rater1 favours model 1 (use-m) with a pattern; rater2 agrees mostly
    def r1(sid, models):
        return 1 if (1 in models and sid % 3 != 0) else (2 + sid % 3)

    def r2(sid, models):
        return r1(sid, models) if sid % 5 else 4

    given = scripted_ratings(study, {"rater1": r1, "rater2": r2})
    res = analyze(study, bkr=False, n_boot=300)
    credits = q(study, "SELECT sugg_id, model_id FROM credits")
    qid = dict(q(study, "SELECT sugg_id, query_id FROM suggestions"))
    for model_id, spec in ((1, "use-m"), (2, "random")):
        scores = [given[(r, s)] for r in ("rater1", "rater2") for s, m in credits if m == model_id]
        m = res["models"][spec]
        assert m["ratings"] == len(scores) == 200
        assert m["counts"] == {str(v): scores.count(v) for v in (1, 2, 3, 4)}
        assert m["mean_score"] == pytest.approx(np.mean(scores))
    c = res["comparisons"][0]
    assert (c["a"], c["b"]) == ("use-m", "random")
    va, vb = res["models"]["use-m"]["very_relevant"], res["models"]["random"]["very_relevant"]
    assert c["very_relevant"] == [va, vb] and c["ratio_very_relevant"] == pytest.approx(va / vb)
    # naive per-query differences of the share of 1s (per rater, then averaged) -> exact enumeration
    diffs = []
    for query in range(1, 21):
        share = {}
        for model_id in (1, 2):
            own = [s for s, m in credits if m == model_id and qid[s] == query]
            share[model_id] = np.mean([np.mean([given[(r, s)] == 1 for s in own]) for r in ("rater1", "rater2")])
        diffs.append(share[1] - share[2])
    nz = np.array([d for d in diffs if d != 0])
    pats = np.array(list(itertools.product((-1.0, 1.0), repeat=nz.size)))
    assert c["primary"]["p"] == pytest.approx(np.mean(np.abs(pats @ nz) >= abs(nz.sum()) - 1e-9))
    assert c["queries_a_better"] == sum(d > 0 for d in diffs) and c["primary"]["p"] < 0.001
    lo, hi = c["ratio_ci95"]
    assert lo <= c["ratio_very_relevant"] <= hi
    # agreement: alpha over the (2 raters x suggestions) matrix
    sids = sorted({s for s, _ in credits})
    mat = np.array([[given[(r, s)] for s in sids] for r in ("rater1", "rater2")], float)
    assert res["agreement"]["alpha_ordinal"] == pytest.approx(krippendorff_alpha(mat, "ordinal", (1, 2, 3, 4)))
    assert res["agreement"]["pairable_suggestions"] == len(sids)
    md = format_study_analysis(res)
    assert "use-m vs random" in md and "Krippendorff" in md
    files = write_outputs(res, study, tmp_path / "out")
    assert json.loads(files[1].read_text())["models"]["use-m"]["counts"] == res["models"]["use-m"]["counts"]
    assert len(files[2].read_text().splitlines()) == 1 + 2 * q(study, "SELECT COUNT(*) FROM suggestions")[0][0]


def test_analyze_with_no_ratings_compares_nothing(study, shared_data):
    """0 ratings: no test, no order by the raters (it said 'by the raters: use-m > random (same)')."""
    res = analyze(study, bkr=True, bkr_n=60, bkr_seeds=1, image_model="color-hist", n_boot=100, progress=False)
    assert res["ratings"] == 0 and res["comparisons"] == []
    assert res["ratings_note"].startswith("no ratings yet: nothing is compared")
    assert "needs at least 6 queries rated for both models" in res["ratings_note"]
    md = format_study_analysis(res)
    assert "**No ratings yet: nothing is compared" in md and "## Comparisons" not in md
    assert "by the raters: none yet (no ratings yet" in md and "(same)" not in md and "(different)" not in md


def test_analyze_with_too_few_ratings_says_how_many_are_needed(study):
    """Ratings on 3 queries only: the exact sign-flip test cannot go below 2 / 2^3 = 0.25."""
    qid = dict(q(study, "SELECT sugg_id, query_id FROM suggestions"))
    rated = {s for s, query in qid.items() if query <= 3}
    con = store.connect(study)
    try:
        tok = con.execute("SELECT token FROM raters WHERE name = 'rater1'").fetchone()[0]  # the study's one rater
        pub = dict(con.execute("SELECT sugg_id, public_id FROM suggestions"))
        for sid in sorted(rated):
            store.record_rating(con, tok, pub[sid], 1 if sid % 2 else 4)
    finally:
        con.close()
    res = analyze(study, bkr=False, n_boot=100)
    c = res["comparisons"][0]
    assert c["queries"] == 3 and c["primary"]["p"] >= 0.25
    assert c["too_few"] == ("3 queries are rated for both use-m and random; the paired test needs at least 6 (each with a "
                            "difference) before p can fall below 0.05 after Holm over 1 comparison")
    assert res["ratings_note"].startswith("too few ratings to tell the models apart")
    assert "3 queries are rated for both use-m and random" in format_study_analysis(res)


def test_queries_needed_by_the_exact_test():
    from backretrieval.study.analyze import queries_needed

    assert queries_needed(1) == 6 and queries_needed(3) == 7  # 2/2^6 = 0.031; 3 * 2/2^7 = 0.047
    for c in (1, 2, 6, 45):
        n = queries_needed(c)
        assert 2.0 ** (1 - n) * c < 0.05 <= 2.0 ** (2 - n) * c


def test_analyze_bkr_section_matches_evaluate(study, shared_data):
    from backretrieval.analysis import EvalConfig, run_grid

    scripted_ratings(study, {"rater1": lambda s, m: 1 + s % 4})
    res = analyze(study, bkr=True, bkr_n=60, bkr_seeds=1, image_model="color-hist", n_boot=100, progress=False)
    assert res["agreement"] is None
    ref = run_grid(EvalConfig("emoji-cldr", [("en", "ru")], MODELS, image_model="color-hist", n=60, seeds=[0],
                              dataset_options={"source_dir": npm_dir(shared_data)}), None, progress=False)
    for rec in ref.records:
        assert res["bkr"]["models"][rec["model"]]["bkr@10"] == pytest.approx(rec["bkr@10"])
        assert res["bkr"]["models"][rec["model"]]["xlr@10"] == pytest.approx(rec["xlr@10"])
    assert "Backretrieval on the same pair" in format_study_analysis(res)


def test_analyze_fits_bkr_n_to_a_small_catalogue_and_refuses_too_large(tmp_path, shared_data):
    from small_catalogue import write_catalogue

    shop = write_catalogue(tmp_path / "shop")  # 60 products in en, de, es: BkR allows N=30 at most
    db = tmp_path / "shop.db"
    create_study(StudyConfig(dataset=str(shop), src="en", tgt="de", models=["tfidf-char", "random"], queries=3,
                             per_model=2), db, progress=False)
    said = []
    res = analyze(db, bkr_seeds=1, image_model="color-hist", n_boot=100, progress=False, log=said.append)
    assert res["bkr"]["n"] == 30 and res["bkr"]["n_note"].startswith("N=30, the largest the data allows")
    assert said == [f"BkR comparison: {res['bkr']['n_note']}"]
    assert "N=30 items per side" in format_study_analysis(res) and "N=30, the largest the data allows" in format_study_analysis(res)
    for n in (31, 1_000_000_000):
        with pytest.raises(DataError, match=f"N={n:} is too large for en-de: at most N=30"):
            analyze(db, bkr_n=n, bkr_seeds=1, image_model="color-hist", n_boot=100, progress=False)
    r = CliRunner().invoke(main, ["study", "analyze", str(db), "--bkr-n", "1000000000", "--image-model", "color-hist",
                                  "--quiet", "--out", str(tmp_path / "a")])
    assert r.exit_code == 2 and "at most N=30" in r.output and "Use --bkr-n 30 or less" in r.output, r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "a").exists()


def test_bkr_n_fits_the_tutorial_catalogue(tmp_path, shared_data):
    """docs/your-data.md's catalogue (772 products) allows N=386 for BkR on en-ja: the default (1,000) is fitted."""
    import pandas as pd

    from backretrieval.study.analyze import bkr_sample_size

    shop = tmp_path / "shop"
    made = CliRunner().invoke(main, ["make-catalogue", str(shop), "--langs", "en,ja"])
    assert made.exit_code == 0, made.output
    parts = [pd.read_csv(f, dtype=str).assign(lang=f.stem) for f in sorted(shop.glob("??.csv"))]
    catalogue = pd.concat(parts, ignore_index=True).assign(concept=lambda d: d["id"])
    catalogue.to_csv(shop / "catalogue.csv", index=False)
    meta = {"dataset": str(shop / "catalogue.csv"), "src": "en", "tgt": "ja"}
    n, note = bkr_sample_size(meta, None, 3)
    assert (n, note) == (386, "N=386, the largest the data allows (BkR's two samples need N en and N ja items with "
                              "disjoint concepts, 2N distinct concepts with one item per concept; the 772 en and 772 ja "
                              "items cover 772)")
    assert bkr_sample_size(meta, 300, 3) == (300, None)
    with pytest.raises(DataError, match="N=387 is too large for en-ja: at most N=386"):
        bkr_sample_size(meta, 387, 3)


def test_cli_create_add_rater_raters_analyze(tmp_path, shared_data):
    db = tmp_path / "cli.db"
    runner = CliRunner()
    args = ["study", "create", "--dataset", "emoji-cldr", "--src", "en", "--tgt", "ru", "--models", "use-m,random",
            "--queries", "3", "--per-model", "2", "--pool-size", "100", "--quiet",
            "--dataset-option", f"source_dir={npm_dir(shared_data)}", "--out", str(db)]
    r = runner.invoke(main, args)
    assert r.exit_code == 0, r.output
    assert re.search(r"rater1: http://127\.0\.0\.1:8765/r/[\w-]{43}", r.output)
    r2 = runner.invoke(main, args)
    assert r2.exit_code == 2 and "exists" in r2.output
    r = runner.invoke(main, ["study", "add-rater", str(db), "--name", "ana"])
    assert r.exit_code == 0 and r.output.startswith("ana: http://127.0.0.1:8765/r/")
    r = runner.invoke(main, ["study", "raters", str(db)])
    assert r.exit_code == 0 and [ln.split("\t")[:2] for ln in r.output.splitlines()] == [
        ["rater1", f"0/{q(db, 'SELECT COUNT(*) FROM suggestions')[0][0]}"], ["ana", f"0/{q(db, 'SELECT COUNT(*) FROM suggestions')[0][0]}"]]
    r = runner.invoke(main, ["study", "analyze", str(db), "--no-bkr", "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    assert "(**incomplete**)" in r.output and (tmp_path / "a" / "analysis.json").is_file()
    r = runner.invoke(main, ["study", "serve", str(tmp_path / "missing.db")])
    assert r.exit_code == 2 and "study file not found" in r.output


# --------------------------------------------------------------------------------- proxy raters


def test_proxy_raters_on_a_copy(study, tmp_path, shared_data):
    from backretrieval.study.proxy import score_from_overlap, terms_of

    f = frozenset
    assert score_from_overlap(f("ab"), f("ab")) == 1 and score_from_overlap(f("ab"), f("abcd")) == 1
    assert score_from_overlap(f("ab"), f("abcde")) == 2 and score_from_overlap(f("ab"), f("bc")) == 2  # J = 0.4, 0.33
    assert score_from_overlap(f("abc"), f("bcd")) == 1 and score_from_overlap(f("abc"), f("cde")) == 3  # J = 0.5, 0.2
    assert score_from_overlap(f("a"), f("b")) == 4
    assert score_from_overlap(f(), f()) == 4
    before = q(study, "SELECT COUNT(*) FROM ratings")[0][0]
    out = tmp_path / "pilot.db"
    r = CliRunner().invoke(main, ["study", "proxy-rate", str(study), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert q(study, "SELECT COUNT(*) FROM ratings")[0][0] == before == 0  # the study itself is untouched
    n = q(out, "SELECT COUNT(*) FROM suggestions")[0][0]
    assert "proxy-words: %d rated" % n in r.output
    # naive recomputation of a few proxy scores from the English annotations
    ds = load_dataset("emoji-cldr", langs=["en"], source_dir=npm_dir(shared_data))
    en = ds["en"]
    row = {i: k for k, i in enumerate(en.ids)}
    got = q(out, "SELECT s.item_id, qq.item_id, g.score FROM ratings g JOIN raters r USING (rater_id) JOIN suggestions s "
                 "USING (sugg_id) JOIN queries qq ON qq.query_id = s.query_id WHERE r.name = 'proxy-words'")
    assert len(got) == n
    for item, query_item, score in got[:40]:
        a = {w.casefold() for w in re.findall(r"\w+", en.extra["title"][row[query_item]] + " " + en.extra["body"][row[query_item]])}
        b = {w.casefold() for w in re.findall(r"\w+", en.extra["title"][row[item]] + " " + en.extra["body"][row[item]])}
        j = len(a & b) / len(a | b)
        assert score == (1 if j >= 0.5 else 2 if j >= 0.25 else 3 if j > 0 else 4)
        assert terms_of(en, row[item], "words") == b
    res = analyze(out, bkr=False, n_boot=100)
    proxies = {r["name"]: r for r in res["raters"] if r["name"].startswith("proxy-")}
    assert set(proxies) == {"proxy-words", "proxy-keywords"} and all(r["rated"] == n for r in proxies.values())
    assert not res["complete"]  # rater1 (a person) has rated nothing in this copy
    assert res["agreement"]["raters"] == 2 and -1 <= res["agreement"]["alpha_ordinal"] <= 1
    r = CliRunner().invoke(main, ["study", "proxy-rate", str(study), "--out", str(study)])
    assert r.exit_code == 2 and "must differ" in r.output


def test_the_studys_bkr_comparison_finds_models_whose_label_is_not_their_spec(shared_data):
    """The records call ``random?dim=16&batch_size=4`` by its label ``random?dim=16``; the study's
    comparison still reads its numbers under the spec the study names it by."""
    from backretrieval.study.analyze import bkr_comparison

    spec = "random?dim=16&batch_size=4"
    b = bkr_comparison({"dataset": "emoji-cldr", "src": "en", "tgt": "de", "models": [spec, "tfidf-char"]},
                       n=40, seeds=1, image_model="color-hist", progress=False)
    assert set(b["models"]) == {spec, "tfidf-char"} and "bkr@10" in b["models"][spec]
