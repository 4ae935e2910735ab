"""The tests' OpenAI-protocol server: the project's EmbeddingServer serving a packaged model, with
faults planned per request (rate limits with Retry-After, server errors, slow and malformed
answers, wrong vectors), a record of every request and answer, and a gate that holds requests."""
from __future__ import annotations

import json
import math
import threading
import time
from typing import Any, Callable

from backretrieval.encoders.text.embedding_server import Answer, EmbeddingServer, error_answer, json_answer

Fault = Callable[["TestServer", dict, dict], Answer]


def rate_limited(seconds: float = 0.05) -> Fault:
    """429 asking the client to wait ``seconds`` (Retry-After)."""
    return lambda server, request, headers: error_answer(429, "Rate limit reached", "rate_limit_error",
                                                         {"Retry-After": f"{seconds:g}"})


def status(code: int) -> Fault:
    """An error answer with HTTP status ``code``."""
    return lambda server, request, headers: error_answer(code, f"status {code}", "server_error")


def slow(seconds: float) -> Fault:
    """The right answer, after ``seconds``."""
    def fault(server, request, headers):
        time.sleep(seconds)
        return server.answer(request, headers)
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
            fault = self.plan.pop(0) if self.plan else None
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
            self.hold_after = None
            self.held.clear()
            self.release.clear()
