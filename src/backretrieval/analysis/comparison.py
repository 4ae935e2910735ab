"""What a comparison of models found (:class:`Comparison`): the tables every report, page and
script shows of it, computed once by :func:`~.compare.compare_models` and read by the verdict
(:mod:`.verdict`) and the report layer.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from .costs import COST_COLUMNS


PAIRWISE_COLUMNS = ["pair", "model_a", "model_b", "diff", "diff_low", "diff_high", "p", "p_adj", "significant"]
EQUIVALENCE_COLUMNS = ["pair", "model_a", "model_b", "diff", "diff_low", "diff_high", "se", "p", "p_adj", "better",
                       "eq_low", "eq_high", "margin", "p_tost", "p_tost_adj", "equivalent", "vs_best", "comparisons"]


@dataclasses.dataclass
class Comparison:
    """The result of :func:`~.compare.compare_models`: everything a table, a page or a script shows of it, computed once.

    Attributes:
        metric: the metric the models were ranked by.
        level: confidence level of the intervals.
        alpha: significance level of the Holm-adjusted gaps.
        per_pair: one row per language pair and model, best first: ``pair, rank, model,
            estimate, ci_low, ci_high, p_vs_next, p_adj, significant`` (the p-values of the gap
            to the next model, Holm over the pair's adjacent gaps; NaN for the last) and
            ``vs_best``: how the model stands against the pair's best by the decision's tests
            (``"best"``, ``"worse"``, ``"worse, within margin"``, ``"equivalent"``,
            ``"undecided"``; :attr:`equivalence`), the mark the rankings show.
        across_pairs: one row per model, best mean first: ``model, mean, sd, min, max, pairs,
            mean_rank, firsts, wins, losses, ties`` (firsts: pairs where it ranks first; wins,
            losses, ties: the (pair, opponent) gaps of :attr:`pairwise` it leads significantly,
            trails significantly, or that are not significant).
        pairwise: every two models on every language pair (:data:`PAIRWISE_COLUMNS`): the gap
            ``diff`` of ``model_a`` (the higher estimate) over ``model_b`` with its paired
            bootstrap interval, the raw and Holm-adjusted p-value (Holm over all of the pair's
            model pairs) and ``significant`` (``p_adj < alpha``).
        equivalence: the decision's tests (:data:`EQUIVALENCE_COLUMNS`), one row per language
            pair and model other than the pair's best: ``model_a`` is the pair's best (highest
            estimate), ``model_b`` the other; ``diff`` the gap with its ``level`` paired
            bootstrap interval ``diff_low, diff_high`` and paired standard error ``se``;
            superiority: ``p`` (paired sign-flip test; Wald for CORR), ``p_adj`` (Holm over the
            pair's ``comparisons`` = k - 1 comparisons with the best), ``better`` (``p_adj <
            alpha``); equivalence within ``margin``: ``eq_low, eq_high`` (the ``1 - 2 alpha``
            interval of the gap), ``p_tost`` (two one-sided tests), ``p_tost_adj`` (Holm over the
            same k - 1), ``equivalent`` (``p_tost_adj < alpha``); ``vs_best`` as in
            :attr:`per_pair` (:mod:`backretrieval.analysis.decision`).
        margin: the equivalence margin of :attr:`equivalence` (``EvalConfig.margin`` unless
            :func:`~.compare.compare` was given another).
        n: the sample size N of the records (queries per pair and seed).
        seeds: the number of seeds.
        chance: the metric's chance level at N (:func:`~backretrieval.metrics.table.chance_level`;
            None where the table declares none).
        beside: the same comparison by the metric's counterpart (XLR@K beside BkR@K and the
            other way round) where the records have what it needs; None otherwise.
        verdict: which model to ship, per pair and overall, with the interval behind it
            (:func:`backretrieval.analysis.verdict.verdict`); empty until :func:`~backretrieval.analysis.compare.compare_models` sets it.
        costs: the price of each model's answers (:func:`backretrieval.analysis.costs.model_costs`:
            bytes per vector, measured throughput, tokens and cost per million items of API
            models); empty until :func:`~backretrieval.analysis.compare.compare_models` sets it.
        cheapest: the cheapest model as good as the best, per pair and overall, by the cost
            the configuration names (:func:`backretrieval.analysis.costs.cheapest_equivalent`);
            None where the verdict holds no equivalence test.
        run: the evaluation's ``run.json`` (configuration, input fingerprints, environment).
    """

    metric: str
    level: float
    alpha: float
    per_pair: pd.DataFrame  # pair, rank, model, estimate, ci_low, ci_high, p_vs_next, p_adj, significant
    across_pairs: pd.DataFrame  # model, mean, sd, min, max, pairs, mean_rank, firsts, wins, losses, ties
    run: dict[str, Any] = dataclasses.field(default_factory=dict)  # the evaluation's run.json (config, inputs, environment)
    pairwise: pd.DataFrame = dataclasses.field(default_factory=lambda: pd.DataFrame(columns=PAIRWISE_COLUMNS))
    equivalence: pd.DataFrame = dataclasses.field(default_factory=lambda: pd.DataFrame(columns=EQUIVALENCE_COLUMNS))
    margin: float = 0.05
    n: int | None = None
    seeds: int | None = None
    chance: float | None = None
    beside: "Comparison | None" = None
    verdict: dict[str, Any] = dataclasses.field(default_factory=dict)
    costs: pd.DataFrame = dataclasses.field(default_factory=lambda: pd.DataFrame(columns=COST_COLUMNS))
    cheapest: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The comparison as JSON-serialisable data (``compare.json``), with ``run``: what
        produced it (configuration, input fingerprints, software environment; see
        :func:`backretrieval.analysis.evaluate.records.run_info`).

        Returns:
            ``metric``, ``level``, ``alpha``, ``margin``, ``n``, ``seeds``, ``chance``, ``verdict``,
            ``per_pair``, ``across_pairs``, ``pairwise``, ``equivalence`` and ``costs`` as lists
            of row dicts, ``cheapest``, ``beside``
            (the counterpart's comparison in the same form, without ``run``; None when there is
            none) and ``run``.
        """
        return {**self._tables(), "costs": self.costs.astype(object).where(self.costs.notna(), None).to_dict(orient="records"),
                "cheapest": self.cheapest,
                "beside": None if self.beside is None else self.beside._tables(), "run": self.run}

    def _tables(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "level": self.level,
            "alpha": self.alpha,
            "margin": self.margin,
            "n": self.n,
            "seeds": self.seeds,
            "chance": self.chance,
            "verdict": self.verdict,
            "per_pair": self.per_pair.to_dict(orient="records"),
            "across_pairs": self.across_pairs.to_dict(orient="records"),
            "pairwise": self.pairwise.to_dict(orient="records"),
            "equivalence": self.equivalence.to_dict(orient="records"),
        }
