"""Study files: nothing stale, nothing lost, every bad input a clear error.

Each test reproduces a finding with the real parts (a real `study serve` process, real HTTP
posts, kill -9, SQLite's real -wal file, real PNG files): a study recreated over a crashed or
running server, a stale -wal without its database, truncated images, rater tokens in the access
log, spreadsheet formulas in ratings.csv, links to 0.0.0.0, file modes, a damaged study, the
proxy copy that shared the study's links, and a study file that is briefly missing."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from test_study import npm_dir, post, q, req, running, table_counts, token_of

from backretrieval.cli import main
from backretrieval.core import BackretrievalError, DataError
from backretrieval.study import StudyConfig, create_study, store
from backretrieval.study.analyze import analyze
from backretrieval.study.export import ratings_frame, write_outputs

CHEAP = ["random", "tfidf-char"]  # no model files: a study in about a second


def create_args(db: Path, shared_data: Path, *extra: str) -> list[str]:
    return ["study", "create", "--dataset", "emoji-cldr", "--src", "en", "--tgt", "ru", "--models", ",".join(CHEAP),
            "--queries", "20", "--per-model", "5", "--pool-size", "300", "--raters", "2", "--quiet",
            "--dataset-option", f"source_dir={npm_dir(shared_data)}", "--out", str(db), *extra]


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


@contextlib.contextmanager
def server(db: Path, *args: str, umask: int | None = None):
    """``backretrieval study serve DB --port 0 ARGS`` in its own process, stdout and stderr to
    files; yields ``(process, port, stdout_path, stderr_path)``."""
    out, err = Path(f"{db}.serve-out"), Path(f"{db}.serve-err")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    old = os.umask(umask) if umask is not None else None
    try:
        with open(out, "w") as fo, open(err, "w") as fe:
            proc = subprocess.Popen(
                [sys.executable, "-m", "backretrieval.cli", "study", "serve", str(db), "--port", "0", *args],
                stdout=fo, stderr=fe, env=env,
            )
    finally:
        if old is not None:
            os.umask(old)
    try:
        for _ in range(600):  # the first line says where it listens (wait on output, not on a clock)
            m = re.search(r"^serving .* on http://(\S+):(\d+)/", out.read_text(), re.M)
            if m or proc.poll() is not None:
                break
            proc_wait(proc, 0.1)
        assert m, f"server did not start: {out.read_text()} {err.read_text()}"
        yield proc, int(m.group(2)), out, err
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


def proc_wait(proc: subprocess.Popen, seconds: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=seconds)


def suggestion_ids(port: int, token: str) -> list[str]:
    status, _, body = req(port, "GET", f"/r/{token}/state")
    assert status == 200
    return [s["sid"] for qq in json.loads(body)["queries"] for s in qq["suggestions"]]


def rate_over_http(db: Path, port: int, n: int) -> None:
    """Post ``n`` ratings for each rater of ``db`` (one request at a time, all acknowledged)."""
    for t, (tok,) in enumerate(q(db, "SELECT token FROM raters ORDER BY rater_id")):
        for i, sid in enumerate(suggestion_ids(port, tok)[:n]):
            status, _, body = post(port, f"/r/{tok}/rate", {"sid": sid, "score": 1 + i % 4, "event": f"e{t}-{i}"})
            assert status == 200, body


def crash(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def clean_study(db: Path, seed: int) -> None:
    """``db`` is a complete, intact study with seed ``seed`` and not a single rating or click."""
    assert json.loads(q(db, "SELECT value FROM meta WHERE key = 'seed'")[0][0]) == seed
    assert table_counts(db) == (0, 0, 0)
    assert q(db, "PRAGMA integrity_check") == [("ok",)]
    assert q(db, "PRAGMA foreign_key_check") == []


# ------------------------------------------------------------------------- 1. recreated study


def test_recreate_refused_while_served_and_clean_after_kill_9(tmp_path, shared_data):
    db = tmp_path / "S.db"
    r = cli(*create_args(db, shared_data))
    assert r.exit_code == 0, r.output
    with server(db) as (proc, port, _, _):
        rate_over_http(db, port, 60)
        before = q(db, "SELECT COUNT(*) FROM ratings")[0][0]
        assert before == 120
        # a server holds the study: replacing it is refused, naming the file (and the process)
        r = cli(*create_args(db, shared_data, "--force", "--seed", "1"))
        assert r.exit_code == 2, r.output
        assert r.output.startswith(f"error: {db} is in use") and r.output.count("\n") == 1, r.output
        if Path("/proc/locks").exists():
            assert f"process {proc.pid}" in r.output
        assert q(db, "SELECT COUNT(*) FROM ratings")[0][0] == before  # the served study is untouched
        crash(proc)  # kill -9: the OS releases the server's lock; SQLite's log stays
    wal = Path(f"{db}-wal")
    assert wal.is_file() and wal.stat().st_size > 0
    # every acknowledged rating survived the crash (read from a copy, not to disturb the log)
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in (db, wal, Path(f"{db}-shm")):
        shutil.copy(p, copy / p.name)
    assert q(copy / db.name, "SELECT COUNT(*) FROM ratings")[0][0] == 120

    r = cli(*create_args(db, shared_data, "--force", "--seed", "1"))
    assert r.exit_code == 0, r.output
    clean_study(db, seed=1)  # the 120 ratings of the old log are not replayed, the file is intact
    assert not wal.exists()
    r = cli("study", "analyze", str(db), "--no-bkr")
    assert r.exit_code == 0 and "0 ratings stored (0 clicks)" in r.output, r.output


CRASH_WHILE_RATING = """
import os, signal, sys
from backretrieval.study import store
con = store.connect(sys.argv[1])  # left open: the process dies with its ratings in the -wal file
tok = con.execute("SELECT token FROM raters LIMIT 1").fetchone()[0]
for i, (sid,) in enumerate(con.execute("SELECT public_id FROM suggestions LIMIT 10").fetchall()):
    store.record_rating(con, tok, sid, 1 + i % 4)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_stale_log_without_its_study_is_refused_then_removed_with_force(tmp_path, shared_data):
    db = tmp_path / "S.db"
    assert cli(*create_args(db, shared_data)).exit_code == 0
    done = subprocess.run([sys.executable, "-c", CRASH_WHILE_RATING, str(db)], env=dict(os.environ))
    assert done.returncode == -signal.SIGKILL
    assert Path(f"{db}-wal").stat().st_size > 0
    db.unlink()  # the study is deleted, its log forgotten
    r = cli(*create_args(db, shared_data))
    assert r.exit_code == 2, r.output  # not a new study carrying the old log's 10 ratings
    assert f"{db}-wal exists" in r.output and r.output.count("error: ") == 1
    assert not db.exists()
    r = cli(*create_args(db, shared_data, "--force"))
    assert r.exit_code == 0, r.output
    clean_study(db, seed=0)


def test_proxy_copy_never_shares_the_study_links(tmp_path, shared_data):
    db = tmp_path / "S.db"
    assert cli(*create_args(db, shared_data)).exit_code == 0
    pilot = tmp_path / "pilot.db"
    r = cli("study", "proxy-rate", str(db), "--out", str(pilot), "--terms", "words")
    assert r.exit_code == 0, r.output
    study_tokens = dict(q(db, "SELECT name, token FROM raters"))
    pilot_tokens = dict(q(pilot, "SELECT name, token FROM raters"))
    assert set(study_tokens) <= set(pilot_tokens)
    assert not set(study_tokens.values()) & set(pilot_tokens.values())
    # a rater's page of the study, left open while the pilot is served, cannot rate the pilot
    with running(pilot) as srv:
        sid = q(pilot, "SELECT public_id FROM suggestions LIMIT 1")[0][0]
        before = table_counts(pilot)
        assert post(srv.port, f"/r/{study_tokens['rater1']}/rate", {"sid": sid, "score": 1})[0] == 404
        assert table_counts(pilot) == before
        assert post(srv.port, f"/r/{pilot_tokens['rater1']}/rate", {"sid": sid, "score": 1})[0] == 200
        # and a served pilot is not replaced under its server
        r = cli("study", "proxy-rate", str(db), "--out", str(pilot), "--force")
        assert r.exit_code == 2 and f"{pilot} is in use" in r.output, r.output


# ------------------------------------------------------------------------- 2. truncated images


def tiny_dataset(folder: Path, texts: dict[str, list[str]], bad: dict[str, int] | None = None) -> Path:
    """A generic .jsonl dataset with a real 64x64 noise PNG per item (``bad``: lang -> the item
    whose PNG is cut in half); every item its own concept."""
    rng = np.random.default_rng(0)
    rows = []
    for lang, items in texts.items():
        for i, text in enumerate(items):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buf, "PNG")
            data = buf.getvalue()
            if (bad or {}).get(lang) == i:
                data = data[: len(data) // 2]
            (folder / f"{lang}{i}.png").write_bytes(data)
            rows.append({"id": f"{lang}{i}", "lang": lang, "text": text, "concept": f"{lang}-{i}", "image": f"{lang}{i}.png"})
    path = folder / "items.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


WORDS = {"en": ["red apple", "green tree", "blue sky", "yellow sun", "black cat", "white snow"],
         "de": ["roter Apfel", "grüner Baum", "blauer Himmel", "gelbe Sonne", "schwarze Katze", "weißer Schnee"]}


def tiny_config(data: Path, models=CHEAP, **kw) -> StudyConfig:
    n_en, n_de = len(WORDS["en"]), len(WORDS["de"])
    return StudyConfig(dataset=str(data), src="en", tgt="de", models=list(models), queries=kw.pop("queries", n_en),
                       per_model=kw.pop("per_model", n_de), **kw)


def test_truncated_suggestion_image_refused_at_create(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    data = tiny_dataset(data_dir, WORDS, bad={"de": 3})
    out = tmp_path / "out"
    with pytest.raises(DataError) as e:
        create_study(tiny_config(data), out / "s.db", progress=False)  # every de item is suggested
    msg = str(e.value)
    assert "items/de item 'de3'" in msg and str(data_dir / "de3.png") in msg and "truncated" in msg
    assert not out.exists() or list(out.iterdir()) == []  # nothing half-written
    # the CLI: one error line, exit code 2
    r = cli("study", "create", "--dataset", str(data), "--src", "en", "--tgt", "de", "--models", ",".join(CHEAP),
            "--queries", "6", "--per-model", "6", "--quiet", "--out", str(out / "s.db"))
    assert r.exit_code == 2 and r.output.count("error: ") == 1, r.output
    assert r.output.splitlines()[-1].startswith("error: items/de item 'de3': image ") and "de3.png" in r.output
    # with images shown for queries only, the broken suggestion image is never read
    create_study(tiny_config(data, images="query"), out / "q.db", progress=False)
    assert q(out / "q.db", "SELECT COUNT(*) FROM suggestions WHERE image_id IS NOT NULL")[0][0] == 0


def test_truncated_query_image_refused_before_any_model_runs(tmp_path):
    data = tiny_dataset(tmp_path, WORDS, bad={"en": 1})
    # "nope" would fail when the models run: the image error must come first
    with pytest.raises(DataError, match=r"en item 'en1': image .*en1\.png is truncated"):
        create_study(tiny_config(data, models=["random", "nope"]), tmp_path / "s.db", progress=False)
    with pytest.raises(BackretrievalError, match="unknown text model 'nope'"):  # (the order is real)
        create_study(tiny_config(data, models=["random", "nope"], images="none"), tmp_path / "s.db", progress=False)


# ------------------------------------------------------------------------- 3. access log


def test_access_log_names_raters_never_tokens(tmp_path, shared_data):
    db = tmp_path / "S.db"
    assert cli(*create_args(db, shared_data)).exit_code == 0
    tokens = dict(q(db, "SELECT name, token FROM raters"))
    tok = tokens["rater1"]
    with server(db) as (proc, port, out, err):
        sid = suggestion_ids(port, tok)[0]
        img = q(db, "SELECT image_id FROM queries LIMIT 1")[0][0]
        assert req(port, "GET", f"/r/{tok}")[0] == 200
        assert post(port, f"/r/{tok}/rate", {"sid": sid, "score": 2})[0] == 200
        assert post(port, f"/r/{tok}/rate", {"sid": sid, "score": 9})[0] == 400
        assert req(port, "GET", f"/r/{tok}/img/{img}")[0] == 200
        assert req(port, "GET", f"/r/{tok}/img/{'0' * 32}")[0] == 404
        assert req(port, "GET", f"/r/{tokens['rater2'][:-1]}x/state")[0] == 404
        assert req(port, "GET", f"/r/{tok}/state?x={tok}")[0] == 200
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:  # a malformed request line
            s.sendall(f"BROKEN /r/{tok} WHAT\r\n\r\n".encode())
            assert s.recv(100)  # an error page (HTTP/0.9 style: the request line was not understood)
        proc.terminate()
        proc.wait(timeout=30)
    log = re.sub(r"\x1b\[[0-9;]*m", "", err.read_text())  # without Werkzeug's colours
    assert log.count("\n") >= 8, log
    for t in tokens.values():
        assert t not in log and t[:10] not in log
    assert '"GET /r/[rater1] HTTP/1.1" 200' in log and '"POST /r/[rater1]/rate HTTP/1.1" 400' in log
    assert f'"GET /r/[{tokens["rater2"][:4]}...]/state HTTP/1.1" 404' in log  # unknown token: 4 characters
    assert f"/r/[{tok[:4]}...] WHAT" in log  # the malformed line is redacted too
    # the operator's own output still has the links to send
    assert f"rater1 (0/" in out.read_text() and tok in out.read_text()


def test_exception_log_of_a_damaged_study_shows_no_token(tmp_path, shared_data, caplog):
    db = tmp_path / "S.db"
    assert cli(*create_args(db, shared_data)).exit_code == 0
    tok = token_of(db)
    with running(db) as srv:
        con = sqlite3.connect(db)
        con.execute("ALTER TABLE suggestions RENAME TO lost")  # damaged: the page state needs it
        con.close()
        with caplog.at_level("INFO"):
            status, _, body = req(srv.port, "GET", f"/r/{tok}/state")
    assert status == 500 and "error" in json.loads(body)
    assert "Exception on /r/[" in caplog.text and "no such table: suggestions" in caplog.text
    assert tok not in caplog.text and tok[:10] not in caplog.text


# ------------------------------------------------------------------------- 4. ratings.csv


FORMULAS = {
    "en": ['=HYPERLINK("http://example.com/x","click me")', "+1+2", "-3", "@SUM(A1:A2)", "\tTab start",
           "'quoted", "plain words", "\rCR start"],
    "de": ["=1+1", "Haus", "@user", "-minus", "'=already quoted", "Baum", "Himmel", "Sonne"],
}


def test_ratings_csv_shows_formulas_as_text(tmp_path):
    data = tiny_dataset(tmp_path, FORMULAS)
    db = tmp_path / "s.db"
    create_study(StudyConfig(dataset=str(data), src="en", tgt="de", models=CHEAP, queries=8, per_model=8, images="none"),
                 db, progress=False)
    con = store.connect(db)
    try:
        store.add_rater(con, "@lice")
        sids = [s for (s,) in con.execute("SELECT public_id FROM suggestions")]
        for name, tok in con.execute("SELECT name, token FROM raters").fetchall():
            for i, sid in enumerate(sids):
                store.record_rating(con, tok, sid, 1 + i % 4)
    finally:
        con.close()
    files = write_outputs(analyze(db, bkr=False, n_boot=50), db, tmp_path / "res")
    with open(files[2], newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    cells = [c for row in body for c in row]
    for c in cells:
        assert not c.startswith(("=", "+", "-", "@", "\t", "\r")), repr(c)
    assert len(body) == 2 * len(sids)  # a carriage return inside a text stays in its cell
    assert "'" + FORMULAS["en"][0] in cells and "'@lice" in cells and "''quoted" in cells and "''=already quoted" in cells
    assert "plain words" in cells and "Haus" in cells  # ordinary text unchanged
    # one leading ' removed gives back every original cell
    from backretrieval.study.export import csv_unsafe

    frame = ratings_frame(db)
    assert header == list(frame.columns)
    want = sorted(tuple(str(v) for v in row) for row in frame.itertuples(index=False))
    assert sorted(tuple(csv_unsafe(c) for c in row) for row in body) == want


# ------------------------------------------------------------------------- 5. 0.0.0.0 links


def test_links_for_all_interfaces_point_to_a_reachable_address(tmp_path, shared_data):
    db = tmp_path / "S.db"
    assert cli(*create_args(db, shared_data)).exit_code == 0
    tok = token_of(db)
    with server(db, "--host", "0.0.0.0") as (_, port, out, err):
        text = out.read_text()
        links = re.findall(r"http://\S+/r/\S+", text)
        assert len(links) == 2 and tok in " ".join(links)
        assert "0.0.0.0" not in text
        host = re.search(r"^serving .* on http://(\S+):\d+/", text, re.M).group(1)
        if host == "HOST":  # no address found: the output says to replace it
            assert "replace HOST" in err.read_text()
        else:  # the printed link opens the rating page
            assert "if raters cannot reach it, replace" in err.read_text()
            link = next(x for x in links if tok in x)
            with urllib.request.urlopen(link, timeout=30) as resp:
                assert resp.status == 200 and b"study.js" in resp.read()
    r = cli("study", "raters", str(db), "--host", "0.0.0.0")
    assert r.exit_code == 0 and "http://0.0.0.0" not in r.output and f"/r/{tok}" in r.output


# ------------------------------------------------------------------------- 6. file modes


def mode(p: Path) -> int:
    return p.stat().st_mode & 0o777


def test_study_files_private_exports_follow_umask(tmp_path, shared_data):
    db = tmp_path / "S.db"
    old = os.umask(0)  # the most permissive umask: the study must still be private
    try:
        assert cli(*create_args(db, shared_data)).exit_code == 0
    finally:
        os.umask(old)
    assert mode(db) == 0o600
    # exported results hold no tokens: they follow the umask like any result file
    res = analyze(db, bkr=False, n_boot=50)
    for mask, want in ((0o022, 0o644), (0o027, 0o640)):
        old = os.umask(mask)
        try:
            written = write_outputs(res, db, tmp_path / f"res{mask:o}")
        finally:
            os.umask(old)
        assert [mode(f) for f in written] == [want] * 3, (mask, [oct(mode(f)) for f in written])
    with server(db, umask=0) as (proc, port, _, _):
        rate_over_http(db, port, 3)
        for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}.lock")):
            assert mode(p) == 0o600, p  # SQLite's log and index hold ratings and copies of tokens
        crash(proc)
    pilot = tmp_path / "pilot.db"
    old = os.umask(0)
    try:
        assert cli("study", "proxy-rate", str(db), "--out", str(pilot), "--terms", "words").exit_code == 0
    finally:
        os.umask(old)
    assert mode(pilot) == 0o600


# ------------------------------------------------------------------------- more: damaged or missing files


def test_analyze_refuses_a_damaged_study(tmp_path, shared_data):
    db = tmp_path / "S.db"
    assert cli(*create_args(db, shared_data)).exit_code == 0
    con = sqlite3.connect(db)  # a rating of a rater that is not in this study (foreign keys off)
    sid = con.execute("SELECT sugg_id FROM suggestions LIMIT 1").fetchone()[0]
    con.execute("INSERT INTO ratings VALUES (99, ?, 1, 'x', 'x', 1)", (sid,))
    con.commit()
    con.close()
    with pytest.raises(store.StudyError, match=rf"{re.escape(str(db))} is damaged: ratings row 1 refers to a row missing from raters"):
        analyze(db, bkr=False)
    r = cli("study", "analyze", str(db), "--no-bkr")
    assert r.exit_code == 2 and r.output.startswith(f"error: {db} is damaged") and r.output.count("\n") == 1, r.output


def test_rating_kept_and_retried_while_the_study_file_is_away(tmp_path, shared_data):
    db = tmp_path / "S.db"
    assert cli(*create_args(db, shared_data)).exit_code == 0
    tok = token_of(db)
    with running(db) as srv:
        sid = suggestion_ids(srv.port, tok)[0]
        away = tmp_path / "moved.db"
        db.rename(away)  # e.g. an operator moving files around
        status, _, body = post(srv.port, f"/r/{tok}/rate", {"sid": sid, "score": 3, "event": "ev1"})
        assert status == 503 and "study file not found" in json.loads(body)["error"]  # the page retries a 5xx
        away.rename(db)
        status, _, body = post(srv.port, f"/r/{tok}/rate", {"sid": sid, "score": 3, "event": "ev1"})  # the retry
        assert status == 200 and json.loads(body)["duplicate"] is False
    assert q(db, "SELECT score, n_changes FROM ratings") == [(3, 1)]
