"""The metric table: one :class:`MetricSpec` per metric an evaluation record can carry, and the
one parser of metric names (:func:`parse_metric`).

A metric name is a stem, with ``@K`` when the metric is taken at a cut-off K: ``xlr@10``,
``bkr@5``, ``bkr_mrr``, ``corr``, ``hubness_skew@10``. Everything that names metrics reads this
table: the evaluation's two routes (exact search and ``approx``) compute what it lists, the
summary and its printed table show its summary columns, ``compare`` accepts its rankable metrics,
``meta`` its candidate proxies, and the reports take chance levels and counterparts from it.

Each entry says what its value is computed from (``source``):

* ``"xlr"``, ``"xlr_t2s"``, ``"bkr"``: the per-query ranks of the true item (XLR source->target,
  target->source, BkR). The value is ``aggregate(outcome(ranks, K))``; :func:`.values.rank_values`
  computes every such metric of a source, and ``compare`` ranks models by the per-query outcomes.
* ``"text"``: the non-matching sample's text embeddings; ``function(src, tgt, k, sim=, csls_k=)``
  returns a dict holding the metric's key (hubness).
* ``"corr"``: the text and image distances of the non-matching sample (CORR).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Iterable

import numpy as np

from ..core import BackretrievalError

KSel = int | str  # a cut-off K: a number, "k" (the configured K) or "depth" (the approximate search depth)
RANK_SOURCES = ("xlr", "xlr_t2s", "bkr")


def hits(ranks: np.ndarray, k: int) -> np.ndarray:
    """Per-query 0/1 outcomes whose mean is Recall@K (or BkR@K).

    Args:
        ranks: 1-based pessimistic ranks of the right item, any shape (inf: not found).
        k: the cut-off K.

    Returns:
        float64 array of the shape of ``ranks``: 1.0 where the rank is <= ``k``, else 0.0.
    """
    return (np.asarray(ranks) <= k).astype(np.float64)


def reciprocal(ranks: np.ndarray, k: int | None = None) -> np.ndarray:
    """Per-query outcomes whose mean is the MRR; with ``k``, the MRR truncated at K.

    Args:
        ranks: 1-based ranks of the right item, any shape (a 0 gives inf; inf, not found, gives 0).
        k: None, or the cut-off beyond which a rank counts 0.

    Returns:
        float64 array of the shape of ``ranks``: ``1 / rank`` (0 where the rank exceeds ``k``).
    """
    r = 1.0 / np.asarray(ranks, dtype=np.float64)
    return r if k is None else np.where(np.asarray(ranks) <= k, r, 0.0)


def _rank(ranks: np.ndarray, k: int | None = None) -> np.ndarray:
    """The ranks themselves (the outcome whose median is the median rank)."""
    return ranks


def _ratio(k: int | None, n: int) -> float:
    """K/N capped at 1: the chance level of Recall@K among N candidates."""
    return min(1.0, k / n)


def _harmonic(k: int | None, n: int) -> float:
    """The mean of 1/r over r = 1..N: the MRR of a model that ranks at random among N candidates."""
    return sum(1.0 / r for r in range(1, n + 1)) / n


def _truncated_harmonic(k: int | None, n: int) -> float:
    """The mean of 1/r over r = 1..min(K, N), divided by N: the MRR truncated at K at random."""
    return sum(1.0 / r for r in range(1, min(k, n) + 1)) / n


def _median(k: int | None, n: int) -> float:
    """The median of a rank drawn uniformly from 1..N."""
    return (n + 1) / 2


def _zero(k: int | None, n: int) -> float:
    return 0.0


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """One metric: what it is called, what it is computed from and where it is used.

    Attributes:
        name: the name pattern: a stem, with ``@K`` for a metric taken at a cut-off
            (``"xlr@K"``, ``"bkr_mrr"``).
        description: one line for listings.
        source: what the value is computed from: ``"xlr"``, ``"xlr_t2s"``, ``"bkr"`` (per-query
            ranks), ``"text"`` (the non-matching sample's text embeddings) or ``"corr"``.
        function: the public function that reports the metric (its key in the dict it returns),
            named relative to :mod:`backretrieval.metrics` (``"xlr"``, ``"approx.xlr_approx"``) or
            the function itself (defined elsewhere); for source ``"text"`` the evaluation calls it.
        higher_is_better: the direction of the metric.
        needs_truth: computed on the matching sample, whose rows are linked across languages
            (the ground truth).
        needs_images: computed on the non-matching sample, which needs images.
        exact: the exact-search route computes it.
        approx: the approximate-search route (``EvalConfig.approx``) computes it.
        ks: for a metric with ``@K``: the K a record reports it at (numbers, ``"k"`` for the
            configured K, ``"depth"`` for the approximate search depth); the exact route drops K
            above N.
        summary: in the summary of the records (:func:`summary_columns`): True / False for a
            metric without K, else the K it is summarised at.
        shown: in the printed summary table by default (same form as ``summary``).
        rankable: ``compare`` can rank models by it.
        candidate: ``meta --candidates`` can judge it as a proxy of the ground truth (never with
            ``needs_truth``); one where lower is better enters with its sign flipped.
        outcome: for a rank source: ``outcome(ranks, K)`` -> per-query values (``K`` None for a
            metric without K).
        aggregate: for a rank source: the per-query values -> the metric (``np.mean``, ``np.median``).
        chance: ``chance(K, N)``: the expected value for a model that ranks at random among N
            candidates (None: not declared).
        counterpart: the name pattern of the same measure on the other side (``bkr@K`` <-> ``xlr@K``).
    """

    name: str
    description: str
    source: str
    function: str | Callable[..., dict]
    higher_is_better: bool = True
    needs_truth: bool = False
    needs_images: bool = False
    exact: bool = True
    approx: bool = False
    ks: tuple[KSel, ...] = ()
    summary: bool | tuple[KSel, ...] = False
    shown: bool | tuple[KSel, ...] = False
    rankable: bool = False
    candidate: bool = False
    outcome: Callable[[np.ndarray, int | None], np.ndarray] | None = None
    aggregate: Callable[[np.ndarray], float] = np.mean
    chance: Callable[[int | None, int], float] | None = None
    counterpart: str | None = None

    def resolve(self) -> Callable[..., dict]:
        """The function named by ``function``.

        Returns:
            The callable: ``function`` itself, or imported from its module (:mod:`.approx`, ...).
        """
        import importlib

        if callable(self.function):
            return self.function
        module, _, fn = ("." + self.function).rpartition(".")
        return getattr(importlib.import_module("backretrieval.metrics" + module), fn)

    @property
    def stem(self) -> str:
        """The name without ``@K``."""
        return self.name.removesuffix("@K")

    @property
    def at_k(self) -> bool:
        """Whether the metric is taken at a cut-off K."""
        return self.name.endswith("@K")

    def key(self, k: int | None = None) -> str:
        """The record key of the metric at a cut-off.

        Args:
            k: the cut-off K (ignored for a metric without ``@K``).

        Returns:
            ``"xlr@10"``, ``"bkr_mrr"``, ...
        """
        return f"{self.stem}@{k}" if self.at_k else self.stem

    def value(self, ranks: np.ndarray, k: int | None = None) -> float:
        """The metric of per-query ranks (a metric of a rank source).

        Args:
            ranks: 1-based per-query ranks of the right item (inf: not found).
            k: the cut-off K (None for a metric without ``@K``).

        Returns:
            ``aggregate(outcome(ranks, k))`` as a float.
        """
        return float(self.aggregate(self.outcome(ranks, k)))

    def record_ks(self, n: int, k: int, depth: int | None = None) -> tuple[int | None, ...]:
        """The K a record reports the metric at.

        Args:
            n: the sample size N (the exact route drops K above it).
            k: the configured K.
            depth: None for the exact route; for the approximate route the depth searched: a
                metric with ``"depth"`` is taken there, the others at every K of :func:`approx_ks`.

        Returns:
            The K ascending; ``(None,)`` for a metric without ``@K``.
        """
        if not self.at_k:
            return (None,)
        if depth is not None:
            return (depth,) if "depth" in self.ks else approx_ks(n, k)
        return tuple(sorted({_resolve(s, k, depth) for s in self.ks} & set(range(1, n + 1))))


def _resolve(sel: KSel, k: int, depth: int | None) -> int | None:
    return k if sel == "k" else depth if sel == "depth" else sel


# what a metric's value is, shared by the entries of each source
_RECALL = dict(outcome=hits, chance=_ratio)  # Recall@K: the share of ranks <= K
_MRR = dict(outcome=reciprocal, chance=_harmonic)
_TRUNCATED_MRR = dict(outcome=reciprocal, chance=_truncated_harmonic, exact=False, approx=True, ks=("depth",))
_MEDIAN = dict(outcome=_rank, aggregate=np.median, chance=_median, higher_is_better=False)
_HUBNESS = dict(source="text", function="hubness", needs_images=True, higher_is_better=False, ks=("k",))
_XLR = dict(function="xlr", needs_truth=True)
_BKR = dict(source="bkr", function="bkr", needs_images=True)
_CANDIDATE = dict(rankable=True, candidate=True)  # ranks models (compare); a proxy of the truth (meta)

METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("xlr@K", "XLR: Recall@K of the translation, source -> target (ground truth)", "xlr", **_XLR, **_RECALL,
               approx=True, ks=(1, 5, 10), summary=(1, 10), shown=(1, 10), rankable=True, counterpart="bkr@K"),
    MetricSpec("xlr_mrr", "XLR: mean reciprocal rank of the translation", "xlr", **_XLR, **_MRR,
               rankable=True, counterpart="bkr_mrr"),
    MetricSpec("xlr_mrr@K", "XLR: MRR truncated at the approximate search depth K", "xlr", "approx.xlr_approx",
               needs_truth=True, **_TRUNCATED_MRR),
    MetricSpec("xlr_median_rank", "XLR: median rank of the translation", "xlr", **_XLR, **_MEDIAN),
    MetricSpec("xlr_t2s@K", "XLR target -> source: Recall@K", "xlr_t2s", **_XLR, **_RECALL,
               approx=True, ks=(1, 5, 10), summary=(10,), rankable=True),
    MetricSpec("xlr_t2s_mrr", "XLR target -> source: mean reciprocal rank", "xlr_t2s", **_XLR, **_MRR, rankable=True),
    MetricSpec("xlr_t2s_mrr@K", "XLR target -> source: MRR truncated at the approximate search depth K", "xlr_t2s",
               "approx.xlr_approx", needs_truth=True, **_TRUNCATED_MRR),
    MetricSpec("xlr_t2s_median_rank", "XLR target -> source: median rank", "xlr_t2s", **_XLR, **_MEDIAN),
    MetricSpec("bkr@K", "BkR@K: share of queries whose own image is among the K nearest to the image of the "
               "target retrieved", **_BKR, **_RECALL,
               approx=True, ks=(1, 5, "k"), summary=("k",), shown=("k",), **_CANDIDATE, counterpart="xlr@K"),
    MetricSpec("bkr_mrr", "BkR: mean reciprocal rank of the query's own image", **_BKR, **_MRR,
               summary=True, shown=True, **_CANDIDATE, counterpart="xlr_mrr"),
    MetricSpec("bkr_mrr@K", "BkR: MRR truncated at the approximate search depth K", "bkr", "approx.bkr_approx",
               needs_images=True, **_TRUNCATED_MRR, summary=("depth",), shown=("depth",)),
    MetricSpec("bkr_median_rank", "BkR: median rank of the query's own image", **_BKR, **_MEDIAN),
    MetricSpec("corr", "CORR: Spearman correlation of text and image distances (the baseline)", "corr", "corr_details",
               needs_images=True, approx=True, summary=True, shown=True, **_CANDIDATE, chance=_zero),
    MetricSpec("hubness_skew@K", "hubness: skewness of the K-occurrence distribution", **_HUBNESS, summary=("k",)),
    MetricSpec("hub_max@K", "hubness: the largest K-occurrence / K", **_HUBNESS),
    MetricSpec("antihub_share@K", "hubness: share of targets that are nobody's K nearest", **_HUBNESS),
)
BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}

_NAME = re.compile(r"([a-z][a-z0-9_]*)(?:@(\d+))?")


def known_metrics(*, rankable: bool = False, approx: bool | None = None, ranks: bool | None = None,
                  candidate: bool = False) -> tuple[str, ...]:
    """Name patterns of the table, in table order.

    Args:
        rankable: only the metrics ``compare`` accepts.
        approx: None: all; True / False: only those the approximate route computes / does not compute.
        ranks: None: all; True / False: only those computed / not computed from per-query ranks.
        candidate: only the candidate proxies ``meta`` judges.

    Returns:
        Names such as ``"xlr@K"``, ``"bkr_mrr"``.
    """
    return tuple(
        s.name for s in METRICS
        if (s.rankable or not rankable) and (s.candidate or not candidate) and (approx is None or s.approx == approx)
        and (ranks is None or (s.source in RANK_SOURCES) == ranks)
    )


def parse_metric(name: str, *, rankable: bool = False, candidate: bool = False) -> tuple[MetricSpec, int | None]:
    """A metric name -> its table entry and K: ``"xlr@10"`` -> ``(<xlr@K>, 10)``, ``"corr"`` -> ``(<corr>, None)``.

    Args:
        name: a metric name (``stem`` or ``stem@K``, K a whole number >= 1).
        rankable: accept only metrics that can rank models (``compare``).
        candidate: accept only candidate proxies of the ground truth (``meta``).

    Returns:
        ``(spec, K)``; ``K`` None for a metric without ``@K``.

    Raises:
        BackretrievalError: naming ``name``: unknown (listing the known names), a K missing or
            given where the metric has none, K below 1, or a metric that cannot rank models (with
            ``rankable``) or is no candidate proxy (with ``candidate``), listing those that are.
    """
    use = ", ".join(known_metrics(rankable=rankable, candidate=candidate))
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None or not ({m.group(1), m.group(1) + "@K"} & BY_NAME.keys()):
        raise BackretrievalError(f"unknown metric {name!r}: use {use}")
    stem, k = m.group(1), None if m.group(2) is None else int(m.group(2))
    spec = BY_NAME.get(stem if k is None else stem + "@K")
    if spec is None and k is None:
        raise BackretrievalError(f"metric {name!r} needs a cut-off: {stem}@K, e.g. {stem}@10")
    if spec is None:
        raise BackretrievalError(f"metric {name!r} takes no cut-off: use {stem}")
    if k is not None and k < 1:
        raise BackretrievalError(f"{name}: K must be at least 1")
    if rankable and not spec.rankable:
        raise BackretrievalError(f"metric {name!r} cannot rank models: use {use}")
    if candidate and not spec.candidate:
        why = "it needs the ground truth it would stand in for" if spec.needs_truth else "the metric table does not mark it one"
        raise BackretrievalError(f"metric {name!r} is no candidate proxy ({why}): use {use}")
    return spec, k


def metric_name(pattern: str, k: int | None = None) -> str:
    """The record key of a metric of the table at a cut-off: ``("bkr@K", 5)`` -> ``"bkr@5"``.

    Args:
        pattern: a name of the table (``"bkr@K"``, ``"corr"``).
        k: the cut-off K (ignored for a metric without ``@K``).

    Returns:
        The record key.

    Raises:
        BackretrievalError: ``pattern`` is not in the table, or ``k`` is missing for a metric with ``@K``.
    """
    spec = BY_NAME.get(pattern)
    if spec is None:
        raise BackretrievalError(f"unknown metric {pattern!r}: use {', '.join(known_metrics())}")
    if spec.at_k and k is None:
        raise BackretrievalError(f"metric {pattern!r} needs a cut-off K")
    return spec.key(k)


def approx_ks(n: int, k: int) -> tuple[int, ...]:
    """The K of every Recall@K the approximate route reports (it searches the top max(K) only):
    every K the exact route reports any metric of the approximate route at.

    Args:
        n: the sample size N.
        k: the configured K.

    Returns:
        Those K up to ``n``, ascending (1, 5, 10 and ``k``).
    """
    ks = {_resolve(s, k, None) for spec in METRICS if spec.approx and spec.at_k for s in spec.ks if s != "depth"}
    return tuple(sorted(ks & set(range(1, n + 1))))


def _columns(field: str, k: int, depth: int | None) -> tuple[str, ...]:
    out: list[str] = []
    for spec in METRICS:
        sel = getattr(spec, field)
        if not sel or not (spec.exact if depth is None else spec.approx):
            continue
        out += [spec.key()] if sel is True else [spec.key(_resolve(s, k, depth)) for s in sel]
    return tuple(dict.fromkeys(out))


def summary_columns(k: int = 10, depth: int | None = None) -> tuple[str, ...]:
    """The record keys a summary of the records holds, in table order.

    Args:
        k: the configured K.
        depth: None for exact search; the approximate search depth for records of the approximate route.

    Returns:
        Keys such as ``"xlr@1"``, ``"bkr@10"``, ``"bkr_mrr"``.
    """
    return _columns("summary", k, depth)


def shown_columns(k: int = 10, depth: int | None = None) -> tuple[str, ...]:
    """The columns of the printed summary table by default (a subset of :func:`summary_columns`).

    Args:
        k: the configured K.
        depth: None for exact search; the approximate search depth for records of the approximate route.

    Returns:
        Keys such as ``"xlr@10"``, ``"bkr@10"``.
    """
    return _columns("shown", k, depth)


def chance_level(name: str, n: int) -> float | None:
    """The expected value of metric ``name`` for a model that ranks at random among ``n`` candidates.

    Args:
        name: a metric name.
        n: the number of candidates N.

    Returns:
        K/N for Recall@K, the mean of 1/r over r = 1..N for an MRR, 0 for CORR; None for an
        unknown name or a metric without a declared chance level.
    """
    try:
        spec, k = parse_metric(name)
    except BackretrievalError:
        return None
    return None if spec.chance is None else spec.chance(k, n)


def counterpart(name: str) -> str | None:
    """The same measure on the other side: ``bkr@10`` <-> ``xlr@10``, ``bkr_mrr`` <-> ``xlr_mrr``.

    Args:
        name: a metric name.

    Returns:
        The counterpart's name, or None where the table declares none (and for unknown names).
    """
    try:
        spec, k = parse_metric(name)
    except BackretrievalError:
        return None
    return None if spec.counterpart is None else BY_NAME[spec.counterpart].key(k)


def describe(specs: Iterable[MetricSpec] = METRICS) -> list[str]:
    """One line per metric for listings (``backretrieval metrics``).

    Args:
        specs: the entries to describe (default: the whole table).

    Returns:
        Lines: name, direction, what it needs, the routes that compute it, whether it can rank
        models, and its description.
    """
    lines = []
    for s in specs:
        needs = "ground truth" if s.needs_truth else "images" if s.needs_images else "-"
        route = "exact+approx" if s.exact and s.approx else "exact" if s.exact else "approx"
        flags = ", rankable" * s.rankable + ", candidate proxy" * s.candidate
        lines.append(f"{s.name:<20} {'higher' if s.higher_is_better else 'lower'} is better; needs {needs}; "
                     f"{route}{flags}: {s.description}")
    return lines
