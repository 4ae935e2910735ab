"""XLR@K and BkR@K at millions of items per language, from FAISS nearest-neighbour lists.

The exact metrics (:func:`~.xlr.xlr`, :func:`~.bkr.bkr`) rank every candidate, which costs
N x N products: fine to a few hundred thousand items, out of reach at millions. Here only the
top K are searched, with a FAISS index (``method="flat"`` exact, ``"hnsw"`` / ``"ivf"``
approximate; see :mod:`backretrieval.search.faiss_backend`):

* ``xlr_approx``: a source counts for XLR@K when its partner is among the K targets found
  (``retrieved``: the first target found per source);
* ``bkr_approx``: step 2 retrieves the first target text found; steps 3-4 search the K source
  images nearest to each distinct retrieved target's image; the query counts for BkR@K when its
  own image is among them.

Only Recall@K for K <= max(ks) is defined, and ``*_mrr@K`` is the MRR truncated at K (1/rank
when the rank is within K, else 0). With ``method="flat"`` the values equal the exact metrics
up to the order of exactly tied scores (the exact metrics rank ties pessimistically; FAISS
does not define their order). Inputs may be memory-mapped: they are read in chunks.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core import MetricInputError
from ..search.faiss_backend import FaissOptions, build_index, search
from ._inputs import check_ks

CHECK_CHUNK = 65536


def _check(x: np.ndarray, name: str) -> None:
    """Shape, NaN/inf and all-zero rows, checked chunk by chunk (inputs may be huge)."""
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise MetricInputError(f"{name}: expected a non-empty 2-D array, got shape {x.shape}")
    for s in range(0, x.shape[0], CHECK_CHUNK):
        c = np.asarray(x[s : s + CHECK_CHUNK], dtype=np.float32)
        bad = ~np.isfinite(c).all(axis=1)
        if bad.any():
            raise MetricInputError(f"{name}: NaN or inf in row {s + int(np.argmax(bad))}")
        zero = ~c.any(axis=1)
        if zero.any():
            raise MetricInputError(f"{name}: all-zero vector in row {s + int(np.argmax(zero))} (cosine undefined)")


def _dims(a: np.ndarray, b: np.ndarray, names: tuple[str, str]) -> None:
    if a.shape[1] != b.shape[1]:
        raise MetricInputError(f"dimension mismatch: {names[0]} has {a.shape[1]} dimensions, {names[1]} has {b.shape[1]}")


def _summary(pos: np.ndarray, ks: tuple[int, ...], prefix: str) -> dict[str, float]:
    """``pos``: 1-based rank of the right item within the K found, 0 when it was not found."""
    found = pos > 0
    out = {f"{prefix}@{k}": float(np.mean(found & (pos <= k))) for k in ks}
    rr = np.zeros(pos.shape, dtype=np.float64)
    rr[found] = 1.0 / pos[found]
    out[f"{prefix}_mrr@{max(ks)}"] = float(rr.mean())
    return out


def _position(lists: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    hit = lists == wanted[:, None]
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)


def _index_over(x: np.ndarray, index: Any, method: str, options: FaissOptions | None, name: str) -> Any:
    if index is None:
        return build_index(x, method, options)
    if getattr(index, "ntotal", None) != x.shape[0] or getattr(index, "d", None) != x.shape[1]:
        raise MetricInputError(
            f"the index given for the {name} holds {getattr(index, 'ntotal', '?')} vectors of dimension "
            f"{getattr(index, 'd', '?')}, but the {name} are {x.shape[0]} x {x.shape[1]}"
        )
    return index


def xlr_approx(
    src: np.ndarray,
    tgt: np.ndarray,
    ks: tuple[int, ...] | int = (1, 5, 10),
    *,
    method: str = "hnsw",
    options: FaissOptions | None = None,
    both_directions: bool = True,
    tgt_index: Any = None,
) -> dict[str, Any]:
    """XLR@K (and ``xlr_t2s@K``) on aligned rows from K-nearest-neighbour lists.

    ``tgt_index``: a FAISS index already built over ``tgt`` (by :func:`build_index` with the
    same method), to share it with :func:`bkr_approx` instead of building it twice."""
    _check(src, "source embeddings")
    _check(tgt, "target embeddings")
    _dims(src, tgt, ("source embeddings", "target embeddings"))
    if src.shape[0] != tgt.shape[0]:
        raise MetricInputError(f"source has {src.shape[0]} rows but target has {tgt.shape[0]}; rows must be aligned")
    ks = check_ks(ks, src.shape[0])
    truth = np.arange(src.shape[0])
    _, idx = search(_index_over(tgt, tgt_index, method, options, "target embeddings"), src, max(ks))
    out: dict[str, Any] = _summary(_position(idx, truth), ks, "xlr")
    retrieved = idx[:, 0].copy()
    if both_directions:
        _, idx = search(build_index(src, method, options), tgt, max(ks))
        out.update(_summary(_position(idx, truth), ks, "xlr_t2s"))
    out["approximate"] = method != "flat"
    out["retrieved"] = retrieved
    return out


def bkr_approx(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    src_img: np.ndarray,
    tgt_img: np.ndarray,
    ks: tuple[int, ...] | int = (1, 5, 10),
    *,
    method: str = "hnsw",
    options: FaissOptions | None = None,
    tgt_text_index: Any = None,
    retrieved: np.ndarray | None = None,
) -> dict[str, Any]:
    """BkR@K from a text index over the targets and an image index over the source images.

    Also returns ``retrieved`` (the target retrieved for each query) for agreement checks.
    ``tgt_text_index``: an index already built over ``tgt_text`` (see :func:`xlr_approx`).
    ``retrieved``: the target already retrieved for each source (step 2), e.g. ``xlr_approx``'s
    ``retrieved`` (the first of its K found, the same as a top-1 search of the same index); then
    no text search is done here."""
    for x, name in ((src_text, "source text embeddings"), (tgt_text, "target text embeddings"),
                    (src_img, "source image features"), (tgt_img, "target image features")):
        _check(x, name)
    _dims(src_text, tgt_text, ("source text embeddings", "target text embeddings"))
    _dims(src_img, tgt_img, ("source image features", "target image features"))
    for side, a, b in (("source", src_text, src_img), ("target", tgt_text, tgt_img)):
        if a.shape[0] != b.shape[0]:
            raise MetricInputError(f"{side}: {a.shape[0]} text embeddings but {b.shape[0]} image features; rows must be aligned")
    ks = check_ks(ks, src_img.shape[0])
    if retrieved is None:
        _, nn = search(_index_over(tgt_text, tgt_text_index, method, options, "target text embeddings"), src_text, 1)
        retrieved = nn[:, 0]
    else:
        retrieved = np.asarray(retrieved)
        if retrieved.shape != (src_text.shape[0],) or retrieved.dtype.kind not in "iu":
            raise MetricInputError(f"retrieved: expected {src_text.shape[0]} integer target rows, got shape {retrieved.shape} ({retrieved.dtype})")
        bad = (retrieved < 0) | (retrieved >= tgt_text.shape[0])
        if bad.any():
            i = int(np.argmax(bad))
            raise MetricInputError(f"retrieved[{i}] = {int(retrieved[i])} is not a target row (0..{tgt_text.shape[0] - 1})")
    distinct, row = np.unique(retrieved, return_inverse=True)
    _, lists = search(build_index(src_img, method, options), tgt_img, max(ks), rows=distinct)
    pos = _position(lists[row], np.arange(src_text.shape[0]))
    out: dict[str, Any] = _summary(pos, ks, "bkr")
    out["approximate"] = method != "flat"
    out["retrieved"] = retrieved
    return out
