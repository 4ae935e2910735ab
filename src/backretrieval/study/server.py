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
connection; writes are serialised by SQLite (``BEGIN IMMEDIATE``, 30 s busy timeout). For its
whole life the server also keeps one idle connection, which holds a shared lock on the study
(:mod:`.files`), so the study cannot be replaced (``study create --force``) while it is
served. A missing study file is answered with 503, which the rating page retries.

The access log never shows a link token: ``/r/TOKEN`` is logged as ``/r/[rater name]`` when the
token belongs to a rater, else as ``/r/[4 characters...]``; query strings as ``?[...]``. Odd
spellings of the route (``/r%2FTOKEN``, ``/r//TOKEN``, ``/R/TOKEN``) are redacted the same way,
the matched rater's token wherever it appears, and so is any other run of 20 or more base64url
characters (a token is 43), wherever it stands in the line.
"""
from __future__ import annotations

import contextlib
import errno
import io
import re
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable

from ..core import BackretrievalError
from . import page, store

RATER_ENV = "backretrieval.study.rater"  # (token, rater name), set by the app for the access log
WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]", "::0", "0:0:0:0:0:0:0:0")
_TOKEN_IN_PATH = re.compile(r"(/[rR](?:/|%2[fF])+)([^/?#\s\"'()<>\[\]]+)")  # /r/, /r//, /r%2F, /R/
_LONG_RUN = re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{20,}")  # what a token (43 base64url characters) could be
_QUERY = re.compile(r"\?[^\s\"']*")  # the app reads no query string: never log one

class StudyServerError(BackretrievalError):
    """The server cannot listen where it was asked to (a port in use, an address not of this machine)."""


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
    class StudyFlask(Flask):
        def log_exception(self, exc_info) -> None:  # Flask's names the path, with the token
            self.logger.error(
                f"Exception on {redact(request.path, request.environ.get(RATER_ENV))} [{request.method}]",
                exc_info=exc_info,
            )

    app = StudyFlask("backretrieval.study", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.json.ensure_ascii = False  # type: ignore[attr-defined]
    app.json.sort_keys = False  # type: ignore[attr-defined]

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

    _page_routes(app, Response, error)
    _rater_routes(app, db_path, Response, jsonify, request, error)
    return app


def _page_routes(app: Any, Response: Any, error: Callable[[int, str], Any]) -> None:
    """The routes without a rater: the bare address, the icon, the page's script and style."""

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


def _rater_routes(app: Any, db_path: Path, Response: Any, jsonify: Any, request: Any, error: Callable[[int, str], Any]) -> None:
    """A rater's routes (``/r/<token>/...``): the rating page, its state, a rating, an image."""
    # Writers of this process queue on a lock rather than in SQLite's busy handler, which
    # retries with growing sleeps and lets unlucky writers lose again and again (seconds of tail
    # latency with dozens of concurrent clients). Other processes (`study add-rater` while
    # serving) still meet SQLite's 30 s busy timeout.
    write_lock = threading.Lock()

    def with_db(fn: Callable[[sqlite3.Connection], Any]) -> Any:
        with store.opened(db_path) as con:
            return fn(con)

    def rater(token: str) -> str:
        """The rater's name (404 for an unknown token), noted for the access log."""
        name = with_db(lambda con: store.rater_by_token(con, token))[1]
        request.environ[RATER_ENV] = (token, name)
        return name

    @app.get("/r/<token>")
    @app.get("/r/<token>/")
    def rating_page(token: str):
        rater(token)
        return Response(page.HTML, mimetype="text/html")

    @app.get("/r/<token>/state")
    def state(token: str):
        st = with_db(lambda con: store.rater_state(con, token))
        request.environ[RATER_ENV] = (token, st["rater"])
        return jsonify(st)

    @app.post("/r/<token>/rate")
    def rate(token: str):
        rater(token)  # wrong token: 404 before anything else
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
        rater(token)
        mime, data = with_db(lambda con: store.image_for(con, token, image_id))
        resp = Response(data, mimetype=mime)
        resp.headers["Cache-Control"] = "private, max-age=86400, immutable"
        return resp


def redact(text: str, known: tuple[str, str] | None = None) -> str:
    """``text`` with every link token replaced: ``known`` = ``(token, NAME)`` (the matched
    rater's) by ``[NAME]`` wherever it appears; whatever follows ``/r/`` (also ``/r//``,
    ``/r%2F``, ``/R/``), and any other run of 20 or more base64url characters, by
    ``[first 4 characters...]``; query strings become ``?[...]``."""
    text = _QUERY.sub("?[...]", text)
    if known is not None and known[0]:
        text = text.replace(known[0], f"[{known[1]}]")
    text = _TOKEN_IN_PATH.sub(lambda m: f"{m.group(1)}[{m.group(2)[:4]}...]", text)
    return _LONG_RUN.sub(lambda m: f"[{m.group(0)[:4]}...]", text)


def _request_handler():
    from werkzeug.serving import WSGIRequestHandler

    class Handler(WSGIRequestHandler):
        """Werkzeug's handler; every log line goes through :func:`redact`."""

        def log(self, type: str, message: str, *args: Any) -> None:
            text = message % args if args else message
            env = getattr(self, "environ", None) or {}
            super().log(type, "%s", redact(text, env.get(RATER_ENV)))

    return Handler


def link_host(host: str) -> str | None:
    """The host to put in rater links for a server bound to ``host``: ``host`` itself, except
    for a wildcard (``0.0.0.0``, ``::``), which no browser can open; then this machine's
    address on its default route, else a non-loopback address of its host name, else ``None``
    (no address found: the caller must say to replace the host)."""
    if host not in WILDCARD_HOSTS:
        return host
    candidates: list[str] = []
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:  # connecting a UDP socket only picks the route and source address: nothing is sent
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))
                candidates.append(s.getsockname()[0])
        except OSError:
            pass
    try:
        candidates += [a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)]
    except OSError:
        pass
    for addr in candidates:
        if not _local_only(addr):
            return addr
    return None


def _local_only(addr: str) -> bool:
    import ipaddress

    try:
        ip = ipaddress.ip_address(addr.split("%")[0])
    except ValueError:
        return True
    return ip.is_loopback or ip.is_unspecified or ip.is_link_local


def base_url(host: str | None, port: int) -> str:
    """``http://HOST:PORT/`` (IPv6 hosts in brackets; ``None`` -> the placeholder ``HOST``)."""
    h = "HOST" if host is None else host
    if ":" in h and not h.startswith("["):
        h = f"[{h}]"
    return f"http://{h}:{port}/"


def link(host: str | None, port: int, token: str) -> str:
    """A rater's link ``http://HOST:PORT/r/TOKEN`` (see :func:`base_url`)."""
    return f"{base_url(host, port)}r/{token}"


class StudyServer:
    """A threaded Werkzeug server for the study app; ``port=0`` picks a free port. Keeps a
    connection to the study (and so its shared lock) until :meth:`close` / :meth:`stop` or the
    end of the process."""

    def __init__(self, db_path: str | Path, host: str = "127.0.0.1", port: int = 8765):
        self.db_path = Path(db_path)
        self.app = create_app(db_path)  # checks Flask, then the study file (no lock file for a typo)
        from werkzeug.serving import make_server  # Flask's own server library: there when Flask is

        # one connection for the server's whole life: it holds the study's shared lock (no
        # `create --force` can replace a served study) and keeps SQLite's WAL in place between
        # requests (no checkpoint-and-delete each time the last request connection closes)
        self._keeper: sqlite3.Connection | None = store.connect(self.db_path)
        said = io.StringIO()  # Werkzeug prints why it cannot listen, then exits: say it our way instead
        try:
            with contextlib.redirect_stderr(said):
                self.server = make_server(host, port, self.app, threaded=True, request_handler=_request_handler())
        except (SystemExit, OSError) as e:
            self._keeper.close()
            lines = said.getvalue().strip().splitlines()
            why = e.strerror if isinstance(e, OSError) and e.strerror else (lines[0] if lines else "the address cannot be used")
            busy = "in use" in said.getvalue() or (isinstance(e, OSError) and e.errno == errno.EADDRINUSE)
            hint = (f": another program listens on port {port}; stop it or choose another --port (0 picks a free one)"
                    if busy else ": choose another --host or --port")
            raise StudyServerError(f"cannot serve the study on {host}:{port} ({why}){hint}") from None
        except BaseException:
            self._keeper.close()
            raise
        self.host, self.port = host, self.server.server_port
        self.link_host = link_host(host)
        self._thread: threading.Thread | None = None

    def url(self, token: str, host: str | None = None) -> str:
        """The rater's link; for a wildcard bind, with :attr:`link_host` (``HOST`` if none)."""
        return link(host or self.link_host, self.port, token)

    def serve_forever(self) -> None:
        """Serve requests in this thread until :meth:`stop` (or an interrupt)."""
        self.server.serve_forever()

    def start(self) -> "StudyServer":
        """Serve in a background thread (for tests and notebooks)."""
        self._thread = threading.Thread(target=self.server.serve_forever, name="study-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the study's connection and join the background thread, if any."""
        if self._thread is not None:
            self.server.shutdown()
        self.close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def close(self) -> None:
        """Close the socket and the lifetime connection (releasing the study's lock)."""
        self.server.server_close()
        if self._keeper is not None:
            self._keeper.close()
            self._keeper = None
