"""FAISS backend (``faiss-cpu``): k nearest neighbours by inner product, exact or approximate.

* ``"flat"`` -- ``IndexFlatIP``: exact, the same neighbours as :func:`.kernels.topk` (up to the
  order of exactly tied scores, which FAISS does not define).
* ``"hnsw"`` -- ``IndexHNSWFlat`` (inner product), graph search; ``m`` links per node,
  ``ef_construction``, ``ef_search`` (raise it for better recall at a higher cost).
* ``"ivf"`` -- ``IndexIVFFlat`` with ``nlist`` k-means cells (default ``4 sqrt(N)``), trained on a
  seeded sample of at most ``256 nlist`` vectors, searching ``nprobe`` cells.

Approximate indexes trade exactness for speed at N where the exact N x N work is out of reach
(millions of items per language); :func:`top1_agreement` measures how often their first
neighbour equals the exact one on a sample, which every approximate result should report.

Vectors are added and queried in chunks, so callers may pass memory-mapped arrays; float32,
C-contiguous, unit-normalised (``normalize=True``, the default: inner product = cosine) copies
are made one chunk at a time.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

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
    x = np.array(X[sl], dtype=np.float32, order="C", copy=True)
    if normalize:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        np.divide(x, norms, out=x, where=norms > 0)
    return x


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
