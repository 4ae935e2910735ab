"""What a catalogue's size allows BkR, said before the run: the largest N, the low-power note."""
from __future__ import annotations

import pytest

import backretrieval as br
from backretrieval.analysis.evaluate.power import (
    SampleSizeError, check_n, detectable_gap, fit_n, largest_n, power_note, queries_for_gap,
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


@pytest.mark.parametrize("n", [31, 50, 300])
def test_too_large_n_names_thirty(ds, n):
    with pytest.raises(SampleSizeError, match=rf"N={n} is too large for en-de: at most N=30 \(BkR's two samples") as e:
        check_n(ds, [("en", "de"), ("en", "es")], n)
    assert "en-es: at most N=30" in str(e.value) and "Use --n 30 or less" in str(e.value)


@pytest.mark.parametrize("n", [50, 300])
def test_evaluate_refuses_too_large_n_before_encoding(shop, n):
    cfg = br.EvalConfig(dataset=shop, pairs=[("en", "de")], models=["random", "tfidf-char"], image_model="color-hist", n=n)
    with pytest.raises(SampleSizeError, match="at most N=30"):
        br.evaluate(cfg, None, progress=False)


def test_power_note_at_thirty_has_the_numbers(ds):
    note = power_note(ds, [("en", "de")], n=30, k=10, seeds=3)
    # 3 seeds x 30 draw from only 60 en items: 60 distinct queries; 2.8 * sqrt(0.5 / 60) = 0.256
    assert note.startswith("BkR@10 has little power at N=30, K=10, 3 seeds (en-de): chance is 0.333")
    assert "only gaps above 0.26 between two models can be detected (60 distinct queries" in note
    assert "--k 1: chance 0.033" in note
    assert f"more products (a gap of 0.05 needs about {queries_for_gap(0.05):,} distinct queries" in note
    assert "there are 60)" in note
    assert "XLR on the part that links languages (the ground truth; N up to 60)" in note
    assert "\n" not in note


def test_no_note_with_enough_data(shared_data):
    emoji = load_dataset("emoji-cldr", langs=["en", "de"])
    assert power_note(emoji, [("en", "de")], n=1500, k=10, seeds=3) is None  # the demo's grid
    one_seed = power_note(emoji, [("en", "de")], n=100, k=10, seeds=1)  # chance 0.1 is fine; 100 queries are few
    assert "chance is 0.100, and only gaps above 0.20" in one_seed and "smaller K" not in one_seed
    assert "more seeds or a larger N (N x seeds of about 1,568 detects a gap of 0.05)" in one_seed
    assert "more products" not in one_seed
    small_n = power_note(emoji, [("en", "de")], n=50, k=10, seeds=40)  # enough queries, chance too high
    assert "chance is 0.200, and only gaps above 0.04" in small_n and "--k 1: chance 0.020" in small_n


def test_detectable_gap():
    assert detectable_gap(60) == pytest.approx(2.8 * (0.5 / 60) ** 0.5)
    assert detectable_gap(0) == float("inf")
    q = queries_for_gap(0.05)
    assert detectable_gap(q) <= 0.05 < detectable_gap(q - 1)


def test_evaluate_says_the_note_before_the_run(shop):
    said = []
    cfg = br.EvalConfig(dataset=shop, pairs=[("en", "de")], models=["random", "tfidf-char"], image_model="color-hist",
                        n=30, seeds=[0, 1, 2])
    res = br.evaluate(cfg, None, progress=False, log=said.append)
    notes = [m for m in said if m.startswith("BkR@10 has little power")]
    assert len(notes) == 1 and notes[0] in res.notes
    assert len(res.records) == 6


def test_fit_n(ds):
    assert fit_n(ds, [("en", "de")], None, 1000) == (30, pytest.approx(fit_n(ds, [("en", "de")], None, 1000)[1]))
    n, note = fit_n(ds, [("en", "de")], None, 1000)
    assert n == 30 and note.startswith("N=30, the largest the data allows (BkR's two samples")
    assert fit_n(ds, [("en", "de")], None, 20) == (20, None)
    assert fit_n(ds, [("en", "de")], 25, 1000) == (25, None)
    with pytest.raises(SampleSizeError, match="at most N=30"):
        fit_n(ds, [("en", "de")], 1_000_000_000, 1000)
