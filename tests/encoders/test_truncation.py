"""Maximum text length: every text encoder cuts a text to its documented maximum before
tokenising, says how many texts it cut, embeds a text and its truncation alike (one cache entry),
and a 5 MB text costs bounded memory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from backretrieval.encoders.text.batching import TruncationWarning, _batches
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.encoders.cache import CachedTextEncoder

SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank. "
LONG = SENTENCE * 400  # 26,000 characters, ~5,600 tokens


def encode_warned(enc, texts, lang="en"):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = enc.encode(texts, lang)
    return out, [str(w.message) for w in caught if issubclass(w.category, TruncationWarning)]


# ----------------------------------------------------------------------------- 5 MB through the real models
SCRIPT = textwrap.dedent(
    """
    import json, re, resource, sys, warnings
    import numpy as np
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a regression fails here, not the machine
    from backretrieval.encoders import get_text_encoder
    from backretrieval.encoders.text.batching import TruncationWarning

    enc = get_text_encoder(sys.argv[1])
    enc.encode(["warm-up: load the model"], "de")
    text = ("Eine sehr lange Beschreibung des Pakets mit vielen Wörtern und Sätzen. " * 80_000)[:5_000_000]
    # the cut depends on the first max_chars characters only: taken from a 20,000-character prefix,
    # so that nothing has yet been allocated for the whole text when its cost is measured
    (cut,), _ = enc.truncate([text[:20_000]])

    def peak():  # the peak resident size since the last reset (Linux: VmHWM, reset by clear_refs 5)
        return int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1))

    def reset_peak():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    reset_peak()
    before = peak()
    alone = enc.encode([cut, "kurzer Text"], "de")[0]  # what the cut text itself costs
    mid = peak()
    reset_peak()
    start = peak()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vecs = enc.encode([text, "kurzer Text"], "de")
    grown = max(0, peak() - max(start, mid))  # what the 5 MB beyond the cut cost
    (whole_cut,), n_cut = enc.truncate([text])
    assert whole_cut == cut
    tokens = enc._get_model().token_count(cut, True) if sys.argv[1] == "e5-small" else None
    print(json.dumps({
        "grown_kib": grown, "cut_kib": mid - before, "same": bool(np.array_equal(vecs[0], alone)), "n_cut": n_cut, "len_cut": len(cut),
        "prefix": text.startswith(cut), "tokens": tokens, "idempotent": enc.truncate([cut]) == ([cut], 0),
        "warnings": [str(w.message) for w in caught if issubclass(w.category, TruncationWarning)],
    }))
    """
)


TEXT_KIB = 5_000_000 // 1024  # one copy of the 5 MB text (one byte per character)


def run_5mb(spec: str) -> dict:
    src = str(Path(__file__).resolve().parents[2] / "src")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, spec], capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": src},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_5mb_text_through_use_m_has_bounded_memory():
    got = run_5mb("use-m")
    # beyond encoding its cut, the 5,000,000-character text costs less than one copy of itself
    # (4,882 KiB; measured: under 0.1 MiB), never memory per token of the whole text (it was 22.6 GB)
    assert got["grown_kib"] < TEXT_KIB, got
    assert got["warnings"] == ["use-m: 1 of 2 de texts longer than 8,192 characters were truncated"]
    assert got["n_cut"] == 1 and got["len_cut"] == 8192 and got["prefix"] and got["idempotent"]
    assert got["same"]  # the text and its truncation: the same vector


def test_5mb_text_through_e5_small_has_bounded_memory():
    got = run_5mb("e5-small")
    assert got["grown_kib"] < TEXT_KIB, got
    assert got["warnings"] == ["e5-small: 1 of 2 de texts longer than 512 tokens were truncated"]
    assert got["n_cut"] == 1 and got["prefix"] and got["idempotent"]
    assert got["tokens"] <= 512 and got["len_cut"] < 8192  # the model's limit, not the character cap
    assert got["same"]


# ----------------------------------------------------------------------------- each model's limit
@pytest.fixture(scope="module")
def e5():
    return get_text_encoder("e5-small")


@pytest.fixture(scope="module")
def minilm():
    return get_text_encoder("minilm-en")


def test_e5_cuts_at_512_tokens(e5):
    model = e5._get_model()
    short = SENTENCE * 10
    (cut, same), n = e5.truncate([LONG, short])
    assert n == 1 and same == short and LONG.startswith(cut)
    assert model.token_count(cut, True) <= 512 < model.token_count(LONG[: len(cut) + 1], True)  # the longest prefix
    vecs, notes = encode_warned(e5, [LONG, short, cut])
    assert notes == ["e5-small: 1 of 3 en texts longer than 512 tokens were truncated"]
    np.testing.assert_array_equal(vecs[0], vecs[2])
    # a text that fits is embedded untouched, in one window
    np.testing.assert_array_equal(vecs[1], model.query([short])[0])


def test_minilm_cuts_where_sentence_transformers_truncates(minilm):
    model = minilm._get_model()
    assert minilm.max_length == "256 tokens" and minilm.max_chars == 256 * 16
    (cut,), n = minilm.truncate([LONG])
    assert n == 1 and LONG.startswith(cut)
    assert len(model.tokenizer(cut)["input_ids"]) <= 256 < len(model.tokenizer(LONG[: len(cut) + 8])["input_ids"])
    vecs, notes = encode_warned(minilm, [LONG])
    assert notes == ["minilm-en: 1 of 1 en texts longer than 256 tokens were truncated"]
    # the model's own truncation of the whole text gives the same vector: nothing it would use was cut
    np.testing.assert_allclose(vecs[0], model.encode([LONG], normalize_embeddings=True)[0], atol=1e-5)


@pytest.mark.parametrize("spec,limit", [("use-m", "8,192 characters"), ("tfidf-char", "100,000 characters")])
def test_character_limits(spec, limit):
    enc = get_text_encoder(spec)
    assert enc.max_length == limit
    cap = int(limit.split()[0].replace(",", ""))
    huge = SENTENCE * (cap // len(SENTENCE) + 2)
    if spec == "tfidf-char":
        enc.fit({"en": [huge, "a dog", "a cat"]})
    (cut,), n = enc.truncate([huge])
    assert n == 1 and cut == huge[:cap]
    vecs, notes = encode_warned(enc, [huge, cut, "a dog"])
    assert notes == [f"{spec}: 1 of 3 en texts longer than {limit} were truncated"]
    np.testing.assert_array_equal(vecs[0], vecs[1])


def test_cr5_bag_of_words_limit(tmp_path):
    from backretrieval.encoders.trained.cr5 import Cr5Model

    Cr5Model({"en": ["dog", "fox", "quick"]}, {"en": np.ones(3)}, {"en": np.eye(3)}).save(tmp_path / "m")
    enc = get_text_encoder(f"cr5:{tmp_path / 'm'}")
    assert enc.max_length == "100,000 characters"
    huge = "quick fox " * 10_000 + "dog " * 10_000  # the dogs start after 100,000 characters
    vecs, notes = encode_warned(enc, [huge])
    assert notes == [f"cr5:{tmp_path / 'm'}: 1 of 1 en texts longer than 100,000 characters were truncated"]
    assert vecs[0, 0] == 0.0 and vecs[0, 1] > 0  # no "dog" counted


def test_cache_keys_the_truncated_text(tmp_path, e5):
    """A text and its truncation share one cache entry; the warning is given once per call."""
    cached = CachedTextEncoder(e5, tmp_path)
    (cut,), _ = e5.truncate([LONG])
    first, notes = encode_warned(cached, [LONG, "short"])
    assert notes == ["e5-small: 1 of 2 en texts longer than 512 tokens were truncated"] and cached.n_encoded == 2
    again, notes = encode_warned(cached, [cut, LONG + " and more"])
    assert cached.n_encoded == 2 and notes == ["e5-small: 1 of 2 en texts longer than 512 tokens were truncated"]
    np.testing.assert_array_equal(again[0], first[0])
    np.testing.assert_array_equal(again[1], first[0])


def test_variants_seed_their_noise_with_the_truncated_text():
    enc = get_text_encoder("use-m@noise=0.5")
    huge = SENTENCE * 200
    vecs, notes = encode_warned(enc, [huge, huge[:8192]])
    assert notes == ["use-m: 1 of 2 en texts longer than 8,192 characters were truncated"]
    np.testing.assert_array_equal(vecs[0], vecs[1])


def test_batches_are_bounded_in_characters():
    lengths = np.array([5, 1, 7, 3, 100, 2, 2, 2])
    order = np.argsort(lengths, kind="stable")
    batches = [b.tolist() for b in _batches(order, lengths, size=3, max_chars=10)]
    assert [i for b in batches for i in b] == order.tolist()
    for b in batches:
        assert len(b) <= 3 and (len(b) == 1 or lengths[b].sum() <= 10)
    assert [4] in batches  # longer than the budget: a batch of its own


def test_grid_logs_truncation(tmp_path, shared_data):
    from backretrieval.analysis import EvalConfig, run_grid

    rows = [{"id": str(i), "lang": lang, "text": (LONG if i == 0 else f"item {i} {lang}"), "concept": str(i)}
            for lang in ("en", "de") for i in range(12)]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    logs: list[str] = []
    run_grid(EvalConfig(dataset=str(data), pairs=[("en", "de")], models=["use-m"], n=12, seeds=[0], k=5), None,
             progress=False, log=logs.append)
    assert "use-m: 1 of 12 en texts longer than 8,192 characters were truncated" in logs
    assert "use-m: 1 of 12 de texts longer than 8,192 characters were truncated" in logs
