"""`compare --report`: the gap statistics against naive references, the report rendered from the
one finished comparison (nothing recomputed while rendering), the report built from a real
small grid (emoji-cldr, tfidf-char / use-m / random, colour histograms as g) checked against
compare.json, and the page in real headless Chromium (Playwright, as tests/study/test_study_browser.py):
it loads from file://, every figure decodes, no console error, nothing is fetched but data: URIs."""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from backretrieval.analysis import EvalConfig
from backretrieval.analysis.compare import compare_models, counterpart, pairwise, wins
from backretrieval.analysis.evaluate import EvalResult
from backretrieval.analysis.stats import bootstrap_ci, hits, holm, mcnemar_exact, paired_bootstrap_diff
from backretrieval.cli import main
from backretrieval.report.compare_report import chance_level, verdicts, write_compare_report

# ------------------------------------------------------------------------------------ statistics


def naive_paired_bootstrap(a, b, n_boot, level, seed):
    """Replicate by replicate: per seed one set of query indices, used for both models."""
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    s, n = a.shape
    rng = np.random.default_rng(seed)
    idx = [rng.integers(0, n, size=(n_boot, n)) for _ in range(s)]  # the draw order of bootstrap_ci
    reps = []
    for r in range(n_boot):
        total = 0.0
        for row in range(s):
            i = idx[row][r]
            total += sum(a[row, j] for j in i) / n - sum(b[row, j] for j in i) / n
        reps.append(total / s)
    q = (1 - level) / 2
    return float(np.mean(a) - np.mean(b)), *np.quantile(reps, [q, 1 - q])


@pytest.mark.parametrize("shape", [(60,), (3, 40)])
def test_paired_bootstrap_diff_matches_naive_reference(shape):
    rng = np.random.default_rng(5)
    a = (rng.random(shape) < 0.6).astype(float)
    b = (rng.random(shape) < 0.4).astype(float)
    got = paired_bootstrap_diff(a, b, n_boot=150, level=0.9, seed=7, chunk=150)
    est, lo, hi = naive_paired_bootstrap(a, b, 150, 0.9, 7)
    assert got.estimate == pytest.approx(est)
    assert got.low == pytest.approx(lo) and got.high == pytest.approx(hi)
    with pytest.raises(ValueError, match="align"):
        paired_bootstrap_diff(a, b[..., :-1])


def test_paired_bootstrap_diff_is_paired_and_covers():
    """Two models that agree on most queries: the paired interval of their gap is much narrower
    than either model's own interval; with a known true gap the interval covers it at about the
    nominal rate."""
    rng = np.random.default_rng(3)
    b = (rng.random(400) < 0.5).astype(float)
    a = b.copy()
    a[rng.choice(400, 30, replace=False)] = 1.0  # a = b, plus up to 30 more hits
    d = paired_bootstrap_diff(a, b, n_boot=300, level=0.9)
    own = bootstrap_ci(a, n_boot=300, level=0.9)
    assert d.estimate == pytest.approx(a.mean() - b.mean())
    assert d.high - d.low < 0.5 * (own.high - own.low)
    assert d.low > 0  # the gap is real, though the two intervals overlap
    assert own.low < bootstrap_ci(b, n_boot=300, level=0.9).high
    cov = 0
    for t in range(200):  # a ~ Bernoulli(0.55), b ~ Bernoulli(0.45), independent: true gap 0.1
        a = (rng.random(300) < 0.55).astype(float)
        b = (rng.random(300) < 0.45).astype(float)
        d = paired_bootstrap_diff(a, b, n_boot=300, level=0.9, seed=t)
        cov += d.low <= 0.1 <= d.high
    assert 0.82 <= cov / 200 <= 0.97


def synthetic_result(n=200, seeds=(0, 1)) -> EvalResult:
    """A grid as evaluate() returns it, with per-query ranks drawn so that: 'good' clearly beats
    'mid', 'mid' and 'mid-twin' are the same model up to a few queries, 'random' ranks at random."""
    rng = np.random.default_rng(11)
    pairs = [("en", "de"), ("de", "ja")]
    models = ["random", "mid", "good", "mid-twin"]
    cfg = EvalConfig(dataset="synthetic", pairs=pairs, models=models, n=n, seeds=list(seeds))
    records, ranks = [], {}
    for (src, tgt), s in itertools.product(pairs, seeds):
        mid = rng.integers(1, 40, n)
        twin = mid.copy()
        twin[:3] = rng.integers(1, 40, 3)
        draw = {"random": rng.integers(1, n + 1, n), "mid": mid, "good": rng.integers(1, 12, n), "mid-twin": twin}
        for m in models:
            records.append({"model": m, "src_lang": src, "tgt_lang": tgt, "seed": s})
            ranks[(m, src, tgt, s)] = {"bkr": draw[m].astype(float), "xlr": draw[m].astype(float)}
    return EvalResult(config=cfg, records=records, ranks=ranks)


def test_pairwise_against_naive_reference_and_wins():
    res = synthetic_result()
    pw = pairwise(res, "bkr@10", n_boot=200, n_perm=400)
    assert len(pw) == 2 * 6  # every two of 4 models on each of 2 pairs
    for pair, g in pw.groupby("pair", sort=False):
        src, tgt = pair.split("->")
        out = {m: np.stack([hits(res.ranks[(m, src, tgt, s)]["bkr"], 10) for s in (0, 1)]) for m in res.config.models}
        ps = []
        for _, r in g.iterrows():
            a, b = out[r["model_a"]], out[r["model_b"]]
            assert a.mean() >= b.mean()
            assert r["diff"] == pytest.approx(a.mean() - b.mean())
            ci = paired_bootstrap_diff(a, b, n_boot=200)
            assert (r["diff_low"], r["diff_high"]) == pytest.approx((ci.low, ci.high))
            assert r["p"] == pytest.approx(mcnemar_exact(a, b).p_value)  # 0/1 outcomes: the sign-flip test is exact
            ps.append(r["p"])
        assert g["p_adj"].tolist() == pytest.approx(holm(ps))
    w = wins(pw).set_index("model")
    for m in res.config.models:  # naive count over the rows
        assert w.loc[m, "wins"] == sum(r.significant and r.model_a == m for r in pw.itertuples())
        assert w.loc[m, "losses"] == sum(r.significant and r.model_b == m for r in pw.itertuples())
        assert w.loc[m, "wins"] + w.loc[m, "losses"] + w.loc[m, "ties"] == 2 * 3
    assert w.loc["good", "wins"] == 6 and w.loc["random", "losses"] == 6


def test_compare_holds_every_statistic_the_report_shows():
    """One computation: compare_models()'s pairwise table is pairwise()'s, its adjacent gaps' raw
    p-values are those of the same tests, and its wins count the significant gaps."""
    res = synthetic_result()
    c = compare_models(res, "bkr@10", n_boot=200, n_perm=400)
    pd.testing.assert_frame_equal(c.pairwise, pairwise(res, "bkr@10", n_boot=200, n_perm=400))
    for _, r in c.per_pair.dropna(subset=["p_vs_next"]).iterrows():
        nxt = c.per_pair[(c.per_pair["pair"] == r["pair"]) & (c.per_pair["rank"] == r["rank"] + 1)].iloc[0]
        gap = c.pairwise[(c.pairwise["pair"] == r["pair"]) & (c.pairwise["model_a"] == r["model"])
                         & (c.pairwise["model_b"] == nxt["model"])].iloc[0]
        assert r["p_vs_next"] == gap["p"]
    w = wins(c.pairwise, c.across_pairs["model"].tolist())
    assert c.across_pairs[["model", "wins", "losses", "ties"]].reset_index(drop=True).equals(w)
    assert c.across_pairs.set_index("model").loc["good", "firsts"] == 2
    assert c.beside is not None and c.beside.metric == "xlr@10"  # the records hold XLR's ranks too
    assert (c.n, c.seeds, c.chance) == (200, 2, 0.05)


def test_write_compare_report_renders_without_resampling(tmp_path, monkeypatch):
    """The report takes the finished comparison: with every resampling function disabled it
    still writes the page, and its numbers are compare.json's."""
    import importlib

    from backretrieval.analysis import stats

    compare_module = importlib.import_module("backretrieval.analysis.compare")
    res = synthetic_result()
    c = compare_models(res, "bkr@10", n_boot=100, n_perm=200)

    def refuse(*a, **k):
        raise AssertionError("the report recomputed a statistic")

    decision = importlib.import_module("backretrieval.analysis.decision")
    for mod, names in ((stats, ("bootstrap_ci", "bootstrap_means", "paired_bootstrap_diff", "paired_permutation_test",
                                "sign_flip_p", "tost", "holm")),
                       (compare_module, ("holm", "compare_models", "pairwise", "decide_outcomes", "decide_replicates")),
                       (decision, ("bootstrap_means", "sign_flip_p", "tost", "holm"))):
        for name in names:
            monkeypatch.setattr(mod, name, refuse)
    write_compare_report(c, res, tmp_path, examples=0)
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["verdict"] == json.loads(json.dumps(c.verdict, default=float))
    xlr, bkr = doc["metrics"]  # the ground truth leads, BkR beside it
    assert (xlr["metric"], bkr["metric"]) == ("xlr@10", "bkr@10")
    pd.testing.assert_frame_equal(pd.DataFrame(bkr["pairwise"]), c.pairwise, check_dtype=False)


def test_verdicts_say_each_model_against_the_best_as_the_verdict_does():
    """The page's sentences read the verdict's own tests (the best against each other model,
    Holm over those k - 1): the same words, marks and decision."""
    res = synthetic_result()
    c = compare_models(res, "bkr@10", n_boot=200, n_perm=400)
    v = verdicts(c)
    gaps = [x for x in v if "better" in x]
    assert len(gaps) == 2 * 3
    for x in gaps:
        t = c.equivalence[(c.equivalence["pair"] == x["pair"]) & (c.equivalence["model_b"] == x["worse"])].iloc[0]
        assert x["better"] == t["model_a"] == "good" and x["significant"] == t["better"] and x["vs_best"] == t["vs_best"]
        assert x["p_adj"] == pytest.approx(t["p_adj"])
        mark = c.per_pair[(c.per_pair["pair"] == x["pair"]) & (c.per_pair["model"] == x["worse"])].iloc[0]["vs_best"]
        assert mark == t["vs_best"]
        if x["significant"] and not x["equivalent"]:
            assert x["text"].startswith(f"good beats {x['worse']} by {x['diff']:.3f} [{x['low']:.3f}, {x['high']:.3f}], "
                                        "significant (Holm over 3 comparisons with the best, p = ")
    assert all(x["significant"] for x in gaps)
    assert any(x.get("at_chance") == "random" for x in v)
    assert c.per_pair.groupby("pair")["vs_best"].apply(lambda s: (s == "best").sum()).eq(1).all()


def test_chance_level_and_counterpart():
    assert chance_level("bkr@10", 200) == 0.05
    assert chance_level("xlr_mrr", 3) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert chance_level("corr", 10) == 0.0
    assert counterpart("bkr@5") == "xlr@5" and counterpart("xlr_mrr") == "bkr_mrr"
    assert counterpart("xlr_t2s@10") is None and counterpart("corr") is None


def test_python_form_writes_the_report_for_synthetic_grid(tmp_path):
    res = synthetic_result()
    path = write_compare_report(compare_models(res, "bkr@10", n_boot=100, n_perm=200), res, tmp_path)
    text = path.read_text(encoding="utf-8")
    assert "write_compare_report(&lt;comparison by bkr@10&gt;, result, out_dir)" in text  # provenance
    doc = json.loads((tmp_path / "report.json").read_text())
    assert [m["metric"] for m in doc["metrics"]] == ["xlr@10", "bkr@10"]
    for m in doc["metrics"]:
        for files in m["figures"].values():
            assert [Path(f).suffix for f in files] == [".png", ".svg"]
            assert all((tmp_path / f).stat().st_size > 1000 for f in files)


# ------------------------------------------------------------------------------ real small grid

MODELS = ["tfidf-char", "use-m", "random"]


@pytest.fixture(scope="module")
def real_report(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("compare-report")
    args = ["compare", "--dataset", "emoji-cldr", "--pairs", "en-de,de-ja", "--models", ",".join(MODELS),
            "--image-model", "color-hist", "--n", "120", "--seeds", "0,1", "--n-boot", "200",
            "--out", str(out), "--quiet", "--report"]
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert f"wrote {out / 'report.html'}" in res.output
    return out, args


def test_report_content_matches_compare_json(real_report):
    out, args = real_report
    html = (out / "report.html").read_text(encoding="utf-8")
    cmp = json.loads((out / "compare.json").read_text())
    rep = json.loads((out / "report.json").read_text())
    assert [m["metric"] for m in rep["metrics"]] == ["xlr@10", "bkr@10"]  # emoji-cldr has ground truth: it leads
    assert sorted(a["pair"] for a in rep["agreement"]["per_pair"]) == ["de->ja", "en->de"]
    assert rep["verdict"] == cmp["verdict"] and rep["verdict"]["metric"] == "xlr@10"
    md = (out / "compare.md").read_text(encoding="utf-8")
    assert rep["verdict"]["summary"] in md and all(p["text"] in md for p in rep["verdict"]["pairs"])
    assert all(p["power"]["text"] in md and p["power"]["text"].replace("&", "&amp;") in html for p in rep["verdict"]["pairs"])
    assert "The four answers: *ship*" in md and "within ±0.05 of it, the margin" in md
    assert html.index('class="verdict') < html.index("<table")  # the verdict comes before the tables
    assert "bkr@10 against the ground truth xlr@10" in html
    assert "backretrieval compare --dataset emoji-cldr --pairs en-de,de-ja" in html
    assert rep["command"] == "backretrieval " + " ".join(args)
    # every number of compare.json's ranking is in the page, and the verdicts follow its significance
    per_pair = pd.DataFrame(cmp["per_pair"])
    for _, r in per_pair.iterrows():
        assert f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]" in html
        assert f"{r['estimate']:.4f}" in html
    bkr = rep["metrics"][1]
    gaps = [v for v in bkr["verdicts"] if "better" in v]
    assert len(gaps) == 2 * (len(MODELS) - 1)
    for v in gaps:
        best = per_pair[(per_pair["pair"] == v["pair"]) & (per_pair["rank"] == 1)].iloc[0]
        row = per_pair[(per_pair["pair"] == v["pair"]) & (per_pair["model"] == v["worse"])].iloc[0]
        assert v["better"] == best["model"] and v["vs_best"] == row["vs_best"]
        assert v["diff"] == pytest.approx(best["estimate"] - row["estimate"])
        assert v["text"].replace("&", "&amp;") in html
    # use-m is the best model on both pairs and significantly so, in words
    for pair in ("en->de", "de->ja"):
        assert any(v["pair"] == pair and v["text"].startswith("use-m beats ") and "significant (Holm over 2" in v["text"]
                   for v in gaps)
    assert "chance 0.0833" in html  # K/N = 10/120
    # versions: from the run's environment
    run = json.loads((out / "run.json").read_text())
    assert f"<td class=\"l\">numpy</td><td>{run['environment']['packages']['numpy']}</td>" in html
    # self-contained: every image inline, nothing external referenced
    srcs = re.findall(r'<img[^>]* src="([^"]+)"', html)
    # 4 figures per metric (xlr@10 leads, bkr@10 beside it) and the quality-versus-cost chart
    assert len(srcs) == 9 and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert not re.search(r"(src|href)=\"(https?:)?//", html) and "<script" not in html and "<link" not in html
    for f in (out / "figures").glob("*.svg"):
        assert f.with_suffix(".png").is_file()
        assert "<svg" in f.read_text(encoding="utf-8")[:2000]


CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def test_report_in_headless_chromium(real_report):
    """Fails (never skips) when Chromium or Playwright is missing, like tests/study/test_study_browser.py."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (scripts/setup.sh does: apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright (Python) is not installed: pip install -e '.[study,test]' (scripts/setup.sh does)")
    out, _ = real_report
    url = (out / "report.html").resolve().as_uri()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            console, errors, requests = [], [], []
            page.on("console", lambda m: console.append((m.type, m.text)))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(url, wait_until="load")
            widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)")
            title = page.title()
            verdict_items = page.locator("ul.verdicts li").count()
        finally:
            browser.close()
    assert len(widths) == 9 and all(w > 0 for w in widths), widths
    assert not errors and not [c for c in console if c[0] in ("error", "warning")], (errors, console)
    assert [u for u in requests if u != url and not u.startswith("data:")] == []
    assert title.startswith("Backretrieval comparison: xlr@10 and bkr@10 on emoji-cldr")
    assert verdict_items >= 2 * 2 * (len(MODELS) - 1)


WIDE_MODELS = ["paraphrase-multilingual-mpnet-base-v2", "multilingual-e5-small?prompt_name=none", "use-m",
               "use-m@trunc=128", "openai:text-embedding-3-small", "tfidf-char", "st:ours@trunc=64", "random?dim=16&seed=3"]


def test_a_report_of_8_models_x_8_pairs_fits_a_1200_px_window(tmp_path):
    """Nothing on the page is wider than the window: figures shrink to the column, long cells wrap."""
    rng = np.random.default_rng(5)
    langs = ["en", "de", "ja", "fr"]
    pairs = [(a, b) for a in langs for b in langs if a != b][:8]
    cfg = EvalConfig(dataset="synthetic", pairs=pairs, models=WIDE_MODELS, n=100, seeds=[0])
    records, ranks = [], {}
    for (src, tgt), (i, m) in itertools.product(pairs, enumerate(WIDE_MODELS)):
        records.append({"model": m, "src_lang": src, "tgt_lang": tgt, "seed": 0})
        r = rng.integers(1, 10 + 10 * i, 100).astype(float)
        ranks[(m, src, tgt, 0)] = {"bkr": r, "xlr": r}
    encoding = {m: {"dim": 512, "bytes_per_item": 2048 >> i, "speed": {"items_per_second": 100.0 * (i + 1)},
                    "speed_note": "measured YYYY-MM-DD on this machine (1,000 texts of 16-31 chars)"}
                for i, m in enumerate(WIDE_MODELS)}
    res = EvalResult(config=cfg, records=records, ranks=ranks, run={"encoding": encoding})
    write_compare_report(compare_models(res, "bkr@10", n_boot=100, n_perm=200), res, tmp_path, examples=0)
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "The price of each answer" in html and html.count('<div class="scroll"><table>') == html.count("<table>")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto((tmp_path / "report.html").resolve().as_uri(), wait_until="load")
            width = page.evaluate("document.documentElement.scrollWidth")
            widest = page.evaluate("Math.max(...[...document.querySelectorAll('body *')]"
                                   ".map(e => e.getBoundingClientRect().right))")
        finally:
            browser.close()
    assert width <= 1200 and widest <= 1200, (width, widest)


def test_agreement_with_ground_truth_names_reversed_pairs():
    from backretrieval.analysis.check import agreement

    res = synthetic_result()
    for (m, src, tgt, s), r in res.ranks.items():  # the truth: 'random' is the best model, 'good' the worst
        if m in ("good", "random"):
            other = "random" if m == "good" else "good"
            r["xlr"] = res.ranks[(other, src, tgt, s)]["bkr"].copy()
    cs = {k: compare_models(res, k, n_boot=100, n_perm=400, beside=False) for k in ("bkr@10", "xlr@10")}
    agree = agreement(cs["bkr@10"], cs["xlr@10"])
    assert len(agree) == 2
    for a in agree:
        assert ["good", "random"] in a["reversed"] and a["status"] == "differs" and a["check_ship"] == "good"
        assert "bkr@10 puts good above random, xlr@10 puts random above good" in a["text"]
        assert a["spearman"] < 0.5
    same = agreement(cs["bkr@10"], cs["bkr@10"])
    assert all(a["reversed"] == [] and a["status"] == "agrees" and a["spearman"] == pytest.approx(1.0) for a in same)


def test_text_only_and_single_model_reports(tmp_path):
    """Records without BkR ranks get the XLR report alone; one model gets no verdict and no win."""
    res = synthetic_result()
    for r in res.ranks.values():
        del r["bkr"]
    res.text_only = True
    c = compare_models(res, "xlr@10", n_boot=100, n_perm=200)
    assert c.beside is None
    write_compare_report(c, res, tmp_path / "text")
    doc = json.loads((tmp_path / "text" / "report.json").read_text())
    assert "agreement" not in doc and [m["metric"] for m in doc["metrics"]] == ["xlr@10"]

    one = EvalResult(config=res.config, records=[r for r in res.records if r["model"] == "good"],
                     ranks={k: v for k, v in res.ranks.items() if k[0] == "good"})
    write_compare_report(compare_models(one, "xlr@10", n_boot=100, n_perm=200), one, tmp_path / "one")
    doc = json.loads((tmp_path / "one" / "report.json").read_text())
    m = doc["metrics"][0]
    assert m["pairwise"] == [] and m["wins"] == [{"model": "good", "wins": 0, "losses": 0, "ties": 0}]
    assert not [v for v in m["verdicts"] if "better" in v]


def test_pairwise_corr_from_bootstrap_replicates():
    """CORR gaps: the estimate difference of the seed means, the percentile interval of the paired
    replicates' difference, and the Wald p-value compare_models() gives the adjacent gap."""
    rng = np.random.default_rng(4)
    res = synthetic_result(seeds=(0, 1))
    level = {"good": 0.3, "mid": 0.15, "mid-twin": 0.149, "random": 0.0}
    for r in res.records:
        r["corr"] = level[r["model"]] + 0.01 * rng.standard_normal()
    common = {(src, tgt, s): rng.standard_normal(80) * 0.02 for (_, src, tgt, s) in res.ranks}
    for (m, src, tgt, s), rk in res.ranks.items():
        rk["corr_boot"] = level[m] + common[(src, tgt, s)] + 0.005 * rng.standard_normal(80)
    pw = pairwise(res, "corr", level=0.9)
    c = compare_models(res, "corr", level=0.9)
    for _, r in pw.iterrows():
        src, tgt = r["pair"].split("->")
        est = {m: np.mean([x["corr"] for x in res.records if (x["model"], x["src_lang"], x["tgt_lang"]) == (m, src, tgt)])
               for m in (r["model_a"], r["model_b"])}
        reps = {m: np.mean([res.ranks[(m, src, tgt, s)]["corr_boot"] for s in (0, 1)], axis=0) for m in est}
        d = reps[r["model_a"]] - reps[r["model_b"]]
        assert r["diff"] == pytest.approx(est[r["model_a"]] - est[r["model_b"]])
        assert (r["diff_low"], r["diff_high"]) == pytest.approx(tuple(np.quantile(d, [0.05, 0.95])))
        row = c.per_pair[(c.per_pair["pair"] == r["pair"]) & (c.per_pair["model"] == r["model_a"])].iloc[0]
        nxt = c.per_pair[(c.per_pair["pair"] == r["pair"]) & (c.per_pair["rank"] == row["rank"] + 1)]
        if len(nxt) and nxt.iloc[0]["model"] == r["model_b"]:
            assert r["p"] == pytest.approx(row["p_vs_next"])
    good = pw[(pw["model_a"] == "good") & (pw["model_b"] == "mid")]
    assert good["significant"].all()


def test_the_verdict_names_the_cheapest_equivalent_model_end_to_end(tmp_path):
    """A model and a cheaper form of it that gives the same answers but for a few queries: the
    verdict's equivalence test finds them within the margin, and compare.json, compare.md and the
    page say to ship the cheaper one, at a quarter of the storage."""
    from backretrieval.report.runs.grid import comparison_markdown

    rng = np.random.default_rng(2)
    pairs, models = [("en", "de"), ("de", "ja")], ["full", "int8", "random"]
    cfg = EvalConfig(dataset="synthetic", pairs=pairs, models=models, n=400, seeds=[0])
    records, ranks = [], {}
    for src, tgt in pairs:
        full = rng.integers(1, 4, 400).astype(float)
        int8 = full.copy()
        int8[:4] = 30.0  # four queries lost
        for m, r in (("full", full), ("int8", int8), ("random", rng.integers(1, 401, 400).astype(float))):
            records.append({"model": m, "src_lang": src, "tgt_lang": tgt, "seed": 0})
            ranks[(m, src, tgt, 0)] = {"bkr": r, "xlr": r}
    encoding = {m: {"dim": 512, "bytes_per_item": b, "speed": None, "speed_note": "unknown"}
                for m, b in (("full", 2048), ("int8", 512), ("random", 2048))}
    res = EvalResult(config=cfg, records=records, ranks=ranks, run={"encoding": encoding})
    c = compare_models(res, "bkr@10", n_boot=200, n_perm=500)
    assert c.verdict["equivalent_to_best"][:2] == ["full", "int8"], c.verdict["text"]
    assert c.cheapest["overall"]["cheapest"] == "int8"
    sentence = "Ship int8: within 0.05 of full on every pair at a quarter of the storage."
    assert c.cheapest["text"] == sentence
    assert sentence in comparison_markdown(c, res)
    write_compare_report(c, res, tmp_path, examples=0)
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "The cheapest model as good as the best</b> (by bytes per item): " + sentence in html
    assert json.loads(json.dumps(c.to_json(), default=float))["cheapest"]["overall"]["cheapest"] == "int8"
