"""The price of each answer: model_costs from run.json's encoding facts, the Pareto front, and the
cheapest model equivalent to the best (verdict dicts built by hand as the verdict's equivalence
test gives them: per pair ``status``, ``margin``, ``equivalent_to_best``; overall ``equivalent_to_best``)."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from backretrieval.analysis.costs import (COST_COLUMNS, cheapest_equivalent, fraction_words, model_costs,
                                          pareto_front)

SPEED = {"items_per_second": 50.0, "items_per_cpu_second": 25.0, "measured": "YYYY-MM-DD", "how": "run"}


def test_model_costs_reads_the_encoding_facts():
    run = {"encoding": {
        "local": {"texts": 100, "encoded": 100, "dim": 512, "bytes_per_item": 2048, "speed": SPEED,
                  "speed_note": "measured YYYY-MM-DD on this machine (100 texts of 16-31 chars)"},
        "int8": {"texts": 100, "encoded": 0, "dim": 512, "bytes_per_item": 512, "speed": SPEED, "speed_note": "x"},
        "skipped": {"texts": 100, "encoded": 0, "dim": 384, "speed": None, "speed_note": "not measured (--no-measure-speed)"},
        "api": {"texts": 100, "encoded": 40, "dim": 256, "speed": {"items_per_second": 40.0}, "speed_note": "y",
                "tokens_per_item": 10.0, "tokens_counted_by": "reported by the server", "price_per_1m_tokens": 0.02},
        "silent": {"texts": 100, "encoded": 40, "dim": 256, "speed": None, "speed_note": "z", "tokens_per_item": None,
                   "tokens_counted_by": "not reported by the server", "price_per_1m_tokens": 0.02},
    }}
    costs = model_costs(run, ["local", "int8", "skipped", "api", "silent", "resumed"]).set_index("model")
    assert list(costs.reset_index().columns) == list(COST_COLUMNS)
    assert costs.loc["local", "bytes_per_item"] == 2048 and costs.loc["local", "items_per_second"] == 50.0
    assert costs.loc["local", "seconds_per_1m_items"] == 20_000 and costs.loc["local", "items_per_cpu_second"] == 25.0
    assert costs.loc["int8", "bytes_per_item"] == 512  # the model's own bytes per item, not 4 x dim
    assert costs.loc["skipped", "items_per_second"] is None and costs.loc["skipped", "bytes_per_item"] == 1536
    assert costs.loc["skipped", "speed_note"] == "not measured (--no-measure-speed)"
    assert math.isclose(costs.loc["api", "cost_per_1m_items"], 0.2)
    assert costs.loc["local", "cost_per_1m_items"] is None
    # a server that reports no usage: the cost is unknown, not $0
    assert costs.loc["silent", "cost_per_1m_items"] is None and costs.loc["silent", "tokens_per_item"] is None
    assert costs.loc["resumed", "speed_note"] == "not recorded" and costs.loc["resumed", "dim"] is None


def test_a_run_json_of_an_api_that_reported_no_usage_is_priced_unknown():
    """run.json as an API model writes it when no answer carried usage: tokens_used None."""
    run = {"encoding": {"api": {"texts": 10, "encoded": 10, "dim": 8, "tokens_used": None, "texts_sent": 10,
                                "texts_with_usage": 0, "price_per_1m_tokens": 0.1}}}
    assert model_costs(run, ["api"]).loc[0, "cost_per_1m_items"] is None


def test_pareto_front():
    quality = [0.5, 0.4, 0.6, 0.3, 0.6, 0.9]
    cost = [1.0, 2.0, 3.0, 0.5, 3.0, math.nan]
    # 0.4 at 2 is beaten by 0.5 at 1; the two equal points (0.6 at 3) do not beat each other; unknown cost: never
    assert pareto_front(quality, cost) == [True, False, True, True, True, False]


def costs_of(rows: dict[str, tuple]) -> pd.DataFrame:
    """A cost table: model -> (bytes per item, seconds per 1M items, cost per 1M items)."""
    return pd.DataFrame([{"model": m, "bytes_per_item": b, "seconds_per_1m_items": s, "cost_per_1m_items": c}
                         for m, (b, s, c) in rows.items()], dtype=object)


COSTS = costs_of({"use-m": (2048, 4000.0, None), "use-m@int8": (512, 4100.0, None), "use-m@binary": (64, 4200.0, None),
                  "tfidf-char": (16388, 600.0, None), "api": (1024, 9000.0, 0.2)})


def pair(name, status, equivalent, margin=0.05):
    return {"pair": name, "status": status, "margin": margin, "equivalent_to_best": equivalent}


def test_the_cheapest_equivalent_model_per_pair_and_overall():
    v = {"pairs": [pair("en->de", "equivalent", ["use-m", "use-m@int8", "tfidf-char"]),
                   pair("de->ja", "equivalent", ["use-m", "use-m@int8"])],
         "equivalent_to_best": ["use-m", "use-m@int8"]}
    out = cheapest_equivalent(v, COSTS, "bytes")
    assert out["overall"]["cheapest"] == "use-m@int8" and out["overall"]["ratio"] == 0.25
    assert out["overall"]["text"] == "Ship use-m@int8: within 0.05 of use-m on every pair at a quarter of the storage."
    assert [p["cheapest"] for p in out["pairs"]] == ["use-m@int8", "use-m@int8"]
    assert out["pairs"][0]["text"] == "en->de: ship use-m@int8: within 0.05 of use-m at a quarter of the storage"
    # by encoding speed the best itself is the cheapest of its equivalents; tfidf-char is faster on en->de
    by_speed = cheapest_equivalent(v, COSTS, "speed")
    assert by_speed["overall"]["cheapest"] is None and "none is cheaper in the encoding time" in by_speed["text"]
    assert by_speed["pairs"][0]["cheapest"] == "tfidf-char" and "in" in by_speed["pairs"][0]["text"]


def test_no_claim_without_the_equivalence_test_or_with_too_little_data():
    assert cheapest_equivalent({"pairs": [{"pair": "en->de", "status": "ship"}]}, COSTS) is None  # no equivalence keys
    v = {"pairs": [pair("en->de", "not enough data", ["use-m", "use-m@binary"]), pair("de->ja", "only model", ["use-m"]),
                   pair("ja->en", "ship", ["use-m"])],
         "equivalent_to_best": ["use-m"]}
    out = cheapest_equivalent(v, COSTS, "bytes")
    assert [p["cheapest"] for p in out["pairs"]] == [None, None, None]
    assert out["pairs"][0]["text"] == "en->de: not enough data: no model is shown as good as another"
    assert out["pairs"][1]["text"] == "de->ja: no other model is shown within 0.05 of use-m: ship use-m"
    assert out["overall"]["text"] == "No other model is shown within 0.05 of use-m on every pair: ship use-m."


def test_an_unknown_cost_is_never_the_cheapest():
    v = {"pairs": [pair("en->de", "equivalent", ["use-m", "api"])], "equivalent_to_best": ["use-m", "api"]}
    out = cheapest_equivalent(v, COSTS, "price")  # use-m has no price: no claim either way
    assert out["overall"]["cheapest"] is None
    assert "unknown for use-m" in out["overall"]["text"]
    with pytest.raises(ValueError, match="use one of bytes, speed, price"):
        cheapest_equivalent(v, COSTS, "weight")


def test_fraction_words():
    assert [fraction_words(r) for r in (0.5, 1 / 3, 0.25, 1 / 32, 0.61)] == ["half", "a third", "a quarter", "1/32", "61%"]
