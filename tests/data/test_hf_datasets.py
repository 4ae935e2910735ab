"""The Hugging Face `datasets` loader: in-memory datasets, save_to_disk folders, column mapping,
splits, the three image forms, and clear errors -- on datasets built in the test (no hub)."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import datasets  # the `hf` extra, installed by scripts/setup.sh for the tests: missing fails loudly

from backretrieval.core import DataError
from backretrieval.data import load_dataset
from backretrieval.data.hf_datasets import from_hf


def _png(colour) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="PNG")
    return buf.getvalue()


COLOURS = {"a": (255, 0, 0), "b": (0, 255, 0), "c": (0, 0, 255), "d": (255, 255, 0), "e": (0, 255, 255),
           "f": (255, 0, 255), "g": (128, 128, 128), "h": (255, 128, 0)}
EN = ["red", "green", "blue", "yellow", "cyan", "magenta", "grey", "orange"]
DE = ["rot", "gruen", "blau", "gelb", "tuerkis", "magenta", "grau", "orange"]


def _rows(n=3):
    colours = dict(list(COLOURS.items())[:n])
    rows = []
    for lang, words in (("en", EN[:n]), ("de", DE[:n])):
        for key, word in zip(colours, words):
            rows.append({"sku": f"{lang}-{key}", "language": lang, "desc": word, "group": key,
                         "picture": _png(colours[key])})
    return rows


def test_in_memory_dataset_with_mapped_columns_and_image_bytes():
    ds = datasets.Dataset.from_list(_rows())
    data = load_dataset(ds, langs=["en", "de"], id="sku", lang="language", text="desc", concept="group", image="picture")
    en, de = data["en"], data["de"]
    assert en.ids == ["en-a", "en-b", "en-c"] and de.texts == ["rot", "gruen", "blau"]
    assert en.concepts == ["a", "b", "c"]
    # bytes become content-addressed files: the same picture in two languages is one file
    assert en.image_paths[0] == de.image_paths[0] and en.image_paths[0] != en.image_paths[1]
    assert Image.open(en.image_paths[2]).getpixel((0, 0)) == (0, 0, 255)


def test_image_feature_and_saved_dataset_dict(tmp_path):
    rows = _rows(8)
    feat = datasets.Features({"sku": datasets.Value("string"), "language": datasets.Value("string"),
                              "desc": datasets.Value("string"), "group": datasets.Value("string"),
                              "picture": datasets.Image()})
    for r in rows:
        r["picture"] = {"bytes": r["picture"], "path": None}
    dd = datasets.DatasetDict({
        "train": datasets.Dataset.from_list(rows[:6] + rows[8:14], features=feat),
        "test": datasets.Dataset.from_list(rows[6:8] + rows[14:16], features=feat),
    })
    dd.save_to_disk(str(tmp_path / "shop"))
    opts = {"id": "sku", "lang": "language", "text": "desc", "concept": "group", "image": "picture"}
    whole = load_dataset(f"hf:{tmp_path / 'shop'}", **opts)
    assert whole.name == "shop" and whole["en"].ids == [f"en-{k}" for k in "abcdefgh"]
    test = load_dataset(f"hf:{tmp_path / 'shop'}", split="test", **opts)
    assert test["de"].ids == ["de-g", "de-h"]
    # an evaluation runs on it (XLR through the concept column, BkR through the images)
    from backretrieval.analysis import EvalConfig, run_grid

    res = run_grid(EvalConfig(dataset=f"hf:{tmp_path / 'shop'}", pairs=[("en", "de")], models=["tfidf-char"],
                              image_model="color-hist", n=3, seeds=[0], k=1, dataset_options=opts), progress=False)
    rec = res.records[0]
    assert rec["n"] == 3 and 0 <= rec["xlr@1"] <= 1 and "bkr@1" in rec


def test_image_paths_and_pil_images(tmp_path):
    p = tmp_path / "x.png"
    p.write_bytes(_png((1, 2, 3)))
    ds = datasets.Dataset.from_list([{"id": 1, "lang": "en", "text": "x", "image": str(p)}])
    assert from_hf(ds)["en"].image_paths == [str(p)]
    pil = Image.open(io.BytesIO(_png((9, 9, 9))))
    stored = from_hf(ds, image=None)["en"].image_paths
    assert stored is None
    from backretrieval.data.hf_datasets import _image_file

    assert Image.open(_image_file(pil, "here")).getpixel((0, 0)) == (9, 9, 9)


def test_errors_name_the_column_split_and_row(tmp_path):
    ds = datasets.Dataset.from_list(_rows())
    with pytest.raises(DataError, match="missing column 'id' .*option id=COLUMN"):
        load_dataset(ds)
    bad = datasets.Dataset.from_list([{"id": "1", "lang": "en", "text": "  \u200b "}])
    with pytest.raises(DataError, match=r"\(row 1\): empty or whitespace-only text"):
        load_dataset(bad)
    dup = datasets.DatasetDict({"a": datasets.Dataset.from_list([{"id": "1", "lang": "en", "text": "x"}]),
                                "b": datasets.Dataset.from_list([{"id": "1", "lang": "en", "text": "y"}])})
    with pytest.raises(DataError, match=r"\(split 'b' row 1\): duplicate id '1' in language 'en' \(first at split 'a' row 1\)"):
        load_dataset(dup)
    with pytest.raises(DataError, match="no split 'dev'"):
        load_dataset(dup, split="dev")
    with pytest.raises(DataError, match="folder not found"):
        load_dataset(f"hf:{tmp_path / 'nope'}")
    with pytest.raises(DataError, match="unknown option 'colour'"):
        load_dataset(ds, colour="x")
