"""core.normalize_rows: the one row normalisation of the encoders, against the formula it replaced;
core.first_bad_row: the one check for unusable rows (encoders and metrics), against the whole-matrix check."""
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


def _first_bad_naive(x):
    """The obvious reference: the whole matrix in float32, NaN/inf first, then all-zero rows."""
    x = np.asarray(x, dtype=np.float32)
    bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
    if bad.size:
        return "nonfinite", int(bad[0])
    zero = np.flatnonzero(~x.any(axis=1))
    return ("zero", int(zero[0])) if zero.size else None


@pytest.mark.parametrize("chunk", [1, 3, 7, 65536])
def test_first_bad_row_matches_the_whole_matrix_check_for_any_chunk(chunk):
    from backretrieval.core import first_bad_row

    rng = np.random.default_rng(0)
    cases = []
    for trial in range(40):
        x = rng.normal(size=(int(rng.integers(1, 20)), 4))
        for _ in range(int(rng.integers(0, 3))):  # a few all-zero rows, NaN/inf rows anywhere
            x[rng.integers(len(x))] = 0.0
        for _ in range(int(rng.integers(0, 2))):
            x[rng.integers(len(x)), rng.integers(4)] = rng.choice([np.nan, np.inf, -np.inf])
        cases.append(x)
    x = np.ones((5, 2))
    x[1] = 0.0
    x[4, 0] = 1e300  # overflows float32: read as inf, and inf is looked for before zeros
    cases.append(x)
    for x in cases:
        assert first_bad_row(x, chunk=chunk) == _first_bad_naive(x)
    assert first_bad_row(cases[-1], chunk=chunk) == ("nonfinite", 4)
    assert first_bad_row(np.ones((3, 2)), chunk=chunk) is None
