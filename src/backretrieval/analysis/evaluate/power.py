"""How much a grid's N, K and seeds let BkR tell models apart, said before the run.

Two checks, both on the data alone (before anything is encoded):

* :func:`check_n` -- the sample size N fits every pair: XLR's matching sample needs N concepts
  present in both languages, BkR's non-matching samples N items on each side with disjoint
  concepts (with one item per concept: 2N distinct concepts). An N that does not fit is refused
  with the largest N that works on each pair and why (:func:`largest_n`).
* :func:`power_note` -- one line when BkR@K has little power at this N, K and number of seeds:
  its chance level K/N is high (above :data:`MAX_CHANCE`), or the smallest gap in BkR@K between
  two models that the seeds' queries can detect (:func:`detectable_gap`) is larger than the gaps
  that matter (:data:`GAP`), with what would help: a smaller K, more products, or XLR on the
  part of the data that links languages.

How the detectable gap is estimated: BkR@K of a model is the share of its queries that hit, so
the gap between two models is a difference of two shares over the same queries. With ``q``
distinct queries (N per seed, over the seeds, but never more than the source language has
items: seeds of a small catalogue draw the same items again), the standard error of that gap is
at most ``sqrt(2 * 0.25 / q)`` (shares near 0.5, the models' hits independent); a two-sided test
at the 5 % level detects it 80 % of the time when it is ``(1.96 + 0.84)`` standard errors. Paired
queries of similar models make the real test somewhat stronger, so the number is an upper bound
and the note is on the safe side. docs/how-much-data.md shows the measured curve behind
:data:`MAX_CHANCE` and :data:`GAP`.
"""
from __future__ import annotations

import math
from typing import Sequence

from ...core import DataError
from ...data import Dataset
from ...data.sampling import largest_matching_n, largest_non_matching_n
from .features import draw_samples

MAX_CHANCE = 0.1  # BkR@K's chance level K/N above which a note is given
GAP = 0.05  # the gap in BkR@K between two models that matters
Z = 1.96 + 0.84  # two-sided 5 % test, 80 % power


class SampleSizeError(DataError):
    """A sample size N larger than the data allows (the message names the largest that works)."""


def sample_limits(ds: Dataset, src: str, tgt: str, seeds: Sequence[int] = (0,)) -> dict[str, int | None]:
    """The largest sample size N the data allow on one pair, per sample kind.

    Args:
        ds: the dataset.
        src: the source language.
        tgt: the target language.
        seeds: the sampling seeds (with several items per concept the split of the shared
            concepts, and so the largest N of BkR's sample, can depend on the seed; the smallest
            over the seeds counts).

    Returns:
        ``{"xlr": ..., "bkr": ...}``: the concepts present in both languages (the matching
        sample's limit, :func:`~backretrieval.data.sampling.largest_matching_n`; None without
        cross-lingual links) and the largest N for which
        :func:`~backretrieval.data.sampling.non_matching` draws two disjoint samples of N for
        every seed (it replays the sampler; None without images).
    """
    s, t = ds[src], ds[tgt]
    return {
        "xlr": largest_matching_n(s, t) if s.has_concepts and t.has_concepts else None,
        "bkr": min(largest_non_matching_n(s, t, seed) for seed in seeds) if s.has_images and t.has_images else None,
    }


def largest_n(ds: Dataset, src: str, tgt: str, seed: int = 0) -> tuple[int, str]:
    """The largest sample size N one pair allows (:func:`sample_limits`), and why.

    Args:
        ds: the dataset.
        src: the source language.
        tgt: the target language.
        seed: the sampling seed.

    Returns:
        ``(N, reason)``: the smaller of what XLR's matching sample allows (where both languages
        have concepts in common) and what BkR's non-matching samples allow (where both have
        images), and a phrase saying which limit it is and what it counts.
    """
    s, t = ds[src], ds[tgt]
    lim = sample_limits(ds, src, tgt, (seed,))
    limits = []
    if lim["bkr"] is not None:
        concepts = len(set(s.concept_keys()) | set(t.concept_keys()))
        limits.append((lim["bkr"],
                       f"BkR's two samples need N {src} and N {tgt} items with disjoint concepts, 2N distinct concepts "
                       f"with one item per concept; the {len(s)} {src} and {len(t)} {tgt} items cover {concepts}"))
    if lim["xlr"]:
        limits.append((lim["xlr"], f"XLR's sample needs N concepts present in both languages; there are {lim['xlr']}"))
    if not limits:
        return 0, f"{src}-{tgt} has neither cross-lingual links nor images"
    return min(limits, key=lambda limit: limit[0])


def check_n(ds: Dataset, pairs: Sequence[tuple[str, str]], n: int, seeds: Sequence[int] = (0,),
            option: tuple[str, str] = ("--n", "n")) -> None:
    """Refuse a sample size N that some pair cannot draw, naming the largest N that works.

    Args:
        ds: the dataset.
        pairs: the (source, target) pairs of the grid.
        n: the sample size N per side.
        seeds: the seeds of the grid (each draws its own samples).
        option: how the command line and Python name N, for the advice.

    Raises:
        SampleSizeError: N is larger than a pair allows: the error names each such pair's largest N
            and its reason, and the largest N every pair allows.
    """
    too_large = []
    fits_all = n
    for src, tgt in pairs:
        for seed in seeds:
            try:
                draw_samples(ds, src, tgt, n, seed)
                continue  # the common case: N fits, nothing to search
            except DataError:
                pass
            largest, why = largest_n(ds, src, tgt, seed)
            if largest < n:
                too_large.append(f"{src}-{tgt}: at most N={largest} ({why})")
                fits_all = min(fits_all, largest)
                break
    if too_large:
        raise SampleSizeError(
            f"{ds.name}: N={n} is too large for {'; '.join(too_large)}. "
            + (f"Use {option[0]} {fits_all} or less ({option[1]}={fits_all} in Python), or bring more items."
               if fits_all > 0 else "No N works: the data is too small.")
        )


def detectable_gap(queries: int) -> float:
    """The smallest gap in BkR@K between two models that ``queries`` distinct queries detect
    (two-sided 5 % test, 80 % power; an upper bound, see the module's docstring).

    Args:
        queries: distinct queries behind each model's BkR@K (N per seed, over the seeds, at
            most the source language's items).

    Returns:
        The gap, a share in (0, 1] (``inf`` for no query).
    """
    return Z * math.sqrt(0.5 / queries) if queries > 0 else math.inf


def queries_for_gap(gap: float) -> int:
    """The distinct queries :func:`detectable_gap` needs to detect ``gap``.

    Args:
        gap: a gap in BkR@K, in (0, 1].

    Returns:
        The smallest number of queries whose detectable gap is at most ``gap``.
    """
    return math.ceil(0.5 * (Z / gap) ** 2)


def power_note(ds: Dataset, pairs: Sequence[tuple[str, str]], n: int, k: int, seeds: int,
               gap: float = GAP, max_chance: float = MAX_CHANCE) -> str | None:
    """One line when BkR@K has little power at this N, K and number of seeds, else None.

    Args:
        ds: the dataset (only pairs whose languages both have images count: BkR needs them).
        pairs: the (source, target) pairs of the grid.
        n: the sample size N per side.
        k: the K of BkR@K.
        seeds: the number of seeds.
        gap: the gap in BkR@K between two models that matters.
        max_chance: the chance level K/N above which BkR@K is said to have little power.

    Returns:
        The note, one sentence without its full stop (as the grid's other notes): the chance level, the smallest detectable gap and the distinct queries it
        rests on, and what would help (a smaller K, more products, more seeds, XLR on the part of
        the data that links languages, with the largest N it allows); None when neither limit is
        reached or no pair has images.
    """
    bkr_pairs = [(s, t) for s, t in pairs if ds[s].has_images and ds[t].has_images]
    if not bkr_pairs:
        return None
    items = min(len(ds[s]) for s, _ in bkr_pairs)
    queries = min(n * seeds, items)
    chance, detectable = k / n, detectable_gap(queries)
    if chance <= max_chance and detectable <= gap:
        return None
    helps = []
    if chance > max_chance and k > 1:
        helps.append(f"a smaller K (--k 1: chance {1 / n:.3f})")
    need = queries_for_gap(gap)
    if need > items:
        helps.append(f"more products (a gap of {gap:.2f} needs about {need:,} distinct queries, N x seeds, from at least "
                     f"as many items; there are {items:,})")
    elif need > queries:
        helps.append(f"more seeds or a larger N (N x seeds of about {need:,} detects a gap of {gap:.2f})")
    linked = [largest_matching_n(ds[s], ds[t]) for s, t in pairs if ds[s].has_concepts and ds[t].has_concepts]
    if linked and min(linked) > 0:
        helps.append(f"XLR on the part that links languages (the ground truth; N up to {min(linked):,})")
    if not helps:
        helps.append("a larger N")
    labels = [f"{s}-{t}" for s, t in bkr_pairs]
    where = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
    return (
        f"BkR@{k} has little power at N={n}, K={k}, {seeds} seed{'s' * (seeds != 1)} ({where}): chance is {chance:.3f}, "
        f"and only gaps above {detectable:.2f} between two models can be detected ({queries:,} distinct queries; "
        f"gaps that matter are about {gap:.2f}). What would help: {', or '.join(helps)}"
    )


def fit_n(ds: Dataset, pairs: Sequence[tuple[str, str]], n: int | None, default: int,
          seeds: Sequence[int] = (0,), option: tuple[str, str] = ("--n", "n")) -> tuple[int, str | None]:
    """The sample size N of a grid: the one asked for, checked, or the default fitted to the data.

    Args:
        ds: the dataset.
        pairs: the (source, target) pairs of the grid.
        n: the N asked for; None: ``default``, or less where the data allows less.
        default: the N used when none is asked for and the data allows it.
        seeds: the seeds of the grid.
        option: how the command line and Python name N, for the advice.

    Returns:
        ``(N, note)``: the note says why N is below ``default`` when it was fitted, else None.

    Raises:
        SampleSizeError: ``n`` is larger than some pair allows (:func:`check_n`), or no N works.
    """
    if n is not None:
        check_n(ds, pairs, n, seeds, option)
        return n, None
    fits = [(min(largest_n(ds, s, t, seed)[0] for seed in seeds), largest_n(ds, s, t, seeds[0])[1]) for s, t in pairs]
    largest, why = min(fits, key=lambda f: f[0])
    if largest < 1:
        raise SampleSizeError(f"{ds.name}: no sample size N works: {why}")
    if largest >= default:
        return default, None
    return largest, f"N={largest}, the largest the data allows ({why})"
