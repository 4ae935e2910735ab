"""core.canonical: the canonical matrix product and tanh against slow references (tests/reference.py's
sequential float64 sums, 40-digit decimal tanh), and the cases that decide a float32 rounding."""
from __future__ import annotations

from decimal import Decimal, localcontext

import numpy as np
import pytest

import reference as ref
from backretrieval.core.canonical import factor, matmul, tanh


def _canonical_product(A, B):
    return ref.dots_matrix(A, np.asarray(B, np.float32).T).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1])
def test_matmul_equals_the_sequential_float64_sums(seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((70, 300)).astype(np.float32)
    B = rng.standard_normal((300, 90)).astype(np.float32)
    B[:, :10] = A[:10].T  # large dot products beside near-zero ones (cancellation)
    B[:, 10:20] = (A[20:30] - A[20:30].mean(1, keepdims=True)).T * 1e-3
    want = _canonical_product(A, B)
    got = matmul(A, B)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(matmul(A, factor(B)), want)
    assert np.count_nonzero((A @ B) != want) > 0  # float32 BLAS is not the canonical value here


def test_matmul_rows_do_not_depend_on_the_other_rows():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((257, 129)).astype(np.float32)
    B = factor(rng.standard_normal((129, 33)).astype(np.float32))
    whole = matmul(A, B)
    np.testing.assert_array_equal(np.concatenate([matmul(A[i : i + 5], B) for i in range(0, 257, 5)]), whole)
    np.testing.assert_array_equal(matmul(A[::-1], B)[::-1], whole)


def test_matmul_decides_a_sum_on_a_float32_rounding_boundary():
    # 1 + 2**-24 is the midpoint of 1 and the next float32: round-half-even gives 1.0, and
    # 1 + 2**-24 + 2**-40 rounds up; the float64 product's error interval straddles both
    A = np.array([[1.0, 2.0**-24, 0.0], [1.0, 2.0**-24, 2.0**-40]], dtype=np.float32)
    B = np.ones((3, 1), dtype=np.float32)
    got = matmul(A, B)
    assert got[0, 0] == np.float32(1.0)
    assert got[1, 0] == np.nextafter(np.float32(1.0), np.float32(2.0))
    np.testing.assert_array_equal(got, _canonical_product(A, B))


def test_matmul_rejects_shapes_that_do_not_multiply():
    with pytest.raises(ValueError, match="do not multiply"):
        matmul(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32))


def _tanh_40_digits(v: float) -> np.float32:
    with localcontext() as ctx:
        ctx.prec = 40
        e = (2 * Decimal(v)).exp()
        t = (e - 1) / (e + 1)
    f = np.float32(float(t))
    cands = (np.nextafter(f, np.float32(-1e9)), f, np.nextafter(f, np.float32(1e9)))
    return min(cands, key=lambda c: abs(Decimal(float(c)) - t))


def test_tanh_is_correctly_rounded():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(400) * 3, [0.0, -0.0, 1e-30, -1e-8, 9.0, -20.0, 88.0]]).astype(np.float32)
    got = tanh(x.reshape(-1, 1)).ravel()
    want = np.array([_tanh_40_digits(float(v)) for v in x], dtype=np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(tanh(np.array([np.nan], np.float32)))[0]
    np.testing.assert_array_equal(tanh(np.array([np.inf, -np.inf], np.float32)), [1.0, -1.0])


def _layers(rng, widths):
    return [(rng.standard_normal((o, i)).astype(np.float32) / np.sqrt(i), rng.standard_normal(o).astype(np.float32) * 0.1)
            for i, o in zip(widths[:-1], widths[1:])]


def test_the_triplet_and_m3l_readers_multiply_canonically():
    """The numpy forward passes of the Triplet tower and the M3L mapping use the canonical product
    in every layer (float32 BLAS gives other bits here), so their vectors are the same on every
    BLAS kernel."""
    from backretrieval.encoders.trained.m3l import NORM_EPS
    from backretrieval.encoders.trained.m3l import forward as m3l_forward
    from backretrieval.encoders.trained.triplet import head_forward

    rng = np.random.default_rng(4)
    x = rng.standard_normal((50, 96)).astype(np.float32)
    params = _layers(rng, [96, 128, 64])
    h = x
    for i, (w, b) in enumerate(params):
        h = _canonical_product(h, w.T) + b
        if i < len(params) - 1:
            np.maximum(h, 0, out=h)
    np.testing.assert_array_equal(head_forward(params, x, final_relu=False), h)
    assert np.count_nonzero(np.maximum(x @ params[0][0].T + params[0][1], 0) @ params[1][0].T + params[1][1] != h) > 0

    layers = _layers(rng, [96, 80, 80, 40])
    y = x
    for i, (w, b) in enumerate(layers):
        y = _canonical_product(y, w.T)
        y += b
        np.maximum(y, 0.0, out=y)
        if i < len(layers) - 1:
            y /= np.maximum(np.linalg.norm(y, axis=1, keepdims=True), NORM_EPS)
    np.testing.assert_array_equal(m3l_forward(x, layers), y)
