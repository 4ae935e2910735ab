"""The comparison figures keep a sane size and say where chance lies, whatever the values:
every model tied (a colour range with no width), chance far above or below every model."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from backretrieval.analysis.comparison import Comparison
from backretrieval.report import compare_figures as F


def comparison(values: dict[str, float], pairs=("en-de",), metric: str = "bkr@10") -> Comparison:
    rows = []
    for pair in pairs:
        for rank, (model, v) in enumerate(values.items(), 1):
            rows.append({"pair": pair, "rank": rank, "model": model, "estimate": v, "ci_low": v, "ci_high": v,
                         "p_vs_next": np.nan, "p_adj": np.nan, "significant": False})
    per_pair = pd.DataFrame(rows)
    across = pd.DataFrame({"model": list(values), "mean": list(values.values()), "sd": 0.0, "min": list(values.values()),
                           "max": list(values.values()), "pairs": len(pairs), "mean_rank": 1.0, "wins": 0})
    return Comparison(metric, 0.95, 0.05, per_pair, across)


def size(png) -> tuple[int, int]:
    with Image.open(png) as im:
        return im.size


@pytest.mark.parametrize("values, chance", [
    ({"random": 0.0, "tfidf-char": 0.0}, 10 / 60),  # every model ties below chance
    ({"random": 0.02, "tfidf-char": 0.03}, 10 / 60),  # chance above every model
    ({"random": 0.5, "tfidf-char": 0.5}, 0.01),  # ties above chance
    ({"random": 0.3, "tfidf-char": 0.5}, 0.01),
])
def test_heatmap_has_a_real_range_and_a_sane_size(tmp_path, values, chance):
    png, svg = F.heatmap_ci(comparison(values), tmp_path / "heat", chance)
    w, h = size(png)
    assert w < 1500 and h < 800, (w, h)  # about 5.5 x 2.6 inches at the figures' DPI, nothing blank beside
    lo, hi = F.colour_range(np.array(list(values.values())), chance)
    assert hi - lo > 0.009 and lo <= min(values.values()) and hi >= max(values.values())
    note = F.chance_note(comparison(values), chance)
    if lo <= chance <= hi:
        assert note == ""
    else:
        assert note == f"chance {chance:.3g} lies {'above' if chance > hi else 'below'} every value (not on the colour bar)"
        assert note in F.heatmap_title(comparison(values), chance)


def test_forest_and_spread_keep_a_sane_size_when_every_model_ties(tmp_path):
    c = comparison({"random": 0.0, "tfidf-char": 0.0}, pairs=("en-de", "de-en"))
    for fn in (F.forest, F.spread):
        w, h = size(fn(c, tmp_path / fn.__name__, 10 / 60)[0])
        assert w < 3000 and h < 1500, (fn.__name__, w, h)


LONG = ["paraphrase-multilingual-mpnet-base-v2", "multilingual-e5-small?prompt_name=none", "use-m", "use-m@trunc=128",
        "openai:text-embedding-3-small", "tfidf-char", "st:ours@trunc=64", "random?dim=16&seed=3"]
PAIRS = ("en->de", "de->en", "en->ja", "ja->en", "de->ja", "ja->de", "en->fr", "fr->en")


def eight_by_eight() -> Comparison:
    """8 models (labels up to 39 characters) x 8 pairs, the models close in quality and cost (two
    of them at the same speed, as a model and its variant are), with intervals and a price."""
    rng = np.random.default_rng(3)
    values = {m: 0.5 + 0.01 * i for i, m in enumerate(reversed(LONG))}
    c = comparison(values, pairs=PAIRS)
    c.per_pair["estimate"] += rng.uniform(-0.02, 0.02, len(c.per_pair))
    c.per_pair["ci_low"] = c.per_pair["estimate"] - 0.04
    c.per_pair["ci_high"] = c.per_pair["estimate"] + 0.04
    c.costs = pd.DataFrame({"model": LONG, "bytes_per_item": [3072, 1536, 2048, 512, 6144, 16388, 256, 64],
                            "seconds_per_1m_items": [5e4, 4e4, 3e4, 3e4, 2e4, 600, 1e4, 100],
                            "cost_per_1m_items": [None, None, None, None, 0.2, None, None, None]}, dtype=object)
    return c


def drawn_texts(fig) -> list:
    """The texts ``fig`` draws: every visible, non-empty text but the labels of ticks outside their axis's view."""
    from matplotlib.text import Text

    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - 1e-12 * abs(hi) <= tick.get_loc() <= hi + 1e-12 * abs(hi):
                    hidden.update((id(tick.label1), id(tick.label2)))
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and id(t) not in hidden]


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """Every two drawn texts of ``fig`` whose boxes overlap."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn_texts(fig)]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]


@pytest.mark.parametrize("draw", ["cost_quality", "heatmap_ci", "spread", "wins_chart"])
def test_no_label_overlaps_another_or_is_cut_at_8_models_x_8_pairs(tmp_path, monkeypatch, draw):
    """Each figure is drawn, and before it is saved every text on it is checked: no two overlap,
    and every model's label is there whole."""
    import matplotlib.pyplot as plt

    seen = {}
    monkeypatch.setattr(F, "_save", lambda fig, stem: seen.setdefault("fig", fig) and (stem, stem))
    c = eight_by_eight()
    args = {"cost_quality": (c, tmp_path / "x"), "heatmap_ci": (c, tmp_path / "x", 0.1), "spread": (c, tmp_path / "x", 0.1),
            "wins_chart": (c, c.across_pairs.assign(losses=0, ties=0), tmp_path / "x")}[draw]
    getattr(F, draw)(*args)
    fig = seen["fig"]
    try:
        assert overlapping_texts(fig) == []
        texts = {t.get_text() for t in drawn_texts(fig)}
        assert set(LONG) <= texts  # whole, not cut with an ellipsis
    finally:
        plt.close(fig)
