"""The probe's cases on the embedding-API path (``openai:MODEL``) and the embedding server: a
real HTTP server on 127.0.0.1 (tests/openai_server.py) serving the ``random`` baseline, with
planned faults -- 429 storms with every kind of ``Retry-After``, 500/503, a hang past the timeout,
a dripping body, malformed JSON, wrong counts, shuffled indices, a dimension change between and
within runs, NaN, an empty list, an oversized body -- and ``kill -9`` mid-run with the re-sent
texts counted at the server. Each case checks docs/bad-input.md's promise: one error naming the
model, the right exit code (1: retry later, 2: fix the input), nothing of a bad batch cached,
nothing sent twice. Retries wait ``backoff=0.01`` s so the storms take milliseconds."""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from commands import assert_refused, cli, grid, write_feature_items
from openai_server import (
    TestServer, add_one, dripping, drop_one, empty_first, http_date, malformed, mangled, nan_in_first, no_vectors,
    oversized, rate_limited, shuffled, slow, status, wider,
)

import backretrieval
from backretrieval.core import EncoderError, ServiceError
from backretrieval.encoders.cache import CacheWaitWarning, CachedTextEncoder
from backretrieval.encoders.registry import get_text_encoder

SRC = Path(backretrieval.__file__).resolve().parents[1]
TEXTS = [f"text number {i}" for i in range(12)]


@pytest.fixture(scope="module")
def local():
    return get_text_encoder("random", dim=16)


@pytest.fixture(scope="module")
def server(local):
    with TestServer(local) as s:
        yield s


@pytest.fixture
def srv(server, monkeypatch):
    server.reset()
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-probe-0123456789")
    return server


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """A fresh embedding cache per test."""
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_feature_items(tmp_path_factory.mktemp("probe-api-data"), 40, {"en": "red cat", "de": "rote Katze"})


def api(srv, **options) -> CachedTextEncoder:
    """``openai:random`` against the test server, cached under the test's cache folder."""
    options = {"batch_size": 4, "backoff": 0.01, **options}
    return CachedTextEncoder(get_text_encoder("openai:random", base_url=srv.url, **options),
                             root=Path(os.environ["BACKRETRIEVAL_CACHE"]) / "embeddings")


def spec(srv, **options) -> str:
    """The same model as a spec string of ``--models``."""
    options = {"base_url": srv.url, "backoff": 0.01, **options}
    return "openai:random?" + "&".join(f"{k}={v}" for k, v in options.items())


def assert_error(res, *fragments: str, code: int = 2) -> str:
    """A run that ended with exit code ``code`` and one ``error:`` line (its last; the lines before
    are the run's notes) holding every fragment, and no traceback."""
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == code and "Traceback" not in res.output, res.output
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], res.output
    for f in fragments:
        assert f in errors[0], (f, errors[0])
    return errors[0]


def shards(cache: Path) -> int:
    return len(list(cache.rglob("shard-*.npz")))


def sent(srv) -> list[str]:
    return [t for r in srv.requests for t in r["texts"]]


# ------------------------------------------------------------------- retries and their exit code
@pytest.mark.parametrize("retry_after", ["0.05", http_date(0.5), "soon", "1s", "-3", "inf", None],
                         ids=["seconds", "date", "soon", "1s", "negative", "inf", "none"])
def test_a_429_storm_with_any_retry_after_is_waited_out(srv, local, retry_after):
    """Three 429s in a row: a number of seconds or an HTTP date is waited; anything else falls
    back to the backoff. No traceback, and the vectors are the model's."""
    srv.plan = [rate_limited(retry_after)] * 3
    enc = api(srv, batch_size=12)
    np.testing.assert_array_equal(enc.encode(TEXTS, "en"), local.encode(TEXTS, "en"))
    assert enc.usage["retries"] == 3 and len(srv.requests) == 4


@pytest.mark.parametrize("code", [500, 503])
def test_server_errors_are_retried_then_exit_1_while_a_refusal_exits_2(srv, data, tmp_path, code):
    srv.plan = [status(code), status(code)]
    assert api(srv, batch_size=12).encode(TEXTS, "en").shape == (12, 16)
    srv.reset()
    srv.always = status(code)
    res = cli(grid("evaluate", data, tmp_path / "out", "--models", spec(srv, max_retries=1)))
    assert_error(res, f"failed (2 tries); last status: {code}; the input is fine: retry later", code=1)
    srv.reset()
    srv.always = status(401)
    res = cli(grid("evaluate", data, tmp_path / "out", "--models", spec(srv)))
    assert_error(res, "refused by", "with status 401", code=2)


def test_a_hang_and_a_dripping_body_end_at_the_timeout_and_are_retried(srv, local):
    """``timeout`` bounds the whole request: a body that drips a byte every 50 ms for 8 s (each
    read well within the timeout) is cut at 1 s and retried like a hang."""
    api(srv).encode(TEXTS[:1], "en")  # the client is built (imports) before the clock starts
    for fault in (slow(8), dripping(0.05, 8)):
        srv.reset()
        srv.plan = [fault]
        enc = api(srv, timeout=1, max_retries=0)
        t0 = time.monotonic()
        with pytest.raises(ServiceError, match=r"batch 1 of 1 \(4 en texts\) failed \(1 tries\); last status: timeout"):
            enc.encode(TEXTS[4:8], "en")
        assert time.monotonic() - t0 < 4  # 1 s and the machine's delays, not 8 s
    srv.reset()
    srv.plan = [dripping(0.05, 8)]
    enc = api(srv, timeout=1)
    np.testing.assert_array_equal(enc.encode(TEXTS[4:8], "en"), local.encode(TEXTS[4:8], "en"))
    assert enc.usage["retries"] == 1


@pytest.mark.parametrize("declared", [False, True], ids=["streamed", "content-length"])
def test_an_oversized_answer_is_refused_without_reading_it(srv, cache, declared):
    srv.plan = [oversized(64, declared)]
    with pytest.raises(EncoderError, match=r"bad answer from .*: the answer (is larger than|declares) "):
        api(srv, batch_size=2).encode(TEXTS[:2], "en")
    assert srv.sent_bytes < 16 << 20 and shards(cache) == 0  # stopped reading long before 64 MiB


# ------------------------------------------------------------------------------- bad answers
@pytest.mark.parametrize("fault,says", [
    (malformed, "unreadable answer"),
    (mangled(drop_one), "3 vectors for 4 texts"),
    (mangled(add_one), "5 vectors for 4 texts"),
    (mangled(no_vectors), "0 vectors for 4 texts"),
    (mangled(nan_in_first), "NaN or inf in the vector of text 0"),
    (mangled(empty_first), "an empty vector"),
], ids=["malformed", "fewer", "more", "empty-list", "nan", "empty-vector"])
def test_a_bad_answer_is_one_error_and_nothing_of_it_is_cached(srv, cache, fault, says):
    srv.plan = [None, fault]
    with pytest.raises(EncoderError, match=f"batch 2 of 3 \\(4 en texts\\).*{says}"):
        api(srv).encode(TEXTS, "en")
    assert shards(cache) == 1  # the first batch, answered before


def test_shuffled_indices_put_each_vector_in_its_place(srv, local):
    srv.plan = [mangled(shuffled)] * 3
    np.testing.assert_array_equal(api(srv).encode(TEXTS, "en"), local.encode(TEXTS, "en"))


def test_a_dimension_change_within_a_run_keeps_the_good_batches(srv, local, cache):
    srv.plan = [None, mangled(wider)]
    with pytest.raises(EncoderError, match=r"batch 2 of 3 .*17-d vectors, the earlier ones are 16-d"):
        api(srv).encode(TEXTS, "en")
    assert shards(cache) == 1
    srv.reset()
    np.testing.assert_array_equal(api(srv).encode(TEXTS, "en"), local.encode(TEXTS, "en"))
    assert sent(srv) == TEXTS[4:]  # only what the cache lacked


def test_a_dimension_change_between_runs_is_one_error_nothing_cached_or_sent_twice(srv, data, tmp_path, cache):
    """The first run caches 16-d vectors; then the endpoint answers 17-d ones. Each later run is
    one error after one batch, naming both dimensions and what to do; nothing of it is cached."""
    api(srv).encode(TEXTS[:8], "en")
    before = shards(cache)
    srv.reset()
    srv.always = mangled(wider)
    for _ in range(2):
        with pytest.raises(EncoderError, match=r"17-d vectors, but the embedding cache holds 16-d vectors of this model"):
            api(srv).encode(TEXTS, "en")
        assert shards(cache) == before and len(srv.requests) == 1 and sent(srv) == TEXTS[8:]
        srv.requests.clear()
    srv.always = None  # the CLI run's en texts cached 16-d, under the CLI's label of the model
    cli_model = spec(srv, batch_size=64)
    CachedTextEncoder(get_text_encoder(cli_model), root=cache / "embeddings").encode([f"red cat {i}" for i in range(40)], "en")
    srv.reset()
    srv.always = mangled(wider)
    res = cli(grid("evaluate", data, tmp_path / "out", "--models", cli_model))
    line = assert_error(res, "17-d vectors, but the embedding cache holds 16-d vectors", "dimensions=16", "dimensions=17")
    assert "random" in line and len(srv.requests) == 1


# --------------------------------------------------------------- what runs share, and kill -9
def test_two_runs_sharing_a_cache_send_each_text_once(srv, local):
    """Two runs of the same texts at once: the second waits for the first (the cache's lock per
    model and language) and then reads what it stored."""
    srv.always = slow(0.3)
    results, errors = {}, []

    def run(name):
        try:
            results[name] = api(srv).encode(TEXTS, "en")
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    first = threading.Thread(target=run, args=("first",))
    first.start()
    while not srv.requests:
        time.sleep(0.01)
    with pytest.warns(CacheWaitWarning, match="another run is sending texts of this model .* waiting for it"):
        second = threading.Thread(target=run, args=("second",))
        second.start()
        first.join(30)
        second.join(30)
    assert not errors, errors
    assert sorted(sent(srv)) == sorted(TEXTS)  # every text once
    np.testing.assert_array_equal(results["first"], results["second"])


def test_kill_9_mid_run_resends_only_the_batch_in_flight(srv, data, tmp_path, cache):
    """``evaluate`` killed with SIGKILL while its fourth request is held at the server: the rerun
    sends every text the first run got no answer for, and of the answered ones none."""
    srv.hold_after = 3
    out = tmp_path / "out"
    args = grid("evaluate", data, out, "--models", spec(srv, batch_size=8))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from backretrieval.cli import main
        sys.argv = ["backretrieval", *{args!r}]
        main()
    """)], env={**os.environ, "PYTHONPATH": str(SRC)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert srv.held.wait(60), proc.stderr.read() if proc.poll() is not None else "no fourth request"
    finally:
        proc.kill()
        proc.wait()
    answered = [t for batch in srv.answered for t in batch]
    in_flight = srv.requests[3]["texts"]
    assert len(srv.requests) == 4 and len(answered) == 24 and in_flight
    srv.release.set()
    srv.reset()
    res = cli(args)
    assert res.exit_code == 0, res.output
    again = sent(srv)
    assert not set(again) & set(answered)  # nothing answered is paid twice
    assert set(in_flight) <= set(again) and len(again) == len(set(again))  # the batch in flight, once
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert records and json.loads((out / "run.json").read_text())["encoding"][records[0]["model"]]["texts_sent"] == len(again)


# ------------------------------------------------------------------ keys, URLs and the server
@pytest.mark.parametrize("key,says", [
    ("sk-probe-123\n", "its last character is a newline"),
    ("sk-pröbe-123", "character 6 of 12 is a character that is not ASCII"),
    ("sk probe", "character 3 of 8 is a space"),
])
def test_a_key_that_is_no_header_value_is_refused_before_any_request(srv, monkeypatch, key, says):
    monkeypatch.setenv("OPENAI_API_KEY", key)
    t0 = time.monotonic()
    with pytest.raises(EncoderError) as e:
        api(srv).encode(TEXTS, "en")
    assert f"the key in OPENAI_API_KEY cannot be sent as an HTTP header: {says}" in str(e.value)
    assert key.strip() not in str(e.value) and not srv.requests and time.monotonic() - t0 < 5


@pytest.mark.parametrize("url,says", [
    ("http://localhost:99999/v1", "base_url 'http://localhost:99999/v1' is not a valid URL (Port out of range"),
    ("http://localhost:abc/v1", "is not a valid URL (Port could not be cast to integer value"),
    ("http://[::1/v1", "base_url 'http://[::1/v1' is not a valid URL (Invalid IPv6 URL)"),
    ("ftp://host/x?secret=42", "base_url must be an http(s) URL such as http://localhost:8000/v1, got 'ftp://host/x'"),
    ("http://host/v1#frag", "base_url 'http://host/v1' carries a #fragment, which no server sees"),
    ("http://host:0/v1", "port 0 is not a port a server listens on"),
])
def test_a_base_url_that_is_no_url_is_one_error_without_its_query(url, says, data, tmp_path):
    with pytest.raises(EncoderError) as e:
        get_text_encoder("openai:m", base_url=url)
    assert says in str(e.value) and "secret" not in str(e.value) and "frag" not in str(e.value).replace("fragment", "")
    res = cli(grid("evaluate", data, tmp_path / "out", "--models", f"openai:m?base_url={url}"))
    assert_refused(res, says.split(" (")[0].split(", got")[0])


def test_an_ipv6_endpoint_keeps_its_brackets_and_timeout_must_be_finite():
    assert get_text_encoder("openai:m", base_url="http://[::1]:8000/v1").endpoint == "http://[::1]:8000/v1"
    for value in ("inf", "nan", "0"):
        with pytest.raises(EncoderError, match="timeout must be a finite number of seconds above 0"):
            get_text_encoder(f"openai:m?base_url=http://localhost:1/v1&timeout={value}")


def test_a_refused_connection_to_this_machine_fails_at_once_asking_for_the_server(data, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    url = f"http://127.0.0.1:{port}/v1"
    t0 = time.monotonic()
    with pytest.raises(ServiceError, match=f"nothing accepts connections at {url} \\(connection refused\\): is the "
                                           "embedding server running"):
        get_text_encoder("openai:m", base_url=url).encode(TEXTS, "en")
    assert time.monotonic() - t0 < 5  # no 63 s of backoff
    res = cli(grid("evaluate", data, tmp_path / "out", "--models", f"openai:m?base_url={url}"))
    assert_error(res, "is the embedding server running?", code=1)


def post(server, body: bytes = b"", headers: dict | None = None) -> tuple[int, str]:
    """POST ``body`` to the server's /v1/embeddings with ``headers`` as given (no Content-Length of
    its own); the status and body of the answer, within 10 s."""
    conn = http.client.HTTPConnection("127.0.0.1", server.httpd.server_address[1], timeout=10)
    try:
        conn.putrequest("POST", "/v1/embeddings")
        for k, v in (headers or {"Content-Length": str(len(body))}).items():
            conn.putheader(k, v)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


@pytest.mark.parametrize("body,headers,code,says", [
    (b"", {"Content-Length": "4000000000"}, 413, "larger than this server takes"),
    (b"", {"Content-Length": "-5"}, 400, "Content-Length must be a number of bytes"),
    (b"", {"Content-Length": "abc"}, 400, "Content-Length must be a number of bytes"),
    (b'{"input": ["a"], "dimensions": true}', None, 400, "dimensions must be an integer from 1 to 16, got True"),
    (b"[" * 100_000 + b"]" * 100_000, None, 400, "nested too deeply"),
], ids=["huge", "negative", "not-a-number", "dimensions-true", "nested"])
def test_the_embedding_server_answers_every_hostile_request(server, body, headers, code, says):
    server.reset()
    got, text = post(server, body, headers)
    assert got == code and says in json.loads(text)["error"]["message"]
