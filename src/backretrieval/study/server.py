"""The rating web app (Flask) and its threaded server (Werkzeug).

Routes (``TOKEN`` is a rater's link token; every route below ``/r/TOKEN`` answers 404 for an
unknown token):

* ``GET /r/TOKEN`` -- the rating page; ``GET /static/study.js``, ``/static/study.css``;
* ``GET /r/TOKEN/state`` -- JSON: the rater's queries and suggestions in the rater's own
  order (opaque ids, texts, image ids) and the rater's ratings so far. Model names, ranks and
  retrieval scores are never sent;
* ``POST /r/TOKEN/rate`` -- JSON ``{"sid": "...", "score": 1-4, "event": "..."}``; stored in
  its own transaction before the answer (:func:`store.record_rating`). Not JSON -> 415,
  malformed -> 400, unknown suggestion -> 404, reused event id -> 409, body over 4 KiB -> 413;
  nothing is written in any of these cases;
* ``GET /r/TOKEN/img/IMAGE_ID`` -- an image stored in the study file (content hash ids); no
  file system path is ever taken from a request.

The server binds 127.0.0.1 unless told otherwise. Each request opens its own SQLite
connection; writes are serialised by SQLite (``BEGIN IMMEDIATE``, 30 s busy timeout).
"""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable

from . import page, store

MAX_BODY = 4096
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'self'; img-src 'self'; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
}


def create_app(db_path: str | Path):
    """The Flask app serving the study in ``db_path`` (checked now: a bad file fails here)."""
    try:
        from flask import Flask, Response, jsonify, request
        from werkzeug.exceptions import HTTPException
    except ImportError as e:
        raise store.StudyError(f"the rating web app needs Flask: pip install 'backretrieval[study]' ({e})") from None

    db_path = Path(db_path)
    store.connect(db_path).close()
    app = Flask("backretrieval.study", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.json.ensure_ascii = False  # type: ignore[attr-defined]
    app.json.sort_keys = False  # type: ignore[attr-defined]

    # Writers of this process queue on a lock rather than in SQLite's busy handler, which
    # retries with growing sleeps and lets unlucky writers lose again and again (seconds of tail
    # latency with dozens of concurrent clients). Other processes (`study add-rater` while
    # serving) still meet SQLite's 30 s busy timeout.
    write_lock = threading.Lock()

    def with_db(fn: Callable[[sqlite3.Connection], Any]) -> Any:
        con = store.connect(db_path)
        try:
            return fn(con)
        finally:
            con.close()

    def error(status: int, msg: str):
        resp = jsonify(error=msg)
        resp.status_code = status
        return resp

    @app.errorhandler(store.StudyError)
    def _study_error(e: store.StudyError):
        return error(e.status, str(e))

    @app.errorhandler(HTTPException)
    def _http_error(e: HTTPException):
        return error(e.code or 500, e.description or e.name)

    @app.after_request
    def _headers(resp: Response) -> Response:
        for k, v in _SECURITY_HEADERS.items():
            resp.headers.setdefault(k, v)
        resp.headers.setdefault("Cache-Control", "no-store")
        return resp

    @app.get("/")
    def index():
        return error(404, "open the link you were given (http://HOST:PORT/r/<token>)")

    @app.get("/favicon.ico")
    def favicon():
        return Response(status=204)

    @app.get("/static/study.js")
    def js():
        return Response(page.JS, mimetype="text/javascript")

    @app.get("/static/study.css")
    def css():
        return Response(page.CSS, mimetype="text/css")

    @app.get("/r/<token>")
    @app.get("/r/<token>/")
    def rating_page(token: str):
        with_db(lambda con: store.rater_by_token(con, token))
        return Response(page.HTML, mimetype="text/html")

    @app.get("/r/<token>/state")
    def state(token: str):
        return jsonify(with_db(lambda con: store.rater_state(con, token)))

    @app.post("/r/<token>/rate")
    def rate(token: str):
        with_db(lambda con: store.rater_by_token(con, token))  # wrong token: 404 before anything else
        if not request.is_json:
            return error(415, "send JSON (Content-Type: application/json)")
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return error(400, "the body must be a JSON object {\"sid\": ..., \"score\": 1-4}")
        extra = set(body) - {"sid", "score", "event"}
        if extra:
            return error(400, f"unknown field(s): {', '.join(sorted(extra))}")
        if "sid" not in body or "score" not in body:
            return error(400, "sid and score are required")
        def write(con: sqlite3.Connection) -> dict[str, Any]:
            with write_lock:  # only the transaction: the connection is opened outside
                return store.record_rating(con, token, body["sid"], body["score"], body.get("event"))

        return jsonify(with_db(write))

    @app.get("/r/<token>/img/<image_id>")
    def image(token: str, image_id: str):
        mime, data = with_db(lambda con: store.image_for(con, token, image_id))
        resp = Response(data, mimetype=mime)
        resp.headers["Cache-Control"] = "private, max-age=86400, immutable"
        return resp

    return app


class StudyServer:
    """A threaded Werkzeug server for the study app; ``port=0`` picks a free port."""

    def __init__(self, db_path: str | Path, host: str = "127.0.0.1", port: int = 8765):
        from werkzeug.serving import make_server

        self.app = create_app(db_path)
        self.db_path = Path(db_path)
        self.server = make_server(host, port, self.app, threaded=True)
        self.host, self.port = host, self.server.server_port
        self._thread: threading.Thread | None = None

    def url(self, token: str, host: str | None = None) -> str:
        h = host or self.host
        if ":" in h:
            h = f"[{h}]"
        return f"http://{h}:{self.port}/r/{token}"

    def serve_forever(self) -> None:
        self.server.serve_forever()

    def start(self) -> "StudyServer":
        """Serve in a background thread (for tests and notebooks)."""
        self._thread = threading.Thread(target=self.server.serve_forever, name="study-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
