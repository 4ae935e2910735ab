"""The case-study statistics (analysis/trained/case_study.py) against naive references, and the
Markdown / figure of report/case_study.py on a small synthetic evaluation result."""
import math
import statistics
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from backretrieval.analysis.trained.case_study import (
    case_study_summary,
    directed_pairs,
    groups_of,
    mean_lift,
    spec_label,
    ordering_agreement,
    spread_stats,
    stacked_hits,
    worst_pairs,
)
from backretrieval.data.splits import heldout_mask
from backretrieval.report.case_study import case_study_figure, case_study_markdown


def _naive_iqr(v):
    s = sorted(v)
    q = lambda p: np.interp(p * (len(s) - 1), range(len(s)), s)  # noqa: E731 - linear interpolation, numpy's default
    return q(0.75) - q(0.25)


def test_spread_stats_matches_naive_sd_iqr_and_resampling():
    rng = np.random.default_rng(0)
    x, y = rng.random(12), 0.5 * rng.random(12)
    s = spread_stats(x, y, n_boot=300, seed=4)
    assert s["sd_a"] == pytest.approx(statistics.stdev(x)) and s["sd_b"] == pytest.approx(statistics.stdev(y))
    assert s["iqr_a"] == pytest.approx(_naive_iqr(x)) and s["iqr_diff"] == pytest.approx(_naive_iqr(x) - _naive_iqr(y))
    # the same resampled pairs for both models, drawn as a loop would
    draws = np.random.default_rng(4).integers(0, 12, size=(300, 12))
    d = [statistics.stdev(x[i]) - statistics.stdev(y[i]) for i in draws]
    assert s["sd_diff_low"] == pytest.approx(np.quantile(d, 0.025)) and s["sd_diff_high"] == pytest.approx(np.quantile(d, 0.975))
    assert s["p_sd_not_smaller"] == pytest.approx(np.mean([v >= 0 for v in d]))
    assert s["sd_diff"] > 0 and s["sd_diff_low"] > 0  # x spreads twice as wide: reliably larger
    with pytest.raises(ValueError, match=">= 2 pairs"):
        spread_stats(x[:1], y[:1])


def test_worst_pairs_and_lift_match_naive_loops():
    base = np.array([0.5, 0.1, 0.3, 0.1, 0.9, 0.2, 0.7, 0.4])
    assert worst_pairs(base).tolist() == [1, 3]  # ceil(0.25 * 8) = 2 lowest; tie -> lower index first
    assert worst_pairs(base, 0.3).tolist() == [1, 3, 5]
    rng = np.random.default_rng(1)
    a, b = (rng.random((3, 2, 50)) < 0.6).astype(float), (rng.random((3, 2, 50)) < 0.4).astype(float)
    got = mean_lift(a, b, n_boot=200, seed=0)
    assert got["lift"] == pytest.approx(sum(a.ravel() - b.ravel()) / a.size)
    assert got["lift_low"] < got["lift"] < got["lift_high"] and got["lift_low"] > 0


def _naive_spearman(u, v):
    r = lambda w: [sorted(w).index(x) for x in w]  # noqa: E731 - no ties in these inputs
    n = len(u)
    return 1 - 6 * sum((p - q) ** 2 for p, q in zip(r(u), r(v))) / (n * (n * n - 1))


def test_ordering_agreement_per_pair():
    idx, cols = ["a->b", "b->a", "a->c", "c->a"], ["base", "triplet", "tripletxl"]
    bkr = pd.DataFrame([[0.1, 0.3, 0.2], [0.2, 0.1, 0.3], [0.3, 0.2, 0.1], [0.2, 0.2, 0.2]], index=idx, columns=cols)
    xlr = pd.DataFrame([[0.4, 0.6, 0.5], [0.1, 0.3, 0.2], [0.1, 0.2, 0.3], [0.5, 0.6, 0.7]], index=idx, columns=cols)
    got = ordering_agreement(bkr, xlr)
    for p in idx[:3]:
        assert got["per_pair"][p] == pytest.approx(_naive_spearman(list(bkr.loc[p]), list(xlr.loc[p])))
    assert got["per_pair"]["a->b"] == 1.0 and got["per_pair"]["a->c"] == -1.0 and got["per_pair"]["b->a"] == pytest.approx(-0.5)
    assert math.isnan(got["per_pair"]["c->a"])  # BkR ties all three models: undefined, left out
    assert got["n_defined"] == 3 and got["share_identical"] == pytest.approx(1 / 3) and got["share_positive"] == pytest.approx(1 / 3)
    assert got["mean_rho"] == pytest.approx((1 - 0.5 - 1) / 3)
    with pytest.raises(ValueError, match="same pairs and models"):
        ordering_agreement(bkr, xlr[cols[::-1]])


def _fake_result(models, pairs, seeds, n, quality, rng):
    """An EvalResult-like object: per (model, pair, seed) ranks drawn with a model's hit rate."""
    ranks, records = {}, []
    for m in models:
        for s, t in pairs:
            for seed in seeds:
                q = quality[m](s, t)
                ranks[(m, s, t, seed)] = {key: np.where(rng.random(n) < q, 1, 50) for key in ("bkr", "xlr")}
                records.append({"model": m, "src": s, "tgt": t, "seed": seed})
    return SimpleNamespace(ranks=ranks, records=records)


def test_summary_averages_training_seeds_and_answers_the_questions(tmp_path):
    assert directed_pairs(["en", "de", "ja"]) == [("en", "de"), ("en", "ja"), ("de", "en"), ("de", "ja"), ("ja", "en"), ("ja", "de")]
    pairs = directed_pairs(["en", "de", "fr", "ja"])  # 12 pairs: 6 with ja (hard for the base and Triplet), 6 without
    hard = {"ja"}
    quality = {"base": lambda s, t: 0.2 if hard & {s, t} else 0.5,
               "triplet:/m/t0": lambda s, t: 0.2 if hard & {s, t} else 0.8, "triplet:/m/t1": lambda s, t: 0.2 if hard & {s, t} else 0.8,
               "tripletxl:/m/x0": lambda s, t: 0.6, "tripletxl:/m/x1": lambda s, t: 0.6}
    models = list(quality)
    labels = {"base": "base", "triplet:/m/t0": "triplet", "triplet:/m/t1": "triplet", "tripletxl:/m/x0": "tripletxl", "tripletxl:/m/x1": "tripletxl"}
    assert groups_of(models, labels) == {"base": ["base"], "triplet": models[1:3], "tripletxl": models[3:]}
    res = _fake_result(models, pairs, [0, 1], 400, quality, np.random.default_rng(0))
    # training seeds are averaged query by query
    st = stacked_hits(res, models[1:3], pairs, "bkr", 10)
    one = [stacked_hits(res, [m], pairs, "bkr", 10) for m in models[1:3]]
    np.testing.assert_array_equal(st, (one[0] + one[1]) / 2)
    assert st.shape == (12, 2, 400)
    s = case_study_summary({"bkr": res}, models, labels, pairs, 10, 10, 200, {"bkr": "fake"})
    rows = {(r["metric"], r["model"]): r for r in s["metrics"]}
    tr = rows[("BkR@10 (fake)", "triplet")]
    assert tr["training_seeds"] == 2 and tr["delta_low"] > 0.1  # Triplet lifts the base (by 0.3 on 6 of 12 pairs)
    assert tr["pairs_better"] == 6 and tr["pairs_worse"] == 0  # only the pairs without ja, where it gains 0.3 (equal on the others)
    # TripletXL is flat across pairs: a smaller spread than Triplet's and the base's, with CIs below 0
    sp = s["spread"]["BkR@10 (fake): tripletxl vs triplet"]
    assert sp["sd_diff_high"] < 0 and sp["sd_a"] < 0.05 < sp["sd_b"]
    assert s["spread"]["BkR@10 (fake): triplet vs base"]["sd_diff_low"] > 0  # Triplet widens the spread (0.3 vs 0.15 gaps)
    assert {k.split(": ")[1] for k in s["spread"]} == {"triplet vs base", "tripletxl vs triplet", "tripletxl vs base"}
    # the worst quartile by the base = 3 pairs with ja; TripletXL lifts them by ~0.4, Triplet not at all
    w = s["worst"]["BkR@10 (fake): tripletxl"]
    assert len(w["pairs"]) == 3 and all("ja" in p for p in w["pairs"]) and w["lift_low"] > 0.3
    w = s["worst"]["BkR@10 (fake): triplet"]
    # (selecting pairs by the base's noisy score favours pairs where the base was unlucky, so a model
    # as good as the base shows a small positive lift there: regression to the mean)
    assert w["pairs"] == s["worst"]["BkR@10 (fake): tripletxl"]["pairs"] and abs(w["lift"]) < 0.05
    xt = s["xl_vs_triplet"]["BkR@10 (fake): tripletxl - triplet"]
    assert xt["lift"] == pytest.approx(float((stacked_hits(res, models[3:], pairs, "bkr", 10) - st).mean()))
    assert xt["share_pairs_higher"] == 0.5 and xt["lift_low"] < xt["lift"] < xt["lift_high"]  # +0.4 on ja pairs, -0.2 elsewhere
    o = s["truth"]["XLR@10 (fake)"]["ordering"]
    assert o["n_defined"] == 12 and o["mean_rho"] > 0
    md = case_study_markdown(s, "# fake")
    for part in ("lift vs base", "## TripletXL vs Triplet", "## The worst pairs", "identical order", "IQR(A) - IQR(B)", "## Per pair: BkR@10 (fake)"):
        assert part in md, part
    assert case_study_figure(s, tmp_path / "f.png").stat().st_size > 1000


def test_labels_and_heldout_mask():
    assert spec_label("tripletxl:/x/tripletxl") == "tripletxl" and spec_label("tripletxl:/x/b1/") == "tripletxl:b1"
    assert spec_label("use-m@trunc=16") == "use-m@trunc=16"
    m = heldout_mask([f"c{i}" for i in range(2000)] + [None], 0.3, seed=2)
    assert 0.25 < m[:-1].mean() < 0.35 and not m[-1]  # no concept: stays in training
    np.testing.assert_array_equal(m, heldout_mask([f"c{i}" for i in range(2000)] + [None], 0.3, seed=2))
