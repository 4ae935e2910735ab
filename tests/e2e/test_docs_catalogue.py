"""docs/your-data.md stays true: `backretrieval make-catalogue` writes the images and one CSV per language
from the real emoji data, and the tutorial's stacking step gives a file the generic loader reads
with images and cross-lingual links."""
from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from backretrieval.cli import main
from backretrieval.data import load_dataset


def test_make_catalogue_and_the_tutorial_stacking_step(tmp_path, shared_data):
    shop = tmp_path / "shop"
    res = CliRunner().invoke(main, ["make-catalogue", str(shop), "--langs", "en,ja", "--categories", "Food & Drink"])
    assert res.exit_code == 0, res.output
    printed = res.output
    rows = {lang: list(csv.DictReader(open(shop / f"{lang}.csv", encoding="utf-8"))) for lang in ("en", "ja")}
    assert 100 < len(rows["en"]) < 200 and f"{shop / 'en.csv'} ({len(rows['en'])} rows)" in printed
    assert list(rows["en"][0]) == ["id", "text", "image"]
    assert all((shop / r["image"]).is_file() for r in rows["en"] + rows["ja"])
    apple = next(r for r in rows["en"] if r["id"] == "1f34e")  # RED APPLE is food
    assert apple["text"].startswith("red apple")
    assert not any(r["id"] == "1f300" for r in rows["en"])  # CYCLONE is not in Food & Drink
    # the tutorial's step 2, verbatim in substance
    parts = [pd.read_csv(f, dtype=str).assign(lang=f.stem) for f in sorted(shop.glob("??.csv"))]
    catalogue = pd.concat(parts, ignore_index=True)
    catalogue["concept"] = catalogue["id"]
    catalogue.to_csv(shop / "catalogue.csv", index=False)
    ds = load_dataset(str(shop / "catalogue.csv"), langs=["en", "ja"])
    en, ja = ds["en"], ds["ja"]
    assert len(en.ids) == len(rows["en"]) and set(en.concepts) & set(ja.concepts)
    i = en.ids.index("1f34e")
    assert Path(en.image_paths[i]).resolve() == (shop / "images" / "1f34e.png").resolve()


def test_make_catalogue_refuses_an_unknown_category(tmp_path, shared_data):
    res = CliRunner().invoke(main, ["make-catalogue", str(tmp_path / "shop"), "--categories", "Food & Drinks"])
    assert res.exit_code == 2
    assert res.output.startswith("error: unknown categories 'Food & Drinks'; emoji.json has: Activities, Animals & Nature,")
    assert not (tmp_path / "shop").exists()
