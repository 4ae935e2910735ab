"""Every model's price in run.json, from the price book beside the cache: the same price table
after a first run, a rerun into the same --out (every record resumed), a new --out (every vector
cached) and br.compare of the finished result; a run that knows nothing measures a fixed sample
or, asked not to, says so; a variant has its base model's speed and its own size; bytes per item
come from a serving form that says them; the dry run estimates time per model (meta too)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

import backretrieval as br
from backretrieval.analysis import EvalConfig, run_grid
from backretrieval.analysis.costs import model_costs
from backretrieval.analysis.evaluate.pricing import NOT_MEASURED, price_facts
from backretrieval.encoders.prices import PriceBook
from commands import cli

MODELS = ["random", "random@trunc=16", "tfidf-char"]
ARGS = ["--dataset", "emoji-cldr", "--pairs", "en-de", "--image-model", "color-hist", "--n", "40", "--seeds", "1"]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An embedding cache (and so a price book) of this test's own."""
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def cfg_for(models=MODELS, **kw) -> EvalConfig:
    base = dict(dataset="emoji-cldr", pairs=[("en", "de")], models=models, image_model="color-hist", n=40, seeds=[0])
    base.update(kw)
    return EvalConfig(**base)


def price_table(out):
    run = json.loads((out / "run.json").read_text())
    return model_costs(run, list(run["encoding"])).to_dict(orient="records")


def test_the_same_price_on_every_rerun_new_out_and_compare(tmp_path, fresh_cache, shared_data):
    first = run_grid(cfg_for(), tmp_path / "a", progress=False)
    table = price_table(tmp_path / "a")
    assert [r["model"] for r in table] == MODELS
    assert all(r["items_per_second"] and r["speed_note"].startswith("measured ") for r in table)
    by = {r["model"]: r for r in table}
    assert by["random"]["bytes_per_item"] == 2048 and by["random@trunc=16"]["bytes_per_item"] == 64
    assert by["random@trunc=16"]["items_per_second"] == by["random"]["items_per_second"]  # the base model encodes
    logs: list[str] = []
    run_grid(cfg_for(), tmp_path / "a", progress=False, log=logs.append)  # every record resumed: nothing encoded
    assert any(line.startswith("resuming: 3 finished records") for line in logs)
    assert json.loads((tmp_path / "a" / "run.json").read_text())["encoding"]["random"]["encoded"] == 0
    assert price_table(tmp_path / "a") == table
    run_grid(cfg_for(), tmp_path / "b", progress=False)
    assert price_table(tmp_path / "b") == table
    c = br.compare(first, "xlr@10")  # its rows in the ranking's order
    assert sorted(c.costs.to_dict(orient="records"), key=lambda r: MODELS.index(r["model"])) == table


def test_a_model_nothing_is_known_of_is_measured_on_a_sample_or_said_not_measured(tmp_path, fresh_cache, shared_data,
                                                                                  monkeypatch):
    run_grid(cfg_for(["random"]), tmp_path / "a", progress=False)
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(tmp_path / "empty"))  # a cache (and price book) that knows nothing
    logs: list[str] = []
    run_grid(cfg_for(["random"], measure_speed=False), tmp_path / "a", progress=False, log=logs.append)
    enc = json.loads((tmp_path / "a" / "run.json").read_text())["encoding"]["random"]
    assert enc["speed"] is None and enc["speed_note"] == NOT_MEASURED and enc["encoded"] == 0
    assert not any("fixed sample" in line for line in logs)
    run_grid(cfg_for(["random"]), tmp_path / "a", progress=False, log=logs.append)
    enc = json.loads((tmp_path / "a" / "run.json").read_text())["encoding"]["random"]
    assert enc["speed"]["how"] == "sample" and "on a fixed sample" in enc["speed_note"]
    assert any("measuring its encoding speed on a fixed sample" in line for line in logs)


class Binary:
    """A serving form as the variants expose it: 512 dimensions kept as 64 bytes."""

    name, version, dim, bytes_per_item, batch_size = "bin", "bin-1", 512, 64, 8

    def encode(self, texts, lang, *, ids=None):
        return np.ones((len(texts), 512), np.float32)


def test_bytes_per_item_come_from_the_model_where_it_says(tmp_path):
    corpora = {"en": SimpleNamespace(texts=[f"text {i}" for i in range(50)])}
    facts = price_facts("bin", Binary(), None, corpora, "bin-1", "bin-1", book=PriceBook(tmp_path))
    assert facts["dim"] == 512 and facts["bytes_per_item"] == 64
    assert facts["speed"]["how"] == "sample" and facts["speed"]["bytes_per_item"] == 64


def test_the_dry_run_estimates_time_per_model(tmp_path, fresh_cache, shared_data):
    cold = cli(["evaluate", *ARGS, "--models", ",".join(MODELS), "--out", str(tmp_path / "dry"), "--dry-run"])
    assert cold.exit_code == 0, cold.output
    assert "random: 158 texts to encode (not cached: computed afresh in every run); time unknown" in cold.output
    run_grid(cfg_for(), tmp_path / "a", progress=False)
    warm = cli(["compare", *ARGS, "--models", ",".join(MODELS), "--out", str(tmp_path / "dry"), "--dry-run"])
    assert warm.exit_code == 0, warm.output
    lines = warm.output.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == MODELS
    assert all(" s on this machine (at " in line and "texts/s" in line for line in lines), lines
    assert not (tmp_path / "dry").exists()


def test_meta_has_a_dry_run(tmp_path, fresh_cache, shared_data):
    res = cli(["meta", *ARGS, "--models", "random,random?seed=1,tfidf-char", "--out", str(tmp_path / "meta"),
               "--dry-run", "--no-measure-speed"])
    assert res.exit_code == 0, res.output
    assert [line.split(":")[0] for line in res.output.strip().splitlines()] == ["random", "random?seed=1", "tfidf-char"]
    assert not (tmp_path / "meta").exists()
