"""What a catalogue's size allows BkR, said before the run: the largest N, the low-power note."""
from __future__ import annotations

from pathlib import Path

import pytest

import backretrieval as br
from backretrieval.analysis.evaluate.power import (
    SampleSizeError, check_n, detectable_gap, fit_n, largest_n, power_facts, power_note, queries_for_gap, sample_limits,
)
from backretrieval.data import load_dataset
from small_catalogue import write_catalogue


@pytest.fixture(scope="module")
def shop(tmp_path_factory, shared_data):
    """60 real products in en, de and es (ids differ per language, concepts link them)."""
    return str(write_catalogue(tmp_path_factory.mktemp("shop")))


@pytest.fixture(scope="module")
def ds(shop):
    return load_dataset(shop)


def test_largest_n_of_sixty_products_is_thirty(ds):
    n, why = largest_n(ds, "en", "de")
    assert n == 30
    assert "2N distinct concepts" in why and "60 en and 60 de items cover 60" in why
    check_n(ds, [("en", "de"), ("en", "es")], 30, seeds=[0, 1, 2])


@pytest.mark.parametrize("n", [31, 50])
def test_too_large_n_names_the_limit_of_the_family_that_needs_it(ds, n):
    """BkR needs 2N distinct products, XLR N linked ones: at N = 31..60 XLR fits, BkR does not."""
    with pytest.raises(SampleSizeError, match=rf"N={n} is too large for en-de: at most N=30 for BkR, which "
                                              rf"compare --metric bkr@10 needs \(BkR's two samples") as e:
        check_n(ds, [("en", "de"), ("en", "es")], n, needs=("bkr",), purpose="compare --metric bkr@10")
    assert "en-es: at most N=30 for BkR" in str(e.value) and "Use --n 30 or less" in str(e.value)
    check_n(ds, [("en", "de"), ("en", "es")], n, needs=("xlr",))  # XLR's sample fits: 60 linked products
    check_n(ds, [("en", "de"), ("en", "es")], n)  # nothing needed: XLR alone is computed


def test_an_n_no_family_fits_names_both_limits(ds):
    with pytest.raises(SampleSizeError) as e:
        check_n(ds, [("en", "de")], 300)
    msg = str(e.value)
    assert "N=300 is too large for en-de: at most N=30 for BkR (BkR's two samples" in msg
    assert "and N=60 for XLR (XLR's sample needs N concepts present in both languages; there are 60)" in msg
    assert "Use --n 60 or less" in msg  # either family is enough for an evaluation
    with pytest.raises(SampleSizeError, match="at most N=60 for XLR, which compare --metric xlr@10 needs"):
        check_n(ds, [("en", "de")], 61, needs=("xlr",), purpose="compare --metric xlr@10")


def test_evaluate_leaves_out_the_family_that_does_not_fit_and_refuses_what_fits_nothing(shop):
    cfg = br.EvalConfig(dataset=shop, pairs=[("en", "de")], models=["random", "tfidf-char"], image_model="color-hist", n=50)
    said = []
    res = br.evaluate(cfg, None, progress=False, log=said.append)
    note = [m for m in said if m.startswith("BkR and CORR not computed on en-de: N=50 is more than its sample allows "
                                            "(at most N=30")]
    assert note and note[0] in res.notes and "XLR is computed at N=50" in note[0]
    assert res.text_only and all("xlr@10" in r and "bkr@10" not in r for r in res.records)
    with pytest.raises(SampleSizeError, match="at most N=30 for BkR"):
        br.evaluate(br.EvalConfig(dataset=shop, pairs=[("en", "de")], models=["random"], image_model="color-hist", n=300),
                    None, progress=False)


def test_xlr_at_sixty_runs_on_sixty_linked_products(shop):
    """``compare --metric xlr@10 --n 60`` on 60 linked products: XLR's own N, not BkR's 30."""
    cfg = br.EvalConfig(dataset=shop, pairs=[("en", "de")], models=["tfidf-char", "random"], image_model="color-hist",
                        n=60)
    c = br.compare(cfg, "xlr@10", n_boot=100, n_perm=200)
    assert c.n == 60 and c.beside is None and c.verdict["metric"] == "xlr@10"
    with pytest.raises(SampleSizeError, match="at most N=30 for BkR, which compare by bkr@10 needs"):
        br.compare(cfg, "bkr@10", n_boot=100, n_perm=200)


@pytest.fixture(scope="module")
def few_linked(tmp_path_factory, shared_data):
    """100 en and 100 de products, of which 5 share a concept (the rest are each language's own)."""
    import csv
    import shutil

    ds = load_dataset("emoji-cldr", langs=["en", "de"])
    out = tmp_path_factory.mktemp("few-linked")
    (out / "images").mkdir()
    path = out / "catalogue.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "lang", "text", "image", "concept"])
        for lang, rows in (("en", range(0, 100)), ("de", [*range(0, 5), *range(100, 195)])):
            c = ds[lang]
            for r in rows:
                shutil.copyfile(c.image_paths[r], out / "images" / f"{lang}-{r}.png")
                w.writerow([f"{lang}-{r}", lang, c.texts[r], f"images/{lang}-{r}.png", c.ids[r]])
    return str(path)


def test_a_few_linked_concepts_do_not_cap_bkr(few_linked):
    ds = load_dataset(few_linked)
    assert sample_limits(ds, "en", "de") == {"xlr": 5, "bkr": 97}
    cfg = br.EvalConfig(dataset=few_linked, pairs=[("en", "de")], models=["tfidf-char", "random"],
                        image_model="color-hist", n=50)
    said = []
    c = br.compare(cfg, "bkr@10", n_boot=100, n_perm=200, log=said.append)
    assert c.n == 50 and c.beside is None
    assert any(m.startswith("XLR not computed on en-de: N=50 is more than its sample allows (at most N=5: XLR's sample "
                            "needs N concepts present in both languages; there are 5); BkR is computed at N=50") for m in said)
    with pytest.raises(SampleSizeError, match=r"N=50 is too large for en-de: at most N=5 for XLR, which compare "
                                              r"by xlr@10 needs \(XLR's sample needs N concepts"):
        br.compare(cfg, "xlr@10", n_boot=100, n_perm=200)


def test_power_note_at_thirty_has_the_numbers(ds):
    note = power_note(ds, [("en", "de")], n=30, k=10, seeds=3, models=2)
    # 3 seeds x 30 draw from only 60 en items: 60 distinct queries
    gap = detectable_gap(60, discrete=True)  # hits: the exact test's half-query continuity
    assert note.startswith("BkR@10 has little power at N=30, K=10, 3 seeds (en-de): chance is 0.333")
    assert (f"only gaps above {gap:.2f} between the best and each other model are detected 80% of the time "
            "(60 distinct queries, two models; gaps that matter are about 0.05)") in note
    assert "--k 1: chance 0.033" in note
    assert f"more products (a gap of 0.05 needs about {queries_for_gap(0.05, discrete=True):,} distinct queries" in note
    assert "from at least as many en items; there are 60)" in note
    assert "XLR on the part that links languages (the ground truth; N up to 60)" in note
    assert "\n" not in note
    five = power_note(ds, [("en", "de")], n=30, k=10, seeds=3, models=5)  # Holm over 4 comparisons with the best
    assert f"only gaps above {detectable_gap(60, comparisons=4, discrete=True):.2f}" in five
    assert "4 comparisons with the best" in five and detectable_gap(60, comparisons=4, discrete=True) > gap


def test_power_note_never_promises_a_gap_above_one(ds):
    """Two queries cannot detect any gap: the note says so instead of 'gaps above 1.98'."""
    note = power_note(ds, [("en", "de")], n=2, k=1, seeds=1)
    assert "no gap between two models, however large, is detected 80% of the time (2 distinct queries" in note
    assert "above 1" not in note
    facts = power_facts(ds, [("en", "de")], n=2, k=1, seeds=1)
    assert facts["en->de"]["detectable_gap"] is None


def test_power_note_names_the_language_that_limits_n(few_linked, tmp_path):
    """de with 5 items limits BkR's N; the note counts de's items, not en's 100."""
    import pandas as pd

    df = pd.read_csv(few_linked)
    small = pd.concat([df[df["lang"] == "en"], df[df["lang"] == "de"].head(5)])
    small["image"] = [str(Path(few_linked).parent / i) for i in small["image"]]
    small["concept"] = small["id"]  # nothing linked: every item its own concept
    path = tmp_path / "small.csv"
    small.to_csv(path, index=False)
    ds = load_dataset(str(path))
    note = power_note(ds, [("en", "de")], n=5, k=1, seeds=3)
    assert "more de items (BkR's N is at most 5 here: there are 5 de items and 100 en items)" in note
    assert "more seeds or a larger N" not in note


def test_no_note_with_enough_data(shared_data):
    emoji = load_dataset("emoji-cldr", langs=["en", "de"])
    assert power_note(emoji, [("en", "de")], n=1500, k=10, seeds=3) is None  # the demo's grid
    one_seed = power_note(emoji, [("en", "de")], n=100, k=10, seeds=1)  # chance 0.1 is fine; 100 queries are few
    assert f"chance is 0.100, and only gaps above {detectable_gap(100, discrete=True):.2f}" in one_seed
    assert "smaller K" not in one_seed
    assert f"more seeds or a larger N (N x seeds of about {queries_for_gap(0.05, discrete=True):,} detects a gap of 0.05)" in one_seed
    assert "more products" not in one_seed
    small_n = power_note(emoji, [("en", "de")], n=50, k=10, seeds=40)  # enough queries, chance too high
    assert f"chance is 0.200, and only gaps above {detectable_gap(2000, discrete=True):.2f}" in small_n
    assert "--k 1: chance 0.020" in small_n


def test_detectable_gap_and_queries_for_gap_invert_each_other():
    # one comparison, the largest spread: about 2.8 * sqrt(0.5 / q), a little more for the sign-flip test's spread
    assert detectable_gap(60) == pytest.approx(2.8 * (0.5 / 60) ** 0.5, rel=0.06)
    assert detectable_gap(0) == float("inf") and detectable_gap(1) == float("inf")
    for comparisons, discrete in ((1, False), (3, False), (3, True)):
        q = queries_for_gap(0.05, comparisons=comparisons, discrete=discrete)
        assert (detectable_gap(q, comparisons=comparisons, discrete=discrete) <= 0.05 + 1e-6
                < detectable_gap(q - 1, comparisons=comparisons, discrete=discrete))
    assert detectable_gap(400, discrete=True) > detectable_gap(400)  # the exact test of hits is discrete


def test_ship_power_matches_a_simulation_of_holm_over_correlated_tests():
    """The prediction (quadrature over the shared component, a recursion over Holm's rungs) against
    Monte Carlo of the same normal model: 4 comparisons with the best, correlation 0.5."""
    import math

    import numpy as np
    from scipy import stats

    from backretrieval.analysis.evaluate.sensitivity import ship_power

    rng = np.random.default_rng(0)
    gap, q, sd, m = 0.05, 800, 0.5, 4
    widen = math.sqrt(1 + (gap / sd) ** 2)
    z = gap * math.sqrt(q) / sd + math.sqrt(0.5) * rng.standard_normal((100_000, 1)) + math.sqrt(0.5) * rng.standard_normal((100_000, m))
    p = np.sort(2 * stats.norm.sf(z / widen), axis=1)
    simulated = np.all(p < 0.05 / np.arange(m, 0, -1), axis=1).mean()
    assert ship_power(gap, q, sd, m) == pytest.approx(simulated, abs=0.006)
    assert ship_power(gap, q, sd, 1) == pytest.approx(stats.norm.sf(1.96 * widen - gap * math.sqrt(q) / sd), abs=1e-4)


def test_evaluate_says_the_note_before_the_run(shop):
    said = []
    cfg = br.EvalConfig(dataset=shop, pairs=[("en", "de")], models=["random", "tfidf-char"], image_model="color-hist",
                        n=30, seeds=[0, 1, 2])
    res = br.evaluate(cfg, None, progress=False, log=said.append)
    notes = [m for m in said if m.startswith("BkR@10 has little power")]
    assert len(notes) == 1 and notes[0] in res.notes
    assert len(res.records) == 6
    assert res.power["en->de"]["queries"] == 60 and res.power["en->de"]["margin"] == 0.05
    assert res.power["en->de"]["detectable_gap"] == pytest.approx(detectable_gap(60, discrete=True))


def test_fit_n(ds):
    assert fit_n(ds, [("en", "de")], None, 1000) == (30, pytest.approx(fit_n(ds, [("en", "de")], None, 1000)[1]))
    n, note = fit_n(ds, [("en", "de")], None, 1000)
    assert n == 30 and note.startswith("N=30, the largest the data allows (BkR's two samples")
    assert fit_n(ds, [("en", "de")], None, 20) == (20, None)
    assert fit_n(ds, [("en", "de")], 25, 1000) == (25, None)
    with pytest.raises(SampleSizeError, match="at most N=30"):
        fit_n(ds, [("en", "de")], 1_000_000_000, 1000)


def test_texts_all_equal_are_said_before_the_run_and_the_verdict_names_no_best(shop, tmp_path):
    """Every text the same: a warning before anything is computed, and a verdict of 'at chance'
    whose models tie (all vectors equal: every query ranks last, 0.000 [0, 0], below chance)."""
    import pandas as pd

    df = pd.read_csv(shop)
    df["text"] = "gift"
    df["image"] = [str(Path(shop).parent / i) for i in df["image"]]
    path = tmp_path / "same.csv"
    df.to_csv(path, index=False)
    said = []
    cfg = br.EvalConfig(dataset=str(path), pairs=[("en", "de")], models=["tfidf-char", "minilm-en"],
                        image_model="color-hist", n=30, k=5)
    c = br.compare(cfg, "bkr@5", n_boot=100, n_perm=200, log=said.append)
    notes = [m for m in said if m.startswith("every sampled en text is the same text ('gift', ")]
    assert len(notes) == 1 and "no text model can tell these items apart" in notes[0]
    assert any(m.startswith("every sampled de text is the same text ('gift', ") for m in said)
    p = c.verdict["pairs"][0]
    assert p["status"] == "at chance" and "not distinguishable" not in p["text"]
    assert "(they tie: none is best), below chance (0.167)" in p["text"]
