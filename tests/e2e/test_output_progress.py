"""The encoding bar moves once per batch, with items/s and an ETA.

The bar advances per encoded batch, not per 2,048-text cache shard (a language of 1,942 long texts
would otherwise sit at "0/1942" for the whole encoding). Here a real model (minilm-en, batch size 64) encodes 200
real emoji names into an empty cache while tqdm draws every update (the bars' options
``mininterval=0, miniters=1``, so nothing depends on timing), and the captured output is read back.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from backretrieval.data import load_dataset
from backretrieval.encoders import cache
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.encoders.cache import CachedTextEncoder


@pytest.fixture
def every_update(monkeypatch, tmp_path):
    monkeypatch.setattr(cache._Cached, "bar_options", {"mininterval": 0, "miniters": 1})  # tqdm draws every update
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(tmp_path / "cache"))


def _frames(err: str, what: str) -> list[str]:
    return [f for f in re.split(r"[\r\n]", err) if f.startswith(f"encode {what}")]


def test_text_bar_moves_per_batch_with_rate_and_eta(every_update, capsys, shared_data):
    texts = load_dataset("emoji-cldr", langs=["en"])["en"].texts[:200]
    enc = CachedTextEncoder(get_text_encoder("minilm-en"), progress=True)
    assert enc.step() == 64  # the model's batch size
    vecs = enc.encode(texts, "en")
    frames = _frames(capsys.readouterr().err, "minilm-en/en")
    counts = [int(m.group(1)) for f in frames if (m := re.search(r"\| *(\d+)/200 \[", f))]
    assert counts[0] == 0 and counts[-1] == 200
    assert {64, 128, 192} <= set(counts), counts  # one update per batch of 64, not one per shard
    moving = [f for f in frames if not re.search(r"\| *0/200 ", f)]
    assert moving and all(re.search(r"text/s\]$", f) for f in moving), moving  # items per second
    assert all(re.search(r"<\d\d:\d\d", f) for f in moving), moving  # the ETA
    # batching by steps gives the same vectors as one call of the model, in the caller's order
    np.testing.assert_allclose(vecs, get_text_encoder("minilm-en").encode(texts, "en"), rtol=0, atol=1e-5)
    # a second call finds everything in the cache: no bar, nothing encoded
    enc2 = CachedTextEncoder(get_text_encoder("minilm-en"), progress=True)
    np.testing.assert_array_equal(enc2.encode(texts, "en"), vecs)
    assert enc2.n_encoded == 0 and not _frames(capsys.readouterr().err, "minilm-en/en")


def test_a_variant_shows_its_base_models_bar(every_update, capsys, shared_data):
    """use-m@noise=1 is not cached itself (the noise is cheap); its base model's cache encodes
    and must show the bar the grid asked for."""
    texts = load_dataset("emoji-cldr", langs=["de"])["de"].texts[:100]
    enc = CachedTextEncoder(get_text_encoder("minilm-en@noise=1"), progress=True)
    enc.encode(texts, "de")
    frames = _frames(capsys.readouterr().err, "minilm-en/de")
    assert any(re.search(r"\| *64/100 \[", f) for f in frames), frames


def test_grid_encoding_bar_moves(every_update, capsys, tmp_path, shared_data):
    """Through the evaluation grid (progress on): the bar of each language moves per batch."""
    from backretrieval.analysis import EvalConfig, run_grid

    cfg = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=["minilm-en"], image_model="color-hist",
                     n=100, k=5, seeds=[0])
    run_grid(cfg, None, progress=True)
    err = capsys.readouterr().err
    for lang in ("en", "de"):
        frames = _frames(err, f"minilm-en/{lang}")
        totals = {int(m.group(1)) for f in frames if (m := re.search(r"/(\d+) \[", f))}
        assert len(totals) == 1, frames
        total = totals.pop()
        counts = [int(m.group(1)) for f in frames if (m := re.search(rf"\| *(\d+)/{total} \[", f))]
        assert total > 64 and 64 in counts and counts[-1] == total, counts
    img = _frames(err, "color-hist images")  # color-hist: batch size 64
    first = [int(m.group(1)) for f in img if (m := re.search(r"\| *(\d+)/197 \[", f))]
    assert first[:4] == [0, 64, 128, 192] and first[-1] == 197, img
    assert all(re.search(r"img/s\]\s*$", f) for f in img if "| 0/" not in f), img  # tqdm pads a frame shorter than the last
