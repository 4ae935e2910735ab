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


def test_paired_permutation_test_rejects_at_the_nominal_rate_under_the_null():
    """Under the null (symmetric differences) the sign-flip test is exact: with 199 random
    patterns P(p <= 0.05) = 10/200 = 0.05. Over 2,000 null draws the rejection count must lie
    in the two-sided 99.9% binomial region around 0.05 (about 0.034-0.067): a one-sided test
    (~0.10) or a p-value without the observed statistic fails it, and so does a test that is
    needlessly conservative."""
    from scipy.stats import binomtest

    draws = 2000
    rejected = 0
    for s in range(draws):
        r = np.random.default_rng(s)
        rejected += paired_permutation_test(r.standard_normal(30), r.standard_normal(30), n_perm=199,
                                            seed=s).p_value <= 0.05
    assert binomtest(int(rejected), draws, 0.05).pvalue > 0.001, rejected / draws


def test_paired_permutation_test_detects_real_difference_only():
    rng = np.random.default_rng(4)
    base = rng.random(500)
    better = base + 0.05 + 0.01 * rng.standard_normal(500)
    assert paired_permutation_test(better, base, n_perm=2000).p_value < 0.01
    same = base + 0.05 * rng.standard_normal(500)
    assert paired_permutation_test(base, base).p_value == 1.0
    # noise alone (no shift) is no evidence: a large p-value for this draw
    assert paired_permutation_test(same, base, n_perm=2000).p_value > 0.05


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
    assert e["pearson[bkr@10]"]["mean"] > 0.95 > e["pearson[corr]"]["mean"]
    assert e["p_pearson_wilcoxon"] < 0.1 and e["p_pearson_ttest"] < 0.01
    assert e["best"]["pearson"]["candidate"] == "bkr@10" and e["best"]["pearson"]["runner_up"] == "corr"
    md = format_meta_table(table)
    assert md.startswith("| pair | Pearson bkr@10 | Pearson corr | p | Spearman bkr@10 | Spearman corr | p | models | seeds |")
    assert "| en->de | **" in md
    deg = image_model_degradation(per_seed)
    assert deg.loc[0, "image_model"] == "g"
    assert list(deg.columns) == ["image_model", "pearson[bkr@10]", "spearman[bkr@10]", "pearson[corr]", "spearman[corr]",
                                 "pearson[bkr@10]_sd", "spearman[bkr@10]_sd", "pearson[corr]_sd", "spearman[corr]_sd"]


def test_calibration_leave_one_pair_out():
    recs = _records(0.002, 0.05, pairs=("en->de", "de->en", "en->ja", "ja->en"))
    cal = calibrate_leave_one_pair_out(recs, level=0.9)
    summ = cal.summary()
    assert set(summ["pair"]) == {"en->de", "de->en", "en->ja", "ja->en"}
    assert (summ["mae"] < 0.08).all()


def test_calibration_intervals_cover_at_the_nominal_rate():
    """The leave-one-pair-out 90% intervals (a cross-conformal construction) cover the true XLR
    at the nominal rate on exchangeable pairs: pooled over 25 seeded draws of 4 pairs x 8 models
    (800 intervals), the coverage lies in the two-sided 99.9% binomial region around 0.9
    (about 0.865-0.932). In-sample residuals (too narrow) or a level ignored fail it."""
    from scipy.stats import binomtest

    covered = total = 0
    for draw in range(25):
        rng = np.random.default_rng(draw)
        recs = []
        for pair in ("en->de", "de->en", "en->ja", "ja->en"):
            s, t = pair.split("->")
            for m, q in enumerate(np.linspace(0.05, 0.9, 8)):
                recs.append({"model": f"m{m}", "src_lang": s, "tgt_lang": t, "seed": 0, "xlr@10": q,
                             "bkr@10": q / 3 + 0.02 * rng.standard_normal()})
        rows = calibrate_leave_one_pair_out(recs, level=0.9).rows
        covered += int(rows["covered"].sum())
        total += len(rows)
    assert total == 800
    assert binomtest(covered, total, 0.9).pvalue > 0.001, covered / total


def test_compare_ranks_corr_with_bootstrap_intervals(tmp_path, shared_data):
    """CORR in `compare`: intervals from resampled queries, paired across models."""
    from backretrieval.analysis import EvalConfig, run_grid
    from backretrieval.analysis.compare import compare_models

    cfg = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=["use-m", "use-m@noise=3", "random"],
                     image_model="color-hist", n=120, seeds=[0, 1], corr_boot=60)
    res = run_grid(cfg, None, progress=False)
    c = compare_models(res, "corr")
    rows = c.per_pair.sort_values("rank")
    assert rows["model"].tolist() == ["use-m", "use-m@noise=3", "random"]
    for _, r in rows.iterrows():
        assert r["ci_low"] <= r["estimate"] <= r["ci_high"]
    assert rows.iloc[0]["significant"]  # use-m vs its heavily noised variant
    rnd = rows.iloc[2]
    assert rnd["ci_low"] < 0.05 and rnd["ci_high"] > -0.05
    # without resamples there is nothing to compare
    with pytest.raises(Exception, match="corr_boot"):
        compare_models(run_grid(EvalConfig(**{**cfg.__dict__, "corr_boot": 0}), None, progress=False), "corr")


# --------------------------------------------------------------------------- one sign-flip test
def _old_paired_p(a, b, n_perm, seed):
    """The analysis/stats implementation before the sign-flip tests were merged (verbatim)."""
    d = (np.asarray(a, float) - np.asarray(b, float)).ravel()
    obs = abs(d.mean())
    nz = d[d != 0]
    if nz.size == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    extreme = 0
    for start in range(0, n_perm, 500):
        m = min(500, n_perm - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(m, nz.size))
        extreme += int(np.count_nonzero(np.abs(signs @ nz) / d.size >= obs - 1e-12))
    return (1 + extreme) / (1 + n_perm)


def _old_study_p(d, seed, exact_max=20, n_random=200_000):
    """study/analyze.py's implementation before the merge (verbatim, constants inlined)."""
    d = np.asarray(d, dtype=np.float64)
    nz = d[d != 0]
    obs = abs(nz.sum())
    if nz.size == 0:
        return 1.0, "exact sign-flip"
    if nz.size <= exact_max:
        extreme, total = 0, 0
        n = nz.size
        chunk = 1 << min(n, 16)
        for start in range(0, 1 << n, chunk):
            idx = np.arange(start, start + chunk, dtype=np.int64)
            signs = 1.0 - 2.0 * ((idx[:, None] >> np.arange(n)) & 1)
            extreme += int(np.count_nonzero(np.abs(signs @ nz) >= obs - 1e-9))
            total += chunk
        return extreme / total, "exact sign-flip"
    rng = np.random.default_rng(seed)
    extreme = 0
    for start in range(0, n_random, 4000):
        m = min(4000, n_random - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(m, nz.size))
        extreme += int(np.count_nonzero(np.abs(signs @ nz) >= obs - 1e-9))
    return (1 + extreme) / (1 + n_random), f"sign-flip, {n_random} random patterns"


def _diffs(rng, n, kind):
    if kind == "binary":  # hits of two models: ties everywhere
        return (rng.random(n) < 0.5).astype(float) - (rng.random(n) < 0.4).astype(float)
    if kind == "thirds":  # hits averaged over three seeds
        return (rng.integers(0, 4, n) - rng.integers(0, 4, n)) / 3.0
    return rng.standard_normal(n) + 0.1


@pytest.mark.parametrize("kind", ["binary", "thirds", "normal"])
def test_paired_permutation_test_unchanged_by_the_shared_sign_flip(kind):
    rng = np.random.default_rng(11)
    for trial in range(12):
        n = int(rng.integers(1, 300))
        a = _diffs(rng, n, kind)
        b = np.zeros(n) if trial % 3 else a.copy()  # every third: all differences 0
        n_perm = int(rng.integers(1, 1700))
        got = paired_permutation_test(a, b, n_perm=n_perm, seed=trial).p_value
        assert got == _old_paired_p(a, b, n_perm, trial), (kind, trial, n, n_perm)


@pytest.mark.parametrize("kind", ["binary", "thirds", "normal"])
def test_study_sign_flip_unchanged_by_the_shared_sign_flip(kind):
    from backretrieval.study.analyze import sign_flip_test

    rng = np.random.default_rng(12)
    for trial, n in enumerate([0, 1, 5, 14, 20, 21, 40]):
        d = _diffs(rng, n, kind) if n else np.zeros(3)
        got = sign_flip_test(d, seed=trial)
        p, method = _old_study_p(d, trial)
        assert (got["p"], got["method"]) == (p, method), (kind, n)
        assert got["nonzero"] == int(np.count_nonzero(d))


def test_sign_flip_exact_matches_brute_force_and_rejects_unknown_statistic():
    from backretrieval.analysis.stats import sign_flip_p

    d = np.array([0.5, -0.2, 0.9, 0.3, 0.0, 0.1, -0.4, 0.7])
    nz = d[d != 0]
    signs = np.array(np.meshgrid(*[[-1, 1]] * nz.size)).reshape(nz.size, -1).T
    brute = np.mean(np.abs(signs @ nz) >= abs(nz.sum()) - 1e-9)
    assert sign_flip_p(d, statistic="sum", exact_max=20, tol=1e-9) == (brute, "exact", 7)
    with pytest.raises(ValueError, match="statistic must be"):
        sign_flip_p(d, statistic="median")


def test_sign_flip_of_zero_one_outcomes_is_exact_at_any_size():
    """Paired 0/1 outcomes: the exact p from the binomial law of the signs equals the enumeration
    of every sign pattern (small n) and scipy's exact binomial test (large n)."""
    from backretrieval.analysis.stats import sign_flip_p

    rng = np.random.default_rng(8)
    for n in (1, 5, 12):
        d = rng.choice([-1.0, 0.0, 1.0], size=n)
        brute = sign_flip_p(d, statistic="mean", exact_max=20)
        assert sign_flip_p(d, binary_exact=True) == pytest.approx(brute)
    d = np.r_[np.ones(160), -np.ones(120), np.zeros(1200)]
    p, how, nonzero = sign_flip_p(d, binary_exact=True)
    assert (how, nonzero) == ("exact", 280) and p == pytest.approx(stats.binomtest(160, 280, 0.5).pvalue)
    assert sign_flip_p(d / 3, binary_exact=True)[0] == pytest.approx(p)  # one magnitude: thirds of seeds' hits
    assert sign_flip_p(np.r_[d, 0.5], binary_exact=True, n_random=99)[1] == "random"  # two magnitudes


def test_tost_against_its_definition():
    """The two one-sided t tests written out, and the duality: p < alpha exactly when the
    1 - 2 alpha interval lies inside (-margin, margin)."""
    from backretrieval.analysis.stats import paired_se, tost

    rng = np.random.default_rng(9)
    for trial in range(40):
        d = rng.normal(rng.uniform(-0.06, 0.06), 0.3, size=(2, 150))
        se, df = paired_se(d)
        assert se == pytest.approx(np.sqrt(d.var(axis=1, ddof=1).sum() / 150) / 2) and df == 298
        diff = d.mean()
        p, low, high = tost(diff, se, 0.05, alpha=0.05, df=df)
        ref = max(stats.t.sf((diff + 0.05) / se, df), stats.t.sf((0.05 - diff) / se, df))
        assert p == pytest.approx(ref)
        assert (p < 0.05) == (-0.05 < low and high < 0.05)
    assert tost(0.0, 0.0, 0.05) == (0.0, 0.0, 0.0)  # every paired difference 0: equivalent
    assert tost(0.06, 0.0, 0.05)[0] == 1.0
    assert paired_se(np.zeros((3, 40))) == (0.0, 117)


def test_bootstrap_means_is_bootstrap_ci_for_every_series_on_the_same_queries():
    from backretrieval.analysis.stats import bootstrap_means

    rng = np.random.default_rng(10)
    a, b = rng.random((2, 70)), rng.random((2, 70))
    reps = bootstrap_means([a, b], n_boot=250, seed=4)
    for x, r in ((a, reps[0]), (b, reps[1])):
        ci = bootstrap_ci(x, n_boot=250, level=0.9, seed=4)
        assert (ci.low, ci.high) == pytest.approx(tuple(np.quantile(r, [0.05, 0.95])))
    d = bootstrap_ci(a - b, n_boot=250, level=0.9, seed=4)  # the paired gap's replicates are the difference of the two
    assert (d.low, d.high) == pytest.approx(tuple(np.quantile(reps[0] - reps[1], [0.05, 0.95])))
