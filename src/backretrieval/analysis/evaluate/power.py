"""How much a grid's N, K and seeds let the verdict tell models apart, said before the run.

Two checks, both on the data alone (before anything is encoded):

* :func:`plan_samples` (and :func:`check_n`) -- the sample size N, per metric family: XLR's
  matching sample needs N concepts present in both languages, BkR's (and CORR's) non-matching
  samples N items on each side with disjoint concepts (with one item per concept: 2N distinct
  concepts). Each family is limited by what it needs: a family whose sample does not fit at N is
  left out with a note (XLR on a catalogue with few linked items, BkR on a small catalogue whose
  items are all linked), unless the caller needs it (``compare --metric xlr@10`` needs XLR); an N
  no needed family fits, or that no family fits, is refused, the message naming the limit of
  the metric that limits it (:func:`largest_n`).
* :func:`power_facts` and :func:`power_note` -- per pair, the chance level K/N and the smallest
  gap between the best of the models and each other model that the queries detect 80 % of the
  time (:func:`~.sensitivity.detectable_gap`, Holm over the models - 1 comparisons the verdict
  makes); one line when BkR@K has little power (chance above :data:`MAX_CHANCE`, or a
  detectable gap above the margin, the gap that matters: :data:`GAP` unless
  ``EvalConfig.margin`` says otherwise), with what would help: a smaller K, more products, or
  XLR on the part of the data that links languages.

How the detectable gap is estimated before a run: BkR@K of a model is the share of its queries
that hit, so the gap between two models is a difference of two shares over the same queries.
With ``q`` distinct queries (N per seed, over the seeds, but never more than the source language
has items: seeds of a small catalogue draw the same items again) the per-query difference has a
standard deviation of at most ``sqrt(0.5)`` (two models whose hits are independent, each near
0.5), and :func:`~.sensitivity.ship_power` gives the chance that the verdict ships the best
model. Models that agree on most queries do better, so the note before a run is on the safe
side; the verdict's own note (after the run) uses the spread the per-query results show.
docs/how-much-data.md shows the measured error rates and power of the verdict.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from ...core import DataError
from ...data import Dataset
from ...data.sampling import largest_matching_n, largest_non_matching_n
from .features import Samples, draw_samples
from .sensitivity import detectable_gap, queries_for_gap

__all__ = ["MAX_CHANCE", "GAP", "SampleSizeError", "sample_limits", "largest_n", "plan_samples", "check_n",
           "detectable_gap", "queries_for_gap", "power_facts", "power_note", "fit_n"]

MAX_CHANCE = 0.1  # BkR@K's chance level K/N above which a note is given
GAP = 0.05  # the gap in a metric between two models that matters: the verdict's default margin
FAMILIES = {"xlr": "XLR", "bkr": "BkR"}  # the sample each metric family needs: matching (XLR), non-matching (BkR, CORR)


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


def _limit_why(ds: Dataset, src: str, tgt: str, family: str, limit: int) -> str:
    """Why ``family``'s sample on ``src``-``tgt`` allows at most ``limit``: what it needs and what there is."""
    s, t = ds[src], ds[tgt]
    if family == "bkr":
        concepts = len(set(s.concept_keys()) | set(t.concept_keys()))
        return (f"BkR's two samples need N {src} and N {tgt} items with disjoint concepts, 2N distinct concepts with "
                f"one item per concept; the {len(s)} {src} and {len(t)} {tgt} items cover {concepts}")
    return f"XLR's sample needs N concepts present in both languages; there are {limit or 'none'}"


def largest_n(ds: Dataset, src: str, tgt: str, seed: int = 0, needs: Sequence[str] | None = None) -> tuple[int, str]:
    """The largest sample size N one pair allows (:func:`sample_limits`), and why.

    Args:
        ds: the dataset.
        src: the source language.
        tgt: the target language.
        seed: the sampling seed.
        needs: the metric families that must fit (``"xlr"``, ``"bkr"``); None: every family the
            pair has (links for XLR, images for BkR).

    Returns:
        ``(N, reason)``: the smallest of the families' limits (0 when a needed family is
        missing), and a phrase saying which limit it is and what it counts.
    """
    lim = sample_limits(ds, src, tgt, (seed,))
    families = [f for f in FAMILIES if lim[f] is not None] if needs is None else list(needs)
    limits = []
    for f in families:
        if lim.get(f) is None:
            return 0, f"{src}-{tgt} has no {'cross-lingual links' if f == 'xlr' else 'images'} for {FAMILIES[f]}"
        limits.append((lim[f], _limit_why(ds, src, tgt, f, lim[f])))
    if not limits:
        return 0, f"{src}-{tgt} has neither cross-lingual links nor images"
    return min(limits, key=lambda limit: limit[0])


def plan_samples(ds: Dataset, pairs: Sequence[tuple[str, str]], n: int, seeds: Sequence[int] = (0,),
                 needs: Sequence[str] = (), option: tuple[str, str] = ("--n", "n"),
                 purpose: str = "this evaluation") -> tuple[dict[tuple[str, str, int], Samples], list[str]]:
    """Draw every pair's samples at N, each metric family limited by what it needs.

    A family whose sample cannot be drawn at N on a pair (XLR: fewer than N linked concepts;
    BkR: fewer than 2N distinct concepts for its two disjoint samples) is left out on that pair
    with a note, unless it is needed.

    Args:
        ds: the dataset.
        pairs: the (source, target) pairs of the grid.
        n: the sample size N per side.
        seeds: the seeds of the grid (each draws its own samples).
        needs: the families the caller needs (``"xlr"``, ``"bkr"``): these must fit.
        option: how the command line and Python name N, for the advice.
        purpose: how the error names what needs a family (``"compare --metric xlr@10"``).

    Returns:
        ``(samples, notes)``: (source, target, seed) -> its :class:`~.features.Samples` (a family
        left out is None), and one sentence per family left out on some pair.

    Raises:
        DataError: a pair with neither links nor images.
        SampleSizeError: N is larger than a needed family allows on some pair, or larger than
            every family allows: the error names each such pair's limits (per family, with the
            reason) and the largest N that works.
    """
    samples: dict[tuple[str, str, int], Samples] = {}
    too_large, notes, fits_all = [], [], n
    for src, tgt in pairs:
        drawn = {f: [] for f in FAMILIES}
        for seed in seeds:
            both = draw_samples(ds, src, tgt, n, seed, fitting=True)
            for f in FAMILIES:
                drawn[f].append(getattr(both, f))
        lim: dict[str, int | None] = {}
        has = {f: _has_family(ds, src, tgt, f) for f in FAMILIES}
        short = [f for f in FAMILIES if has[f] and not all(x is not None for x in drawn[f])]
        fits = [f for f in FAMILIES if has[f] and f not in short]
        bad = [f for f in short if f in needs] or ([] if fits else short)
        if short:
            lim = sample_limits(ds, src, tgt, seeds)
        if bad:
            bad.sort(key=lambda f: lim[f] or 0)
            limits = " and ".join(f"N={lim[f] or 0} for {FAMILIES[f]}" + (f", which {purpose} needs" if f in needs else "")
                                  + f" ({_limit_why(ds, src, tgt, f, lim[f] or 0)})" for f in bad)
            too_large.append(f"{src}-{tgt}: at most {limits}")
            fits_all = min(fits_all, max(lim[f] or 0 for f in bad) if not needs else min(lim[f] or 0 for f in bad))
            continue
        for f in short:
            notes.append(f"{FAMILIES[f]}{' and CORR' if f == 'bkr' else ''} not computed on {src}-{tgt}: N={n} is more than "
                         f"its sample allows (at most N={lim[f] or 0}: {_limit_why(ds, src, tgt, f, lim[f] or 0)}); "
                         f"{' and '.join(FAMILIES[g] for g in fits)} {'is' if len(fits) == 1 else 'are'} computed at N={n}")
        for i, seed in enumerate(seeds):
            samples[(src, tgt, seed)] = Samples(*(drawn[f][i] if f in fits else None for f in ("xlr", "bkr")))
    if too_large:
        raise SampleSizeError(
            f"{ds.name}: N={n} is too large for {'; '.join(too_large)}. "
            + (f"Use {option[0]} {fits_all} or less ({option[1]}={fits_all} in Python), or bring more items."
               if fits_all > 0 else "No N works: the data is too small.")
        )
    return samples, notes


def _has_family(ds: Dataset, src: str, tgt: str, family: str) -> bool:
    s, t = ds[src], ds[tgt]
    return (s.has_concepts and t.has_concepts) if family == "xlr" else (s.has_images and t.has_images)


def check_n(ds: Dataset, pairs: Sequence[tuple[str, str]], n: int, seeds: Sequence[int] = (0,),
            option: tuple[str, str] = ("--n", "n"), needs: Sequence[str] = (), purpose: str = "this evaluation") -> None:
    """Refuse a sample size N that some pair cannot draw, naming the largest N that works
    (:func:`plan_samples`, whose samples are dropped).

    Args:
        ds: the dataset.
        pairs: the (source, target) pairs of the grid.
        n: the sample size N per side.
        seeds: the seeds of the grid (each draws its own samples).
        option: how the command line and Python name N, for the advice.
        needs: the families that must fit (``"xlr"``, ``"bkr"``); (): at least one on each pair.
        purpose: how the error names what needs a family.

    Raises:
        SampleSizeError: N is larger than a pair allows: the error names each such pair's limits
            and their reasons, and the largest N every pair allows.
    """
    plan_samples(ds, pairs, n, seeds, needs, option, purpose)


def power_facts(ds: Dataset, pairs: Sequence[tuple[str, str]], n: int, k: int, seeds: int | Sequence[int],
                margin: float = GAP, models: int = 2) -> dict[str, dict[str, Any]]:
    """What N, K and the seeds let BkR@K detect on each pair whose languages both have images,
    before the run (:mod:`.sensitivity`, with the safe-side spread of a difference of two shares).

    Args:
        ds: the dataset.
        pairs: the (source, target) pairs of the grid.
        n: the sample size N per side.
        k: the K of BkR@K.
        seeds: the seeds (or their number: seeds 0 .. seeds - 1).
        margin: the gap between two models that matters (the verdict's equivalence margin).
        models: the number of models (the verdict makes models - 1 comparisons per pair).

    Returns:
        Per pair label (``"en->de"``): ``n``, ``k``, ``seeds``, ``chance`` (K/N), ``queries``
        (distinct queries: N x seeds, at most the source language's items), ``src_items``,
        ``tgt_items``, ``comparisons``, ``detectable_gap`` (80 % power; None when no gap up to 1
        is), ``margin``, ``queries_for_margin`` (the distinct queries a gap of ``margin`` needs)
        and ``largest_n`` (:func:`sample_limits`).
    """
    out = {}
    comparisons = max(models - 1, 1)
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    for s, t in dict.fromkeys(pairs):
        if not (ds[s].has_images and ds[t].has_images):
            continue
        items = len(ds[s])
        queries = min(n * len(seed_list), items)
        gap = detectable_gap(queries, comparisons=comparisons, discrete=True)
        out[f"{s}->{t}"] = {
            "n": n, "k": k, "seeds": len(seed_list), "chance": k / n, "queries": queries, "src_items": items,
            "tgt_items": len(ds[t]), "comparisons": comparisons, "detectable_gap": None if math.isinf(gap) else gap,
            "margin": margin, "queries_for_margin": queries_for_gap(margin, comparisons=comparisons, discrete=True),
            "largest_n": sample_limits(ds, s, t, seed_list or [0]),
        }
    return out


def power_note(ds: Dataset, pairs: Sequence[tuple[str, str]], n: int, k: int, seeds: int | Sequence[int],
               gap: float = GAP, max_chance: float = MAX_CHANCE, models: int = 2,
               facts: dict[str, dict[str, Any]] | None = None) -> str | None:
    """One line when BkR@K has little power at this N, K and number of seeds, else None.

    Args:
        ds: the dataset (only pairs whose languages both have images count: BkR needs them).
        pairs: the (source, target) pairs of the grid.
        n: the sample size N per side.
        k: the K of BkR@K.
        seeds: the seeds (or their number).
        gap: the gap in BkR@K between two models that matters (the verdict's margin).
        max_chance: the chance level K/N above which BkR@K is said to have little power.
        models: the number of models (the verdict makes models - 1 comparisons per pair).
        facts: :func:`power_facts` of the same arguments, when already computed.

    Returns:
        The note, one sentence without its full stop (as the grid's other notes): the chance
        level, the smallest detectable gap and the distinct queries it rests on, and what would
        help (a smaller K, more products, more seeds, XLR on the part of the data that links
        languages, with the largest N it allows); None when neither limit is reached or no pair
        has images.
    """
    facts = power_facts(ds, pairs, n, k, seeds, gap, models) if facts is None else facts
    seeds = len(seeds) if not isinstance(seeds, int) else seeds
    if not facts:
        return None
    worst = min(facts.values(), key=lambda f: (f["queries"], -(f["detectable_gap"] or math.inf)))
    chance, detectable, queries = k / n, worst["detectable_gap"], worst["queries"]
    if chance <= max_chance and detectable is not None and detectable <= gap:
        return None
    helps = []
    if chance > max_chance and k > 1:
        helps.append(f"a smaller K (--k 1: chance {1 / n:.3f})")
    need = worst["queries_for_margin"]
    items, most = worst["src_items"], worst["largest_n"]["bkr"]
    most = n if most is None else most  # the largest N BkR's samples allow
    src, tgt = next(label for label, f in facts.items() if f is worst).split("->")
    if need > items:
        helps.append(f"more products (a gap of {gap:.2f} needs about {need:,} distinct queries, N x seeds, from at least "
                     f"as many {src} items; there are {items:,})")
    elif need > queries:
        larger = "more seeds" if most <= n else "more seeds or a larger N"
        helps.append(f"{larger} (N x seeds of about {need:,} detects a gap of {gap:.2f})")
    if most <= n and worst["tgt_items"] < items:
        helps.append(f"more {tgt} items (BkR's N is at most {most:,} here: there are {worst['tgt_items']:,} {tgt} items "
                     f"and {items:,} {src} items)")
    linked = [largest_matching_n(ds[s], ds[t]) for s, t in pairs if ds[s].has_concepts and ds[t].has_concepts]
    if linked and min(linked) > 0:
        helps.append(f"XLR on the part that links languages (the ground truth; N up to {min(linked):,})")
    if not helps:
        helps.append("a larger N")
    labels = [label.replace("->", "-") for label in facts]
    where = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
    over = f"{worst['comparisons']} comparisons with the best" if worst["comparisons"] > 1 else "two models"
    can = (f"only gaps above {detectable:.2f} between the best and each other model are detected 80% of the time"
           if detectable is not None else "no gap between two models, however large, is detected 80% of the time")
    return (
        f"BkR@{k} has little power at N={n}, K={k}, {seeds} seed{'s' * (seeds != 1)} ({where}): chance is {chance:.3f}, "
        f"and {can} ({queries:,} distinct queries, {over}; gaps that matter are about {gap:.2f}). What would help: "
        f"{', or '.join(helps)}"
    )


def fit_n(ds: Dataset, pairs: Sequence[tuple[str, str]], n: int | None, default: int,
          seeds: Sequence[int] = (0,), option: tuple[str, str] = ("--n", "n"),
          needs: Sequence[str] | None = None) -> tuple[int, str | None]:
    """The sample size N of a grid: the one asked for, checked, or the default fitted to the data.

    Args:
        ds: the dataset.
        pairs: the (source, target) pairs of the grid.
        n: the N asked for; None: ``default``, or less where the data allows less.
        default: the N used when none is asked for and the data allows it.
        seeds: the seeds of the grid.
        option: how the command line and Python name N, for the advice.
        needs: the metric families the grid needs (``"xlr"``, ``"bkr"``); None: every family
            the pairs have (the default N fits all of them; an N asked for needs one per pair).

    Returns:
        ``(N, note)``: the note says why N is below ``default`` when it was fitted, else None.

    Raises:
        SampleSizeError: ``n`` is larger than some pair allows (:func:`check_n`), or no N works.
    """
    if n is not None:
        check_n(ds, pairs, n, seeds, option, needs or ())
        return n, None
    fits = [(min(largest_n(ds, s, t, seed, needs)[0] for seed in seeds), largest_n(ds, s, t, seeds[0], needs)[1])
            for s, t in pairs]
    largest, why = min(fits, key=lambda f: f[0])
    if largest < 1:
        raise SampleSizeError(f"{ds.name}: no sample size N works: {why}")
    if largest >= default:
        return default, None
    return largest, f"N={largest}, the largest the data allows ({why})"
