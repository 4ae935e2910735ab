"""A small HTTP server that answers the OpenAI embeddings protocol with any text model.

``EmbeddingServer(encoder)`` serves ``POST /v1/embeddings`` on ``127.0.0.1`` (a free port by
default) in a background thread: the request's ``input`` (one string or a list of strings) is
encoded by the encoder and answered as the protocol documents it -- ``data`` (one
``{"object": "embedding", "index": i, "embedding": ...}`` per input, the vector as a list of
floats or, with ``encoding_format: "base64"``, as the base64 of its little-endian float32 bytes),
``model`` and ``usage`` (``prompt_tokens`` / ``total_tokens``: the served model's own token count
where it has one, ``count_tokens``, as a TEI or vLLM server counts with its model's tokenizer;
else the whitespace-separated words of the inputs, at least one per input). ``dimensions`` keeps the first that many
components of each vector. It is what ``openai:MODEL`` talks to in the contract checks and the
tests, and a way to put a packaged model behind the same protocol as an embedding API::

    with EmbeddingServer(get_text_encoder("use-m")) as server:
        enc = get_text_encoder("openai:use-m", base_url=server.url)

Requests are checked before they are read: a ``Content-Length`` that is not a number from 0 to
``max_request_bytes`` (64 MiB) is answered with 400 or 413 and the body is not read; a body that is
not a JSON object, or nested too deeply to read, with 400; ``dimensions`` must be an integer
(``true`` is not 1). An encoder that fails answers 500 with its error's type; every request gets an
answer.

:meth:`EmbeddingServer.respond` computes each answer; a subclass overrides it to answer
differently (the tests' rate limits, server errors, slow and malformed answers). An answer's
body is bytes, or an iterable of bytes written (and flushed) one piece after another -- an answer
that arrives slowly -- whose headers then give its ``Content-Length`` if it has one.
"""
from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

Answer = tuple[int, dict[str, str], "bytes | Iterable[bytes]"]  # (HTTP status, headers, body)
MAX_REQUEST_BYTES = 64 << 20


def json_answer(status: int, payload: Any, headers: dict[str, str] | None = None) -> Answer:
    """An answer whose body is ``payload`` as JSON."""
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(payload).encode()


def error_answer(status: int, message: str, kind: str = "invalid_request_error",
                 headers: dict[str, str] | None = None) -> Answer:
    """An error answer in the protocol's shape: ``{"error": {"message", "type"}}``."""
    return json_answer(status, {"error": {"message": message, "type": kind, "code": None}}, headers)


class EmbeddingServer:
    """Serve ``encoder`` over ``POST /v1/embeddings`` (see the module docstring).

    Args:
        encoder: a text model (``encode(texts, lang)``).
        host: the address to listen on (default: this machine only).
        port: the port (0: a free one).
        lang: the language the texts are encoded as (the protocol carries none).
    """

    def __init__(self, encoder: Any, *, host: str = "127.0.0.1", port: int = 0, lang: str = "en",
                 max_request_bytes: int = MAX_REQUEST_BYTES) -> None:
        self.encoder, self.lang = encoder, lang
        self.max_request_bytes = int(max_request_bytes)
        self._lock = threading.Lock()  # one encode at a time: encoders need not be thread-safe
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 -- the http.server hook's name
                answer = owner.handle(self.path, dict(self.headers), self.rfile)
                try:
                    owner.send(self, answer)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
                    pass

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- quiet
                return

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    def handle(self, path: str, headers: dict[str, str], body: Any) -> Answer:
        """The answer to one POST to ``path``: the request's size checked before its ``body``
        (a readable stream) is read, then its JSON, then :meth:`respond`."""
        length = str(headers.get("Content-Length") or "0").strip()
        if not length.isdigit():
            return error_answer(400, f"Content-Length must be a number of bytes, got {length[:40]!r}")
        if int(length) > self.max_request_bytes:
            return error_answer(413, f"the request body ({int(length):,} bytes) is larger than this server takes "
                                     f"({self.max_request_bytes:,} bytes): send fewer texts per request")
        raw = body.read(int(length))
        if path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
            return error_answer(404, f"no route {path}")
        try:
            request = json.loads(raw or b"{}")
        except RecursionError:
            return error_answer(400, "the body is nested too deeply (arrays or objects inside each other)")
        except ValueError:
            request = None
        if not isinstance(request, dict):
            return error_answer(400, "the body must be a JSON object")
        try:
            return self.respond(request, headers)
        except Exception as e:  # noqa: BLE001 -- every request gets an answer
            return error_answer(500, f"the model failed: {type(e).__name__}", "server_error")

    @staticmethod
    def send(handler: BaseHTTPRequestHandler, answer: Answer) -> None:
        """Write ``answer`` through ``handler``: bytes at once with their length, an iterable of
        bytes piece by piece (with the length its headers give, if any)."""
        status, headers, body = answer
        handler.send_response(status)
        for k, v in headers.items():
            handler.send_header(k, v)
        if isinstance(body, (bytes, bytearray)):
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        handler.end_headers()
        for piece in body:
            handler.wfile.write(piece)
            handler.wfile.flush()

    @property
    def url(self) -> str:
        """The base URL a client is given (``http://127.0.0.1:PORT/v1``)."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "EmbeddingServer":
        """Start answering in a background thread; returns the server."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.httpd.serve_forever, name="embedding-server", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering and close the socket."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.server_close()

    def __enter__(self) -> "EmbeddingServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def respond(self, request: dict[str, Any], headers: dict[str, str]) -> Answer:
        """The answer to one embeddings request (the request's JSON body and its headers).

        Args:
            request: the JSON body: ``input``, ``model``, optional ``encoding_format`` and ``dimensions``.
            headers: the request's headers.

        Returns:
            ``(status, headers, body)``.
        """
        texts = request.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return error_answer(400, "input must be a non-empty string or a non-empty list of strings")
        if any(t == "" for t in texts):
            return error_answer(400, "input cannot contain an empty string")
        fmt = request.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            return error_answer(400, f"encoding_format must be float or base64, got {fmt!r}")
        with self._lock:
            vecs = np.asarray(self.encoder.encode(texts, self.lang), dtype=np.float32)
        dims = request.get("dimensions")
        if dims is not None:
            if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= vecs.shape[1]:
                return error_answer(400, f"dimensions must be an integer from 1 to {vecs.shape[1]}, got {dims!r}")
            vecs = vecs[:, :dims]
        data = []
        for i, v in enumerate(vecs):
            if fmt == "base64":
                emb: Any = base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
            else:
                emb = [float(x) for x in v]
            data.append({"object": "embedding", "index": i, "embedding": emb})
        count = getattr(self.encoder, "count_tokens", None)
        tokens = int(count(texts)) if callable(count) else sum(max(1, len(t.split())) for t in texts)
        return json_answer(200, {"object": "list", "data": data, "model": request.get("model", ""),
                                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
