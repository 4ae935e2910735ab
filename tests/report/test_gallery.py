"""Galleries (report/gallery.py): which queries are shown, in which order, on hand-built per-query
frames with known answers; how a cell reads; each image embedded once."""
from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from backretrieval.cli import main
from backretrieval.core import DataError
from backretrieval.report.gallery import ALL_FAIL, DISAGREE, RANDOM, Thumbnails, gallery_table, select_queries

COLUMNS = ["pair", "src_lang", "tgt_lang", "model", "seed", "query_id", "query_text", "retrieved_id", "retrieved_ids",
           "retrieved_text", "bkr_rank", "xlr_rank", "is_translation", "query_image", "retrieved_image"]


def frame(ranks: dict[str, dict[str, int]], *, pair=("en", "de"), seed=0, retrieved=None, truth=None) -> pd.DataFrame:
    """ranks[query][model] = the round-trip rank; retrieved[query][model] = the retrieved id
    (default: the query itself when the rank is 1, else 'x-<model>-<query>')."""
    rows = []
    for q, per_model in ranks.items():
        for m, r in per_model.items():
            got = (retrieved or {}).get(q, {}).get(m) or (q if r == 1 else f"x-{q}")
            rows.append({"pair": f"{pair[0]}->{pair[1]}", "src_lang": pair[0], "tgt_lang": pair[1], "model": m,
                         "seed": seed, "query_id": q, "query_text": f"text {q}", "retrieved_id": got,
                         "retrieved_ids": [got], "retrieved_text": f"target {got}", "bkr_rank": float(r),
                         "xlr_rank": np.nan if truth is None else float(truth[q][m]),
                         "is_translation": pd.NA if truth is None else truth[q][m] == 1,
                         "query_image": None, "retrieved_image": None})
    return pd.DataFrame(rows, columns=COLUMNS)


def test_disagreement_first_by_spread_then_all_fail_hardest_first_then_random():
    ranks = {
        "agree": {"a": 1, "b": 1, "c": 1},
        "split-wide": {"a": 1, "b": 64, "c": 2},  # log2 spread 6
        "split-narrow": {"a": 1, "b": 2, "c": 1},  # log2 spread 1
        "split-mid": {"a": 4, "b": 32, "c": 4},  # log2 spread 3
        "fail-hard": {"a": 50, "b": 50, "c": 50},
        "fail-easy": {"a": 3, "b": 3, "c": 3},
        "fail-harder": {"a": 90, "b": 90, "c": 90},
        "agree-2": {"a": 1, "b": 1, "c": 1},
    }
    sel = select_queries(frame(ranks), n=6, seed=0)
    assert list(sel["why"]) == [DISAGREE] * 3 + [ALL_FAIL] * 1 + [RANDOM] * 2
    assert list(sel["query_id"][:4]) == ["split-wide", "split-mid", "split-narrow", "fail-harder"]
    rest = set(sel["query_id"][4:])
    assert rest <= {"agree", "agree-2", "fail-hard", "fail-easy"} and len(rest) == 2


def test_same_ranks_different_items_is_a_disagreement_ranked_after_rank_spread():
    ranks = {"q1": {"a": 1, "b": 1}, "q2": {"a": 2, "b": 2}, "q3": {"a": 1, "b": 3}}
    retrieved = {"q1": {"a": "q1", "b": "q1"}, "q2": {"a": "u", "b": "v"}}
    sel = select_queries(frame(ranks, retrieved=retrieved), n=4, seed=0)
    assert list(sel["query_id"][:2]) == ["q3", "q2"] and list(sel["why"][:2]) == [DISAGREE, DISAGREE]
    assert list(sel["query_id"][2:]) == ["q1"] and list(sel["why"][2:]) == [RANDOM]


def test_groups_short_of_queries_leave_their_places_to_the_next():
    ranks = {f"f{i}": {"a": 5 + i, "b": 5 + i} for i in range(5)}  # every model fails, no disagreement
    ranks["ok"] = {"a": 1, "b": 1}
    sel = select_queries(frame(ranks), n=4, seed=0)  # 2 disagree + 1 fail + 1 random, no disagreement
    assert list(sel["why"]) == [ALL_FAIL] * 3 + [RANDOM]
    assert list(sel["query_id"][:3]) == ["f4", "f3", "f2"] and sel["query_id"].iloc[3] in ("f1", "f0", "ok")
    assert len(select_queries(frame(ranks), n=50)) == 6  # never more than there are


def test_random_part_is_seeded_and_per_pair():
    ranks = {f"q{i:02d}": {"a": 1, "b": 1} for i in range(40)}
    df = pd.concat([frame(ranks), frame(ranks, pair=("en", "ar"))])
    a, b, c = (select_queries(df, n=5, seed=s) for s in (7, 7, 8))
    pd.testing.assert_frame_equal(a, b)
    assert list(a["pair"]) == ["en->de"] * 5 + ["en->ar"] * 5 and set(a["why"]) == {RANDOM}
    assert list(a["query_id"]) != list(c["query_id"])
    want = [f"q{i:02d}" for i in np.random.default_rng(7).permutation(40)[:5]]
    assert list(a["query_id"][:5]) == want


def test_a_query_drawn_by_two_seeds_is_shown_once():
    df = pd.concat([frame({"q": {"a": 1, "b": 9}}, seed=1), frame({"q": {"a": 1, "b": 9}, "r": {"a": 1, "b": 1}}, seed=0)])
    sel = select_queries(df, n=4)
    assert sorted(zip(sel["query_id"], sel["seed"])) == [("q", 0), ("r", 0)]


def emoji_png(color) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGBA", (64, 64), color).save(buf, "PNG")
    return buf.getvalue()


def test_table_cells_escape_direction_and_images_once(tmp_path):
    red, blue = tmp_path / "red.png", tmp_path / "blue.png"
    red.write_bytes(emoji_png((255, 0, 0, 255)))
    blue.write_bytes(emoji_png((0, 0, 255, 128)))
    (tmp_path / "red-copy.png").write_bytes(red.read_bytes())
    df = frame({"q": {"a": 1, "b": 7}}, pair=("en", "he"), truth={"q": {"a": 1, "b": 3}})
    df["query_text"] = "<b>pizza</b> & co"
    df["retrieved_text"] = ["פיצה", "זה <script>"]
    df["query_image"] = str(red)
    df["retrieved_image"] = [str(tmp_path / "red-copy.png"), str(blue)]
    thumbs = Thumbnails()
    sel = select_queries(df, n=1)
    out = gallery_table(df, sel, thumbs, models=["b", "a"])
    assert "&lt;b&gt;pizza&lt;/b&gt; &amp; co" in out and "<script>" not in out and "&lt;script&gt;" in out
    assert re.findall(r"<th>(.*?)</th>", out) == ["query", "b", "a"]
    assert '<div dir="auto" lang="he">פיצה</div>' in out and '<div dir="auto" lang="en">' in out
    assert "round trip: rank 7; not the translation (it ranks 3)" in out and "leads back (rank 1); the translation" in out
    classes = re.findall(r'class="th (i[0-9a-f]+)"', out)
    assert len(classes) == 3 and len(set(classes)) == 2 == len(thumbs)  # red and its copy: one image
    css = thumbs.style()
    assert css.count("data:image/webp;base64,") == 2
    for cls in set(classes):
        uri = re.search(rf"\.{cls}\{{background-image:url\(data:image/webp;base64,([^)]+)\)\}}", css).group(1)
        from PIL import Image

        with Image.open(io.BytesIO(base64.b64decode(uri))) as im:
            assert im.format == "WEBP" and max(im.size) <= 96


def test_a_missing_image_is_named(tmp_path):
    df = frame({"q": {"a": 1}})
    df["query_image"] = str(tmp_path / "gone.png")
    with pytest.raises(DataError, match=r"image of en item q not found or unreadable: .*gone\.png"):
        gallery_table(df, select_queries(df, n=1), Thumbnails())


# ------------------------------------------------------- a real report, 5 models x 3 pairs x 12 queries

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
MODELS = ["use-m", "tfidf-char", "random", "use-m@mix=0.5", "tfidf-char@noise=1"]
PAIRS = ["en->ar", "he->en", "en->de"]
MAX_PAGE = 15 * 2**20


@pytest.fixture(scope="module")
def gallery_report(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("gallery-report")
    args = ["compare", "--dataset", "emoji-cldr", "--pairs", "en-ar,he-en,en-de", "--models", ",".join(MODELS),
            "--image-model", "color-hist", "--n", "120", "--seeds", "0,", "--n-boot", "100", "--out", str(out),
            "--quiet", "--report"]
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return out


def test_real_report_has_a_gallery_per_pair_and_sample_within_the_size_bound(gallery_report):
    path = gallery_report / "report.html"
    text = path.read_text(encoding="utf-8")
    assert path.stat().st_size <= MAX_PAGE
    tables = re.findall(r'<table class="gallery">.*?</table>', text, flags=re.S)
    assert len(tables) == 3 * 2  # per pair: BkR's sample and XLR's (emoji-cldr links the languages)
    for t in tables:
        assert len(re.findall(r"<tr>", t)) == 1 + 12
        assert len(re.findall(r"<th>", t)) == 1 + len(MODELS)
    assert sorted(h for h in re.findall(r'<h3 id="gallery-[^"]+">(.*?)</h3>', text)) == sorted(p.replace(">", "&gt;") for p in PAIRS)
    uris = re.findall(r"url\((data:image/webp;base64,[^)]+)\)", text)
    assert len(uris) == len(set(uris)) > 0  # each image's bytes once
    used = set(re.findall(r'class="th (i[0-9a-f]+)"', text))
    assert used == set(re.findall(r"\.(i[0-9a-f]+)\{background-image", text))
    doc = json.loads((gallery_report / "report.json").read_text())
    assert len(doc["examples"]) == 3 * 2 * 12 and {e["why"] for e in doc["examples"]} <= {DISAGREE, ALL_FAIL, RANDOM}


def test_gallery_in_headless_chromium(gallery_report):
    """Every thumbnail decodes, nothing is fetched, no console error, Arabic and Hebrew run right
    to left. Fails (never skips) when Chromium or Playwright is missing."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (scripts/setup.sh does: apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright (Python) is not installed: pip install -e '.[study,test]' (scripts/setup.sh does)")
    url = (gallery_report / "report.html").resolve().as_uri()
    fetched, console, errors = [], [], []

    def route(r):  # anything but the page itself and data: URIs is recorded and refused
        if r.request.url == url or r.request.url.startswith("data:"):
            return r.continue_()
        fetched.append(r.request.url)
        return r.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.route("**/*", route)
            page.on("console", lambda m: console.append((m.type, m.text)))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url, wait_until="load")
            thumbs = page.evaluate("""async () => {
                const urls = [...document.querySelectorAll('i.th')].map(e => getComputedStyle(e).backgroundImage);
                const out = [];
                for (const u of new Set(urls)) {
                    const img = new Image();
                    img.src = u.slice(5, -2);  // url("...")
                    try { await img.decode(); } catch (e) {}
                    out.push([u.slice(0, 40), img.naturalWidth]);
                }
                return [urls.length, out];
            }""")
            directions = page.evaluate("""() => Object.fromEntries(['ar', 'he', 'en'].map(l =>
                [l, [...document.querySelectorAll(`table.gallery div[lang="${l}"]`)].map(e => getComputedStyle(e).direction)]))""")
        finally:
            browser.close()
    n_used, decoded = thumbs
    assert n_used >= 3 * 2 * 12 * (1 + len(MODELS))  # every cell shows its image
    assert decoded and all(u.startswith('url("data:image/webp;base64,') and w > 0 for u, w in decoded), decoded
    assert fetched == [] and not errors and not [c for c in console if c[0] in ("error", "warning")], (fetched, errors, console)
    assert directions["ar"] and set(directions["ar"]) == {"rtl"}
    assert directions["he"] and set(directions["he"]) == {"rtl"}
    assert directions["en"] and set(directions["en"]) == {"ltr"}


def test_thumbnail_budget_implies_the_page_bound(tmp_path):
    """The worst case for a thumbnail is a large photo of pure noise: it still stays within the
    byte budget that keeps 5 models x 3 pairs x 12 queries under 15 MB even with no image shared
    (2 samples x 12 queries x 6 images per pair, beside the report's own figures)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    noise = tmp_path / "noise.png"
    Image.fromarray(rng.integers(0, 256, (900, 1200, 3), dtype=np.uint8)).save(noise)
    thumbs = Thumbnails()
    thumbs.tag(str(noise), "photo")
    uri = re.search(r"url\(([^)]+)\)", thumbs.style()).group(1)
    budget = 24_000
    assert len(uri) <= budget
    assert 3 * 2 * 12 * (1 + 5) * budget < MAX_PAGE - 2 * 2**20  # 2 MiB left for figures and tables


def test_rank_disagreements_known_places():
    from backretrieval.report.meta_report import rank_disagreements

    recs = []
    for seed in (0, 1):
        for m, (b, x) in {"a": (0.9, 0.1), "b": (0.5, 0.5), "c": (0.1, 0.9)}.items():
            recs.append({"model": m, "src_lang": "en", "tgt_lang": "de", "seed": seed, "bkr@10": b, "xlr@10": x})
            recs.append({"model": m, "src_lang": "en", "tgt_lang": "ar", "seed": seed, "bkr@10": b, "xlr@10": b + seed})
    r = rank_disagreements(recs, "bkr@10").set_index(["pair", "model"])
    assert r.loc[("en->de", "a"), ["by_bkr", "by_truth", "gap"]].tolist() == [1, 3, 2]
    assert r.loc[("en->de", "b"), "gap"] == 0 and r.loc[("en->de", "c"), "by_truth"] == 1
    assert r.xs("en->ar")["gap"].tolist() == [0, 0, 0]


def test_meta_examples_show_the_two_models_that_trade_places(gallery_report):
    """On the real grid behind the report: the pairs BkR and XLR order most differently, each with
    a gallery of the two models that trade places, on the queries where the two differ."""
    from backretrieval.analysis import EvalConfig, run_grid
    from backretrieval.report.meta_report import disagreement_examples, rank_disagreements

    cfg = EvalConfig(dataset="emoji-cldr", pairs=[("en", "ar"), ("he", "en"), ("en", "de")], models=MODELS,
                     image_model="color-hist", n=120, seeds=[0])
    res = run_grid(cfg, gallery_report, progress=False)
    text, css = disagreement_examples(res, "bkr@10", pairs=2, n=4)
    ranks = rank_disagreements(res.records, "bkr@10")
    worst = ranks.groupby("pair", sort=False)["gap"].sum().sort_values(ascending=False, kind="stable")
    assert worst.iloc[0] > 0  # these five models are placed differently somewhere
    shown = re.findall(r"<h3>(.*?)</h3>", text)
    assert shown and shown[0] == worst.index[0].replace(">", "&gt;")
    for t in re.findall(r'<table class="gallery">.*?</table>', text, flags=re.S):
        assert len(re.findall(r"<th>", t)) == 3 and 2 <= len(re.findall(r"<tr>", t)) <= 1 + 4
        assert t.count(f"({DISAGREE}, seed") == len(re.findall(r"<tr>", t)) - 1
    assert set(re.findall(r'class="th (i[0-9a-f]+)"', text)) == set(re.findall(r"\.(i[0-9a-f]+)\{", css))


def test_report_without_per_query_results_says_so(tmp_path):
    """A result assembled from ranks alone (no samples' items) gets its report, with a sentence
    instead of the galleries."""
    from backretrieval.analysis import EvalConfig
    from backretrieval.analysis.compare import compare_models
    from backretrieval.analysis.evaluate import EvalResult
    from backretrieval.report.compare_report import write_compare_report

    rng = np.random.default_rng(0)
    cfg = EvalConfig(dataset="synthetic", pairs=[("en", "de")], models=["a", "b"], n=40, seeds=[0])
    res = EvalResult(config=cfg, records=[{"model": m, "src_lang": "en", "tgt_lang": "de", "seed": 0} for m in "ab"],
                     ranks={(m, "en", "de", 0): {"bkr": rng.integers(1, 41, 40).astype(float)} for m in "ab"})
    path = write_compare_report(compare_models(res, "bkr@10", n_boot=50, n_perm=50), res, tmp_path)
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["examples"].startswith("no example gallery: record ") and "holds no items of its samples" in doc["examples"]
    assert "<h2>Examples: what each model retrieved</h2>" in path.read_text(encoding="utf-8")
    write_compare_report(compare_models(res, "bkr@10", n_boot=50, n_perm=50), res, tmp_path / "none", examples=0)
    assert "examples" not in json.loads((tmp_path / "none" / "report.json").read_text())


def test_long_ids_are_cut_with_the_full_id_on_hover():
    """5,000-character ids are shown cut (the full id in the element's title, once per cell), so
    the page stays small."""
    long_q, long_t = "q" * 5000, "t" * 5000
    df = frame({long_q: {"a": 2, "b": 3}}, retrieved={long_q: {"a": long_t, "b": long_t}})
    out = gallery_table(df, select_queries(df, n=1), Thumbnails(), models=["a", "b"])
    assert len(out) < 3 * 5000 + 2000, len(out)  # the query's id once, the retrieved id once per model
    assert out.count(long_q) == 1 and out.count(long_t) == 2
    assert f'title="{long_q}"' in out and f'title="{long_t}"' in out
    assert "q" * 39 + "\u2026" in out and "t" * 39 + "\u2026" in out
    short = gallery_table(frame({"q1": {"a": 1}}), select_queries(frame({"q1": {"a": 1}}), n=1), Thumbnails())
    assert "<small>q1 (" in short and "title=" not in short  # short ids stay as they are
