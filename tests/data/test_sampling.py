"""matching / non_matching samples (Backretrieval paper, Section 3.1)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backretrieval.core import DataError
from backretrieval.data import Corpus, matching, non_matching
from backretrieval.data.sampling import largest_matching_n, largest_non_matching_n


def corpus(lang, concepts, dataset="toy"):
    return Corpus(dataset, lang, ids=[f"{lang}{i}" for i in range(len(concepts))],
                  texts=[f"text {c}" for c in concepts], concepts=list(concepts))


def test_matching_aligns_concepts_and_is_seeded():
    s = corpus("en", [f"c{i}" for i in range(50)])
    t = corpus("de", [f"c{i}" for i in range(49, -1, -1)] + ["only-de"])
    a_s, a_t = matching(s, t, 20, seed=3)
    b_s, b_t = matching(s, t, 20, seed=3)
    assert (a_s == b_s).all() and (a_t == b_t).all()
    assert [s.concepts[i] for i in a_s] == [t.concepts[j] for j in a_t]
    assert len(set(a_s.tolist())) == 20
    c_s, _ = matching(s, t, 20, seed=4)
    assert not (c_s == a_s).all()


def shared_and_own(n_shared: int, n_s_only: int, n_t_only: int, dup: bool):
    """An en and a de corpus sharing ``n_shared`` concepts, each with concepts of its own (en
    repeats three shared ones when ``dup``); None when a side would be empty."""
    shared = [f"c{i}" for i in range(n_shared)]
    s_con = shared + [f"s{i}" for i in range(n_s_only)] + (shared[:3] if dup else [])
    t_con = shared + [f"t{i}" for i in range(n_t_only)]
    if not s_con or not t_con:
        return None
    return corpus("en", s_con), corpus("de", t_con)


@settings(max_examples=60, deadline=None)
@given(n_shared=st.integers(0, 30), n_s_only=st.integers(0, 15), n_t_only=st.integers(0, 15),
       n=st.integers(1, 25), seed=st.integers(0, 1000), dup=st.booleans())
def test_non_matching_concepts_are_disjoint(n_shared, n_s_only, n_t_only, n, seed, dup):
    pair = shared_and_own(n_shared, n_s_only, n_t_only, dup)
    if pair is None:
        return
    s, t = pair
    try:
        si, ti = non_matching(s, t, n, seed)
    except DataError as e:
        assert "non-matching sampling impossible" in str(e)
        if not dup:  # one item per concept: impossible exactly when no split of the shared ones works
            assert max(0, n - n_s_only) + max(0, n - n_t_only) > n_shared
        return
    if not dup:
        assert max(0, n - n_s_only) + max(0, n - n_t_only) <= n_shared
    assert len(si) == len(ti) == n
    assert len(set(si.tolist())) == n and len(set(ti.tolist())) == n
    assert not {s.concepts[i] for i in si} & {t.concepts[j] for j in ti}
    si2, ti2 = non_matching(s, t, n, seed)
    assert (si == si2).all() and (ti == ti2).all()


@settings(max_examples=40, deadline=None)
@given(n_shared=st.integers(0, 30), n_s_only=st.integers(0, 15), n_t_only=st.integers(0, 15),
       seed=st.integers(0, 1000), dup=st.booleans())
def test_largest_non_matching_n_is_the_largest_that_draws(n_shared, n_s_only, n_t_only, seed, dup):
    pair = shared_and_own(n_shared, n_s_only, n_t_only, dup)
    if pair is None:
        return
    s, t = pair
    largest = largest_non_matching_n(s, t, seed)
    if largest:
        assert len(non_matching(s, t, largest, seed)[0]) == largest
    with pytest.raises(DataError, match=f"the largest n that works is {largest}$"):
        non_matching(s, t, largest + 1, seed)
    if not dup:  # one item per concept: the largest n with a split of the shared concepts
        assert largest == max(n for n in range(0, 60) if max(0, n - n_s_only) + max(0, n - n_t_only) <= n_shared)


def test_largest_matching_n_counts_shared_concepts():
    s, t = corpus("en", ["a", "b", "c", "d"]), corpus("de", ["b", "c", "d", "e", "b"])
    assert largest_matching_n(s, t) == 3
    assert largest_matching_n(s, corpus("de", ["x"])) == 0


def test_non_matching_emoji_like_all_shared():
    concepts = [f"e{i}" for i in range(100)]
    si, ti = non_matching(corpus("en", concepts), corpus("ja", concepts), 50, 0)
    assert len(si) == 50
    with pytest.raises(DataError, match="non-matching sampling impossible for n=51"):
        non_matching(corpus("en", concepts), corpus("ja", concepts), 51, 0)


def test_items_without_concepts_are_their_own():
    s = Corpus("toy", "en", ids=["a", "b", "c"], texts=["x", "y", "z"])
    t = Corpus("toy", "de", ids=["a", "b", "c"], texts=["x", "y", "z"])
    si, ti = non_matching(s, t, 3, 0)
    assert sorted(si.tolist()) == [0, 1, 2] == sorted(ti.tolist())
    with pytest.raises(DataError, match="no concept is shared"):
        matching(s, t, 2, 0)


def test_bad_sizes():
    s = corpus("en", ["a", "b", "c"])
    with pytest.raises(DataError, match="n=4 is larger than the 3 concepts"):
        matching(s, corpus("de", ["a", "b", "c"]), 4, 0)
    with pytest.raises(DataError, match="positive integer"):
        matching(s, s, 0, 0)


def test_corpus_rejects_bad_rows():
    with pytest.raises(DataError, match="duplicate id 'x'"):
        Corpus("toy", "en", ids=["x", "x"], texts=["a", "b"])
    with pytest.raises(DataError, match="empty or whitespace-only text for id 'y'"):
        Corpus("toy", "en", ids=["x", "y"], texts=["a", "  \n"])
