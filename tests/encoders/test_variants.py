"""Variants of any text model (encoders/variants.py): the serving forms ``@int8`` and ``@binary``
-- their spec syntax, bytes per item, the scoring they declare -- and on real texts their codes
against sentence-transformers' own ``quantize_embeddings`` and their ranks against integer
references (the other variants' specs: tests/encoders/test_options.py)."""
from __future__ import annotations

import numpy as np
import pytest

import reference as ref
from backretrieval.core import EncoderError
from backretrieval.encoders.cache import CachedTextEncoder
from backretrieval.encoders.quantize import unit_rows
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.encoders.variants import parse_variant, split_variants
from backretrieval.metrics import xlr_ranks


def test_forms_are_written_as_the_last_variant():
    assert split_variants("use-m@trunc=256@int8") == ("use-m", ["trunc=256", "int8"])
    assert parse_variant("use-m@trunc=256@int8") == ("use-m", [("trunc", 256.0), ("int8", None)])
    assert parse_variant("use-m@binary") == ("use-m", [("binary", None)])
    # an "@int8" that does not end the spec or precede another variant belongs to the base spec
    assert split_variants("precomputed:a@int8.npz@binary") == ("precomputed:a@int8.npz", ["binary"])
    for bad in ("use-m@int8@trunc=64", "use-m@int8@binary", "use-m@binary@noise=1"):
        with pytest.raises(EncoderError, match="serving form .* is the last operation"):
            parse_variant(bad)
    with pytest.raises(EncoderError, match="image variants support noise= and seed= only, not int8$"):
        from backretrieval.encoders.registry import get_image_encoder

        get_image_encoder("color-hist@int8")


def test_bytes_per_item_and_scoring_follow_the_form_through_the_cache():
    """use-m (512-d): 2,048 B as float32, 512 B as int8, 64 B as bits; the cache wrapper shows what
    the model says."""
    want = {"use-m@noise=0.5": (2048, "cosine"), "use-m@int8": (512, "dot"), "use-m@binary": (64, "dot"),
            "use-m@trunc=256@int8": (256, "dot"), "use-m@trunc=100@binary": (13, "dot"),
            "random?dim=384@binary": (48, "dot")}
    for spec, (size, scoring) in want.items():
        enc = get_text_encoder(spec)
        cached = CachedTextEncoder(enc)
        assert (enc.bytes_per_item, cached.bytes_per_item, cached.scoring) == (size, size, scoring), spec
        assert enc.name == spec
    int8 = get_text_encoder("use-m@int8")
    assert int8.version.endswith("|int8") and "int8 rule" in int8.versions and int8.fitted_on_texts
    assert "binary rule" in get_text_encoder("use-m@binary").versions
    assert not get_text_encoder("use-m@binary").fitted_on_texts


def test_int8_is_calibrated_before_it_encodes():
    enc = get_text_encoder("random?dim=32@int8")
    with pytest.raises(EncoderError, match="the int8 ranges of this variant are fitted on the evaluated texts"):
        enc.encode(["dog"], "en")
    enc.fit({"en": ["dog", "cat", "red heart"], "de": ["Hund", "Katze"]})
    x = enc.encode(["dog", "a text outside the calibration"], "en")
    assert x.dtype == np.float32 and x.shape == (2, 32) and x.min() >= -128 and x.max() <= 127
    assert np.array_equal(x, np.round(x))


@pytest.fixture(scope="module")
def emoji_names(shared_data):
    """A small real sample: 150 emoji with their English and German names, aligned by concept."""
    from backretrieval.data import load_dataset

    ds = load_dataset("emoji-cldr", langs=["en", "de"])
    en, de = ds["en"], ds["de"]
    concepts = sorted(set(en.concepts) & set(de.concepts))[:150]
    pick = {lang: {c: t for c, t in zip(ds[lang].concepts, ds[lang].texts)} for lang in ("en", "de")}
    return {lang: [pick[lang][c] for c in concepts] for lang in ("en", "de")}


@pytest.mark.filterwarnings("ignore:minilm-en. the model was not trained on language")
def test_forms_of_a_real_model_are_sentence_transformers_codes_ranked_as_a_vector_store(emoji_names):
    """minilm-en on emoji names: the int8 codes are ``quantize_embeddings``' codes with the ranges of
    every evaluated text; XLR's ranks on the codes are the ranks of the exact integer dot products
    (int8) and of the Hamming distances of the packed bits (binary), skin-tone ties included."""
    quantization = pytest.importorskip("sentence_transformers.quantization")
    int8 = get_text_encoder("minilm-en@int8").fit(emoji_names)  # encodes the texts once, into the cache
    fp32 = {lang: unit_rows(int8.base.encode(t, lang)) for lang, t in emoji_names.items()}  # from the cache
    binary = get_text_encoder("minilm-en@binary")
    ranges = np.vstack([np.concatenate(list(fp32.values())).min(0), np.concatenate(list(fp32.values())).max(0)])
    codes = {lang: int8.encode(t, lang) for lang, t in emoji_names.items()}
    bits = {lang: binary.encode(t, lang) for lang, t in emoji_names.items()}
    for lang in emoji_names:
        st_codes = quantization.quantize_embeddings(fp32[lang], precision="int8", ranges=ranges)
        np.testing.assert_array_equal(codes[lang], st_codes.astype(np.float32))
        packed = quantization.quantize_embeddings(fp32[lang], precision="ubinary")
        np.testing.assert_array_equal(np.packbits(bits[lang] > 0, axis=1), packed)
    for form, x, exact in (("int8", codes, ref.code_scores(codes["en"], codes["de"])),
                           ("binary", bits, ref.hamming_scores(bits["en"], bits["de"]))):
        fwd, bwd = xlr_ranks(x["en"], x["de"], sim="dot")
        want_fwd, want_bwd = ref.ranks_from_scores(exact)
        assert fwd.tolist() == want_fwd.tolist() and bwd.tolist() == want_bwd.tolist(), form
    diag = np.diagonal(exact)[:, None]  # binary: real ties with the true partner, which the tie rule decides
    assert ((exact == diag).sum(axis=1) > 1).sum() > 5
