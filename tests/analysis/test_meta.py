"""The meta command end to end on real emoji data (small N), the choice of the best candidate
where the answer is known, a candidate metric added from outside the package, and the figure /
HTML writers."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from backretrieval.analysis.meta import calibrate_leave_one_pair_out, meta_table, per_seed_correlations
from backretrieval.cli import main
from backretrieval.report import figures, format_meta_table
from backretrieval.report.meta_report import format_best_candidates
from backretrieval.report.html import build_html

MODELS = "use-m,use-m@noise=1.5,use-m@trunc=16,use-m@mix=0.8,tfidf-char,random"


@pytest.fixture(scope="module")
def meta_run(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("meta")
    res = CliRunner().invoke(main, [
        "meta", "--dataset", "emoji-cldr", "--pairs", "en-de,de-en,en-ja", "--models", MODELS,
        "--n", "200", "--seeds", "3", "--weak-image-models", "color-hist", "--out", str(out), "--quiet",
    ], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return out, res.output


def test_meta_json_layout(meta_run):
    out, output = meta_run
    doc = json.loads((out / "meta.json").read_text())
    assert set(doc["pairs"]) == {"en->de", "de->en", "en->ja"}
    for entry in doc["pairs"].values():
        for key in ("pearson[bkr@10]", "spearman[bkr@10]", "pearson[corr]", "spearman[corr]"):
            assert set(entry[key]) == {"mean", "sd"} and -1 <= entry[key]["mean"] <= 1
        assert "p_pearson_wilcoxon" in entry and "p_spearman_wilcoxon" in entry
        assert entry["n_models"] == 6 and entry["seeds"] == 3
        assert entry["pearson[bkr@10]"]["mean"] > 0.8  # a graded family: BkR must track XLR
        best = entry["best"]["pearson"]
        assert best["candidate"] in ("bkr@10", "corr") and best["low"] <= best["mean"] <= best["high"]
        assert best["mean"] == pytest.approx(max(entry["pearson[bkr@10]"]["mean"], entry["pearson[corr]"]["mean"]))
    assert doc["candidates"] == ["bkr@10", "corr"]
    assert {r["image_model"] for r in doc["image_models"]} == {"efficientnet-lite0", "color-hist"}
    assert set(doc["calibration"]) == {"bkr@10", "corr"}
    cal = doc["calibration"]["bkr@10"]
    assert cal["level"] == 0.9 and cal["mae"] < 0.2
    # 3 held-out pairs x 6 models: the overall coverage is the share of the 18 intervals that hold
    # the true XLR, the mean of the per-pair shares (6 models each)
    assert {p["pair"] for p in cal["per_pair"]} == {"en->de", "de->en", "en->ja"}
    shares = [p["coverage"] * 6 for p in cal["per_pair"]]
    assert all(abs(k - round(k)) < 1e-9 for k in shares)
    assert cal["coverage"] == pytest.approx(sum(round(k) for k in shares) / 18, abs=1e-12)
    # the promise: 90% intervals. 18 intervals at 90% cover at least 13 with probability 0.99
    # (binomial, as if independent): fewer says the intervals are too narrow
    assert round(cal["coverage"] * 18) >= 13, cal
    head = "| pair | Pearson bkr@10 | Pearson corr | p | Spearman bkr@10 | Spearman corr | p | models | seeds |"
    md = (out / "meta.md").read_text()
    assert head in md and head in output
    assert "## Which candidate tracks XLR@10 best" in md and "| pair | best by Pearson | mean (95% CI) |" in md


def test_meta_results_and_figures(meta_run):
    out, _ = meta_run
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(recs) == 6 * 3 * 3 and {r["image_model"] for r in recs} == {"efficientnet-lite0"}
    weak = (out / "image-models" / "color-hist" / "results.jsonl").read_text().splitlines()
    assert len(weak) == len(recs)
    names = ["scatter", "boxplot_bkr_10", "boxplot_corr", "heatmap_bkr_10", "heatmap_corr", "heatmap_xlr_10",
             "image_models", "calibration_bkr_10", "calibration_corr"]
    assert sorted(p.stem for p in (out / "figures").glob("*.png")) == sorted(names)
    for name in names:
        with Image.open(out / "figures" / f"{name}.png") as im:
            assert im.format == "PNG" and im.size[0] > 500 and im.size[1] > 250
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(names) and "<table>" in html and "src=\"http" not in html
    assert "bkr@10 and xlr@10 disagree: example queries</h2>" in html


def _records():
    rng = np.random.default_rng(0)
    rows = []
    for pair in (("en", "de"), ("de", "en"), ("en", "ja"), ("ja", "en")):
        for seed in range(2):
            for i, model in enumerate(["a", "b", "c", "d", "e"]):
                x = 0.15 * i + rng.uniform(0, 0.05)
                rows.append({"model": model, "src_lang": pair[0], "tgt_lang": pair[1], "seed": seed,
                             "xlr@10": x, "bkr@10": 0.5 * x + rng.uniform(0, 0.02), "corr": 0.3 * x})
    return rows


def test_figures_and_html_from_synthetic_records(tmp_path):
    recs = _records()
    paths = [
        figures.scatter_candidates(recs, "en->de", 0, tmp_path / "s.png"),
        figures.boxplot_by_model(recs, "bkr@10", tmp_path / "b.png"),
        figures.heatmap(recs, "bkr@10", tmp_path / "h.png"),
        figures.calibration_plot(calibrate_leave_one_pair_out(recs), tmp_path / "c.png"),
        figures.degradation_plot(pd.DataFrame({"image_model": ["g1", "g2"], "pearson[bkr@10]": [0.9, 0.5],
                                               "spearman[bkr@10]": [0.9, 0.4], "pearson[corr]": [0.7, 0.3],
                                               "spearman[corr]": [0.6, 0.2]}), tmp_path / "d.png"),
    ]
    for p in paths:
        assert p.stat().st_size > 10_000
    page = build_html("T <&>", [("Summary", ["| a | b |\n|---|---|\n| 1 | 2 |"]), ("Figures", paths)], tmp_path / "r.html")
    text = page.read_text()
    assert "T &lt;&amp;&gt;" in text and "<td>1</td>" in text and text.count("data:image/png;base64,") == 5
    assert not list(tmp_path.glob(".*tmp*"))  # atomic writes leave nothing behind


# --------------------------------------------------------------------------- the best candidate
def _graded(seeds=12, pairs=("en->de", "de->en", "en->ja")):
    """A family of 8 models of graded quality q (XLR@10 = q) and candidates whose relation to q is
    built in: bkr@10 tracks q closely, bkr_mrr loosely, toy_loss (lower is better) falls with q
    almost as closely as bkr@10, and corr is blind (drawn without looking at q)."""
    rng = np.random.default_rng(7)
    quality = np.linspace(0.05, 0.9, 8)
    recs = []
    for pair in pairs:
        s, t = pair.split("->")
        for seed in range(seeds):
            for m, q in enumerate(quality):
                recs.append({"model": f"m{m}", "image_model": "g", "src_lang": s, "tgt_lang": t, "seed": seed, "xlr@10": q,
                             "bkr@10": q / 3 + 0.01 * rng.standard_normal(), "bkr_mrr": q / 3 + 0.08 * rng.standard_normal(),
                             "toy_loss": 1 - q + 0.12 * rng.standard_normal(), "corr": rng.standard_normal()})
    return recs


@pytest.fixture
def toy_metric(monkeypatch):
    """Register toy metrics in the metric table, as a metric of the package registers: one row.

    ``toy_loss`` (lower is better) and ``toy_blind`` (a candidate built to be blind: a number
    drawn from a seed made of the signs of the target embeddings, whatever the model's quality)."""
    from backretrieval.metrics import table

    def blind(src, tgt, k, *, sim, csls_k):
        """A candidate built to be blind to the model's quality."""
        digest = hashlib.sha256(np.packbits(np.asarray(tgt) > 0).tobytes()).digest()
        return {"toy_blind": float(np.random.default_rng(int.from_bytes(digest[:8], "little")).random())}

    toys = (table.MetricSpec("toy_loss", "toy: falls as the model gets better", "text", blind, higher_is_better=False,
                             needs_images=True, candidate=True),
            table.MetricSpec("toy_blind", "toy: a candidate built to be blind", "text", blind, needs_images=True,
                             candidate=True))
    monkeypatch.setattr(table, "METRICS", table.METRICS + toys)
    for spec in toys:
        monkeypatch.setitem(table.BY_NAME, spec.name, spec)
    return toys


def test_the_best_candidate_is_the_one_built_to_track_the_truth(toy_metric):
    """On a graded family where the answer is known: bkr@10 is best on every pair with a lead whose
    interval excludes 0, the blind candidate's interval holds 0, a lower-is-better candidate
    enters with its sign flipped, and the order the candidates are given in does not matter."""
    order = ("corr", "toy_loss", "bkr_mrr", "bkr@10")
    table = meta_table(per_seed_correlations(_graded(), candidates=order))
    for pair, e in table.items():
        for kind in ("pearson", "spearman"):
            best = e["best"][kind]
            assert best["candidate"] == "bkr@10" and best["runner_up"] == "toy_loss", (pair, kind, best)
            assert 0 < best["lead"]["low"] <= best["lead"]["mean"] <= best["lead"]["high"]
            assert best["low"] <= best["mean"] <= best["high"] and best["level"] == 0.95
            assert e[f"{kind}[toy_loss]"]["mean"] > 0.85 > e[f"{kind}[bkr_mrr]"]["mean"] > 0.5
            blind = e[f"{kind}[corr]"]
            half = 2.20 * blind["sd"] / np.sqrt(e["seeds"])  # t(0.975, 11): the blind one's interval holds 0
            assert abs(blind["mean"]) < half, (pair, kind, blind)
            assert e[f"p_{kind}_ttest"] < 0.05
    again = meta_table(per_seed_correlations(_graded(), candidates=order[::-1]))
    assert {p: e["best"] for p, e in again.items()} == {p: e["best"] for p, e in table.items()}
    md = format_meta_table(table)
    assert md.splitlines()[0].startswith("| pair | Pearson corr | Pearson toy_loss | Pearson bkr_mrr | Pearson bkr@10 | p |")
    assert all(line.count("**") == 4 for line in md.splitlines()[2:])  # the best bold, once per kind
    best = format_best_candidates(table)
    assert "| en->de | bkr@10 | " in best and "toy_loss: +" in best and "not told apart" not in best


def test_one_candidate_or_a_tie_names_no_runner_up():
    recs = _graded(seeds=3, pairs=("en->de",))
    e = meta_table(per_seed_correlations(recs, candidates=["bkr@10"]))["en->de"]
    assert e["best"]["pearson"]["runner_up"] is None and e["best"]["pearson"]["lead"] is None
    assert np.isnan(e["p_pearson_wilcoxon"])
    for r in recs:
        r["bkr_mrr"] = r["bkr@10"]  # the same values: equal correlations on every seed
    e = meta_table(per_seed_correlations(recs, candidates=["bkr@10", "bkr_mrr"]))["en->de"]
    lead = e["best"]["pearson"]["lead"]
    assert lead["mean"] == lead["low"] == lead["high"] == 0 and np.isnan(e["p_pearson_wilcoxon"])
    assert "not told apart" in format_best_candidates({"en->de": e}) and "**" not in format_meta_table({"en->de": e})


def test_a_metric_added_to_the_table_is_judged_by_meta(tmp_path, shared_data, toy_metric):
    """A candidate from outside the package -- one table row, as a metric of the package adds it
    -- is computed by the evaluation and judged by ``meta --candidates``: on a family of graded
    quality (tfidf-char mixed with ever more random vectors) BkR@10 tracks XLR@10 and the
    candidate built to be blind does not."""
    out = tmp_path / "meta"
    res = CliRunner().invoke(main, [
        "meta", "--dataset", "emoji-cldr", "--pairs", "en-de,de-en,en-fr", "--image-model", "color-hist",
        "--models", "tfidf-char,tfidf-char@mix=0.4,tfidf-char@mix=0.7,tfidf-char@mix=0.9,random",
        "--candidates", "bkr@10,bkr@1,corr,toy_blind", "--n", "100", "--seeds", "3", "--out", str(out), "--quiet",
        "--no-report",
    ], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "meta.json").read_text())
    assert doc["candidates"] == ["bkr@10", "bkr@1", "corr", "toy_blind"]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(0 <= r["toy_blind"] < 1 for r in records)
    for pair, e in doc["pairs"].items():
        assert e["best"]["pearson"]["candidate"] != "toy_blind", (pair, e)
        assert e["pearson[bkr@10]"]["mean"] > 0.8 > e["pearson[toy_blind]"]["mean"], (pair, e)
    assert set(doc["calibration"]) == {"bkr@10", "bkr@1", "corr", "toy_blind"}
    assert "| pair | Pearson bkr@10 | Pearson bkr@1 | Pearson corr | Pearson toy_blind | p |" in res.output
