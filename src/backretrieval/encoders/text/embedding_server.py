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

:meth:`EmbeddingServer.respond` computes each answer; a subclass overrides it to answer
differently (the tests' rate limits, server errors, slow and malformed answers).
"""
from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

Answer = tuple[int, dict[str, str], bytes]  # (HTTP status, headers, body)


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

    def __init__(self, encoder: Any, *, host: str = "127.0.0.1", port: int = 0, lang: str = "en") -> None:
        self.encoder, self.lang = encoder, lang
        self._lock = threading.Lock()  # one encode at a time: encoders need not be thread-safe
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 -- the http.server hook's name
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size)
                if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
                    status, headers, body = error_answer(404, f"no route {self.path}")
                else:
                    try:
                        request = json.loads(raw or b"{}")
                    except ValueError:
                        request = None
                    if not isinstance(request, dict):
                        status, headers, body = error_answer(400, "the body must be a JSON object")
                    else:
                        status, headers, body = owner.respond(request, dict(self.headers))
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
                    pass

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- quiet
                return

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

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
            if not isinstance(dims, int) or not 1 <= dims <= vecs.shape[1]:
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
