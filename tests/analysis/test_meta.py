"""The meta command end to end on real emoji data (small N), and the figure / HTML writers."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from backretrieval.analysis.meta import calibrate_leave_one_pair_out
from backretrieval.cli import main
from backretrieval.report import figures
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
        for key in ("pearson_bkr", "spearman_bkr", "pearson_corr", "spearman_corr"):
            assert set(entry[key]) == {"mean", "sd"} and -1 <= entry[key]["mean"] <= 1
        assert "p_pearson_wilcoxon" in entry and "p_spearman_wilcoxon" in entry
        assert entry["n_models"] == 6 and entry["seeds"] == 3
        assert entry["pearson_bkr"]["mean"] > 0.8  # a graded family: BkR must track XLR
    assert {r["image_model"] for r in doc["image_models"]} == {"efficientnet-lite0", "color-hist"}
    cal = doc["calibration"]
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
    assert "| pair | Pearson BkR |" in (out / "meta.md").read_text() and "| pair | Pearson BkR |" in output


def test_meta_results_and_figures(meta_run):
    out, _ = meta_run
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(recs) == 6 * 3 * 3 and {r["image_model"] for r in recs} == {"efficientnet-lite0"}
    weak = (out / "image-models" / "color-hist" / "results.jsonl").read_text().splitlines()
    assert len(weak) == len(recs)
    for name in ("scatter_xlr_bkr", "boxplot_bkr", "heatmap_bkr", "heatmap_xlr", "image_models", "calibration"):
        with Image.open(out / "figures" / f"{name}.png") as im:
            assert im.format == "PNG" and im.size[0] > 500 and im.size[1] > 250
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 6 and "<table>" in html and "src=\"http" not in html
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
        figures.scatter_xlr_bkr(recs, "en->de", 0, tmp_path / "s.png"),
        figures.boxplot_by_model(recs, "bkr@10", tmp_path / "b.png"),
        figures.heatmap(recs, "bkr@10", tmp_path / "h.png"),
        figures.calibration_plot(calibrate_leave_one_pair_out(recs), tmp_path / "c.png"),
        figures.degradation_plot(pd.DataFrame({"image_model": ["g1", "g2"], "pearson_bkr": [0.9, 0.5], "spearman_bkr": [0.9, 0.4],
                                               "pearson_corr": [0.7, 0.3], "spearman_corr": [0.6, 0.2]}), tmp_path / "d.png"),
    ]
    for p in paths:
        assert p.stat().st_size > 10_000
    page = build_html("T <&>", [("Summary", ["| a | b |\n|---|---|\n| 1 | 2 |"]), ("Figures", paths)], tmp_path / "r.html")
    text = page.read_text()
    assert "T &lt;&amp;&gt;" in text and "<td>1</td>" in text and text.count("data:image/png;base64,") == 5
    assert not list(tmp_path.glob(".*tmp*"))  # atomic writes leave nothing behind
