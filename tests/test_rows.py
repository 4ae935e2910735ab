"""core.normalize_rows: the one row normalisation of the encoders, against the formula it replaced."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval.core import normalize_rows


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_normalize_rows_same_bits_as_the_plain_formula(dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((200, 37)) * rng.lognormal(size=(200, 1))).astype(dtype)
    naive = x / np.linalg.norm(x, axis=1, keepdims=True)
    got = normalize_rows(x)
    assert got.dtype == dtype and got.tobytes() == naive.tobytes()
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_normalize_rows_keeps_zero_rows_and_input():
    x = np.array([[3.0, 4.0], [0.0, 0.0]])
    before = x.copy()
    assert normalize_rows(x).tolist() == [[0.6, 0.8], [0.0, 0.0]]
    assert np.array_equal(x, before)  # a new array
    with pytest.raises(ValueError, match="2-D"):
        normalize_rows(np.ones(3))
