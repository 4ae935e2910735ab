"""The tests' OpenAI-protocol server: the project's EmbeddingServer serving a packaged model, with
faults planned per request (rate limits with any Retry-After, server errors, slow, dripping,
oversized and malformed answers, wrong, shuffled, wider and NaN vectors, an empty list), a record
of every request and answer, and a gate that holds requests."""
from __future__ import annotations

import email.utils
import json
import math
import threading
import time
from typing import Any, Callable

from backretrieval.encoders.text.embedding_server import Answer, EmbeddingServer, error_answer, json_answer

Fault = Callable[["TestServer", dict, dict], Answer]


def rate_limited(retry_after: float | str | None = 0.05) -> Fault:
    """429 asking the client to wait: ``Retry-After: retry_after`` (a number of seconds, or any
    text as given: an HTTP date, ``soon``, ``1s``); None sends no Retry-After."""
    headers = {} if retry_after is None else {
        "Retry-After": retry_after if isinstance(retry_after, str) else f"{retry_after:g}"}
    return lambda server, request, headers_: error_answer(429, "Rate limit reached", "rate_limit_error", headers)


def http_date(seconds_from_now: float) -> str:
    """An HTTP date (as ``Retry-After`` may give one) ``seconds_from_now`` seconds ahead."""
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


def status(code: int) -> Fault:
    """An error answer with HTTP status ``code``."""
    return lambda server, request, headers: error_answer(code, f"status {code}", "server_error")


def slow(seconds: float) -> Fault:
    """The right answer, after ``seconds``."""
    def fault(server, request, headers):
        time.sleep(seconds)
        return server.answer(request, headers)
    return fault


def dripping(every: float, seconds: float) -> Fault:
    """The right answer's headers (with its full Content-Length), then its body a byte every
    ``every`` seconds for ``seconds`` seconds, and the rest at once (or until the client hangs up)."""
    def fault(server, request, headers):
        status_, hdrs, body = server.answer(request, headers)
        n = int(seconds / every)

        def pieces():
            for i in range(min(n, len(body) - 1)):
                time.sleep(every)
                yield body[i : i + 1]
            yield body[n:]
        return status_, {**hdrs, "Content-Length": str(len(body))}, pieces()
    return fault


def oversized(megabytes: int, declared: bool = False) -> Fault:
    """A 200 whose body is ``megabytes`` MiB of JSON white space (the client should stop reading
    long before), its Content-Length declared or not; :attr:`TestServer.sent_bytes` counts what
    was written."""
    def fault(server, request, headers):
        hdrs = {"Content-Type": "application/json"}
        if declared:
            hdrs["Content-Length"] = str(megabytes << 20)

        def pieces():
            for _ in range(megabytes * 4):
                server.sent_bytes += 1 << 18
                yield b" " * (1 << 18)
        return 200, hdrs, pieces()
    return fault


def malformed(server, request, headers) -> Answer:
    """A 200 whose body is not JSON."""
    return 200, {"Content-Type": "application/json"}, b'{"object": "list", "data": [{"embedd'


def mangled(edit: Callable[[dict], None]) -> Fault:
    """The right answer (float encoding) with ``edit`` applied to its JSON."""
    def fault(server, request, headers):
        status_, hdrs, body = server.answer({**request, "encoding_format": "float"}, headers)
        payload = json.loads(body)
        edit(payload)
        return json_answer(status_, payload)
    return fault


def drop_one(payload):
    payload["data"].pop()


def add_one(payload):
    payload["data"].append(dict(payload["data"][0], index=len(payload["data"])))


def shuffled(payload):
    """The vectors in reverse order, each with its own ``index`` (the protocol allows any order)."""
    payload["data"].reverse()


def no_vectors(payload):
    payload["data"] = []


def wider(payload):
    """One more component in every vector (a model with another dimension behind the endpoint)."""
    for d in payload["data"]:
        d["embedding"] = d["embedding"] + [0.5]


def nan_in_first(payload):
    payload["data"][0]["embedding"][0] = math.nan


def shorter(payload):
    for d in payload["data"]:
        d["embedding"] = d["embedding"][:-1]


def empty_first(payload):
    payload["data"][0]["embedding"] = []


class TestServer(EmbeddingServer):
    """EmbeddingServer with planned faults; counts requests and the texts of the answered ones."""

    __test__ = False  # not a pytest test class

    def __init__(self, encoder: Any, **kw: Any) -> None:
        super().__init__(encoder, **kw)
        self.plan: list[Fault | None] = []
        self.requests: list[dict] = []  # {"texts", "authorization", "encoding_format"}
        self.answered: list[list[str]] = []
        self.sent_bytes = 0  # body bytes written by the oversized fault
        self.always: Fault | None = None  # the fault of every request the plan does not name
        self.hold_after: int | None = None  # requests beyond this many wait for `release`
        self.held = threading.Event()
        self.release = threading.Event()
        self._plan_lock = threading.Lock()

    def answer(self, request: dict, headers: dict) -> Answer:
        """The right answer (EmbeddingServer's)."""
        return super().respond(request, headers)

    def respond(self, request: dict, headers: dict) -> Answer:
        texts = request.get("input")
        with self._plan_lock:
            lower = {k.lower(): v for k, v in headers.items()}
            self.requests.append({"texts": texts, "authorization": lower.get("authorization", ""),
                                  "encoding_format": request.get("encoding_format")})
            fault = self.plan.pop(0) if self.plan else self.always
            hold = self.hold_after is not None and len(self.requests) > self.hold_after
        if hold:
            self.held.set()
            self.release.wait(60)
            return error_answer(503, "held")
        ans = fault(self, request, headers) if fault is not None else self.answer(request, headers)
        if ans[0] == 200 and fault is None:
            with self._plan_lock:
                self.answered.append(list(texts))
        return ans

    def reset(self) -> None:
        """Forget the requests, the plan and the gate."""
        with self._plan_lock:
            self.plan, self.requests, self.answered = [], [], []
            self.sent_bytes, self.always = 0, None
            self.hold_after = None
            self.held.clear()
            self.release.clear()
