"""The verdict on cases whose answer is known: a clearly best model, the same model under two
names, two models alike but not the same, a check that would ship another model, one model,
texts all equal, models at the metric's ceiling, a gap whose interval excludes 0 that Holm over
the comparisons does not call significant, CORR, and a catalogue too small for BkR."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from backretrieval.analysis import EvalConfig
from backretrieval.analysis.check import agreement
from backretrieval.analysis.compare import compare_models, outcome_fn
from backretrieval.analysis.decision import decide_outcomes
from backretrieval.analysis.evaluate import EvalResult
from backretrieval.analysis.verdict import lead_and_check, pair_verdict


def grid(draws, n=200, seeds=(0, 1), pairs=(("en", "de"), ("de", "ja")), largest_n=None, kinds=("bkr", "xlr")) -> EvalResult:
    """Per-query ranks drawn per model by ``draws[model](rng, n)`` (the same function for BkR and XLR
    unless a model maps to a dict of kind -> function); a model mapped to the name of another gets
    that model's very ranks (the same vectors under another name)."""
    rng = np.random.default_rng(5)
    cfg = EvalConfig(dataset="synthetic", pairs=list(pairs), models=list(draws), n=n, seeds=list(seeds))
    records, ranks = [], {}
    for (src, tgt), s in itertools.product(pairs, seeds):
        base = {}
        for m, f in draws.items():
            if isinstance(f, str):
                base[m] = {k: v.copy() for k, v in base[f].items()}
                continue
            base[m] = {k: (f[k] if isinstance(f, dict) else f)(rng, n).astype(float) for k in kinds}
        for m in draws:
            records.append({"model": m, "src_lang": src, "tgt_lang": tgt, "seed": s})
            ranks[(m, src, tgt, s)] = base[m]
    return EvalResult(config=cfg, records=records, ranks=ranks, largest_n=largest_n or {})


GOOD = lambda rng, n: rng.integers(1, 12, n)  # noqa: E731  (BkR@10 and XLR@10 about 0.9)
MID = lambda rng, n: rng.integers(1, 40, n)  # noqa: E731  (about 0.25)
RANDOM = lambda rng, n: rng.integers(1, n + 1, n)  # noqa: E731
TOP = lambda rng, n: rng.choice([1, 2], size=n, p=[0.8, 0.2])  # noqa: E731  (@1 about 0.8)
STATS = dict(n_boot=200, n_perm=400)


def _texts(v):
    return [v["summary"], v["text"], *(p["text"] for p in v["pairs"])]


def test_a_clearly_best_model_is_the_one_to_ship():
    c = compare_models(grid({"random": RANDOM, "mid": MID, "good": GOOD}), "bkr@10", **STATS)
    v = c.verdict
    assert v["metric"] == "xlr@10" and v["check"] == "bkr@10"  # the ground truth leads
    assert v["status"] == "ship" and v["ship"] == "good" and v["leading"] == ["good"]
    assert v["margin"] == 0.05 and v["equivalent_to_best"] == ["good"]
    for p in v["pairs"]:
        assert p["status"] == "ship" and p["ship"] == "good" and p["gap"]["vs"] == "mid"
        assert p["equivalent_to_best"] == ["good"] and p["margin"] == 0.05 and p["comparisons"] == 2
        assert 0 < p["gap"]["low"] <= p["gap"]["diff"] <= p["gap"]["high"]
        assert "Holm over the 2 comparisons with the best" in p["text"]
        assert p["power"]["queries"] == 400 and p["power"]["comparisons"] == 2 and p["power"]["text"]
    assert v["text"].startswith("Ship good: by xlr@10, the ground truth (these data link languages), it is significantly "
                                "better than every other model on every pair (Holm over the 2 comparisons with the best on "
                                "each); its smallest lead: ")
    assert "bkr@10, which needs no translations, is the check: it gives the same answer as xlr@10 on en->de, de->ja." in v["text"]
    assert c.to_json()["verdict"] == v
    assert c.across_pairs.set_index("model").loc["good", "wins"] == 4  # significant wins: 2 opponents x 2 pairs
    eq = c.beside.equivalence if c.metric == "xlr@10" else lead_and_check(c)[0].equivalence
    assert len(eq) == 4 and set(eq["model_a"]) == {"good"} and set(eq["comparisons"]) == {2}  # k - 1 per pair, not all pairs


def test_the_same_model_near_chance_is_still_equivalent():
    """N = 20, K = 5: chance 0.25; the model scores 0.45 with an interval reaching chance, but the
    same vectors under two names are equivalent all the same (with the caveat said)."""
    hits = np.r_[np.ones(9, int), np.full(11, 20)]
    draws = {"a": lambda rng, n: hits, "a-again": "a"}
    c = compare_models(grid(draws, n=20, seeds=(0,), pairs=(("en", "de"),), kinds=("xlr",)), "xlr@5", **STATS)
    p = c.verdict["pairs"][0]
    assert p["best"]["low"] <= 0.25 < p["best"]["estimate"]
    assert p["status"] == "equivalent" and "the same model, of uncertain use" in p["text"]


@pytest.mark.parametrize("n", [10, 50, 1500])
def test_the_same_model_under_two_names_is_equivalent_at_any_n(n):
    """Every paired difference 0: equivalent, whatever N, with the interval [0, 0]."""
    c = compare_models(grid({"a": TOP, "a-again": "a"}, n=n, seeds=(0,), pairs=(("en", "de"),), kinds=("xlr",)), "xlr@1", **STATS)
    v = c.verdict
    assert v["status"] == "equivalent" and v["ship"] is None and v["equivalent_to_best"] == ["a", "a-again"]
    p = v["pairs"][0]
    assert p["status"] == "equivalent" and p["equivalent_to_best"] == ["a", "a-again"]
    assert p["gap"]["eq_low"] == p["gap"]["eq_high"] == 0.0 and p["gap"]["equivalent"]
    assert "pick among them by cost or speed" in p["text"] and "pick among them by cost or speed" in v["summary"]
    row = c.equivalence.iloc[0]
    assert (row["p_tost"], row["p_tost_adj"], row["equivalent"], row["vs_best"]) == (0.0, 0.0, True, "equivalent")


def test_models_alike_but_not_the_same_are_not_enough_data_and_never_picked_by_cost():
    """Two models drawn alike, query by query different: 'not significant' is not 'equal'."""
    res = grid({"a": GOOD, "b": GOOD, "random": RANDOM}, largest_n={"en->de": {"xlr": 5000, "bkr": 2000},
                                                                 "de->ja": {"xlr": 5000, "bkr": 2000}})
    c = compare_models(res, "xlr@10", **STATS)
    v = c.verdict
    assert v["status"] == "not enough data" and v["ship"] is None
    for p in v["pairs"]:
        assert p["status"] == "not enough data" and p["leading"] == [p["best"]["model"], *({"a", "b"} - {p["best"]["model"]})]
        assert "can be neither separated from it nor shown within ±0.05 of it" in p["text"]
        assert "random is significantly worse" in p["text"]
        power = p["power"]
        assert power["detectable_gap"] > 0.05 and power["n_for_margin"] > 200 and power["largest_n"] == 5000
        assert f"a lead of 0.05 needs about N = {power['n_for_margin']:,}" in p["text"]
        assert "the data allow N up to 5,000" in p["text"] and "More data may show a winner, or that they are equivalent" in p["text"]
    for t in _texts(v):
        assert "cost" not in t


def test_pick_by_cost_only_with_equivalent():
    cases = [grid({"a": GOOD, "a2": "a", "r": RANDOM}), grid({"a": GOOD, "b": GOOD}), grid({"g": GOOD, "m": MID}),
             grid({"a": TOP, "a2": "a", "b": TOP}, n=400, seeds=(0,))]
    seen = set()
    for res in cases:
        v = compare_models(res, "xlr@10", **STATS).verdict
        for p in v["pairs"]:
            seen.add(p["status"])
            assert ("by cost or speed" in p["text"]) == (p["status"] == "equivalent"), p["text"]
        assert ("by cost or speed" in v["summary"]) == (v["status"] == "equivalent"), v["summary"]
    assert {"ship", "equivalent", "not enough data"} <= seen


def test_partly_equivalent_partly_undecided_is_said_as_such():
    """a2 is a under another name; b misses 40 of a's 320 hits and hits 30 of its 80 misses: 0.025
    behind with 70 discordant queries, neither separable nor shown within 0.05 at N = 400."""
    a = np.random.default_rng(1).permutation(np.r_[np.ones(320, int), np.full(80, 2)])
    b = a.copy()
    b[np.flatnonzero(a == 1)[:40]] = 2
    b[np.flatnonzero(a == 2)[:30]] = 1
    draws = {"a": lambda rng, n: a, "a2": "a", "b": lambda rng, n: b}
    c = compare_models(grid(draws, n=400, seeds=(0,), pairs=(("en", "de"),), kinds=("xlr",)), "xlr@1", **STATS)
    p = c.verdict["pairs"][0]
    assert p["status"] == "not enough data" and p["equivalent_to_best"] == ["a", "a2"]
    assert "b can be neither separated from it nor shown within ±0.05 of it" in p["text"]
    assert "a2 is shown within ±0.05 of it (partly equivalent, partly undecided)" in p["text"]


def test_a_gap_whose_interval_excludes_zero_but_holm_does_not_call_significant_says_which_decides():
    """Three models each lose 9 queries and win 1 against the best out of 100 (exact p = 0.021 each):
    every interval excludes 0, but Holm over the 3 comparisons gives p = 0.064: not shipped, and
    the page says the corrected test decides."""
    n = 100
    best = np.r_[np.ones(40, int), np.full(60, 50)]  # hits@1 on the first 40 queries
    others = {}
    for j in range(3):
        r = best.copy()
        r[j * 10:j * 10 + 9] = 50  # loses 9 of the best's hits
        r[40 + j] = 1  # wins one query
        others[f"m{j}"] = r
    draws = {"best": lambda rng, n: best, **{m: (lambda r: lambda rng, n: r)(r) for m, r in others.items()}}
    c = compare_models(grid(draws, n=n, seeds=(0,), pairs=(("en", "de"),), kinds=("xlr",)), "xlr@1", **STATS)
    eq = c.equivalence
    assert eq["p"].tolist() == pytest.approx([0.021484375] * 3) and eq["p_adj"].tolist() == pytest.approx([0.064453125] * 3)
    assert (eq["diff_low"] > 0).all() and not eq["better"].any()
    p = c.verdict["pairs"][0]
    assert p["status"] == "not enough data"
    assert "its 95% interval excludes 0, but the test decides, corrected for the 3 comparisons the verdict makes" in p["text"]


def test_a_check_that_would_ship_another_model_is_never_green():
    draws = {"good": {"xlr": GOOD, "bkr": RANDOM}, "bad": {"xlr": RANDOM, "bkr": GOOD}}
    c = compare_models(grid(draws), "bkr@10", **STATS)
    lead, check = lead_and_check(c)
    assert (lead.metric, check.metric) == ("xlr@10", "bkr@10")
    a = agreement(check, lead)
    assert all(x["status"] == "differs" and x["check_ship"] == "bad" and x["reversed"] == [["bad", "good"]]
               and not x["same_pick"] and x["gallery"] == "gallery-" + x["pair"].replace("->", "-") for x in a)
    assert a[0]["text"].startswith("bkr@10 would ship bad (bkr@10 0.")
    assert "where xlr@10 would ship good (xlr@10 0." in a[0]["text"]
    check_text = c.verdict["check_text"]
    assert check_text.startswith("bkr@10, which needs no translations, is the check: on en->de it would ship bad instead")
    assert "same answer" not in check_text
    assert pair_verdict(lead, "en->de")["ship"] == "good"
    json.dumps(c.to_json(), default=float)  # compare.json holds it


def test_one_model_is_the_only_model_and_two_get_a_verdict():
    c = compare_models(grid({"only": GOOD}, kinds=("bkr",)), "bkr@10", n_boot=100, n_perm=200)
    v = c.verdict
    assert v["status"] == "only model" and v["ship"] is None and v["equivalent_to_best"] == ["only"]
    assert all(p["status"] == "only model" and p["power"] is None for p in v["pairs"])
    assert not any("significantly" in t or "best on" in t for t in _texts(v))
    assert v["summary"] == "only is the only model (by bkr@10): nothing to compare it with."
    two = compare_models(grid({"only": GOOD, "other": RANDOM}, kinds=("bkr",)), "bkr@10", n_boot=100, n_perm=200).verdict
    assert two["status"] == "ship" and two["ship"] == "only"


def test_texts_all_equal_are_below_chance_and_no_model_is_named_best():
    """Every model ranks every query last (all vectors tie): 0.000 [0, 0] is below chance, not
    'not distinguishable from chance', and none of the tied models is 'the best'."""
    from backretrieval.report.compare_report import verdicts

    last = lambda rng, n: np.full(n, n)  # noqa: E731
    c = compare_models(grid({"a": last, "b": last}, n=30, seeds=(0,), pairs=(("en", "de"),), kinds=("bkr",)), "bkr@5", **STATS)
    v = c.verdict
    assert v["status"] == "at chance" and v["pairs"][0]["status"] == "at chance"
    text = v["pairs"][0]["text"]
    assert "every model scores 0.000 [0.000, 0.000] (they tie: none is best), below chance (0.167)" in text
    assert "not distinguishable" not in text and "best model" not in text
    assert v["summary"].startswith("At chance: by bkr@5, no model is shown above chance")
    chance = [x for x in verdicts(c) if "at_chance" in x]
    assert chance and all("is below chance (bkr@5 0.000 [0.000, 0.000], chance 0.167)" in x["text"] for x in chance)


def test_models_at_the_ceiling_get_the_k_that_separates_them():
    """N = 50, K = 10: three models find every translation in their top 10; at K = 1 they differ."""
    draws = {"a": lambda rng, n: np.ones(n, int), "b": lambda rng, n: rng.choice([1, 2], size=n, p=[0.6, 0.4]),
             "c": lambda rng, n: rng.choice([1, 3], size=n, p=[0.3, 0.7])}
    c = compare_models(grid(draws, n=50, seeds=(0,), pairs=(("en", "de"),), kinds=("xlr",)), "xlr@10", **STATS)
    p = c.verdict["pairs"][0]
    assert p["status"] == "not enough data"  # every paired difference is 0 at K = 10, but only at the ceiling
    assert "a, b and c are within ±0.05 of the best, a (xlr@10 1.000 [1.000, 1.000]), but only at the metric's ceiling" in p["text"]
    assert "cost" not in p["text"]
    assert "xlr@10 saturates: a, b and c score 1.000 or more at K = 10 (K/N = 0.2)" in p["text"]
    assert "at K = 1 they may separate (xlr@1 ranks the same records: --metric xlr@1)" in p["text"]
    at1 = compare_models(grid(draws, n=50, seeds=(0,), pairs=(("en", "de"),), kinds=("xlr",)), "xlr@1", **STATS).verdict
    assert at1["ship"] == "a"


def test_corr_gets_the_same_answers_from_its_replicates():
    """CORR has no per-query outcomes: its replicates decide. Identical replicates: equivalent;
    a clear lead: ship."""
    rng = np.random.default_rng(3)
    cfg = EvalConfig(dataset="synthetic", pairs=[("en", "de")], models=["a", "a2", "weak"], n=100, seeds=[0])
    base = 0.5 + 0.02 * rng.standard_normal(200)
    boots = {"a": base, "a2": base.copy(), "weak": base - 0.3 + 0.01 * rng.standard_normal(200)}
    corr = {"a": 0.5, "a2": 0.5, "weak": 0.2}
    records = [{"model": m, "src_lang": "en", "tgt_lang": "de", "seed": 0, "corr": corr[m]} for m in boots]
    ranks = {(m, "en", "de", 0): {"corr_boot": b} for m, b in boots.items()}
    c = compare_models(EvalResult(config=cfg, records=records, ranks=ranks), "corr")
    p = c.verdict["pairs"][0]
    assert p["status"] == "equivalent" and p["equivalent_to_best"] == ["a", "a2"] and "weak is significantly worse" in p["text"]
    assert c.chance is None and p["power"] is not None


@pytest.mark.parametrize("case", range(4))
def test_the_calibration_harness_runs_the_verdicts_code(case):
    """decide_outcomes (what bench/bench_verdict_calibration.py calls) gives every pair the answer
    compare's verdict gives."""
    draws = [{"a": TOP, "a2": "a", "b": TOP}, {"g": GOOD, "m": MID, "r": RANDOM}, {"a": GOOD, "b": GOOD},
             {"a": TOP, "b": RANDOM}][case]
    res = grid(draws, n=120, seeds=(0, 1), kinds=("xlr",))
    c = compare_models(res, "xlr@1", **STATS)
    key, fn = outcome_fn("xlr@1")
    for p in c.verdict["pairs"]:
        src, tgt = p["pair"].split("->")
        outcomes = {m: np.stack([fn(res.ranks[(m, src, tgt, s)][key]) for s in (0, 1)]) for m in draws}
        d = decide_outcomes(outcomes, margin=0.05, chance=c.chance, all_pairs=False, **STATS)
        assert (d.status, d.equivalent_to_best) == (p["status"], p["equivalent_to_best"])


def test_a_tiny_catalogue_is_at_chance_on_bkr_and_no_advice_it_cannot_follow():
    """N = 30, as much as the data allow: BkR@10's chance is 1/3 and every model sits at it; XLR
    still separates the models, so it leads and BkR's check says there is not enough data to check."""
    chance = lambda rng, n: rng.integers(1, n + 1, n)  # noqa: E731
    draws = {"good": {"xlr": lambda rng, n: np.ones(n, int), "bkr": chance},
             "poor": {"xlr": lambda rng, n: rng.integers(15, n + 1, n), "bkr": chance}}
    largest = {p: {"xlr": 30, "bkr": 30} for p in ("en->de", "de->ja")}
    c = compare_models(grid(draws, n=30, seeds=(0,), largest_n=largest), "bkr@10", **STATS)
    v = c.verdict
    assert v["metric"] == "xlr@10" and v["status"] == "ship" and v["ship"] == "good"
    assert [a["status"] for a in v["agreement"]] == ["not enough data"] * 2
    for a in v["agreement"]:  # no reassurance from a test that could not have failed
        assert a["text"].startswith("not enough data to check: bkr@10 itself is at chance at N = 30")
    assert "on en->de, de->ja there is not enough data to check" in v["check_text"]
    bkr_alone = compare_models(grid(draws, n=30, seeds=(0,), largest_n=largest, kinds=("bkr",)), "bkr@10", **STATS)
    w = bkr_alone.verdict
    assert w["metric"] == "bkr@10" and w["check"] is None and w["status"] == "at chance"
    for p in w["pairs"]:
        assert p["status"] == "at chance"
        assert "N = 30 is the most these data allow, so only more items lower chance (K/N)" in p["text"]
        assert "a larger N" not in p["text"]


def test_a_sixty_product_catalogue_gets_an_xlr_led_verdict_and_a_check_that_cannot_pass_untested(tmp_path, shared_data):
    """60 real products (emoji) in en, de and es, linked by concept: BkR's disjoint samples allow
    N = 30 at most (2N distinct products), where BkR@10's chance is 1/3. XLR, computed because
    the data link languages, leads; nothing advises a larger N than the data hold."""
    from small_catalogue import write_catalogue

    shop = write_catalogue(tmp_path / "shop")
    cfg = EvalConfig(dataset=str(shop), pairs=[("en", "de"), ("en", "es")], models=["tfidf-char", "random"],
                     image_model="color-hist", n=30, seeds=[0, 1])
    c = compare_models(cfg, "bkr@10", n_boot=200, n_perm=1000)
    v = c.verdict
    assert v["metric"] == "xlr@10" and v["check"] == "bkr@10"
    assert c.beside.chance == pytest.approx(1 / 3) and c.chance == pytest.approx(1 / 3)
    for p in v["pairs"]:
        assert "raise" not in p["text"] and "N up to" not in p["text"]  # the matching sample could grow to 60, but
        assert p["power"]["largest_n"] == 60  # XLR's own limit, which the verdict follows
    for a in v["agreement"]:  # the check is green only where BkR gives the same answer
        assert (a["status"] == "agrees") == (a["same_pick"] and a["check_status"] in ("ship", "equivalent"))
    lead, check = lead_and_check(c)
    bkr_only = pair_verdict(check, "en->de", {"en->de": {"xlr": 60, "bkr": 30}})
    if bkr_only["status"] in ("not enough data", "at chance"):
        assert "N = 30 is the most these data allow" in bkr_only["text"]


def test_the_same_vectors_under_two_names_are_equivalent_on_real_data(tmp_path, shared_data):
    """emoji-cldr, `compare --models minilm-en,minilm-en@trunc=384` (384 of MiniLM's 384
    dimensions: the same vectors under two names): "equivalent" in compare.json, never "not
    enough data", and the page says to pick by cost."""
    from click.testing import CliRunner

    from backretrieval.cli import main

    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["compare", "--dataset", "emoji-cldr", "--pairs", "en-de", "--models",
                                    "minilm-en,minilm-en@trunc=384", "--image-model", "color-hist", "--n", "100",
                                    "--seeds", "1", "--n-boot", "200", "--quiet", "--out", str(out)])
    assert res.exit_code == 0, res.output
    v = json.loads((out / "compare.json").read_text())["verdict"]
    assert v["metric"] == "xlr@10" and v["status"] == "equivalent"
    assert v["equivalent_to_best"] == ["minilm-en", "minilm-en@trunc=384"]
    p = v["pairs"][0]
    assert p["status"] == "equivalent" and p["gap"]["eq_low"] == p["gap"]["eq_high"] == 0.0 and p["power"]["text"]
    assert v["agreement"][0]["status"] == "agrees"  # BkR sees the same vectors too
    assert "pick among them by cost or speed" in (out / "compare.md").read_text()
