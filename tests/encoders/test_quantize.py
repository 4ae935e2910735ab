"""The serving forms' codes (encoders/quantize.py) equal sentence-transformers' own
``quantize_embeddings``, bit for bit; the bytes per item match the form."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval.encoders.quantize import (form_bytes, hamming, int8_codes, int8_ranges, packed_bits, sign_codes,
                                             unit_rows)
from backretrieval.search import l2_normalize

quantization = pytest.importorskip("sentence_transformers.quantization")


def _vectors(seed: int, n: int = 300, d: int = 48) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = unit_rows(rng.standard_normal((n, d)).astype(np.float32))
    x[:, 5] = 0.25  # a dimension constant over the corpus
    x[7] = x[3]  # a duplicate row
    return x


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_int8_codes_are_sentence_transformers_codes(seed):
    x = _vectors(seed)
    calib, rest = x[:200], x[200:]  # the rest lies partly outside the calibrated ranges
    ranges = int8_ranges(calib)
    np.testing.assert_array_equal(ranges, np.vstack((calib.min(0), calib.max(0))))
    for part in (calib, rest):
        want = quantization.quantize_embeddings(part, precision="int8", ranges=ranges)
        got = int8_codes(part, ranges)
        assert got.dtype == np.float32 and got.min() >= -128 and got.max() <= 127
        np.testing.assert_array_equal(got, want.astype(np.float32))
    assert (int8_codes(calib, ranges)[:, 5] == -128).all()  # the constant dimension


def test_binary_codes_are_the_sign_bits_sentence_transformers_packs():
    x = _vectors(3, d=50)  # not a multiple of 8: the last byte is padded with zero bits
    x[0, :4] = 0.0  # zero is not positive: bit 0, code -1
    codes = sign_codes(x)
    assert set(np.unique(codes)) == {-1.0, 1.0} and (codes[0, :4] == -1).all()
    bits = packed_bits(codes)
    np.testing.assert_array_equal(bits, quantization.quantize_embeddings(x, precision="ubinary"))
    assert bits.shape == (x.shape[0], 7)


def test_hamming_ranks_as_the_dot_product_of_the_signs():
    """d - 2 * hamming = the ±1 dot product, exactly: the grid's score of a binary form."""
    codes = sign_codes(_vectors(4, n=40, d=37))
    h = hamming(packed_bits(codes), packed_bits(codes[::-1]))
    brute = np.array([[sum(a != b for a, b in zip(p, q)) for q in codes[::-1]] for p in codes])
    np.testing.assert_array_equal(h, brute)
    np.testing.assert_array_equal(codes.astype(np.int64) @ codes[::-1].T.astype(np.int64), 37 - 2 * h)


def test_unit_rows_are_the_canonical_unit_rows_of_the_search():
    x = np.random.default_rng(5).standard_normal((64, 33)).astype(np.float32) * 3
    x[0] = 0.0
    np.testing.assert_array_equal(unit_rows(x), l2_normalize(x))


def test_bytes_per_item_match_the_form():
    assert [form_bytes(512, f) for f in (None, "int8", "binary")] == [2048, 512, 64]
    assert form_bytes(384, "binary") == 48 and form_bytes(50, "binary") == 7
    with pytest.raises(ValueError, match="unknown serving form"):
        form_bytes(8, "int4")
