"""The HTTP side of ``openai:MODEL``: what a base URL and a key may be, how long to wait after a
429, and a client whose requests are bounded in time and size.

* :func:`check_base_url` -- an ``http(s)`` URL with a host and, where given, a port from 1 to
  65535 (an IPv6 host in brackets, ``http://[::1]:8000/v1``); no user, password, query or
  ``#fragment`` (they would be written into labels, records and logs). An error shows the URL
  without any of them (:func:`shown_url`), never its query.
* :func:`key_problem` -- a key that cannot be sent as an HTTP header (a trailing newline, a space,
  a character that is not printable ASCII) is refused before any request is made; the error
  names the position and kind of the character, never the key.
* :func:`retry_after` -- the wait a ``retry-after-ms`` / ``Retry-After`` header asks for (seconds
  or an HTTP date); anything else (``soon``, ``1s``, a negative or infinite number) is no answer,
  and the caller's backoff decides.
* :func:`bounded_client` -- the ``openai`` client's own HTTP client with two bounds on every
  request: ``timeout`` seconds for the whole request, from sending it to the last byte of the
  answer (the HTTP library's own timeout bounds each read, so a body that drips in forever is
  cut here: at the deadline the connection is shut and the attempt is a timeout, retried as
  one), and a largest answer (:func:`max_answer_bytes`: a declared ``Content-Length`` above it
  is refused before the body is read, a body growing past it is cut), an
  :class:`AnswerTooLarge` that is not retried. Answers are asked for uncompressed
  (``Accept-Encoding: identity``), so the bytes counted are the bytes read.
* :func:`refused_locally` -- a connection refused by this machine (``localhost``, ``127.x``,
  ``::1``): nothing listens there, which no retry mends.
"""
from __future__ import annotations

import email.utils
import functools
import ipaddress
import math
import socket
import sys
import threading
import time
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit

from ...core import EncoderError

MAX_DIM = 16_384  # the widest vector an answer is sized for
BYTES_PER_NUMBER = 32  # a float written as JSON text, with its separator, at most
ANSWER_OVERHEAD = 1 << 20  # the answer's JSON around the vectors (usage, model, object)
DEADLINE = "backretrieval.deadline"  # the request extension that carries the attempt's deadline


class AnswerTooLarge(EncoderError):
    """An answer larger than :func:`max_answer_bytes` allows (declared or received)."""


def max_answer_bytes(texts: int) -> int:
    """The largest answer accepted for a request of ``texts`` texts: each a :data:`MAX_DIM`-d
    vector of :data:`BYTES_PER_NUMBER`-byte numbers, and :data:`ANSWER_OVERHEAD` besides."""
    return ANSWER_OVERHEAD + texts * MAX_DIM * BYTES_PER_NUMBER


def shown_url(url: str) -> str:
    """``url`` as an error may show it: scheme, host, port and path only (no user, password,
    query or fragment), whatever else is wrong with it."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    rest = rest.split("#", 1)[0].split("?", 1)[0]
    netloc, slash, path = rest.partition("/")
    netloc = netloc.rpartition("@")[2]
    return repr(f"{scheme}{sep}{netloc}{slash}{path}")


def endpoint_of(base_url: str) -> str:
    """``base_url`` without user, password, query or fragment (what keys and records may name);
    an IPv6 host keeps its brackets."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"


def check_base_url(base: str, name: str) -> str:
    """The endpoint of ``base`` (:func:`endpoint_of`) after checking it is a base URL a model may name.

    Raises:
        EncoderError: not ``http(s)``, no host, a port that is not a number from 1 to 65535, a
            malformed IPv6 host, or a user, password, query or fragment.
    """
    example = "http(s) URL such as http://localhost:8000/v1"
    try:
        parts = urlsplit(base)
        host, port = parts.hostname, parts.port
    except ValueError as e:  # an unclosed '[', a port out of range or not a number
        raise EncoderError(f"{name}: base_url {shown_url(base)} is not a valid URL ({e}); give an {example}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise EncoderError(f"{name}: base_url must be an {example}, got {shown_url(base)}")
    if port == 0:
        raise EncoderError(f"{name}: base_url {shown_url(base)}: port 0 is not a port a server listens on")
    if parts.username or parts.password or parts.query:
        raise EncoderError(f"{name}: base_url {endpoint_of(base)!r} carries a user, password or query: "
                           "credentials are never part of a model's options (they would be written into labels "
                           "and records); give the key in OPENAI_API_KEY or the variable api_key_env names")
    if parts.fragment or base.endswith("#"):
        raise EncoderError(f"{name}: base_url {endpoint_of(base)!r} carries a #fragment, which no server sees "
                           "and which would be written into labels, records and logs: remove it")
    return endpoint_of(base)


def key_problem(key: str, variable: str) -> str | None:
    """Why ``key`` (read from the environment variable ``variable``) cannot be sent as an HTTP
    header value, or None; the reason names a position and a kind of character, never the key."""
    for i, ch in enumerate(key):
        if not ("!" <= ch <= "~"):
            kind = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space"}.get(
                ch, "a control character" if ord(ch) < 32 or ord(ch) == 127 else "a character that is not ASCII")
            where = "its last character" if i == len(key) - 1 else f"character {i + 1} of {len(key)}"
            return (f"the key in {variable} cannot be sent as an HTTP header: {where} is {kind} (a key is printable "
                    "ASCII without spaces); nothing was sent: set the variable to the key alone")
    return None


def retry_after(headers: Any) -> float | None:
    """Seconds to wait that an answer's ``retry-after-ms`` / ``Retry-After`` header asks for;
    None when there is none or it is neither a number of seconds nor an HTTP date (then the
    caller's backoff decides)."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except (TypeError, ValueError):
            seconds = _http_date_wait(value) if scale == 1.0 else None
        if seconds is not None and math.isfinite(seconds):
            return max(0.0, seconds)
    return None


def _http_date_wait(value: Any) -> float | None:
    """The seconds until the HTTP date ``value`` (None: not a date)."""
    try:
        when = email.utils.parsedate_to_datetime(str(value))
        return when.timestamp() - time.time()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` is this machine (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if not host:
        return False
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refused_locally(error: BaseException, base_url: str) -> bool:
    """Whether ``error`` (the client's connection error) is a connection refused by a server on
    this machine: nothing listens at ``base_url``'s port."""
    if not is_loopback(urlsplit(base_url).hostname):
        return False
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError) or "connection refused" in str(e).lower():
            return True
        e = e.__cause__ or e.__context__
    return False


def http_module() -> Any:
    """The HTTP library the installed ``openai`` client is built on (``httpx2`` or ``httpx``)."""
    import openai

    for cls in openai.DefaultHttpxClient.__mro__:
        top = cls.__module__.split(".")[0]
        if cls.__name__ == "Client" and top in ("httpx", "httpx2"):
            return sys.modules[top]
    import httpx  # the client's documented library where the class cannot tell

    return httpx


@functools.cache
def _bounded_stream_class(http: Any) -> type:
    """A byte stream of ``http`` that enforces a deadline and a size on the stream it wraps."""

    class BoundedStream(http.SyncByteStream):
        def __init__(self, inner: Any, request: Any, deadline: float, limit: int, sock: Any) -> None:
            self.inner, self.request, self.deadline, self.limit, self.sock = inner, request, deadline, limit, sock
            self.expired = False
            self.timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._expire)
            self.timer.daemon = True
            self.timer.start()

        def _expire(self) -> None:
            self.expired = True
            if self.sock is not None:  # wakes a read that waits on the socket
                with suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)

        def _timeout(self) -> BaseException:
            return http.ReadTimeout("the whole request took longer than its timeout", request=self.request)

        def __iter__(self):
            received = 0
            try:
                for chunk in self.inner:
                    if self.expired or time.monotonic() > self.deadline:
                        raise self._timeout()
                    received += len(chunk)
                    if received > self.limit:
                        raise AnswerTooLarge(f"the answer is larger than {self.limit:,} bytes, the most a batch "
                                             "of this size takes; nothing more of it was read")
                    yield chunk
            except (http.TransportError, OSError):
                if self.expired:
                    raise self._timeout() from None
                raise
            if self.expired:  # the body ended because the connection was shut at the deadline
                raise self._timeout()

        def close(self) -> None:
            self.timer.cancel()
            self.inner.close()

    return BoundedStream


def bounded_client(timeout: float, texts_per_request: int) -> Any:
    """The ``openai`` client's default HTTP client, each request bounded by ``timeout`` seconds in
    all (see the module docstring) and its answer by :func:`max_answer_bytes` of
    ``texts_per_request``."""
    import openai

    http = http_module()
    limit = max_answer_bytes(texts_per_request)
    stream_class = _bounded_stream_class(http)

    def on_request(request: Any) -> None:
        request.extensions[DEADLINE] = time.monotonic() + timeout
        request.headers["Accept-Encoding"] = "identity"  # the bytes bounded are the bytes decoded

    def on_response(response: Any) -> None:
        declared = response.headers.get("content-length", "")
        if declared.strip().isdigit() and int(declared) > limit:
            raise AnswerTooLarge(f"the answer declares {int(declared):,} bytes (Content-Length), more than the "
                                 f"{limit:,} a batch of this size takes; it was not read")
        deadline = response.request.extensions.get(DEADLINE, time.monotonic() + timeout)
        network = response.extensions.get("network_stream")
        sock = None
        with suppress(Exception):
            sock = network.get_extra_info("socket") if network is not None else None
        response.stream = stream_class(response.stream, response.request, deadline, limit, sock)

    return openai.DefaultHttpxClient(timeout=timeout, event_hooks={"request": [on_request], "response": [on_response]})
