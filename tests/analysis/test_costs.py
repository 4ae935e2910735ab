"""The price of each answer: model_costs from run.json's encoding facts, and the Pareto front."""
from __future__ import annotations

import math

from backretrieval.analysis.costs import COST_COLUMNS, model_costs, pareto_front


def test_model_costs_reads_the_encoding_facts():
    run = {"encoding": {
        "local": {"texts": 100, "encoded": 100, "seconds": 2.0, "dim": 512, "items_per_second": 50.0},
        "again": {"texts": 100, "encoded": 0, "seconds": 0.1, "dim": 384, "items_per_second": None},
        "api": {"texts": 100, "encoded": 40, "seconds": 1.0, "dim": 256, "items_per_second": 40.0,
                "tokens_used": 400, "texts_sent": 40, "price_per_1m_tokens": 0.02},
    }}
    costs = model_costs(run, ["local", "again", "api", "resumed"]).set_index("model")
    assert list(costs.reset_index().columns) == list(COST_COLUMNS)
    assert costs.loc["local", "bytes_per_item"] == 2048 and costs.loc["local", "throughput"] == "measured"
    assert costs.loc["again", "throughput"] == "cached" and costs.loc["again", "items_per_second"] is None
    assert costs.loc["api", "tokens_per_item"] == 10 and math.isclose(costs.loc["api", "cost_per_1m_items"], 0.2)
    assert costs.loc["local", "cost_per_1m_items"] is None
    assert costs.loc["resumed", "throughput"] == "not recorded" and costs.loc["resumed", "dim"] is None


def test_pareto_front():
    quality = [0.5, 0.4, 0.6, 0.3, 0.6, 0.9]
    cost = [1.0, 2.0, 3.0, 0.5, 3.0, math.nan]
    # 0.4 at 2 is beaten by 0.5 at 1; the two equal points (0.6 at 3) do not beat each other; unknown cost: never
    assert pareto_front(quality, cost) == [True, False, True, True, True, False]
