"""The study database: one SQLite file holds the blinded study, its raters and every rating.

Tables (see :data:`SCHEMA`):

* ``meta`` -- the configuration (dataset, languages, models, seed, ...), JSON values;
* ``models`` -- the compared models; never leaves the server;
* ``queries`` / ``suggestions`` -- what raters see; a suggestion is a (query, target item)
  pair, stored once even when several models retrieved it;
* ``credits`` -- which model retrieved which suggestion at which rank (a duplicate has one
  credit per model); never leaves the server;
* ``images`` -- the image bytes of queries and suggestions, keyed by content hash, so the
  file is self-contained and the web app can only ever serve these images;
* ``raters`` -- name, unguessable link token (:func:`secrets.token_urlsafe`) and the seed of
  the rater's own presentation order;
* ``ratings`` -- the current score of each (rater, suggestion): ``PRIMARY KEY(rater_id,
  sugg_id)``, so rating again *overwrites* (``n_changes`` counts the writes);
* ``events`` -- every accepted click, append-only, with the client's event id: a retried
  request with the same event id is recognised and stored once.

Durability: WAL journal, ``synchronous=FULL``, every rating one ``BEGIN IMMEDIATE`` ...
``COMMIT`` transaction. A rating the server has answered is on disk; a crash of the server
(or of the machine) loses nothing that was acknowledged.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import re
import secrets
import sqlite3
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..core import BackretrievalError, DataError
from . import files

SCHEMA_VERSION = 1
SCALE = (
    (1, "Very relevant"),
    (2, "Relevant"),
    (3, "Somewhat relevant"),
    (4, "Not relevant"),
)
SCORES = tuple(s for s, _ in SCALE)
_EVENT_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_PUBLIC_RE = re.compile(r"^[a-f0-9]{12}$")
_NAME_RE = re.compile(r"^[\w .@+-]{1,64}$")

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE models (
  model_id INTEGER PRIMARY KEY,
  spec TEXT NOT NULL UNIQUE,
  label TEXT NOT NULL UNIQUE
);
CREATE TABLE images (image_id TEXT PRIMARY KEY, mime TEXT NOT NULL, data BLOB NOT NULL);
CREATE TABLE queries (
  query_id INTEGER PRIMARY KEY,
  public_id TEXT NOT NULL UNIQUE,
  item_id TEXT NOT NULL UNIQUE,
  text TEXT NOT NULL,
  image_id TEXT REFERENCES images(image_id)
);
CREATE TABLE suggestions (
  sugg_id INTEGER PRIMARY KEY,
  public_id TEXT NOT NULL UNIQUE,
  query_id INTEGER NOT NULL REFERENCES queries(query_id),
  item_id TEXT NOT NULL,
  text TEXT NOT NULL,
  image_id TEXT REFERENCES images(image_id),
  UNIQUE (query_id, item_id)
);
CREATE TABLE credits (
  sugg_id INTEGER NOT NULL REFERENCES suggestions(sugg_id),
  model_id INTEGER NOT NULL REFERENCES models(model_id),
  rank INTEGER NOT NULL,
  score REAL NOT NULL,
  PRIMARY KEY (sugg_id, model_id)
);
CREATE TABLE raters (
  rater_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  token TEXT NOT NULL UNIQUE,
  order_seed INTEGER NOT NULL,
  created_at TEXT NOT NULL
);
CREATE TABLE ratings (
  rater_id INTEGER NOT NULL REFERENCES raters(rater_id),
  sugg_id INTEGER NOT NULL REFERENCES suggestions(sugg_id),
  score INTEGER NOT NULL CHECK (score BETWEEN 1 AND 4),
  first_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  n_changes INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY (rater_id, sugg_id)
);
CREATE TABLE events (
  event_id INTEGER PRIMARY KEY,
  rater_id INTEGER NOT NULL REFERENCES raters(rater_id),
  sugg_id INTEGER NOT NULL REFERENCES suggestions(sugg_id),
  score INTEGER NOT NULL CHECK (score BETWEEN 1 AND 4),
  client_event TEXT,
  at TEXT NOT NULL,
  UNIQUE (rater_id, client_event)
);
CREATE INDEX suggestions_by_query ON suggestions(query_id);
"""


class StudyError(BackretrievalError):
    """A study file, rater or rating request is invalid. ``status`` is the HTTP status the web
    app answers with."""

    status = 400


class NotFound(StudyError):
    """An unknown rater link, suggestion or image (HTTP 404)."""

    status = 404


class Conflict(StudyError):
    """A request that conflicts with what is stored: a rater name taken, an event id reused (HTTP 409)."""

    status = 409


def now() -> str:
    """The current UTC time as an ISO 8601 string with milliseconds."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def public_id() -> str:
    """An opaque id for something the browser sees (12 hex digits, from :mod:`secrets`)."""
    return secrets.token_hex(6)


class Unavailable(StudyError):
    """The study file is missing or damaged. The web app answers 503, so the rating page keeps
    a click and retries it instead of dropping it."""

    status = 503


class _Connection(sqlite3.Connection):
    """A connection that holds a shared lock on its study (:func:`files.acquire`) until closed."""

    study_lock: files.Lock | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.study_lock is not None:
                self.study_lock.release()
                self.study_lock = None


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, ``synchronous=FULL``,
    holding a shared lock on the study (``STUDY.db.lock``) until closed, so the study cannot be
    replaced under it (:mod:`.files`).

    Raises :class:`Unavailable` when ``path`` does not exist, :class:`StudyError` when it is not
    a study file.
    """
    path = Path(path)
    if not path.is_file():  # before the lock: no lock file beside a mistyped path
        raise Unavailable(f"study file not found: {path}")
    # (never open the database file itself with another descriptor here: closing it would drop
    # this process's POSIX locks on it, which SQLite's other connections rely on)
    lock = files.acquire(path, exclusive=False, wait=True)
    con = sqlite3.connect(
        str(path), timeout=30.0, isolation_level=None, check_same_thread=False, factory=_Connection
    )
    con.study_lock = lock
    try:
        con.execute("PRAGMA busy_timeout = 30000")
        con.execute("PRAGMA foreign_keys = ON")
        con.execute("PRAGMA synchronous = FULL")
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError as e:
        con.close()
        raise StudyError(f"{path} is not a study file ({e})") from None
    if row is None or json.loads(row[0]) != SCHEMA_VERSION:
        con.close()
        raise StudyError(f"{path}: unsupported study schema version {row and row[0]!r} (expected {SCHEMA_VERSION})")
    return con


@contextlib.contextmanager
def opened(path: str | Path, *, check: bool = False) -> Iterator[sqlite3.Connection]:
    """:func:`connect` for a ``with`` block: closed (and its study lock released) on leaving it.

    Args:
        path: the study file.
        check: refuse a damaged file first (:func:`check_integrity`).

    Raises:
        Unavailable, StudyError: as :func:`connect` and :func:`check_integrity`.
    """
    con = connect(path)
    try:
        if check:
            check_integrity(con, path)
        yield con
    finally:
        con.close()


def check_integrity(con: sqlite3.Connection, path: str | Path) -> None:
    """Refuse a damaged study file: SQLite's ``quick_check`` and ``foreign_key_check`` must
    both be clean (a rating of an unknown rater or suggestion, pages of another database).

    Raises:
        Unavailable: naming the file and the first problems found.
    """
    try:
        bad = [r[0] for r in con.execute("PRAGMA quick_check(5)") if r[0] != "ok"]
        if not bad:
            bad = [
                f"{table} row {rowid} refers to a row missing from {parent}"
                for table, rowid, parent, _ in con.execute("PRAGMA foreign_key_check").fetchmany(5)
            ]
    except sqlite3.DatabaseError as e:
        bad = [str(e)]
    if bad:
        raise Unavailable(f"{path} is damaged: {'; '.join(b.replace(chr(10), '; ') for b in bad)[:500]}")


def read_meta(con: sqlite3.Connection) -> dict[str, Any]:
    """The study's configuration (the ``meta`` table), JSON values decoded."""
    return {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta")}


# --------------------------------------------------------------------------------------- raters


def add_rater(con: sqlite3.Connection, name: str | None = None) -> dict[str, Any]:
    """Register a rater; returns ``{"rater_id", "name", "token"}``. The token is the secret part
    of the rater's link (``/r/<token>``): 32 random bytes, URL-safe base64."""
    con.execute("BEGIN IMMEDIATE")
    try:
        next_id = con.execute("SELECT COALESCE(MAX(rater_id), 0) + 1 FROM raters").fetchone()[0]
        name = f"rater{next_id}" if name is None else str(name).strip()
        if not _NAME_RE.match(name):
            raise StudyError(f"bad rater name {name!r}: 1-64 letters, digits, spaces or . @ + - _")
        if con.execute("SELECT 1 FROM raters WHERE name = ?", (name,)).fetchone():
            raise Conflict(f"a rater named {name!r} already exists")
        token = secrets.token_urlsafe(32)
        con.execute(
            "INSERT INTO raters (rater_id, name, token, order_seed, created_at) VALUES (?, ?, ?, ?, ?)",
            (next_id, name, token, next_id, now()),
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return {"rater_id": next_id, "name": name, "token": token}


def list_raters(con: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every rater with name, token, creation time and how many of the study's suggestions they rated."""
    total = con.execute("SELECT COUNT(*) FROM suggestions").fetchone()[0]
    rows = con.execute(
        "SELECT r.rater_id, r.name, r.token, r.created_at, COUNT(g.sugg_id) FROM raters r "
        "LEFT JOIN ratings g ON g.rater_id = r.rater_id GROUP BY r.rater_id ORDER BY r.rater_id"
    ).fetchall()
    return [
        {"rater_id": i, "name": n, "token": t, "created_at": c, "rated": k, "total": total}
        for i, n, t, c, k in rows
    ]


def rater_by_token(con: sqlite3.Connection, token: str) -> tuple[int, str, int]:
    """``(rater_id, name, order_seed)`` of the rater with this link token, else :class:`NotFound`."""
    if not isinstance(token, str) or not 20 <= len(token) <= 100:
        raise NotFound("unknown rater link")
    row = con.execute("SELECT rater_id, name, order_seed FROM raters WHERE token = ?", (token,)).fetchone()
    if row is None:
        raise NotFound("unknown rater link")
    return row


# --------------------------------------------------------------------------------------- state


def rater_order(con: sqlite3.Connection, order_seed: int) -> list[tuple[int, list[int]]]:
    """The rater's presentation order: ``[(query_id, [sugg_id, ...]), ...]``, queries and the
    suggestions within each query shuffled by ``default_rng([study seed, order_seed])``."""
    seed = read_meta(con)["seed"]
    rng = np.random.default_rng([int(seed), 104729, int(order_seed)])
    qids = [q for (q,) in con.execute("SELECT query_id FROM queries ORDER BY query_id")]
    by_q: dict[int, list[int]] = {q: [] for q in qids}
    for s, q in con.execute("SELECT sugg_id, query_id FROM suggestions ORDER BY sugg_id"):
        by_q[q].append(s)
    out = []
    for qi in rng.permutation(len(qids)):
        q = qids[int(qi)]
        sids = by_q[q]
        out.append((q, [sids[int(i)] for i in rng.permutation(len(sids))]))
    return out


def rater_state(con: sqlite3.Connection, token: str) -> dict[str, Any]:
    """Everything the rating page needs, in the rater's order. Holds no model identity, rank or
    retrieval score: only opaque public ids, texts and image ids."""
    rater_id, name, order_seed = rater_by_token(con, token)
    meta = read_meta(con)
    q_rows = {
        q: (pid, text, img)
        for q, pid, text, img in con.execute("SELECT query_id, public_id, text, image_id FROM queries")
    }
    s_rows = {
        s: (pid, text, img)
        for s, pid, text, img in con.execute("SELECT sugg_id, public_id, text, image_id FROM suggestions")
    }
    ratings = {
        s_rows[s][0]: score
        for s, score in con.execute("SELECT sugg_id, score FROM ratings WHERE rater_id = ?", (rater_id,))
    }
    queries = []
    for q, sids in rater_order(con, order_seed):
        pid, text, img = q_rows[q]
        queries.append(
            {
                "qid": pid,
                "text": text,
                "image": img,
                "suggestions": [
                    {"sid": s_rows[s][0], "text": s_rows[s][1], "image": s_rows[s][2]} for s in sids
                ],
            }
        )
    return {
        "rater": name,
        "src_lang": meta["src"],
        "tgt_lang": meta["tgt"],
        "scale": [{"score": s, "label": label} for s, label in SCALE],
        "queries": queries,
        "ratings": ratings,
        "rated": len(ratings),
        "total": len(s_rows),
    }


def image_for(con: sqlite3.Connection, token: str, image_id: str) -> tuple[str, bytes]:
    """``(mime, bytes)`` of an image of this study, for a valid rater token; else :class:`NotFound`."""
    rater_by_token(con, token)
    if not isinstance(image_id, str) or not re.fullmatch(r"[0-9a-f]{32}", image_id):
        raise NotFound("unknown image")
    row = con.execute("SELECT mime, data FROM images WHERE image_id = ?", (image_id,)).fetchone()
    if row is None:
        raise NotFound("unknown image")
    return row[0], bytes(row[1])


# --------------------------------------------------------------------------------------- ratings


def check_score(score: Any) -> int:
    """A score must be the JSON integer 1, 2, 3 or 4 (not a string, float or boolean)."""
    if isinstance(score, bool) or not isinstance(score, int) or score not in SCORES:
        raise StudyError(f"score must be an integer from 1 to 4, got {score!r}")
    return int(score)


def record_rating(
    con: sqlite3.Connection, token: str, sid: Any, score: Any, event: Any = None
) -> dict[str, Any]:
    """Store one click in its own transaction; returns ``{"sid", "score", "rated", "total",
    "duplicate"}``.

    * bad score, malformed ids -> :class:`StudyError` (400); unknown token or suggestion ->
      :class:`NotFound` (404); nothing is written in either case;
    * ``event`` (optional, 1-64 of ``[A-Za-z0-9_-]``) is the client's id of the click: a
      request repeated with the same event id is stored once (``duplicate: true``); the same
      event id with a different suggestion or score is a :class:`Conflict` (409);
    * rating a suggestion again overwrites the score (``n_changes`` + 1); ``events`` keeps
      every accepted click.
    """
    score = check_score(score)
    if not isinstance(sid, str) or not _PUBLIC_RE.match(sid):
        raise StudyError(f"sid must be a suggestion id (12 hex digits), got {sid!r}")
    if event is not None and (not isinstance(event, str) or not _EVENT_RE.match(event)):
        raise StudyError(f"event must be 1-64 characters of A-Z a-z 0-9 _ -, got {event!r}")
    ts = now()
    con.execute("BEGIN IMMEDIATE")
    try:
        rater_id, _, _ = rater_by_token(con, token)
        row = con.execute("SELECT sugg_id FROM suggestions WHERE public_id = ?", (sid,)).fetchone()
        if row is None:
            raise NotFound(f"unknown suggestion {sid!r}")
        sugg_id = row[0]
        duplicate = False
        if event is not None:
            prev = con.execute(
                "SELECT sugg_id, score FROM events WHERE rater_id = ? AND client_event = ?", (rater_id, event)
            ).fetchone()
            if prev is not None:
                if tuple(prev) != (sugg_id, score):
                    raise Conflict(f"event {event!r} was already used for another rating")
                duplicate = True
        if not duplicate:
            con.execute(
                "INSERT INTO events (rater_id, sugg_id, score, client_event, at) VALUES (?, ?, ?, ?, ?)",
                (rater_id, sugg_id, score, event, ts),
            )
            con.execute(
                "INSERT INTO ratings (rater_id, sugg_id, score, first_at, updated_at, n_changes) "
                "VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT (rater_id, sugg_id) DO UPDATE SET "
                "score = excluded.score, updated_at = excluded.updated_at, n_changes = n_changes + 1",
                (rater_id, sugg_id, score, ts, ts),
            )
        rated = con.execute("SELECT COUNT(*) FROM ratings WHERE rater_id = ?", (rater_id,)).fetchone()[0]
        total = con.execute("SELECT COUNT(*) FROM suggestions").fetchone()[0]
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return {"sid": sid, "score": score, "rated": rated, "total": total, "duplicate": duplicate}


# --------------------------------------------------------------------------------------- analysis


def load_tables(con: sqlite3.Connection) -> dict[str, Any]:
    """Unblinded tables for the analysis (pandas DataFrames): ``models``, ``queries``,
    ``suggestions``, ``credits``, ``raters``, ``ratings``, and ``meta``."""
    import pandas as pd

    def df(sql: str) -> pd.DataFrame:
        cur = con.execute(sql)
        return pd.DataFrame(cur.fetchall(), columns=[c[0] for c in cur.description])

    return {
        "meta": read_meta(con),
        "models": df("SELECT model_id, spec, label FROM models ORDER BY model_id"),
        "queries": df("SELECT query_id, public_id, item_id, text FROM queries ORDER BY query_id"),
        "suggestions": df("SELECT sugg_id, public_id, query_id, item_id, text FROM suggestions ORDER BY sugg_id"),
        "credits": df("SELECT sugg_id, model_id, rank, score FROM credits ORDER BY sugg_id, model_id"),
        "raters": df("SELECT rater_id, name FROM raters ORDER BY rater_id"),
        "ratings": df(
            "SELECT rater_id, sugg_id, score, n_changes, first_at, updated_at FROM ratings ORDER BY rater_id, sugg_id"
        ),
        "n_events": con.execute("SELECT COUNT(*) FROM events").fetchone()[0],
    }


def study_summary(path: str | Path) -> dict[str, Any]:
    """Configuration and counts of the study at ``path``: queries, suggestions, shared suggestions,
    raters."""
    con = connect(path)
    try:
        meta = read_meta(con)
        n_q = con.execute("SELECT COUNT(*) FROM queries").fetchone()[0]
        n_s = con.execute("SELECT COUNT(*) FROM suggestions").fetchone()[0]
        n_dup = con.execute(
            "SELECT COUNT(*) FROM (SELECT sugg_id FROM credits GROUP BY sugg_id HAVING COUNT(*) > 1)"
        ).fetchone()[0]
        return {"meta": meta, "queries": n_q, "suggestions": n_s, "shared_suggestions": n_dup, "raters": list_raters(con)}
    finally:
        con.close()


def require_new(path: str | Path, force: bool) -> None:
    """Check, before any work, that a new study may be written to ``path``.

    Args:
        path: where the new study will go.
        force: replace an existing study (and all its ratings) there.

    Raises:
        files.InUse: a server or another command has the study at ``path`` open (even with
            ``force``).
        DataError: without ``force``, when ``path`` or one of its SQLite companions
            (``-wal``, ``-shm``, ``-journal``: they may hold ratings) exists.
    """
    path = Path(path)
    if files.in_use(path):
        files.acquire(path, exclusive=True, wait=False).release()  # raises InUse, naming the holders
    if force:
        return
    if path.exists():
        raise DataError(f"{path} exists; it may hold ratings: choose another --out or pass --force to replace it")
    for p in files.companions(path):
        if p.exists():
            raise DataError(
                f"{p} exists (SQLite's log of a study that was at {path}: it may hold ratings that would "
                f"appear in the new study); move it away or pass --force to delete it"
            )
