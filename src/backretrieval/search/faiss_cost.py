"""The settings of a FAISS index and the cost model that weighs an approximate route against exact
search: every kind of distance (a blocked exact product, an HNSW graph-walk step while building
or searching, an IVF assignment or scan) counted in units of one exact-search distance by a fixed
weight per kind (:data:`DISTANCE_WEIGHTS`, measured and written down in BENCHMARKS.md), so the
choice is a deterministic function of sizes and options, never of a clock.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

METHODS = ("flat", "hnsw", "ivf")


@dataclasses.dataclass
class FaissOptions:
    """The settings of an approximate FAISS index (see the module doc).

    Attributes:
        m: HNSW links per node.
        ef_construction: HNSW ``efConstruction`` (the candidate list while the graph is built).
        ef_search: HNSW ``efSearch`` (the candidate list per query: recall against cost).
        nlist: IVF k-means cells (None: ``4 sqrt(N)``).
        nprobe: IVF cells searched per query.
        seed: seeds the IVF training sample.
        threads: FAISS's OpenMP threads (None: FAISS's default).
    """

    m: int = 32
    ef_construction: int = 80
    ef_search: int = 128
    nlist: int | None = None
    nprobe: int = 32
    seed: int = 0
    threads: int | None = None


KMEANS_ITERATIONS = 25  # FAISS's k-means iterations when an IVF index is trained


#: What one counted distance computation costs in each kind of work, relative to one inside exact
#: search's blocked float32 product (exact search, and the self-check's exact samples: weight 1).
#: Measured constants (BENCHMARKS.md, "What a counted distance costs": HNSW's from the timed 100k
#: routes, IVF's by bench/bench_approx_cost.py), never timings taken at run time: the route depends
#: only on the sizes and the options. An HNSW distance is computed inside a graph walk, one scattered vector at a time (search
#: and build alike); an IVF search scans its cells' vectors one by one after a blocked product with
#: the centroids; IVF's build is k-means, blocked products.
DISTANCE_WEIGHTS: dict[str, float] = {
    "hnsw build": 26.0,
    "hnsw search": 18.0,
    "ivf build": 1.0,
    "ivf search": 12.0,
}


def exact_cost(n_q: int, n_d: int) -> int:
    """Distance computations of exact search: every query against every database row (weight 1,
    the unit of the weighted costs)."""
    return int(n_q) * int(n_d)


def weighted(method: str, work: str, count: int) -> int:
    """``count`` distance computations of ``work`` (``"build"`` or ``"search"``) of a ``method``
    index in units of one exact-search distance (:data:`DISTANCE_WEIGHTS`; flat: weight 1), rounded up."""
    if method == "flat":
        return int(count)
    return int(math.ceil(int(count) * DISTANCE_WEIGHTS[f"{method} {work}"]))


MIN_POINTS_PER_CELL = 39  # FAISS's minimum of training points per k-means centroid (ClusteringParameters)


def ivf_nlist(n: int, options: FaissOptions | None = None) -> int:
    """The IVF cells of an index over ``n`` rows: the options' ``nlist`` (default ``4 sqrt(n)``),
    at most ``n // MIN_POINTS_PER_CELL`` and at least 1, so that k-means has the training points
    FAISS asks for (more cells than rows would fail inside FAISS, fewer than 39 rows per cell
    print its warning)."""
    opt = options or FaissOptions()
    wanted = opt.nlist or int(4 * np.sqrt(n))
    return max(1, min(int(wanted), int(n) // MIN_POINTS_PER_CELL))


def build_cost(method: str, n: int, options: FaissOptions | None = None) -> int:
    """Distance computations to build an index over ``n`` rows (the model of :func:`checked_cost`).

    HNSW: each inserted row runs a beam search of ``ef_construction`` candidates at level 0,
    each expanding up to ``2 m`` links: ``n * ef_construction * 2 m``. IVF: k-means on the
    training sample (``min(n, 256 nlist)`` rows, :data:`KMEANS_ITERATIONS` iterations, each row
    against every centroid), then each row against every centroid: ``(25 t + n) nlist``. Flat: 0."""
    opt = options or FaissOptions()
    if method == "flat":
        return 0
    if method == "hnsw":
        return int(n) * opt.ef_construction * 2 * opt.m
    if method == "ivf":
        nlist = ivf_nlist(n, opt)
        return (KMEANS_ITERATIONS * min(n, 256 * nlist) + int(n)) * nlist
    raise ValueError(f"unknown FAISS method {method!r}; use one of {', '.join(METHODS)}")


def query_cost(method: str, n: int, options: FaissOptions | None = None, value: int | None = None) -> int:
    """Distance computations of one query of an index over ``n`` rows at search effort ``value``
    (None: the options' ``ef_search`` / ``nprobe``), never more than ``n`` plus the IVF centroids.

    HNSW: ``efSearch`` candidates expanded, up to ``2 m`` links each: ``min(n, 2 m efSearch)``.
    IVF: every centroid, then ``nprobe`` cells of ``ceil(n / nlist)`` rows (balanced cells):
    ``nlist + min(n, nprobe ceil(n / nlist))``. Flat: ``n``."""
    opt = options or FaissOptions()
    if method == "flat":
        return int(n)
    if method == "hnsw":
        return min(int(n), 2 * opt.m * int(value if value is not None else opt.ef_search))
    if method == "ivf":
        nlist = ivf_nlist(n, opt)
        probe = min(nlist, int(value if value is not None else opt.nprobe))
        return nlist + min(int(n), probe * -(-int(n) // nlist))
    raise ValueError(f"unknown FAISS method {method!r}; use one of {', '.join(METHODS)}")


def sample_sizes(n_q: int, sample: int) -> tuple[int, int]:
    """Sizes of the tuning sample and of the disjoint held-out sample drawn from ``n_q`` queries:
    ``sample`` each, or half of the queries each (the tuning sample one more when odd) when
    there are fewer than ``2 sample``."""
    total = min(2 * int(sample), int(n_q))
    tune = min(int(sample), (total + 1) // 2)
    return tune, total - tune


def checked_cost(method: str, n_q: int, n_d: int, options: FaissOptions | None = None, *, sample: int = 1000,
                 value: int | None = None) -> int:
    """Weighted distance computations (:func:`weighted`: units of one exact-search distance) of
    checked approximate search if its calibration stopped at the first effort tried (``value``;
    None: the options'): the index build, exact search of both samples, both samples searched
    approximately, and the ``n_q`` queries searched. Calibration can only add to it, so when it
    exceeds :func:`exact_cost` exact search is cheaper. (The canonical scores of the ``n_q``
    lists, :func:`listed_scores`, are not counted: K + 1 per query, below 1% of any search.)"""
    tune, held = sample_sizes(n_q, sample)
    q = weighted(method, "search", query_cost(method, n_d, options, value))
    return weighted(method, "build", build_cost(method, n_d, options)) + (tune + held) * int(n_d) + (tune + held + int(n_q)) * q
