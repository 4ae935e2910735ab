"""Statistics: correlations against scipy, bootstrap coverage and paired tests on synthetic data
where the answer is known, meta-evaluation tables and calibration."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from backretrieval.report import format_meta_table
from backretrieval.analysis.meta import (
    calibrate_leave_one_pair_out,
    image_model_degradation,
    meta_table,
    per_seed_correlations,
)
from backretrieval.analysis.stats import (
    bootstrap_ci,
    correlations,
    hits,
    holm,
    mcnemar_exact,
    paired_permutation_test,
    reciprocal,
)


def test_correlations_match_scipy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(12)
    y = x + rng.standard_normal(12)
    r, rho = correlations(x, y)
    assert r == pytest.approx(stats.pearsonr(x, y).statistic)
    assert rho == pytest.approx(stats.spearmanr(x, y).statistic)
    assert np.isnan(correlations(np.ones(5), y[:5])[0])


def test_bootstrap_ci_covers_true_mean_at_nominal_rate():
    # Bernoulli(0.3) outcomes: a 90% interval should cover 0.3 about 90% of the time
    rng = np.random.default_rng(1)
    covered = 0
    trials = 200
    for t in range(trials):
        x = (rng.random(400) < 0.3).astype(float)
        ci = bootstrap_ci(x, n_boot=400, level=0.9, seed=t)
        covered += ci.low <= 0.3 <= ci.high
    assert 0.84 <= covered / trials <= 0.96


def test_bootstrap_stratified_and_seeded():
    rng = np.random.default_rng(2)
    x = rng.random((5, 300))
    a = bootstrap_ci(x, n_boot=300, seed=3)
    b = bootstrap_ci(x, n_boot=300, seed=3)
    assert a == b
    assert a.estimate == pytest.approx(x.mean())
    # the interval of the mean over 5 seeds is narrower than that of one seed's sample
    one = bootstrap_ci(x[0], n_boot=300, seed=3)
    assert (a.high - a.low) < (one.high - one.low)


def test_paired_permutation_test_detects_real_difference_only():
    rng = np.random.default_rng(4)
    base = rng.random(500)
    better = base + 0.05 + 0.01 * rng.standard_normal(500)
    assert paired_permutation_test(better, base, n_perm=2000).p_value < 0.01
    same = base + 0.05 * rng.standard_normal(500)
    ps = [paired_permutation_test(base + 0.05 * np.random.default_rng(s).standard_normal(500), base,
                                  n_perm=500, seed=s).p_value for s in range(40)]
    # under the null, p-values are roughly uniform: few are tiny
    assert np.mean(np.array(ps) < 0.05) <= 0.2
    assert paired_permutation_test(base, base).p_value == 1.0
    assert same.shape == base.shape


def test_permutation_test_matches_exact_enumeration():
    d = np.array([0.5, -0.2, 0.9, 0.3, 0.1, -0.4, 0.7])
    obs = abs(d.mean())
    signs = np.array(np.meshgrid(*[[-1, 1]] * d.size)).reshape(d.size, -1).T
    exact = np.mean(np.abs(signs @ d) / d.size >= obs - 1e-12)
    p = paired_permutation_test(d, np.zeros_like(d), n_perm=20000, seed=0).p_value
    assert p == pytest.approx(exact, abs=0.02)


def test_mcnemar_exact_against_binomial():
    a = np.array([1] * 30 + [0] * 10 + [1] * 50 + [0] * 10)
    b = np.array([0] * 30 + [1] * 10 + [1] * 50 + [0] * 10)
    res = mcnemar_exact(a, b)
    assert res.p_value == pytest.approx(stats.binomtest(30, 40, 0.5).pvalue)
    assert res.diff == pytest.approx(0.2)


def test_holm():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_outcomes():
    r = np.array([1, 3, 12])
    assert hits(r, 10).tolist() == [1, 1, 0]
    assert reciprocal(r).tolist() == pytest.approx([1, 1 / 3, 1 / 12])


def _records(noise_bkr, noise_corr, n_models=8, seeds=5, pairs=("en->de", "de->en")):
    rng = np.random.default_rng(0)
    quality = np.linspace(0.05, 0.9, n_models)
    recs = []
    for pair in pairs:
        s, t = pair.split("->")
        for seed in range(seeds):
            for m, q in enumerate(quality):
                recs.append({"model": f"m{m}", "image_model": "g", "src_lang": s, "tgt_lang": t, "seed": seed,
                             "xlr@10": q, "bkr@10": q / 3 + noise_bkr * rng.standard_normal(),
                             "corr": 0.1 * q + noise_corr * rng.standard_normal()})
    return recs


def test_meta_table_prefers_the_metric_that_tracks_truth():
    per_seed = per_seed_correlations(_records(0.005, 0.05))
    assert len(per_seed) == 10
    table = meta_table(per_seed)
    e = table["en->de"]
    assert e["pearson_bkr"]["mean"] > 0.95 > e["pearson_corr"]["mean"]
    assert e["p_pearson_wilcoxon"] < 0.1 and e["p_pearson_ttest"] < 0.01
    md = format_meta_table(table)
    assert "| en->de | **" in md
    deg = image_model_degradation(per_seed)
    assert deg.loc[0, "image_model"] == "g"


def test_calibration_leave_one_pair_out():
    recs = _records(0.002, 0.05, pairs=("en->de", "de->en", "en->ja", "ja->en"))
    cal = calibrate_leave_one_pair_out(recs, level=0.9)
    summ = cal.summary()
    assert set(summ["pair"]) == {"en->de", "de->en", "en->ja", "ja->en"}
    assert (summ["mae"] < 0.08).all()
    assert cal.rows["covered"].mean() >= 0.6


def test_compare_ranks_corr_with_bootstrap_intervals(tmp_path, shared_data):
    """CORR in `compare`: intervals from resampled queries, paired across models."""
    from backretrieval.analysis import EvalConfig, evaluate
    from backretrieval.analysis.compare import compare

    cfg = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=["use-m", "use-m@noise=3", "random"],
                     image_model="color-hist", n=120, seeds=[0, 1], corr_boot=60)
    res = evaluate(cfg, None, progress=False)
    c = compare(res, "corr")
    rows = c.per_pair.sort_values("rank")
    assert rows["model"].tolist() == ["use-m", "use-m@noise=3", "random"]
    for _, r in rows.iterrows():
        assert r["ci_low"] <= r["estimate"] <= r["ci_high"]
    assert rows.iloc[0]["significant"]  # use-m vs its heavily noised variant
    rnd = rows.iloc[2]
    assert rnd["ci_low"] < 0.05 and rnd["ci_high"] > -0.05
    # without resamples there is nothing to compare
    with pytest.raises(Exception, match="corr_boot"):
        compare(evaluate(EvalConfig(**{**cfg.__dict__, "corr_boot": 0}), None, progress=False), "corr")
