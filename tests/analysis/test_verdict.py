"""The verdict on cases whose answer is known: a clearly best model, two models that are the same
up to a few queries, and a catalogue too small for BkR (N at the most the data allow, every model
at chance on BkR, XLR separating them)."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from backretrieval.analysis import EvalConfig
from backretrieval.analysis.compare import compare
from backretrieval.analysis.evaluate import EvalResult
from backretrieval.analysis.check import agreement
from backretrieval.analysis.verdict import lead_and_check, pair_verdict


def grid(draws, n=200, seeds=(0, 1), pairs=(("en", "de"), ("de", "ja")), largest_n=None, kinds=("bkr", "xlr")) -> EvalResult:
    """Per-query ranks drawn per model by ``draws[model](rng, n)`` (the same function for BkR and XLR
    unless a model maps to a dict of kind -> function)."""
    rng = np.random.default_rng(5)
    cfg = EvalConfig(dataset="synthetic", pairs=list(pairs), models=list(draws), n=n, seeds=list(seeds))
    records, ranks = [], {}
    for (src, tgt), s in itertools.product(pairs, seeds):
        base = {}
        for m, f in draws.items():
            base[m] = {k: (f[k] if isinstance(f, dict) else f)(rng, n).astype(float) for k in kinds}
        for m in draws:
            records.append({"model": m, "src_lang": src, "tgt_lang": tgt, "seed": s})
            ranks[(m, src, tgt, s)] = base[m]
    return EvalResult(config=cfg, records=records, ranks=ranks, largest_n=largest_n or {})


GOOD = lambda rng, n: rng.integers(1, 12, n)  # noqa: E731  (BkR@10 and XLR@10 about 0.9)
MID = lambda rng, n: rng.integers(1, 40, n)  # noqa: E731  (about 0.25)
RANDOM = lambda rng, n: rng.integers(1, n + 1, n)  # noqa: E731


def test_a_clearly_best_model_is_the_one_to_ship():
    c = compare(grid({"random": RANDOM, "mid": MID, "good": GOOD}), "bkr@10", n_boot=200, n_perm=400)
    v = c.verdict
    assert v["metric"] == "xlr@10" and v["check"] == "bkr@10"  # the ground truth leads
    assert v["status"] == "ship" and v["ship"] == "good" and v["leading"] == ["good"]
    for p in v["pairs"]:
        assert p["status"] == "ship" and p["ship"] == "good" and p["gap"]["vs"] == "mid"
        assert 0 < p["gap"]["low"] <= p["gap"]["diff"] <= p["gap"]["high"]
    assert v["text"].startswith("Ship good: by xlr@10, the ground truth (these data link languages), it is significantly "
                                "best on every pair; its smallest lead: ")
    assert "bkr@10, which needs no translations, is the check: it agrees with xlr@10 on en->de, de->ja." in v["text"]
    assert c.to_json()["verdict"] == v
    assert c.across_pairs.set_index("model").loc["good", "wins"] == 4  # significant wins: 2 opponents x 2 pairs


def test_two_indistinguishable_models_are_picked_by_cost():
    def twin(rng, n):  # 'good' shifted by nothing: the same model under another name, but for a few queries
        return rng.integers(1, 12, n)

    res = grid({"a": GOOD, "b": twin, "random": RANDOM}, largest_n={"en->de": {"xlr": 5000, "bkr": 2000},
                                                                     "de->ja": {"xlr": 5000, "bkr": 2000}})
    c = compare(res, "xlr@10", n_boot=200, n_perm=400)
    v = c.verdict
    assert v["metric"] == "xlr@10" and v["status"] == "tied" and v["ship"] is None
    assert sorted(v["leading"]) == ["a", "b"]
    for p in v["pairs"]:
        assert p["status"] == "tied" and sorted(p["leading"]) == ["a", "b"]
        assert p["gap"]["low"] <= 0 <= p["gap"]["high"]  # the interval behind "indistinguishable"
        assert "pick among them by cost or speed" in p["text"]
        assert "more queries would narrow the intervals (the data allow N up to 2000)" in p["text"]
    assert "are indistinguishable at N = 200 on all 2 pairs" in v["text"]


def test_a_tiny_catalogue_says_not_enough_data_and_no_advice_it_cannot_follow():
    """N = 30, as much as the data allow: BkR@10's chance is 1/3 and every model sits at it; XLR
    still separates the models, so it leads and BkR's check says it cannot tell."""
    chance = lambda rng, n: rng.integers(1, n + 1, n)  # noqa: E731
    draws = {"good": {"xlr": lambda rng, n: np.ones(n, int), "bkr": chance},
             "poor": {"xlr": lambda rng, n: rng.integers(15, n + 1, n), "bkr": chance}}
    largest = {p: {"xlr": 30, "bkr": 30} for p in ("en->de", "de->ja")}
    c = compare(grid(draws, n=30, seeds=(0,), largest_n=largest), "bkr@10", n_boot=200, n_perm=400)
    v = c.verdict
    assert v["metric"] == "xlr@10" and v["status"] == "ship" and v["ship"] == "good"
    assert [a["status"] for a in v["agreement"]] == ["not enough data"] * 2
    for a in v["agreement"]:  # no reassurance from a test that could not have failed
        assert a["text"].startswith("not enough data to tell") or "not enough data to tell" in a["text"]
        assert "go the same way" not in a["text"] and "no significant gap" not in a["text"]
    bkr_alone = compare(grid(draws, n=30, seeds=(0,), largest_n=largest, kinds=("bkr",)), "bkr@10", n_boot=200, n_perm=400)
    w = bkr_alone.verdict
    assert w["metric"] == "bkr@10" and w["check"] is None and w["status"] == "not enough data"
    for p in w["pairs"]:
        assert p["status"] == "not enough data"
        assert "N = 30 is the most these data allow" in p["text"] and "only more items can" in p["text"]
        assert "raise" not in p["text"] and "more queries would" not in p["text"]
    assert w["text"].startswith("Not enough data to tell: by bkr@10, no pair separates the models at N = 30.")


def test_check_that_reverses_the_truth_is_named():
    draws = {"good": {"xlr": GOOD, "bkr": RANDOM}, "bad": {"xlr": RANDOM, "bkr": GOOD}}
    c = compare(grid(draws), "bkr@10", n_boot=200, n_perm=400)
    lead, check = lead_and_check(c)
    assert (lead.metric, check.metric) == ("xlr@10", "bkr@10")
    a = agreement(check, lead)
    assert all(x["status"] == "reverses" and x["reversed"] == [["bad", "good"]] and not x["same_pick"] for x in a)
    assert "bkr@10 would ship bad instead" in a[0]["text"]
    assert "reverses a significant gap of xlr@10 on en->de, de->ja" in c.verdict["text"]
    assert pair_verdict(lead, "en->de")["ship"] == "good"
    json.dumps(c.to_json(), default=float)  # compare.json holds it


@pytest.mark.parametrize("models", [["only"], ["only", "other"]])
def test_one_or_two_models(models):
    c = compare(grid({m: GOOD if m == "only" else RANDOM for m in models}, kinds=("bkr",)), "bkr@10", n_boot=100, n_perm=200)
    assert c.verdict["ship"] == "only" and c.verdict["status"] == "ship"


def test_a_sixty_product_catalogue_gets_an_xlr_led_verdict_without_advice_it_cannot_follow(tmp_path, shared_data):
    """60 real products (emoji) in en, de and es, linked by concept: BkR's disjoint samples allow
    N = 30 at most (2N distinct products), where BkR@10's chance is 1/3. XLR, computed because
    the data link languages, leads; nothing advises a larger N."""
    from backretrieval.data import load_dataset

    ds = load_dataset("emoji-cldr", langs=["en", "de", "es"])
    ids = [i for i in ds["en"].ids if i in set(ds["de"].ids) & set(ds["es"].ids)][:60]
    rows = []
    for lang in ("en", "de", "es"):
        c = ds[lang]
        where = {x: j for j, x in enumerate(c.ids)}
        rows += [{"id": i, "lang": lang, "text": c.texts[where[i]], "concept": i, "image": c.image_paths[where[i]]} for i in ids]
    path = tmp_path / "shop.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = EvalConfig(dataset=str(path), pairs=[("en", "de"), ("en", "es")], models=["tfidf-char", "random"],
                     image_model="color-hist", n=30, seeds=[0, 1])
    c = compare(cfg, "bkr@10", n_boot=200, n_perm=1000)
    v = c.verdict
    assert v["metric"] == "xlr@10" and v["check"] == "bkr@10"
    assert c.beside.chance == pytest.approx(1 / 3) and c.chance == pytest.approx(1 / 3)
    for p in v["pairs"]:
        assert "raise" not in p["text"] and "up to" not in p["text"]  # the matching sample could grow to 60, but
    for a in v["agreement"]:  # the check never reassures without a test that could have failed
        assert (a["status"] == "not enough data") == (a["tested"] == [])
    bkr_only = pair_verdict(c, "en->de", {"en->de": {"xlr": 60, "bkr": 30}})
    if bkr_only["status"] != "ship":
        assert "N = 30 is the most these data allow on en->de" in bkr_only["text"]
