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
