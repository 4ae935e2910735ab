"""The metrics on quantised codes, ``sim="dot"``: int8 codes and ±1 sign bits (the serving forms
``@int8`` / ``@binary``) ranked by the raw dot product of the codes, as a vector store ranks them
(the integer inner product of int8 codes; for sign bits ``d - 2 * hamming``, the Hamming order).
Every score is an exact integer, so the fast metrics must equal the integer references of
tests/reference.py exactly, ties included, whatever the blocks and the BLAS."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import reference as ref
from backretrieval.core import MetricInputError
from backretrieval.metrics import bkr_ranks, corr_from_sides, hubness, image_side, text_side, xlr_ranks


def csr_lists(offsets, targets):
    return [targets[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]


def int8_like(rng, n, d, distinct):
    """Integer codes in [-128, 127] drawn from ``distinct`` rows: exact duplicates, and a third of
    the rows moved by one code in one place (scores one apart from a tie)."""
    base = rng.integers(-128, 128, size=(distinct, d)).astype(np.float32)
    x = base[rng.integers(0, distinct, n)].copy()
    for i in rng.choice(n, size=max(1, n // 3), replace=False):
        j = rng.integers(0, d)
        x[i, j] = np.clip(x[i, j] + rng.choice([-1, 1]), -128, 127)
    return x


def signs(rng, n, d, distinct):
    """±1 rows drawn from ``distinct`` sign patterns: exact duplicates."""
    return rng.choice([-1.0, 1.0], size=(distinct, d)).astype(np.float32)[rng.integers(0, distinct, n)]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 30), d=st.sampled_from([7, 64, 1024]), seed=st.integers(0, 10**6),
       block=st.sampled_from([16, 256, 10**9]), form=st.sampled_from(["int8", "binary"]))
def test_dot_on_codes_equals_the_integer_reference(n, d, seed, block, form):
    rng = np.random.default_rng(seed)
    make = int8_like if form == "int8" else signs
    s_codes, t_codes = make(rng, n, d, max(1, n // 3)), make(rng, n, d, max(1, n // 3))
    si, ti = signs(rng, n, 4, 3), signs(rng, n, 4, 3)
    exact = ref.code_scores(s_codes, t_codes)
    if form == "binary":  # the ±1 dot product ranks exactly as the Hamming distance of the bits
        assert np.array_equal(exact, d + 2 * ref.hamming_scores(s_codes, t_codes))
        exact = ref.hamming_scores(s_codes, t_codes)
    fwd, bwd, offsets, targets = xlr_ranks(s_codes, t_codes, sim="dot", block_bytes=block, return_nearest=True)
    want_fwd, want_bwd = ref.ranks_from_scores(exact)
    assert fwd.tolist() == want_fwd.tolist() and bwd.tolist() == want_bwd.tolist()
    ranks, b_off, b_targets = bkr_ranks(s_codes, t_codes, si, ti, sim="dot", block_bytes=block, return_ties=True)
    want_ranks, want_tied = ref.bkr_from_scores(exact, si, ti)
    assert ranks.tolist() == want_ranks.tolist()
    assert csr_lists(b_off, b_targets) == want_tied == csr_lists(offsets, targets)
    occ = np.zeros(n, dtype=int)  # hubness: the k nearest by score, ties by ascending index
    for row in exact:
        occ[sorted(range(n), key=lambda j: (-row[j], j))[:2]] += 1
    assert hubness(s_codes, t_codes, 2, sim="dot")["hub_max@2"] == occ.max() / 2


@pytest.mark.parametrize("form", ["int8", "binary"])
def test_dot_decisions_survive_a_perturbed_fast_pass(form):
    """Every fast score at the edge of its window (the largest error any BLAS may make): the
    decisions on codes do not move."""
    from edge_of_window import at_edge

    rng = np.random.default_rng(5)
    make = int8_like if form == "int8" else signs
    s_codes, t_codes = make(rng, 40, 1024, 12), make(rng, 40, 1024, 12)
    si, ti = signs(rng, 40, 4, 3), signs(rng, 40, 4, 3)
    clean = (xlr_ranks(s_codes, t_codes, sim="dot"), bkr_ranks(s_codes, t_codes, si, ti, sim="dot", return_ties=True))
    with at_edge(1):
        noisy = (xlr_ranks(s_codes, t_codes, sim="dot", block_bytes=300),
                 bkr_ranks(s_codes, t_codes, si, ti, sim="dot", return_ties=True, block_bytes=300))
    for a, b in zip([*clean[0], *clean[1]], [*noisy[0], *noisy[1]]):
        np.testing.assert_array_equal(a, b)
    assert clean[0][0].tolist() == ref.ranks_from_scores(ref.code_scores(s_codes, t_codes))[0].tolist()


def test_corr_of_codes_is_the_spearman_of_their_integer_scores():
    rng = np.random.default_rng(8)
    s_codes, t_codes = int8_like(rng, 25, 64, 6), int8_like(rng, 20, 64, 6)
    si, ti = rng.standard_normal((2, 25, 4)).astype(np.float32)
    ti = ti[:20]
    image = image_side(si, ti)
    got = corr_from_sides(text_side(s_codes, t_codes, sim="dot"), image)["corr"]
    want = stats.spearmanr(ref.code_scores(s_codes, t_codes).ravel(), ref.scores(ref.unit(si), ref.unit(ti)).ravel())
    assert got == pytest.approx(want.statistic, abs=1e-9)
    with pytest.raises(MetricInputError, match="cosine or dot"):
        text_side(s_codes, t_codes, sim="csls")
