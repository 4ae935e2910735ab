"""FAISS backend (``faiss-cpu``): k nearest neighbours by inner product, exact or approximate.

* ``"flat"`` -- ``IndexFlatIP``: exact, the same neighbours as :func:`.kernels.topk` (up to the
  order of exactly tied scores, which FAISS does not define).
* ``"hnsw"`` -- ``IndexHNSWFlat`` (inner product), graph search; ``m`` links per node,
  ``ef_construction``, ``ef_search`` (raise it for better recall at a higher cost).
* ``"ivf"`` -- ``IndexIVFFlat`` with ``nlist`` k-means cells (default ``4 sqrt(N)``), trained on a
  seeded sample of at most ``256 nlist`` vectors, searching ``nprobe`` cells.

Approximate indexes trade exactness for speed at N where the exact N x N work is out of reach
(millions of items per language); :func:`top1_agreement` measures how often their first
neighbour equals the exact one on a sample, which every approximate result should report, and
:func:`calibrate` raises the search effort (HNSW ``efSearch``, IVF ``nprobe``) until a seeded
sample of queries reaches a target agreement with exact search, or falls back to exact search.

Vectors are added and queried in chunks, so callers may pass memory-mapped arrays; float32,
C-contiguous, unit-normalised (``normalize=True``, the default: inner product = cosine) copies
are made one chunk at a time.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np

from .exact import unit_rows_exact
from .kernels import topk

METHODS = ("flat", "hnsw", "ivf")
CHUNK = 65536


def _faiss():
    try:
        import faiss
    except ImportError as e:  # pragma: no cover - exercised only without faiss-cpu
        raise ImportError("the FAISS backend needs faiss-cpu: pip install faiss-cpu", name="faiss-cpu") from e
    return faiss


@dataclasses.dataclass
class FaissOptions:
    m: int = 32
    ef_construction: int = 80
    ef_search: int = 128
    nlist: int | None = None
    nprobe: int = 32
    seed: int = 0
    threads: int | None = None


def _chunks(n: int, size: int = CHUNK):
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))


def _rows(X: np.ndarray, sl: slice | np.ndarray, normalize: bool) -> np.ndarray:
    """Rows of ``X`` as a float32 C-contiguous copy, unit-normalised canonically (the same bits on
    every machine, see :mod:`.exact`) when ``normalize``."""
    x = np.array(X[sl], dtype=np.float32, order="C", copy=True)
    return unit_rows_exact(x) if normalize else x


def build_index(D: np.ndarray, method: str = "hnsw", options: FaissOptions | None = None, *, normalize: bool = True,
                progress: Any = None) -> Any:
    """An inner-product index over the rows of ``D`` (added in chunks)."""
    faiss = _faiss()
    opt = options or FaissOptions()
    if opt.threads:
        faiss.omp_set_num_threads(int(opt.threads))
    n, d = D.shape
    if method == "flat":
        index = faiss.IndexFlatIP(d)
    elif method == "hnsw":
        index = faiss.IndexHNSWFlat(d, opt.m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = opt.ef_construction
        index.hnsw.efSearch = opt.ef_search
    elif method == "ivf":
        nlist = opt.nlist or max(1, int(4 * np.sqrt(n)))
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(opt.seed)
        sample = np.sort(rng.choice(n, size=min(n, 256 * nlist), replace=False))
        index.train(_rows(D, sample, normalize))
        index.nprobe = min(opt.nprobe, nlist)
    else:
        raise ValueError(f"unknown FAISS method {method!r}; use one of {', '.join(METHODS)}")
    for sl in _chunks(n):
        index.add(_rows(D, sl, normalize))
        if progress is not None:
            progress.update(sl.stop - sl.start)
    return index


def search(index: Any, Q: np.ndarray, k: int, *, rows: np.ndarray | None = None, normalize: bool = True,
           progress: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, indices)`` of the ``k`` best rows per query, best first (FAISS order). The
    queries are ``Q`` or, with ``rows``, ``Q[rows]`` -- gathered one chunk at a time."""
    n = Q.shape[0] if rows is None else len(rows)
    scores = np.empty((n, k), dtype=np.float32)
    idx = np.empty((n, k), dtype=np.int64)
    for sl in _chunks(n):
        q = _rows(Q, sl if rows is None else np.asarray(rows[sl]), normalize)
        scores[sl], idx[sl] = index.search(q, k)
        if progress is not None:
            progress.update(sl.stop - sl.start)
    return scores, idx


def knn(Q: np.ndarray, D: np.ndarray, k: int, method: str = "flat", options: FaissOptions | None = None, *,
        normalize: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Build an index over ``D`` and search it with ``Q``: ``(scores, indices)``, both (n_q, k)."""
    if not 1 <= k <= D.shape[0]:
        raise ValueError(f"k={k} must be between 1 and the database size {D.shape[0]}")
    return search(build_index(D, method, options, normalize=normalize), Q, k, normalize=normalize)


def top1_agreement(Q: np.ndarray, D: np.ndarray, approx_top1: np.ndarray, sample: int = 1000, seed: int = 0, *,
                   normalize: bool = True) -> float:
    """Share of a seeded sample of queries whose approximate first neighbour is the exact one
    (exact = brute force over ``D`` in chunks; a tie for first place counts as agreement)."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(Q.shape[0], size=min(sample, Q.shape[0]), replace=False))
    q = _rows(Q, rows, normalize)
    best = np.full(q.shape[0], -np.inf, dtype=np.float32)
    for sl in _chunks(D.shape[0]):
        s, _ = topk(q, _rows(D, sl, normalize), 1)
        np.maximum(best, s[:, 0], out=best)
    got = np.einsum("ij,ij->i", q, _rows(D, approx_top1[rows], normalize))
    return float(np.mean(got >= best - 1e-6))


def exact_top(Q: np.ndarray, D: np.ndarray, k: int, *, normalize: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of the rows ``Q`` against all of ``D`` (``D`` read in chunks): canonical
    scores and indices, ties by ascending index, as :func:`.kernels.topk` (``Q`` must be small)."""
    q = _rows(Q, slice(None), normalize)
    best_s = np.full((q.shape[0], 0), -np.inf, dtype=np.float32)
    best_i = np.empty((q.shape[0], 0), dtype=np.int64)
    for sl in _chunks(D.shape[0]):
        d = _rows(D, sl, normalize)
        s, i = topk(q, d, min(k, d.shape[0]))
        cs = np.concatenate([best_s, s], axis=1)
        ci = np.concatenate([best_i, i + sl.start], axis=1)
        order = np.lexsort((ci, -cs.astype(np.float64)), axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(cs, order, axis=1), np.take_along_axis(ci, order, axis=1)
    return best_s, best_i


@dataclasses.dataclass
class Calibration:
    """What :func:`calibrate` chose and measured.

    ``agreement``: share of the sampled queries whose approximate first neighbour is an exact
    first neighbour (a tie for first place counts); ``recall``: mean share of the exact top ``k``
    found in the approximate top ``k``; ``low``: the 95% Wilson lower bound of the agreement;
    ``param``/``value``: the effort parameter and its chosen value (``None`` for flat search);
    ``fallback``: exact search was used because no effort reached the target; ``tried``: each
    (value, agreement, recall) measured; ``seconds``: the cost of calibrating (exact search of the
    sample included)."""

    method: str
    target: float
    sample: int
    agreement: float
    recall: float
    low: float
    param: str | None
    value: int | None
    fallback: bool
    tried: list[tuple[int, float, float]]
    seconds: float

    def as_dict(self, prefix: str = "") -> dict[str, Any]:
        """The fields as a plain dict, each key prefixed with ``prefix``."""
        return {f"{prefix}{k}": v for k, v in dataclasses.asdict(self).items()}


def _wilson_low(p: float, n: int, z: float = 1.96) -> float:
    if n == 0:
        return 0.0
    den = 1 + z * z / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / den)


def _agreement(q: np.ndarray, D: np.ndarray, exact_s: np.ndarray, exact_i: np.ndarray, idx: np.ndarray,
               normalize: bool) -> tuple[float, float]:
    from .exact import pair_scores

    top = idx[:, 0]
    valid = top >= 0
    got = np.full(top.shape, -np.inf, dtype=np.float32)
    if valid.any():
        rows = np.flatnonzero(valid)
        got[rows] = pair_scores(q, _rows(D, top[rows], normalize), rows, np.arange(rows.size))
    agree = float(np.mean(got >= exact_s[:, 0]))
    k = exact_i.shape[1]
    recall = float(np.mean([np.intersect1d(a[a >= 0], b).size / k for a, b in zip(idx[:, :k], exact_i)]))
    return agree, recall


def calibrate(index: Any, D: np.ndarray, Q: np.ndarray, method: str, *, k: int = 1, target: float = 0.99,
              sample: int = 1000, seed: int = 0, max_value: int | None = None, normalize: bool = True) -> Calibration:
    """Raise the search effort of ``index`` (over ``D``, queried by ``Q``) until, on a seeded
    sample of queries, the approximate first neighbour equals an exact one for at least ``target``
    of them *and* the approximate top ``k`` holds at least ``target`` of the exact top ``k``.

    HNSW doubles ``efSearch`` (from its current value, up to ``max_value``, default
    ``max(4096, 4 k)`` and at most the index size); IVF doubles ``nprobe`` up to ``nlist``. When
    the largest effort is still below the target the result says ``fallback=True``: the caller
    must search exactly (:func:`exact_index`). The chosen value is left set on ``index``.

    Args:
        index: a FAISS index built by :func:`build_index` over ``D``.
        D, Q: the database and the queries (may be memory-mapped).
        method: "hnsw", "ivf" or "flat" (flat is exact: agreement 1, nothing tuned).
        k: list length the caller will search (recall@k is reported too).
        target: required top-1 agreement, in (0, 1].
        sample: number of queries checked (seeded).

    Returns:
        A :class:`Calibration`.

    Raises:
        ValueError: for a bad target or sample size, or an unknown method.
    """
    if not 0 < target <= 1:
        raise ValueError(f"target agreement {target} must be in (0, 1]")
    if sample < 1:
        raise ValueError(f"sample {sample} must be positive")
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(Q.shape[0], size=min(sample, Q.shape[0]), replace=False))
    q = _rows(Q, rows, normalize)
    k = max(1, min(k, D.shape[0]))
    exact_s, exact_i = exact_top(q, D, k, normalize=normalize)
    if method == "flat":
        return Calibration(method, target, rows.size, 1.0, 1.0, _wilson_low(1.0, rows.size), None, None, False, [],
                           time.perf_counter() - t0)
    if method == "hnsw":
        param, value = "ef_search", int(index.hnsw.efSearch)
        top = min(max_value or max(4096, 4 * k), max(D.shape[0], 1))

        def set_value(v: int) -> None:
            index.hnsw.efSearch = v
    elif method == "ivf":
        param, value = "nprobe", int(index.nprobe)
        top = min(max_value or index.nlist, index.nlist)

        def set_value(v: int) -> None:
            index.nprobe = v
    else:
        raise ValueError(f"unknown FAISS method {method!r}; use one of {', '.join(METHODS)}")
    value = max(1, min(value, top))
    tried: list[tuple[int, float, float]] = []
    while True:
        set_value(value)
        _, idx = index.search(q, k)
        agree, recall = _agreement(q, D, exact_s, exact_i, idx, normalize)
        tried.append((value, agree, recall))
        ok = agree >= target and recall >= target
        if ok or value >= top:
            break
        value = min(top, 2 * value)
    fallback = not ok
    return Calibration(method, target, rows.size, agree, recall, _wilson_low(agree, rows.size), param, value, fallback,
                       tried, time.perf_counter() - t0)


def exact_index(D: np.ndarray, *, normalize: bool = True) -> Any:
    """An exact inner-product index over ``D`` (the fall-back of :func:`calibrate`)."""
    return build_index(D, "flat", normalize=normalize)
