"""Sampling of Section 3.1 of the Backretrieval paper.

* :func:`matching` -- N concepts present in both languages, one item of each language per
  concept, aligned row by row (source row i <-> target row i): the sample for XLR.
* :func:`non_matching` -- N source items and N target items whose concepts are disjoint,
  simulating data without cross-lingual correspondences: the sample for BkR and CORR.

Both are deterministic functions of ``seed`` (numpy ``default_rng``). Items without a known
concept count as concepts of their own, so user data with no cross-lingual links always
samples as non-matching.
"""
from __future__ import annotations

import numpy as np

from ..core import DataError
from .corpus import Corpus


def _first_row_per_concept(corpus: Corpus) -> dict[str, int]:
    rows: dict[str, int] = {}
    for i, c in enumerate(corpus.concept_keys()):
        rows.setdefault(c, i)
    return rows


def _check_n(n: int) -> None:
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise DataError(f"sample size n must be a positive integer, got {n!r}")


def matching(src: Corpus, tgt: Corpus, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices ``(src_idx, tgt_idx)`` of ``n`` aligned ground-truth pairs.

    Where a concept has several items in a language, its first item is used.
    """
    _check_n(n)
    s_rows, t_rows = _first_row_per_concept(src), _first_row_per_concept(tgt)
    shared = sorted(set(s_rows) & set(t_rows))
    shared = [c for c in shared if not c.startswith("\x00")]
    if not shared:
        raise DataError(
            f"{src.dataset}: no concept is shared by {src.lang!r} and {tgt.lang!r}; "
            "ground-truth metrics (XLR) need cross-lingual links"
        )
    if n > len(shared):
        raise DataError(
            f"{src.dataset} {src.lang}-{tgt.lang}: n={n} is larger than the {len(shared)} concepts "
            "present in both languages"
        )
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(shared), size=n, replace=False)
    concepts = [shared[i] for i in pick]
    return (
        np.array([s_rows[c] for c in concepts], dtype=np.int64),
        np.array([t_rows[c] for c in concepts], dtype=np.int64),
    )


def largest_matching_n(src: Corpus, tgt: Corpus) -> int:
    """The largest ``n`` :func:`matching` can draw: the concepts present in both languages."""
    shared = set(_first_row_per_concept(src)) & set(_first_row_per_concept(tgt))
    return sum(1 for c in shared if not c.startswith("\x00"))


def _pools(src: Corpus, tgt: Corpus, n: int, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """The rows each side of a non-matching sample of ``n`` may draw from, concepts disjoint.

    Concepts found in both languages are shuffled and split between the two sides: each side
    first gets what it lacks from its own language-only concepts, the rest is halved."""
    s_keys, t_keys = src.concept_keys(), tgt.concept_keys()
    s_set, t_set = set(s_keys), set(t_keys)
    shared = sorted(s_set & t_set)
    s_pool = [i for i, c in enumerate(s_keys) if c not in t_set]
    t_pool = [i for i, c in enumerate(t_keys) if c not in s_set]
    # items per shared concept on each side
    s_by_c: dict[str, list[int]] = {}
    t_by_c: dict[str, list[int]] = {}
    for i, c in enumerate(s_keys):
        if c in t_set:
            s_by_c.setdefault(c, []).append(i)
    for i, c in enumerate(t_keys):
        if c in s_set:
            t_by_c.setdefault(c, []).append(i)
    need_s = max(0, n - len(s_pool))
    need_t = max(0, n - len(t_pool))
    order = rng.permutation(len(shared))
    # give shared concepts to the source until it has enough items, then to the target, then
    # alternate so that leftover concepts are split evenly
    got_s = got_t = 0
    for j, ci in enumerate(order):
        c = shared[ci]
        if got_s < need_s:
            side = "s"
        elif got_t < need_t:
            side = "t"
        else:
            side = "s" if j % 2 == 0 else "t"
        if side == "s":
            s_pool.extend(s_by_c[c])
            got_s += len(s_by_c[c])
        else:
            t_pool.extend(t_by_c[c])
            got_t += len(t_by_c[c])
    return s_pool, t_pool


def largest_non_matching_n(src: Corpus, tgt: Corpus, seed: int = 0) -> int:
    """The largest ``n`` :func:`non_matching` can draw with ``seed``: two samples of ``n`` items
    whose concepts are disjoint, so at least ``2 n`` distinct concepts between the two languages
    (exactly ``(distinct concepts) // 2`` when every concept has one item per language and
    both languages have every concept); 0 when not even one works."""
    def fits(n: int) -> bool:
        s_pool, t_pool = _pools(src, tgt, n, np.random.default_rng(seed))
        return len(s_pool) >= n and len(t_pool) >= n

    low, high = 0, min(len(src), len(tgt))  # fits(low); the answer is at most high
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def non_matching(src: Corpus, tgt: Corpus, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices ``(src_idx, tgt_idx)``, ``n`` each, with no concept on both sides.

    Concepts found in both languages are shuffled and split between the two sides (each side
    first gets what it lacks from its own language-only concepts, the rest is halved), then
    ``n`` items are drawn on each side from its own concepts.
    """
    _check_n(n)
    rng = np.random.default_rng(seed)
    s_pool, t_pool = _pools(src, tgt, n, rng)
    if len(s_pool) < n or len(t_pool) < n:
        concepts = set(src.concept_keys()) | set(tgt.concept_keys())
        shared = set(src.concept_keys()) & set(tgt.concept_keys())
        raise DataError(
            f"{src.dataset} {src.lang}-{tgt.lang}: non-matching sampling impossible for n={n}: "
            f"{len(src)} {src.lang} and {len(tgt)} {tgt.lang} items cover only {len(concepts)} "
            f"distinct concepts ({len(shared)} shared); two disjoint samples of n need 2n distinct concepts: "
            f"the largest n that works is {largest_non_matching_n(src, tgt, seed)}"
        )
    s_idx = rng.choice(np.array(sorted(s_pool), dtype=np.int64), size=n, replace=False)
    t_idx = rng.choice(np.array(sorted(t_pool), dtype=np.int64), size=n, replace=False)
    return s_idx, t_idx
