"""Embedding APIs in the grid, against a real OpenAI-protocol server on 127.0.0.1 serving use-m:
``openai:use-m`` gives exactly use-m's records; the key is written nowhere (a run killed mid-way
and resumed: tests/e2e/test_probe_api.py); the estimate and
``--dry-run`` come before anything is sent; run.json records the tokens used."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from openai_server import TestServer

from backretrieval.analysis import EvalConfig, run_grid
from backretrieval.cli import main
from backretrieval.encoders.registry import get_text_encoder

KEY = "sk-test-evaluation-KEY-5f3a9c"
N = 30
TIMING = {"seconds", "encode_seconds"}


@pytest.fixture(scope="module")
def server(shared_data):
    with TestServer(get_text_encoder("use-m")) as s:
        yield s


@pytest.fixture
def api(server, monkeypatch, tmp_path):
    """The server, reset; the key and base URL in the environment; a fresh embedding cache."""
    server.reset()
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(tmp_path / "cache"))
    return server


def cfg_for(models, **kw) -> EvalConfig:
    base = dict(dataset="emoji-cldr", pairs=[("en", "de")], models=models, image_model="color-hist", n=N, seeds=[0, 1])
    base.update(kw)
    return EvalConfig(**base)


def strip(rec):
    return {k: v for k, v in rec.items() if k not in TIMING | {"model", "model_identity", "model_spec"}}


def test_openai_use_m_gives_use_m_records_and_writes_no_key(api, tmp_path):
    lines: list[str] = []
    spec, label = "openai:use-m?batch_size=16&price_per_1m_tokens=0.02", "openai:use-m"
    out = tmp_path / "out"
    result = run_grid(cfg_for(["use-m", spec]), out, progress=False, log=lines.append)
    local = [r for r in result.records if r["model"] == "use-m"]
    remote = [r for r in result.records if r["model"] == label]
    assert {r["model_spec"] for r in remote} == {spec}  # the label is short; the records keep the full spec
    assert len(local) == len(remote) == 2 and [strip(r) for r in local] == [strip(r) for r in remote]
    for key, ranks in result.ranks.items():
        if key[0] == "use-m":
            for name, arr in ranks.items():
                assert (arr == result.ranks[(label, *key[1:])][name]).all()
    # the estimate came first; run.json has the tokens the server reported
    (line,) = [x for x in lines if x.startswith(f"{label}:")]
    assert "texts to send in" in line and "(0 already cached)" in line and "at $0.02 per 1M tokens" in line
    run = json.loads((out / "run.json").read_text())
    enc = run["encoding"][label]
    sent = sum(len(r["texts"]) for r in api.requests)
    words = sum(len(t.split()) for r in api.requests for t in r["texts"])
    assert enc["tokens_used"] == words and enc["texts_sent"] == sent == enc["encoded"] and enc["requests"] == len(api.requests)
    assert enc["tokens_per_item"] == pytest.approx(words / sent, abs=1e-3) and enc["tokens_counted_by"] == "reported by the server"
    assert run["encoding"]["use-m"]["items_per_second"] > 0
    assert all(r["authorization"] == f"Bearer {KEY}" for r in api.requests)
    # the key is nowhere: outputs, cache, log
    for root in (out, tmp_path / "cache"):
        for f in root.rglob("*"):
            if f.is_file():
                assert KEY.encode() not in f.read_bytes(), f
    assert not any(KEY in x for x in lines)
    # a second run sends nothing: every batch is cached
    api.reset()
    run_grid(cfg_for([spec]), tmp_path / "again", progress=False)
    assert api.requests == []


def test_dry_run_sends_nothing(api, tmp_path):
    res = CliRunner().invoke(main, [
        "compare", "--dataset", "emoji-cldr", "--pairs", "en-de", "--models",
        "openai:use-m?price_per_1m_tokens=0.1,openai:use-m?price_per_1m_tokens=0.1@int8",
        "--image-model", "color-hist", "--n", str(N), "--seeds", "2", "--out", str(tmp_path / "dry"), "--dry-run",
    ], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    lines = {line.split(": ")[0]: line for line in res.output.splitlines() if line.startswith("openai:")}
    assert set(lines) == {"openai:use-m", "openai:use-m@int8"}, res.output
    for line in lines.values():  # the serving form sends what its model sends
        assert "already cached), about" in line and "at $0.1 per 1M tokens" in line, line
        assert "approximation: 1 token per 4 bytes of UTF-8" in line, line
    assert lines["openai:use-m"].split(": ", 1)[1] == lines["openai:use-m@int8"].split(": ", 1)[1]
    assert api.requests == [] and not (tmp_path / "dry" / "results.jsonl").exists()


def test_a_server_that_reports_no_usage_is_priced_unknown_not_zero(api, tmp_path):
    from openai_server import mangled

    from backretrieval.analysis.costs import model_costs

    def no_usage(payload):
        del payload["usage"]

    api.plan = [mangled(no_usage)] * 50
    spec = "openai:use-m?price_per_1m_tokens=0.02"
    run_grid(cfg_for([spec]), tmp_path / "out", progress=False)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    enc = run["encoding"]["openai:use-m"]
    assert enc["texts_sent"] > 0 and enc["tokens_used"] is None and enc["tokens_per_item"] is None
    assert enc["tokens_counted_by"] == "not reported by the server"
    row = model_costs(run, ["openai:use-m"]).iloc[0]
    assert row["price_per_1m_tokens"] == 0.02 and row["cost_per_1m_items"] is None
