"""The retrieval measures of a Cr5 model: document retrieval over a split's candidate pools
(:func:`evaluate_retrieval`, Sec. 4.2), which lambda selection validates with
(:func:`select_lambda`), and word translation retrieval with the columns of ``Phi``
(:func:`word_retrieval`, Sec. 4.4). A whole split-train-evaluate run of one regime is
:func:`backretrieval.analysis.trained.cr5.train_evaluate`.

Records name their metric like every metric of the project (``name@K``): ``xlr@K`` (the share of
queries whose true candidate ranks <= K; pessimistic ties), ``xlr_mrr`` and ``xlr_median_rank``.
Ranks come from :func:`backretrieval.metrics.retrieval_ranks`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...core import DataError
from ...data import Corpus, Dataset
from ...encoders.trained.cr5 import Cr5Model
from ...metrics import rank_summary, retrieval_ranks
from .estimator import Cr5
from .splits import Split, corpora_of, pair_key, candidate_rows

METRIC = "xlr"  # record keys xlr@K, xlr_mrr, xlr_median_rank
SIMS = ("cosine", "csls")


def retrieval_precision(
    q: np.ndarray, d: np.ndarray, truth: np.ndarray, *, q_pool: np.ndarray | None = None, sim: str = "cosine",
    csls_k: int = 10, ks: Sequence[int] = (1, 5, 10),
) -> dict[str, float]:
    """XLR@K of queries ``q`` against candidates ``d`` (``truth[i]``: the candidate row of query
    ``i``): the share of queries whose true candidate ranks <= K (pessimistic ties), MRR and
    median rank. CSLS: ``2 cos - r_D(q) - r_P(d)`` with ``r`` the mean similarity to the
    ``csls_k`` nearest items of the other side (``q_pool``, default ``q``).

    Args:
        q: (n, dim) query vectors.
        d: (m, dim) candidate vectors (any scale: rows are L2-normalised; with cosine an
            all-zero row, e.g. a text with no known token, scores 0 against everything).
        truth: (n,) int, the candidate row of each query's true item.
        q_pool: (p, dim) the query side's items for the candidates' CSLS penalty.
        sim: ``"cosine"`` or ``"csls"``.
        csls_k: neighbours of the CSLS penalties (clipped to the size of each side).
        ks: the K of ``xlr@K``.

    Returns:
        ``{"xlr@K": ..., "xlr_mrr": ..., "xlr_median_rank": ...}`` (floats; the median of
        an even count is the mean of the two middle ranks).

    Raises:
        DataError: ``sim`` is not cosine or csls.
        MetricInputError: NaN or inf in a vector, mismatched shapes, ``truth`` out of range
            (from :func:`backretrieval.metrics.retrieval_ranks`).
    """
    if sim not in SIMS:
        raise DataError(f"unknown similarity {sim!r}; use cosine or csls")
    ranks = retrieval_ranks(q, d, truth, sim=sim, query_pool=q_pool, csls_k=csls_k)
    return rank_summary(ranks, tuple(ks), METRIC)


def evaluate_retrieval(
    embed: Callable[[Sequence[str], str], np.ndarray],
    ds: Dataset | Mapping[str, Corpus],
    split: Split,
    pairs: Sequence[tuple[str, str]] | None = None,
    *,
    phase: str = "test",
    sims: Sequence[str] = ("cosine", "csls"),
    csls_k: int = 10,
    ks: Sequence[int] = (1, 5, 10),
) -> list[dict[str, Any]]:
    """Document retrieval of Sec. 4.2 for each pair and both directions: the ``phase`` (test or
    val) queries of the pair against the target language's candidate pool. ``embed(texts,
    lang)`` gives the vectors (e.g. ``Cr5.transform``). One record per (pair, direction, sim).

    Each query concept's document in the source pool queries the whole target pool
    (:func:`.splits.candidate_rows`); the CSLS penalty of the candidates is taken over the whole
    source pool. Where a concept has several documents in a pool, the last one in corpus order
    is its query / true candidate (and the others compete with it).

    Args:
        embed: ``embed(texts, lang)`` -> (len(texts), dim) vectors.
        ds: the dataset, or corpora per language, the split was made on.
        split: the split.
        pairs: the pairs to evaluate (either order of a split pair; default: the split's).
        phase: ``"test"`` or ``"val"`` queries (and pools).
        sims: the similarities, ``"cosine"`` and/or ``"csls"``.
        csls_k: neighbours of the CSLS penalties.
        ks: the K of ``xlr@K``.

    Returns:
        Records ``{"src", "tgt", "sim", "phase", "n_queries", "n_candidates", "xlr@K" per K,
        "xlr_mrr", "xlr_median_rank"}``, pair by pair, source->target before target->source.

    Raises:
        DataError: ``phase`` is not test or val, a pair with no queries of that phase in the
            split, or an unknown similarity.
    """
    if phase not in ("test", "val"):
        raise DataError(f"phase must be 'test' or 'val', got {phase!r}")
    corpora = corpora_of(ds)
    pairs = list(split.pairs if pairs is None else pairs)
    queries = split.test if phase == "test" else split.val
    pool_rows: dict[str, np.ndarray] = {}
    pool_vecs: dict[str, np.ndarray] = {}
    for a, b in pairs:
        for lang in (a, b):
            if lang not in pool_rows:
                pool_rows[lang] = candidate_rows(corpora, split, lang, phase)
                c = corpora[lang]
                pool_vecs[lang] = embed([c.texts[i] for i in pool_rows[lang]], lang)
    out = []
    for a, b in pairs:
        key = pair_key(a, b) if pair_key(a, b) in queries else pair_key(b, a)
        if key not in queries:
            raise DataError(f"pair {a}-{b} has no {phase} queries in the split (pairs: {', '.join(queries)})")
        concepts = queries[key]
        for s, t in ((a, b), (b, a)):
            pos_s = {corpora[s].concepts[i]: j for j, i in enumerate(pool_rows[s])}
            pos_t = {corpora[t].concepts[i]: j for j, i in enumerate(pool_rows[t])}
            qi = np.array([pos_s[c] for c in concepts], dtype=np.int64)
            ti = np.array([pos_t[c] for c in concepts], dtype=np.int64)
            for sim in sims:
                rec = {"src": s, "tgt": t, "sim": sim, "phase": phase, "n_queries": len(concepts),
                       "n_candidates": int(len(pool_rows[t]))}
                rec.update(retrieval_precision(pool_vecs[s][qi], pool_vecs[t], ti, q_pool=pool_vecs[s], sim=sim,
                                               csls_k=csls_k, ks=ks))
                out.append(rec)
    return out


def mean_score(records: Sequence[Mapping[str, Any]], key: str = "xlr@1", sim: str | None = None) -> float:
    """Mean of ``key`` over records (optionally one similarity only): the lambda-selection score.

    Args:
        records: :func:`evaluate_retrieval` records.
        key: the record field to average, e.g. ``"xlr@1"``.
        sim: only records of this similarity (None: all).

    Returns:
        The unweighted mean over the records (each pair and direction counts once, whatever
        its number of queries).

    Raises:
        DataError: no record left to average.
        KeyError: a record without ``key``.
    """
    vals = [r[key] for r in records if sim is None or r["sim"] == sim]
    if not vals:
        raise DataError(f"no records to average ({key}, sim={sim})")
    return float(np.mean(vals))


def select_lambda(
    make: Callable[[float], Cr5],
    train: Mapping[str, Corpus],
    ds: Dataset | Mapping[str, Corpus],
    split: Split,
    lams: Sequence[float],
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    key: str = "xlr@1",
    sim: str | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> tuple[Cr5, float, list[dict[str, Any]]]:
    """Fit ``make(lam)`` on ``train`` for every lambda and keep the one with the best mean
    validation ``key`` (over pairs, directions and ``sim``; ties: the smaller lambda).

    Args:
        make: ``make(lam)`` -> an unfitted :class:`Cr5` with that lambda.
        train: the training corpora per language (:func:`.splits.training_corpora`).
        ds: the dataset, or corpora per language, the split was made on (the validation pools).
        split: the split whose validation queries score each lambda.
        lams: the candidates (duplicates dropped, tried in increasing order).
        pairs: the pairs evaluated (default: the split's).
        key: the :func:`evaluate_retrieval` field to maximise.
        sim: the similarity averaged (None: cosine and CSLS together).
        log: receives one line per lambda.

    Returns:
        ``(model, lam, table)``: the fitted model of the chosen lambda, that lambda, and one
        ``{"lam", "val_<key>", "fit_seconds"}`` record per lambda tried, in increasing order.

    Raises:
        DataError: no lambda given, or what :meth:`Cr5.fit` and :func:`evaluate_retrieval`
            reject.
    """
    if not lams:
        raise DataError("select_lambda: no lambda given")
    best: tuple[float, float, Cr5] | None = None
    table = []
    for lam in sorted(set(float(x) for x in lams)):
        model = make(lam).fit(train)
        recs = evaluate_retrieval(model.transform, ds, split, pairs, phase="val")
        score = mean_score(recs, key, sim)
        table.append({"lam": lam, f"val_{key}": score, "fit_seconds": model.fit_seconds_})
        log(f"lambda={lam:g}: validation {key}={score:.4f} ({model.fit_seconds_:.0f}s)")
        if best is None or score > best[0]:
            best = (score, lam, model)
    assert best is not None
    return best[2], best[1], table


def word_retrieval(
    model: Cr5 | Cr5Model,
    dictionary: Sequence[tuple[str, str]],
    src: str,
    tgt: str,
    *,
    sims: Sequence[str] = ("cosine", "csls"),
    csls_k: int = 10,
    ks: Sequence[int] = (1, 5, 10),
) -> list[dict[str, Any]]:
    """Word translation retrieval (Sec. 4.4) with the columns of ``Phi`` as word vectors: each
    dictionary source word (lower-cased, in the source vocabulary) queries the whole target
    vocabulary; a word's rank is the best rank of its listed translations (``xlr@K``: the share
    of words with a translation in the top K). Pairs whose words are not in the vocabularies are
    skipped (counted in ``n_skipped``).

    Args:
        model: a fitted :class:`Cr5` or a loaded :class:`~backretrieval.encoders.trained.cr5.Cr5Model`.
        dictionary: (source word, target word) pairs; one source word may have several
            translations.
        src, tgt: the languages of the dictionary's two sides.
        sims: the similarities, ``"cosine"`` and/or ``"csls"`` (CSLS penalises the candidates
            over the whole source vocabulary).
        csls_k: neighbours of the CSLS penalties.
        ks: the K of ``xlr@K``.

    Returns:
        One record per similarity: ``{"src", "tgt", "sim", "n_queries"`` (distinct source words),
        ``"n_skipped"`` (dictionary pairs left out), ``"n_candidates"`` (the target vocabulary
        size), ``"xlr@K"`` per K, ``"xlr_mrr"``, ``"xlr_median_rank"}``. Each word's best rank
        is pessimistic: its other listed translations count as competitors.

    Raises:
        DataError: no dictionary pair has both words in the vocabularies.
    """
    m = model.model_ if isinstance(model, Cr5) else model
    sv, sx = m.word_vectors(src)
    tv, tx = m.word_vectors(tgt)
    s_idx = {w: i for i, w in enumerate(sv)}
    t_idx = {w: i for i, w in enumerate(tv)}
    gold: dict[int, set[int]] = {}
    skipped = 0
    for a, b in dictionary:
        a, b = a.strip().lower(), b.strip().lower()
        if a in s_idx and b in t_idx:
            gold.setdefault(s_idx[a], set()).add(t_idx[b])
        else:
            skipped += 1
    if not gold:
        raise DataError(f"word retrieval {src}->{tgt}: no dictionary pair has both words in the vocabularies")
    qs = np.array(sorted(gold), dtype=np.int64)
    # one query row per (word, listed translation); a word's rank is the best of its rows
    alts = [sorted(gold[q]) for q in qs]
    rows = np.repeat(qs, [len(a) for a in alts])
    truth = np.fromiter((t for a in alts for t in a), dtype=np.int64, count=len(rows))
    starts = np.concatenate([[0], np.cumsum([len(a) for a in alts])[:-1]])
    out = []
    for sim in sims:
        ranks = retrieval_ranks(sx[rows], tx, truth, sim=sim, query_pool=sx, csls_k=csls_k)
        best = np.minimum.reduceat(ranks, starts)
        rec = {"src": src, "tgt": tgt, "sim": sim, "n_queries": int(len(qs)), "n_skipped": skipped,
               "n_candidates": int(tx.shape[0])}
        rec.update(rank_summary(best, tuple(ks), METRIC))
        out.append(rec)
    return out


def single_token_dictionary(ds: Dataset | Mapping[str, Corpus], src: str, tgt: str, field: str | None = "title") -> list[tuple[str, str]]:
    """A bilingual word list from concept-aligned short texts: the pairs of items of the same
    concept whose text (``extra[field]``, else the text) is a single token (:func:`tokenize`) in
    both languages -- e.g. emoji-cldr names: 🐈 "cat" / "Katze". Sorted, without duplicates.

    Args:
        ds: the dataset, or corpora per language, whose items carry concepts.
        src, tgt: the two languages.
        field: the ``extra`` column holding the short text (per language; a corpus without it
            uses its texts); None: the texts.

    Returns:
        (source token, target token) pairs: every combination of a concept's single-token
        texts in the two languages, tokens as :func:`~backretrieval.encoders.trained.bow.tokenize`
        gives them (lower-cased).

    Raises:
        KeyError: ``src`` or ``tgt`` is not a language of ``ds``.
    """
    from ...encoders.trained.bow import tokenize

    corpora = corpora_of(ds)

    def single(c: Corpus) -> dict[str, set[str]]:
        col = c.extra.get(field) if field else None
        texts = col if col is not None else c.texts
        out: dict[str, set[str]] = {}
        for k, t in zip(c.concepts or [], texts):
            toks = tokenize(str(t))
            if k is not None and len(toks) == 1:
                out.setdefault(k, set()).add(toks[0])
        return out

    s, t = single(corpora[src]), single(corpora[tgt])
    return sorted({(a, b) for k in s.keys() & t.keys() for a in s[k] for b in t[k]})
