"""Dataset loaders on the real data (../shared/data, or the registry downloads conftest.py makes
when it is absent; fail, never skip) and on the Multi30K-format fixture under tests/fixtures."""
from __future__ import annotations

import json
import lzma
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from backretrieval.core import DataError
from backretrieval.data import ddtp, emoji_cldr, generic, multi30k
from backretrieval.data.registry import list_datasets, load_dataset

N_EMOJI = 3786


@pytest.fixture(scope="session")
def npm_dir(shared_data) -> Path:
    return shared_data / "npm"


@pytest.fixture(scope="session")
def ddtp_dir(shared_data) -> Path:
    return shared_data / "ddtp"


@pytest.fixture(scope="module", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Never touch the real user cache; ignore the data-location variables (for this module only:
    the other test modules find the data through them)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BACKRETRIEVAL_CACHE", str(tmp_path_factory.mktemp("cache")))
        for var in ("BACKRETRIEVAL_EMOJI_DIR", "BACKRETRIEVAL_DDTP_DIR", "BACKRETRIEVAL_MULTI30K"):
            mp.delenv(var, raising=False)
        yield


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    cache = tmp_path / "fresh-cache"
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(cache))
    return cache


def _script(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return p


def test_registry_lists_the_four_loaders():
    infos = {i.name: i for i in list_datasets()}
    assert {"emoji-cldr", "generic", "multi30k", "ddtp"} <= set(infos)
    assert infos["emoji-cldr"].has_images and infos["emoji-cldr"].has_concepts
    assert all(i.source and i.license and i.description for i in infos.values())


# ------------------------------------------------------------------------------------ emoji-cldr


@pytest.fixture(scope="module")
def emoji_en_de(npm_dir, emoji_tarball):
    for f in (emoji_tarball.name, "cldr-annotations-full-48.2.0.tgz", "cldr-annotations-derived-full-48.2.0.tgz"):
        if not (npm_dir / f).is_file():
            pytest.fail(f"missing real data file {npm_dir / f}")
    return emoji_cldr.load(["en", "de"], source_dir=npm_dir)


def test_emoji_en_de_join(emoji_en_de):
    en, de = emoji_en_de["en"], emoji_en_de["de"]
    assert len(en) == len(de) == N_EMOJI
    assert en.ids == de.ids and en.concepts == en.ids and de.concepts == de.ids
    i = en.ids.index("1f436")
    assert "dog" in en.texts[i].lower()
    assert "hund" in de.texts[de.ids.index("1f436")].lower()
    # skin-tone variants are items of their own, with their own names
    for tone in ("1f3fb", "1f3fc", "1f3fd", "1f3fe", "1f3ff"):
        assert f"1f385-{tone}" in en.ids
    santa = en.texts[en.ids.index("1f385-1f3fb")]
    assert "santa" in santa.lower() and "light skin tone" in santa
    # keycaps: U+FE0F stripped on both sides of the join
    assert en.extra["title"][en.ids.index("0023-fe0f-20e3")] == "keycap: #"
    assert en.extra["title"][en.ids.index("00a9-fe0f")] == "copyright"
    assert en.extra["title"][en.ids.index("1f1e9-1f1ea")] == "flag: Germany"  # from the derived annotations
    # the image is the pivot: one existing file per emoji, shared by the languages
    assert en.image_paths == de.image_paths
    assert all(os.path.isabs(p) and os.path.isfile(p) for p in en.image_paths)
    assert Path(en.image_paths[i]).name == "1f436.png"
    assert emoji_en_de.has_images
    assert set(en.extra) == {"title", "body"} and len(en.extra["title"]) == N_EMOJI


def test_emoji_text_options(npm_dir):
    by_mode = {m: emoji_cldr.load(["en"], source_dir=npm_dir, text=m)["en"] for m in emoji_cldr.TEXT_MODES}
    name, kw, both = by_mode["name"], by_mode["keywords"], by_mode["name+keywords"]
    i = name.ids.index("1f436")
    assert name.texts[i] == "dog face" == name.extra["title"][i]
    assert "puppy" in kw.texts[i] and not kw.texts[i].startswith("dog face:")
    assert both.texts[i].startswith("dog face: ") and "puppy" in both.texts[i]
    assert both.texts[i] == f"{name.texts[i]}: {both.extra['body'][i]}"
    # keywords identical to the name are not repeated after it
    for n, body in zip(both.extra["title"], both.extra["body"]):
        assert n.casefold() not in [k.casefold() for k in body.split(", ")]
    assert any(n.casefold() in [k.casefold() for k in t.split(", ")] for n, t in zip(kw.extra["title"], kw.texts))
    with pytest.raises(DataError, match="text"):
        emoji_cldr.load(["en"], source_dir=npm_dir, text="title")


def test_emoji_languages_and_counts(emoji_en_de, npm_dir):
    langs = emoji_cldr.available_languages(npm_dir)
    assert {"en", "de", "ja", "zh", "zh-Hant", "ar", "ru"} <= set(langs) and len(langs) > 150
    counts = emoji_cldr.name_counts(npm_dir)
    for lang in ("en", "de", "ja", "ru", "ar", "zh"):
        assert counts[lang] == N_EMOJI
    default = emoji_cldr.default_languages(npm_dir)
    assert {"en", "de", "ja"} <= set(default) and "en-AU" not in default and "und" not in default
    assert all(counts[lang] >= emoji_cldr.MIN_NAMES_DEFAULT for lang in default)
    assert len(default) >= 100
    with pytest.raises(DataError, match="xx-Nope"):
        emoji_cldr.load(["en", "xx-Nope"], source_dir=npm_dir)


def test_emoji_extraction_is_once_and_minimal(emoji_en_de, npm_dir):
    root = emoji_cldr.prepare(npm_dir)
    assert Path(emoji_en_de["en"].image_paths[0]).is_relative_to(root)
    assert emoji_cldr.prepare(npm_dir) == root and (root / ".complete").is_file()
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) >= [
        "annotations", "annotationsDerived", "img", "index.json"]
    assert len(list((root / "img").iterdir())) == N_EMOJI
    assert not list(root.parent.glob(".*.tmp-*"))  # no leftover temporary extraction
    assert not (root / "README.md").exists() and not (root / "package").exists()


def test_emoji_incomplete_extraction_is_redone(fresh_cache, npm_dir):
    root = emoji_cldr.prepare(npm_dir)
    (root / ".complete").unlink()
    (root / "index.json").unlink()  # looks half-finished
    again = emoji_cldr.prepare(npm_dir)
    assert again == root and (root / ".complete").is_file() and (root / "index.json").is_file()


def test_emoji_tarball_names_and_env(tmp_path, monkeypatch, npm_dir, emoji_tarball):
    src = tmp_path / "src"
    src.mkdir()
    # the full `npm pack` name of the emoji package is accepted too
    (src / "emoji-datasource-google-16.0.0.tgz").symlink_to(emoji_tarball)
    for f in ("cldr-annotations-full-48.2.0.tgz", "cldr-annotations-derived-full-48.2.0.tgz"):
        (src / f).symlink_to(npm_dir / f)
    found = emoji_cldr.find_tarballs(src, fetch=False)
    assert found[0].name == "emoji-datasource-google-16.0.0.tgz"
    monkeypatch.setenv("BACKRETRIEVAL_EMOJI_DIR", str(npm_dir))
    assert [p.parent for p in emoji_cldr.find_tarballs(fetch=False)] == [npm_dir] * 3
    monkeypatch.setenv("BACKRETRIEVAL_EMOJI_DIR", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="cldr-annotations-full-48.2.0.tgz"):
        emoji_cldr.find_tarballs(fetch=False)


def test_emoji_without_npm_says_npm(fresh_cache, monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(DataError, match="npm") as e:
        emoji_cldr.load(["en"])
    assert "source_dir" in str(e.value) and "BACKRETRIEVAL_EMOJI_DIR" in str(e.value)


def test_emoji_fetch_with_npm_pack(fresh_cache, tmp_path, monkeypatch, npm_dir, emoji_tarball):
    """`npm pack NAME@VERSION --pack-destination DIR` (a stand-in npm) fills the cache."""
    log = tmp_path / "npm.log"
    _script(tmp_path / "bin", "npm", f"""
echo "$@" >> {log}
spec="$2"; dest="$4"
case "$spec" in
  emoji-datasource-google@16.0.0) cp "{emoji_tarball}" "$dest/emoji-datasource-google-16.0.0.tgz";;
  *) name="${{spec%@*}}"; ver="${{spec##*@}}"; cp "{npm_dir}/$name-$ver.tgz" "$dest/$name-$ver.tgz";;
esac
""")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    found = emoji_cldr.find_tarballs()
    assert all(p.parent == fresh_cache / "npm" and p.is_file() for p in found)
    calls = log.read_text().splitlines()
    assert calls[0].startswith("pack emoji-datasource-google@16.0.0 --pack-destination ")
    assert len(calls) == 3
    emoji_cldr.find_tarballs()  # now cached: npm is not run again
    assert len(log.read_text().splitlines()) == 3


def test_emoji_npm_failure_is_reported(fresh_cache, tmp_path, monkeypatch):
    _script(tmp_path / "bin", "npm", "echo 'npm ERR! 404 Not Found' >&2\nexit 1\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(DataError, match="npm pack emoji-datasource-google@16.0.0.*404"):
        emoji_cldr.find_tarballs()


# --------------------------------------------------------------------------------------- generic


def _png(path: Path, color=(255, 0, 0)) -> None:
    from PIL import Image

    Image.new("RGB", (4, 4), color).save(path)


@pytest.fixture
def items(tmp_path):
    (tmp_path / "imgs").mkdir()
    _png(tmp_path / "imgs" / "cat.png")
    _png(tmp_path / "imgs" / "dog.png", (0, 255, 0))
    return [
        {"id": "a1", "lang": "en", "text": "a cat", "concept": "cat", "image": "imgs/cat.png", "title": "Cat", "body": "a small cat"},
        {"id": "a2", "lang": "en", "text": "a dog", "concept": "dog", "image": "imgs/dog.png", "title": "Dog", "body": "a dog"},
        {"id": "b1", "lang": "de", "text": "ein Hund", "concept": "dog", "image": str(tmp_path / "imgs" / "dog.png")},
        {"id": "a1", "lang": "de", "text": "eine Katze", "concept": "cat", "image": "imgs/cat.png"},
    ]


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def test_generic_jsonl_with_images(tmp_path, items):
    path = _write_jsonl(tmp_path / "my_items.jsonl", items)
    ds = load_dataset(str(path))
    assert ds.name == "my_items" and ds.languages == ["de", "en"]
    en, de = ds["en"], ds["de"]
    assert en.ids == ["a1", "a2"] and de.ids == ["b1", "a1"]  # the same id in two languages is fine
    assert en.concepts == ["cat", "dog"] and de.concepts == ["dog", "cat"]
    assert en.image_paths == [str(tmp_path / "imgs" / "cat.png"), str(tmp_path / "imgs" / "dog.png")]
    assert all(os.path.isfile(p) for p in de.image_paths) and ds.has_images
    assert en.extra == {"title": ["Cat", "Dog"], "body": ["a small cat", "a dog"]}
    assert de.extra["title"] == ["", ""]
    assert generic.load(path, langs=["de"]).languages == ["de"]
    with pytest.raises(DataError, match="unknown language 'fr'"):
        generic.load(path, langs=["fr"])


def test_generic_json_array_and_parquet(tmp_path, items):
    rows = [{k: v for k, v in r.items() if k not in ("image", "title", "body")} for r in items]
    (tmp_path / "arr.json").write_text(json.dumps(rows), encoding="utf-8")
    ds = generic.load(tmp_path / "arr.json")
    assert len(ds["en"]) == 2 and not ds.has_images
    pd.DataFrame(rows).to_parquet(tmp_path / "t.parquet")
    ds = generic.load(tmp_path / "t.parquet")
    assert ds.name == "t" and ds["de"].concepts == ["dog", "cat"]
    # no concept column: no cross-lingual links
    pd.DataFrame(rows).drop(columns=["concept"]).to_parquet(tmp_path / "nc.parquet")
    assert not generic.load(tmp_path / "nc.parquet")["en"].has_concepts


def test_generic_csv_with_feature_rows(tmp_path):
    np.save(tmp_path / "feats.npy", np.arange(12, dtype=np.float32).reshape(3, 4))
    pd.DataFrame(
        {"id": ["1", "2", "3"], "lang": ["en", "en", "fr"], "text": ["x", "y", "z"],
         "concept": ["c1", "", "c1"], "image_feature_row": [0, 2, 1]}
    ).to_csv(tmp_path / "f.csv", index=False)
    ds = generic.load(tmp_path / "f.csv", image_features=tmp_path / "feats.npy")
    en = ds["en"]
    assert en.ids == ["1", "2"] and en.concepts == ["c1", None]
    assert en.image_features == str((tmp_path / "feats.npy").resolve()) and en.image_rows.tolist() == [0, 2]
    assert ds["fr"].image_rows.tolist() == [1] and ds.has_images
    # relative feature path, resolved against the data file's folder
    assert generic.load(tmp_path / "f.csv", image_features="feats.npy")["en"].image_rows.tolist() == [0, 2]
    with pytest.raises(DataError, match="image_features"):
        generic.load(tmp_path / "f.csv")  # rows without the matrix


@pytest.mark.parametrize(
    "change, pattern",
    [
        (lambda rows: [{k: v for k, v in r.items() if k != "text"} for r in rows],
         r"missing required column 'text'; columns present: id, lang, concept, image"),
        (lambda rows: rows[:1] + [{**rows[1], "image": "imgs/nope.png"}] + rows[2:],
         r"id 'a2'.*image file not found: .*imgs/nope\.png"),
        (lambda rows: rows[:1] + [{**rows[1], "text": "   "}] + rows[2:], r"id 'a2'.*empty or whitespace"),
        (lambda rows: rows + [{**rows[0], "text": "again"}], r"id 'a1'.*duplicate id 'a1' in language 'en'"),
        (lambda rows: rows[:1] + [{**rows[1], "lang": None}] + rows[2:], r"id 'a2'.*has no lang"),
        (lambda rows: rows[:1] + [{**rows[1], "lang": ""}] + rows[2:], r"id 'a2'.*has no lang"),
    ],
    ids=["missing-column", "missing-image", "empty-text", "duplicate-id", "null-lang", "empty-lang"],
)
def test_generic_bad_input(tmp_path, items, change, pattern):
    rows = [{k: v for k, v in r.items() if k not in ("title", "body")} for r in items]
    path = _write_jsonl(tmp_path / "bad.jsonl", change(rows))
    with pytest.raises(DataError, match=pattern):
        generic.load(path)


@pytest.mark.parametrize(
    "row, pattern",
    [
        ("x", r"id 'bad'.*image_feature_row must be a non-negative integer, got 'x'"),
        (1.5, r"id 'bad'.*non-negative integer, got 1\.5"),
        (-1, r"id 'bad'.*non-negative integer, got -1"),
        (True, r"id 'bad'.*non-negative integer"),
        (7, r"id 'bad'.*image_feature_row 7 is out of range .*\(3 rows\)"),
    ],
)
def test_generic_bad_feature_rows(tmp_path, row, pattern):
    np.save(tmp_path / "feats.npy", np.zeros((3, 2), np.float32))
    rows = [{"id": "ok", "lang": "en", "text": "fine", "image_feature_row": 0},
            {"id": "bad", "lang": "en", "text": "broken", "image_feature_row": row}]
    path = _write_jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(DataError, match=pattern):
        generic.load(path, image_features=tmp_path / "feats.npy")


def test_generic_image_and_feature_row_together(tmp_path):
    np.save(tmp_path / "feats.npy", np.zeros((3, 2), np.float32))
    _png(tmp_path / "i.png")
    rows = [{"id": "both", "lang": "en", "text": "t", "image": "i.png", "image_feature_row": 1}]
    with pytest.raises(DataError, match=r"id 'both'.*either image or image_feature_row, not both"):
        generic.load(_write_jsonl(tmp_path / "b.jsonl", rows), image_features=tmp_path / "feats.npy")
    # CSV: empty cells are missing values, so one of the two per row is fine
    pd.DataFrame({"id": ["p"], "lang": ["en"], "text": ["t"], "image": ["i.png"], "image_feature_row": [""]}).to_csv(
        tmp_path / "ok.csv", index=False)
    assert generic.load(tmp_path / "ok.csv", image_features=tmp_path / "feats.npy")["en"].image_paths


def test_generic_images_or_feature_rows_for_every_item_of_a_language_or_none(tmp_path, items):
    rows = [{k: v for k, v in r.items() if k not in ("title", "body")} for r in items]
    rows[1] = {k: v for k, v in rows[1].items() if k != "image"}  # en: a1 has an image, a2 none
    with pytest.raises(DataError, match=r"id 'a2' \(line 2\) has no image, while other 'en' items have one; "
                                        r"give an image for every item of a language or none"):
        generic.load(_write_jsonl(tmp_path / "some.jsonl", rows))
    np.save(tmp_path / "feats.npy", np.zeros((3, 2), np.float32))
    rows = [{"id": "r0", "lang": "de", "text": "t", "image_feature_row": 0}, {"id": "r1", "lang": "de", "text": "u"}]
    with pytest.raises(DataError, match=r"id 'r1' \(line 2\) has no image_feature_row, while other 'de' items have "
                                        r"one; give a row for every item of a language or none"):
        generic.load(_write_jsonl(tmp_path / "rows.jsonl", rows), image_features=tmp_path / "feats.npy")


def test_generic_missing_file_and_type(tmp_path):
    with pytest.raises(DataError, match="nothere.jsonl"):
        generic.load(tmp_path / "nothere.jsonl")
    (tmp_path / "x.txt").write_text("id\n")
    with pytest.raises(DataError, match="unsupported"):
        generic.load(tmp_path / "x.txt")


# -------------------------------------------------------------------------------------- multi30k


def test_multi30k_en_de_test_split(multi30k_root):
    ds = multi30k.load(["en", "de"], root=multi30k_root)
    en, de = ds["en"], ds["de"]
    assert len(en) == len(de) == 8
    assert en.ids[0] == "test_2016_flickr-0" and en.ids == de.ids
    assert en.concepts == de.concepts and en.concepts[0] == "fixture-0001.jpg"
    assert en.texts[0] == "A brown dog runs across a green meadow." and "Hund" in de.texts[0]
    assert not ds.has_images and en.image_paths is None
    assert multi30k.load(root=multi30k_root).languages == ["cs", "de", "en", "fr"]
    assert multi30k.splits(multi30k_root) == ["test_2016_flickr", "test_2017_flickr", "val"]
    assert multi30k.languages("test_2017_flickr", multi30k_root) == ["en", "de", "fr"]
    with pytest.raises(DataError, match="unknown language 'cs'"):
        multi30k.load(["en", "cs"], root=multi30k_root, split="test_2017_flickr")


def test_multi30k_empty_caption_is_left_out(multi30k_root):
    val = multi30k.load(["en", "cs"], root=multi30k_root, split="val")
    assert len(val["en"]) == 6 and len(val["cs"]) == 5  # line 3 of val.cs is empty
    assert "val-2" in val["en"].ids and "val-2" not in val["cs"].ids
    i = val["cs"].ids.index("val-3")  # ids keep the line index, so the image still matches
    assert val["cs"].concepts[i] == val["en"].concepts[3] == "fixture-0104.jpg"


def test_multi30k_images_and_features(tmp_path, monkeypatch, multi30k_root):
    feats = tmp_path / "f.npy"
    np.save(feats, np.zeros((6, 3), np.float32))
    monkeypatch.setenv("BACKRETRIEVAL_MULTI30K", str(multi30k_root))  # root from the environment
    fr = multi30k.load(["fr"], split="val", image_features=feats)["fr"]
    assert fr.image_rows.tolist() == list(range(6)) and fr.image_features == str(feats.resolve())
    with pytest.raises(DataError, match=r"shape \(6, 3\); need \(8, d\)"):
        multi30k.load(["en"], image_features=feats)
    imgs = tmp_path / "flickr"
    imgs.mkdir()
    names = (multi30k_root / "data/task1/image_splits/test_2016_flickr.txt").read_text().split()
    for n in names[:-1]:
        (imgs / n).touch()
    with pytest.raises(DataError, match=f"1 of 8 images .*{names[-1]}"):
        multi30k.load(["en"], images_dir=imgs)
    (imgs / names[-1]).touch()
    en = multi30k.load(["en"], images_dir=imgs)["en"]
    assert en.image_paths[0] == str((imgs / names[0]).resolve()) and en.image_features is None


def test_multi30k_missing_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="github.com/multi30k"):
        multi30k.load(["en"])
    with pytest.raises(DataError, match="data/task1"):
        multi30k.load(["en"], root=tmp_path)


# ------------------------------------------------------------------------------------------ ddtp


@pytest.fixture(scope="module")
def ddtp_en(ddtp_dir):
    return ddtp.load(["en"], source_dir=ddtp_dir)["en"]  # the one full parse of en


def test_ddtp_de_aligns_with_en(ddtp_en, ddtp_dir):
    de = ddtp.load(["de"], source_dir=ddtp_dir, max_docs=200)["de"]
    assert len(de) == 200 and de.ids == de.concepts
    # one item per distinct md5, as a plain scan of the file counts them (61,486 in the shared
    # bookworm copy, see its README; apt's files of today hold a few more)
    with lzma.open(ddtp.files_in(ddtp_dir)["en"], "rt", encoding="utf-8") as fh:
        distinct = {line.split(":", 1)[1].strip() for line in fh if line.startswith("Description-md5:")}
    assert len(ddtp_en) == len(distinct) and len(distinct) > 60000
    assert len(set(ddtp_en.ids)) == len(ddtp_en)
    en_ids = set(ddtp_en.ids)
    shared = [m for m in de.ids if m in en_ids]
    assert len(shared) >= 190
    md5 = "26581e685027d5ae84824362a4ba59ee"  # 0ad-data
    d, e = de.ids.index(md5), ddtp_en.ids.index(md5)
    assert de.texts[d].startswith("Echtzeit-Strategiespiel über antike Kriegsführung (Datendateien)\n0 A.D. ist")
    assert "Spielengine.\n\nDieses Paket enthält" in de.texts[d]  # " ." became a blank line
    assert ddtp_en.extra["title"][e] == "Real-time strategy game of ancient warfare (data files)"
    assert ddtp_en.extra["body"][e].endswith("This package contains the main data files required by 0 A.D.")
    assert not any(line.startswith(" ") for line in de.extra["body"][d].splitlines())
    # the full parse was cached and is used again
    assert list(Path(os.environ["BACKRETRIEVAL_CACHE"], "ddtp-parsed").glob("Translation-en-*.parquet"))


def _stanza(pkg, md5, lang, synopsis, *body):
    return "\n".join([f"Package: {pkg}", f"Description-md5: {md5}", f"Description-{lang}: {synopsis}", *body]) + "\n"


def _write_xz(path: Path, stanzas) -> Path:
    with lzma.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(stanzas))
    return path


def test_ddtp_parsing_dedup_and_options(tmp_path, monkeypatch):
    src = tmp_path / "ddtp"
    src.mkdir()
    _write_xz(src / "Translation-de.xz", [
        _stanza("a", "m1", "de", "Erstes Paket", " Zeile eins", " Zeile zwei", " .", " Absatz zwei", "  wörtlich"),
        _stanza("a-doc", "m1", "de", "Duplikat", " anders"),
        _stanza("b", "m2", "de", "Nur Synopse"),
        _stanza("c", "m3", "de", "Drittes", " lang " * 20),
    ])
    c = ddtp.load(source_dir=src)["de"]
    assert c.ids == ["m1", "m2", "m3"] and c.extra["package"] == ["a", "b", "c"]  # first stanza wins
    assert c.texts[0] == "Erstes Paket\nZeile eins\nZeile zwei\n\nAbsatz zwei\n wörtlich"
    assert c.extra["title"][0] == "Erstes Paket" and c.extra["body"][0].startswith("Zeile eins\n")
    assert c.texts[1] == "Nur Synopse" and c.extra["body"][1] == ""
    assert ddtp.load(source_dir=src, max_docs=2)["de"].ids == ["m1", "m2"]
    assert ddtp.load(source_dir=src, min_chars=50)["de"].ids == ["m1", "m3"]
    assert ddtp.load(source_dir=src, min_chars=50, max_docs=1)["de"].ids == ["m1"]
    # a second load reads the parquet cache, not the file
    monkeypatch.setattr(ddtp, "iter_docs", lambda path: (_ for _ in ()).throw(AssertionError("re-parsed")))
    assert ddtp.load(source_dir=src)["de"].ids == ["m1", "m2", "m3"]
    with pytest.raises(DataError, match="unknown language 'fr'"):
        ddtp.load(["fr"], source_dir=src)
    monkeypatch.setenv("BACKRETRIEVAL_DDTP_DIR", str(src))
    assert ddtp.load()["de"].ids == ["m1", "m2", "m3"]


def test_ddtp_fetch_with_apt(fresh_cache, tmp_path, monkeypatch):
    """A stand-in apt-get writes an i18n list file into the private Dir::State::Lists folder."""
    log = tmp_path / "apt.log"
    _script(tmp_path / "bin", "apt-get", f"""
echo "$@" > {log}
for a in "$@"; do case "$a" in Dir::State::Lists=*) d="${{a#Dir::State::Lists=}}";; esac; done
printf 'Package: p\\nDescription-md5: 0123\\nDescription-pt: Ola\\n mundo\\n' > "$d/deb.debian.org_debian_dists_bookworm_main_i18n_Translation-pt"
printf 'Package: q\\nDescription-md5: 4567\\nDescription-zh_CN: Ni hao\\n' > "$d/deb.debian.org_debian_dists_bookworm_main_i18n_Translation-zh%5fCN"
""")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    ds = ddtp.load(["pt", "zh_CN"])
    assert ds["pt"].texts == ["Ola\nmundo"] and ds["zh_CN"].ids == ["4567"]
    assert "Acquire::Languages=pt,zh_CN" in log.read_text() and log.read_text().rstrip().endswith("update")
    assert (fresh_cache / "ddtp" / "Translation-pt.xz").is_file()
    log.unlink()
    assert ddtp.load(["pt"])["pt"].ids == ["0123"] and not log.exists()  # from the cache now


def test_ddtp_apt_release_suite_comes_first(fresh_cache, tmp_path, monkeypatch):
    """apt also delivers the -security and -updates suites' files, whose names sort first; the
    release's own file must come first (so max_docs keeps the release's documents, as in the shared
    copy), the updates' new descriptions after it."""
    _script(tmp_path / "bin", "apt-get", """
for a in "$@"; do case "$a" in Dir::State::Lists=*) d="${a#Dir::State::Lists=}";; esac; done
printf 'Package: s\\nDescription-md5: m3\\nDescription-en: security fix\\n\\nPackage: a\\nDescription-md5: m1\\nDescription-en: first\\n' > "$d/deb.debian.org_debian-security_dists_bookworm-security_main_i18n_Translation-en"
printf 'Package: u\\nDescription-md5: m4\\nDescription-en: update\\n' > "$d/deb.debian.org_debian_dists_bookworm-updates_main_i18n_Translation-en"
printf 'Package: a\\nDescription-md5: m1\\nDescription-en: first\\n\\nPackage: b\\nDescription-md5: m2\\nDescription-en: second\\n' > "$d/deb.debian.org_debian_dists_bookworm_main_i18n_Translation-en"
""")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    en = ddtp.load(["en"])["en"]
    assert en.ids[:2] == ["m1", "m2"] and sorted(en.ids[2:]) == ["m3", "m4"]
    assert ddtp.load(["en"], max_docs=2)["en"].texts == ["first", "second"]


def test_ddtp_without_apt_explains(fresh_cache, monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(DataError, match="source_dir") as e:
        ddtp.load(["de"])
    assert "Translation-<lang>.xz" in str(e.value) and "apt-get" in str(e.value)


def test_a_misspelled_dataset_or_option_gets_did_you_mean():
    with pytest.raises(DataError, match=r"^unknown dataset 'emoji-cdlr' \(did you mean 'emoji-cldr'\?\); known: ddtp, emoji-cldr"):
        load_dataset("emoji-cdlr")
    with pytest.raises(DataError, match=r"^unknown dataset 'bert'; known: "):  # nothing close: no guess
        load_dataset("bert")
    with pytest.raises(DataError, match=r"unknown option 'txt' for dataset 'emoji-cldr' \(did you mean 'text'\?\); its options: text,"):
        load_dataset("emoji-cldr", txt="name")


@pytest.mark.parametrize("sep", [";", "\t", "|"], ids=["semicolon", "tab", "pipe"])
def test_generic_csv_delimiter_is_sniffed_from_the_header(tmp_path, sep):
    (tmp_path / "img.png").write_bytes(b"")  # the loader checks that the file exists, not its content
    lines = [["id", "lang", "text", "concept", "image"], ["1", "en", '"red, apple; fresh"', "c1", "img.png"],
             ["2", "de", "Apfel", "c1", "img.png"]]
    path = tmp_path / "items.csv"
    path.write_text("\ufeff" + "".join(sep.join(row) + "\n" for row in lines), encoding="utf-8")
    ds = generic.load(path)
    assert ds["en"].texts == ["red, apple; fresh"] and ds["de"].concepts == ["c1"]
    assert ds["de"].image_paths == [str(tmp_path / "img.png")]


def test_generic_csv_with_another_delimiter_and_no_required_columns_names_the_delimiter(tmp_path):
    path = tmp_path / "items.csv"
    path.write_text("ID;Language;text\n1;en;x\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"items\.csv: the header is semicolon-separated \('ID;Language;text'\) but lacks "
                                        r"the required columns 'id', 'lang'; columns present: ID, Language, text$"):
        generic.load(path)
    path.write_text("id,language,text\n1,en,x\n", encoding="utf-8")  # comma-separated: the column is named
    with pytest.raises(DataError, match=r"missing required column 'lang'; columns present: id, language, text$"):
        generic.load(path)


def test_generic_missing_image_says_where_paths_are_resolved_and_how_many_rows(tmp_path):
    data = tmp_path / "shop"
    (data / "images").mkdir(parents=True)
    (data / "images" / "a.png").write_bytes(b"")
    rows = [{"id": str(i), "lang": "en", "text": f"t{i}", "image": img}
            for i, img in enumerate(["images/a.png", "photos/b.png", "photos/c.png", None, str(tmp_path / "d.png")])]
    path = _write_jsonl(data / "items.jsonl", rows)
    with pytest.raises(DataError) as e:
        generic.load(path)
    assert str(e.value) == (
        f"{path}: id '1' (line 2): image file not found: {data / 'photos' / 'b.png'}; relative image paths are resolved "
        f"against the data file's folder, {data.resolve()}; 3 of the 4 rows with an image name a file that is not there")
