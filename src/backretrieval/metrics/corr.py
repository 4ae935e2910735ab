"""CORR, the baseline of the Backretrieval paper (Section 3.1).

Spearman correlation between the text cosine distances and the image cosine distances of all
source x target pairs of a (non-matching) sample. Similarities are the canonical float32 scores
of ``search.exact`` (the same bits on every machine); ties -- equal canonical scores -- get
average ranks (as in ``scipy.stats.spearmanr``). Up to ``max_pairs`` pairs (default 4,000,000, i.e. N=2000 per side)
every pair is used; above that a uniform random subsample of ``max_pairs`` pairs (seeded) is
used and the result says so.

CORR is the Pearson product of two standardized rank vectors, one per side, so each half is
computed once and reused: :func:`image_side` across text models, :func:`text_side` across image
models, combined by :func:`corr_from_sides`.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..core import MetricInputError
from ..search import average_ranks, sort_order, unit_rows, weighted_average_ranks
from ..search.exact import pair_scores, scores_block
from ._inputs import check_pair

DEFAULT_MAX_PAIRS = 4_000_000


@dataclasses.dataclass(frozen=True)
class CorrSide:
    """Average ranks of one side's pair similarities, centred and scaled for a Pearson product;
    with ``keep_order`` also their sort structure, for bootstrap resamples (:func:`corr_bootstrap`).

    Args:
        z: float64 (P,) average ranks of the P pairs' similarities minus their mean, divided by
            the norm of that difference (all zeros when every similarity is equal), so that
            CORR is ``sum(z_text * z_image)``.
        pairs: the sampled ``(i, j)`` source/target rows (int arrays of length P), or None when
            all N x M pairs are used (row-major).
        order: int (P,) ascending sort order of the similarities (with ``keep_order``).
        starts: int first sorted position of each group of equal similarities (with ``keep_order``).
    """

    z: np.ndarray  # (ranks - mean) / norm, float64
    pairs: tuple[np.ndarray, np.ndarray] | None  # sampled (i, j), or None for all pairs
    order: np.ndarray | None = None  # ascending order of the similarities
    starts: np.ndarray | None = None  # first sorted position of each group of equal similarities


def _pairs(n_s: int, n_t: int, max_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    if n_s * n_t <= max_pairs:
        return None
    flat = np.random.default_rng(seed).choice(n_s * n_t, size=max_pairs, replace=False)
    return np.divmod(flat, n_t)


def _sims(A: np.ndarray, B: np.ndarray, pairs, rows: int = 1024, unit: bool = True) -> np.ndarray:
    """Canonical float32 cosine similarities (``unit=False``: raw inner products) of all pairs
    (row-major) or of the sampled pairs: the same bits on every machine (``search.exact``), so
    their ranks and ties are too."""
    if unit:
        A, B = unit_rows(A), unit_rows(B)
    if pairs is None:
        out = np.empty((A.shape[0], B.shape[0]), dtype=np.float32)
        for s in range(0, A.shape[0], rows):
            out[s : s + rows] = scores_block(A[s : s + rows], B)
        return out.ravel()
    i, j = pairs
    return pair_scores(A, B, i, j)


def _standardized(r: np.ndarray) -> np.ndarray:
    r = r - r.mean()
    norm = np.sqrt(np.sum(r * r))  # numpy's pairwise sum: the same bits whatever the BLAS threads
    return r / norm if norm > 0 else r


def _side(A: np.ndarray, B: np.ndarray, names: tuple[str, str], max_pairs: int, seed: int, keep_order: bool,
          unit: bool = True) -> CorrSide:
    A, B = check_pair(A, B, names)
    pairs = _pairs(A.shape[0], B.shape[0], max_pairs, seed)
    sims = _sims(A, B, pairs, unit=unit)
    structure = sort_order(sims)
    z = _standardized(average_ranks(sims, structure))  # ties get their average rank, as in scipy
    return CorrSide(z, pairs, *(structure if keep_order else (None, None)))


def image_side(src_img: np.ndarray, tgt_img: np.ndarray, *, max_pairs: int = DEFAULT_MAX_PAIRS, seed: int = 0,
               keep_order: bool = False) -> CorrSide:
    """The image half of CORR for a sample: reusable across text models.

    Args:
        src_img: (N, e) source image features.
        tgt_img: (M, e) target image features.
        max_pairs: at most this many of the N x M pairs (a seeded subsample above it).
        seed: seed of the subsample.
        keep_order: keep the sort order (needed by :func:`corr_bootstrap`).

    Returns:
        A :class:`CorrSide` (standardised ranks of the pairs' cosine distances).

    Raises:
        MetricInputError: a matrix that is not 2-D and non-empty, holds NaN/inf or an all-zero
            row (named), or the two matrices' dimensions differ.
    """
    return _side(src_img, tgt_img, ("source image features", "target image features"), max_pairs, seed, keep_order)


def text_side(src_text: np.ndarray, tgt_text: np.ndarray, *, max_pairs: int = DEFAULT_MAX_PAIRS, seed: int = 0,
              keep_order: bool = False, sim: str = "cosine") -> CorrSide:
    """The text half of CORR for a sample: reusable across image models.

    Args:
        src_text: (N, d) source text embeddings.
        tgt_text: (M, d) target text embeddings.
        max_pairs, seed, keep_order: as :func:`image_side` (use the same values).
        sim: ``"cosine"`` (the text distance is the cosine distance) or ``"dot"`` (the negative
            raw inner product: quantised codes as a vector store scores them).

    Returns:
        A :class:`CorrSide`.

    Raises:
        MetricInputError: a matrix that is not 2-D and non-empty, holds NaN/inf or an all-zero
            row (named), the two matrices' dimensions differ, or ``sim`` is neither.
    """
    if sim not in ("cosine", "dot"):
        raise MetricInputError(f"CORR's text distances are cosine or dot distances, not {sim!r}")
    return _side(src_text, tgt_text, ("source text embeddings", "target text embeddings"), max_pairs, seed, keep_order,
                 unit=sim == "cosine")


def corr_from_sides(text: CorrSide, image: CorrSide) -> dict[str, float]:
    """``{"corr": rho, "corr_pairs": pairs used, "corr_subsampled": 0 or 1}`` from two halves
    computed on the same sample with the same ``max_pairs`` and ``seed``.

    Args:
        text: :func:`text_side` of the sample.
        image: :func:`image_side` of the same sample.

    Returns:
        The three floats above; ``corr`` is NaN when a side's distances are all equal.

    Raises:
        MetricInputError: the halves have different numbers of pairs.
    """
    if text.z.size != image.z.size:
        raise MetricInputError(f"CORR: the text side has {text.z.size} pairs, the image side {image.z.size}: samples differ")
    # Spearman rho = Pearson correlation of the ranks; distances are 1 - similarity on both
    # sides, which leaves the rank correlation unchanged
    rho = float(np.sum(text.z * image.z)) if (text.z.any() and image.z.any()) else float("nan")
    return {"corr": rho, "corr_pairs": float(text.z.size), "corr_subsampled": float(image.pairs is not None)}


def corr_details(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    src_img: np.ndarray | None = None,
    tgt_img: np.ndarray | None = None,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int = 0,
    image: CorrSide | None = None,
) -> dict[str, float]:
    """CORR with its bookkeeping (see :func:`corr_from_sides`). Pass either the image features
    or ``image=image_side(...)`` computed with the same ``max_pairs`` and ``seed``.

    Args:
        src_text, tgt_text: text embeddings of the sample.
        src_img, tgt_img: its image features (unless ``image`` is given).
        max_pairs, seed: as :func:`image_side`.
        image: a precomputed image half.

    Returns:
        ``corr``, ``corr_pairs``, ``corr_subsampled``.

    Raises:
        MetricInputError: a matrix that is not 2-D and non-empty, holds NaN/inf or an all-zero
            row (named), or two halves computed on different samples.
    """
    if image is None:
        image = image_side(src_img, tgt_img, max_pairs=max_pairs, seed=seed)
    return corr_from_sides(text_side(src_text, tgt_text, max_pairs=max_pairs, seed=seed), image)


def corr(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    src_img: np.ndarray,
    tgt_img: np.ndarray,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int = 0,
) -> float:
    """Spearman rho between text and image cosine distances over source x target pairs.

    Args:
        src_text, tgt_text: (N, d) and (M, d) text embeddings.
        src_img, tgt_img: (N, e) and (M, e) image features, row-aligned with the texts.
        max_pairs, seed: as :func:`image_side`.

    Returns:
        rho in [-1, 1] (NaN when a side's distances are all equal).

    Raises:
        MetricInputError: a matrix that is not 2-D and non-empty, holds NaN/inf or an all-zero
            row (named), or two halves computed on different samples.
    """
    return corr_details(src_text, tgt_text, src_img, tgt_img, max_pairs=max_pairs, seed=seed)["corr"]


# ------------------------------------------------------------------------ bootstrap over queries


def bootstrap_row_weights(n_rows: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_rows) multiplicities: how often each source row (query) is drawn when
    ``n_rows`` rows are resampled with replacement; seeded, the same for every model of a sample
    (which makes the bootstrap paired).

    Args:
        n_rows: source rows of the sample.
        n_boot: resamples.
        seed: the sample's seed.

    Returns:
        float64 (n_boot, n_rows) counts, each row summing to ``n_rows``.
    """
    rng = np.random.default_rng([seed, 0xB0075])
    return np.stack([np.bincount(rng.integers(0, n_rows, n_rows), minlength=n_rows) for _ in range(n_boot)]).astype(np.float64)


def _row_of_pair(side: CorrSide, n_src: int, n_tgt: int) -> np.ndarray:
    return (np.repeat(np.arange(n_src), n_tgt) if side.pairs is None else side.pairs[0]).astype(np.int32)


def corr_bootstrap(
    text_sides: dict, image: CorrSide, n_src: int, n_tgt: int, weights: np.ndarray
) -> dict:
    """CORR of every bootstrap resample of the source rows, for each text side in ``text_sides``
    (``{key: CorrSide}``, built with ``keep_order=True``, like ``image``): ``{key: (n_boot,)}``.

    A resample repeats source row i ``weights[b, i]`` times, so each of its pairs counts that
    often: the ranks of the resampled multiset are weighted average ranks over the original sort
    order (no re-sorting) and Spearman's rho is their weighted Pearson correlation.

    Args:
        text_sides: ``{key: CorrSide}`` text halves of the sample.
        image: the image half.
        n_src, n_tgt: source and target rows of the sample.
        weights: :func:`bootstrap_row_weights` (n_boot, n_src).

    Returns:
        ``{key: float64 (n_boot,)}`` CORR per resample.

    Raises:
        MetricInputError: a side built without ``keep_order=True``.
    """
    sides = {"\x00image": image, **text_sides}
    for key, side in sides.items():
        if side.order is None:
            raise MetricInputError(f"CORR bootstrap: side {key!r} was built without keep_order=True")
    row = _row_of_pair(image, n_src, n_tgt)
    rows_sorted = {key: row[side.order] for key, side in sides.items()}
    out = {key: np.empty(weights.shape[0]) for key in text_sides}
    for b, w_rows in enumerate(weights):
        w = w_rows[row]
        wsum = w.sum()

        def centred(key: str) -> np.ndarray:
            side = sides[key]
            r = weighted_average_ranks(side.order, side.starts, w_rows[rows_sorted[key]])
            return r - np.sum(w * r) / wsum

        ri = centred("\x00image")
        vi = np.sum(w * ri * ri)
        for key in text_sides:
            rt = centred(key)
            vt = np.sum(w * rt * rt)
            out[key][b] = np.sum(w * rt * ri) / np.sqrt(vt * vi) if vt > 0 and vi > 0 else np.nan
    return out

