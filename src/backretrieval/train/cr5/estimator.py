"""The Cr5 estimator (:class:`Cr5`): document selection, TF-IDF preprocessing and the solver of
:mod:`.solver`, on the training layer's one estimator shape (:class:`~..base.Estimator`).

Cr5: crosslingual reduced-rank ridge regression (Josifoski, Paskov, Paskov, Jaggi, West; WSDM 2019).

Documents of several languages carry concept labels (the same concept in two languages = a
document and its translation). Cr5 fits one-vs-all ridge regression of the concept one-hot
matrix ``Y`` (n x K) on the stacked bag-of-words matrix ``X`` (n x p, p = sum of the languages'
vocabularies; a row is non-zero only in its own language's block), with the coefficient matrix
``W`` (K x p) constrained to rank r (Eq. 8). ``W = H Phi``; the rows of ``Phi`` (r x p),
made orthonormal, are the embedding map, and its block ``Phi_l`` embeds language ``l``.

Solver (Sec. 3.2 and 5), never densifying X (CSR blocks, one per language):

* ``M = Y^T Xc (Xc^T Xc + lam I)^-1 Xc^T Y`` (Eq. 12; ``Xc`` = column-centred X). Its top-r
  eigenvectors ``P`` come from ``scipy.sparse.linalg.eigsh`` on a LinearOperator whose matvec
  solves Eq. 13 ``(Xc^T Xc + lam I) x = Xc^T Y u`` with conjugate gradients and returns
  ``Y^T Xc x``. Centring ``Y`` (``Y-hat`` in the paper) changes nothing because
  ``Xc^T 1 = 0``, so ``Y`` itself is used.
* ``Xc^T Xc + lam I = B - n mu mu^T`` with ``B = X^T X + lam I`` block-diagonal over
  languages and ``mu = X^T 1 / n``. Woodbury: ``(B - n mu mu^T)^-1 u = B^-1 u + c w (w^T u)``
  with ``w = B^-1 mu`` and ``c = n / (1 - n mu^T w)``, so every solve splits into independent
  per-language CG solves ``B_l x_l = u_l`` (Sec. 5 writes the same as "block-diagonal minus
  rank 1" ``B^-1 - zeta zeta^T``; since ``1 - n mu^T w > 0`` for a positive definite system,
  that ``zeta`` would be imaginary, and the real form is the plus sign used here). The direct
  path (``woodbury=False``) runs one CG on the whole centred system instead; both are checked
  against each other and against a dense closed form in the tests.
* ``Phi* = P^T Y^T Xc (Xc^T Xc + lam I)^-1`` (Eq. 14), solved for all r right-hand sides at
  once with a column-wise (block-vectorised) Jacobi-preconditioned CG per language.
* ``Phi* Phi*^T = Q Lam Q^T`` (Eq. 15); ``Phi = Lam^-1/2 Q^T Phi*`` has orthonormal rows and
  ``W = (P Q) Lam^1/2 Phi`` is the SVD of W. Row signs are fixed (largest entry positive).

CG uses a Jacobi (diagonal) preconditioner, the relative residual tolerance and iteration cap
of Sec. 4.1 (``cg_tol=0.01``, ``cg_maxiter=500``), and eigsh ``tol=0.1``, ``maxiter=250``.

Preprocessing (Sec. 4.1, :mod:`backretrieval.encoders.trained.bow`): lower-cased TF-IDF bag of words,
IDF from the training documents only, vocabulary = the ``max_vocab`` most frequent tokens
after dropping those in fewer than ``min_df`` (3) documents, rows L2-normalised; Japanese and
Chinese as character bigrams. Training documents are filtered by their number of distinct
tokens (``min_words``/``max_words``; the paper keeps Wikipedia articles with 50-1,000 distinct
words; DDTP descriptions have a median of ~37 distinct words and a 5th percentile of ~16, so
the defaults are 5-1,000, which drops only near-empty descriptions), and only concepts present
in at least two languages are kept (the union of pairwise intersections, Fig. 1(a)).

Training regimes (Sec. 4.2, Fig. 1) over a concept-level split (:func:`make_split`): joint
(all languages, one model), pairwise (one language pair), transitive (two languages that share
no training concept, each overlapping with a pivot). Lambda is chosen by validation retrieval
(:func:`select_lambda`). Evaluation (:func:`evaluate_retrieval`): XLR@1/5/10 (record keys
``xlr@K``, ``xlr_mrr``; the share of queries whose translation ranks <= K) with cosine and CSLS,
both directions, held-out queries against a candidate pool of held-out documents. Word
retrieval (:func:`word_retrieval`) ranks the columns of ``Phi``.
"""
from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...core import DataError
from ...data import Corpus, Dataset
from ...encoders.trained.bow import TfidfBow, fit_tfidf, n_unique_tokens
from ...encoders.trained.cr5 import Cr5Model
from ..base import NON_NEGATIVE_INT, POSITIVE_INT, POSITIVE_REAL, Estimator, HyperParameterError, fit_context
from .settings import DEFAULTS, SolverSettings
from .solver import solve
from .splits import corpora_of


class Cr5(Estimator):
    """Crosslingual reduced-rank ridge regression, scikit-learn style.

    >>> model = Cr5(rank=300, lam=1.0).fit(dataset)          # doctest: +SKIP
    >>> vecs = model.transform(["a text"], "en")             # doctest: +SKIP
    >>> model.save("models/cr5-ddtp")                         # doctest: +SKIP

    ``fit`` takes a :class:`~backretrieval.data.Dataset` or a mapping language -> Corpus whose
    items carry concepts. Learned attributes: ``languages_``, ``vocabulary_`` and ``idf_`` (per
    language), ``components_`` (per language, ``Phi_l``: rank x |V_l| float32, orthonormal rows
    across languages), ``singular_values_`` (of W), ``eigenvalues_`` (top of M, Eq. 12),
    ``n_documents_`` (per language), ``n_concepts_``, ``stats_``, ``preprocess_seconds_``,
    ``fit_seconds_`` and ``model_`` (the :class:`~backretrieval.encoders.trained.cr5.Cr5Model` that
    ``transform`` and ``save`` use). :meth:`load` restores all of them from a saved directory.

    Hyper-parameters (checked before ``fit`` does anything; a bad one raises
    :class:`~backretrieval.train.base.HyperParameterError` naming it): ``rank`` (r), ``lam``
    (ridge lambda), ``max_vocab`` / ``min_df`` (vocabulary per language), ``min_words`` <=
    ``max_words`` (distinct tokens of a training document), ``min_languages`` (languages a
    training concept needs), ``cg_tol`` / ``cg_maxiter`` / ``eig_tol`` / ``eig_maxiter`` (Sec. 4.1
    tolerances), ``woodbury`` (per-language solves), ``seed`` (eigsh start vector), ``n_jobs``
    (threads; same bits for any value) and ``progress`` (bars on stderr).

    Args:
        rank: r, the rank of W (Eq. 8) and the embedding dimension; at least 1 and below the
            number of training concepts.
        lam: the ridge lambda (> 0) of Eq. 8; the paper picks it by validation
            (:func:`~backretrieval.train.cr5.select_lambda`).
        max_vocab: the most frequent tokens kept per language (None: all that pass ``min_df``).
        min_df: a token must occur in at least this many training documents of its language.
        min_words, max_words: the range of distinct tokens of a training document (inclusive;
            ``max_words`` None: no upper bound). The paper keeps 50-1,000 for Wikipedia.
        min_languages: a training concept must have a document in at least this many languages.
        cg_tol: the relative residual tolerance of every CG solve (Sec. 4.1: 0.01).
        cg_maxiter: the iteration cap of every CG solve (Sec. 4.1: 500).
        eig_tol: the relative eigenpair tolerance of the eigensolver (Sec. 4.1: 0.1).
        eig_maxiter: the restart cap of ``eigsh`` (Sec. 4.1: 250).
        woodbury: solve the centred system by Woodbury as independent per-language CG solves
            (False: one CG on the whole centred system; same solution up to ``cg_tol``).
        seed: seeds the eigensolver's start vector (>= 0).
        n_jobs: threads for the per-language and per-column CG solves (>= 1).
        progress: show progress bars on stderr.
    """

    _parameter_constraints: dict[str, list[Any]] = {
        "rank": [POSITIVE_INT],
        "lam": [POSITIVE_REAL],
        "max_vocab": [POSITIVE_INT, None],
        "min_df": [POSITIVE_INT],
        "min_words": [NON_NEGATIVE_INT],
        "max_words": [POSITIVE_INT, None],
        "min_languages": [POSITIVE_INT],
        "cg_tol": [POSITIVE_REAL],
        "cg_maxiter": [POSITIVE_INT],
        "eig_tol": [POSITIVE_REAL],
        "eig_maxiter": [POSITIVE_INT],
        "woodbury": ["boolean"],
        "seed": [NON_NEGATIVE_INT],
        "n_jobs": [POSITIVE_INT],
        "progress": ["boolean"],
    }
    _fitted_attribute = "components_"

    def __init__(
        self,
        rank: int = DEFAULTS.rank,
        lam: float = DEFAULTS.lam,
        *,
        max_vocab: int | None = 200_000,
        min_df: int = 3,
        min_words: int = 5,
        max_words: int | None = 1000,
        min_languages: int = 2,
        cg_tol: float = DEFAULTS.cg_tol,
        cg_maxiter: int = DEFAULTS.cg_maxiter,
        eig_tol: float = DEFAULTS.eig_tol,
        eig_maxiter: int = DEFAULTS.eig_maxiter,
        woodbury: bool = DEFAULTS.woodbury,
        seed: int = DEFAULTS.seed,
        n_jobs: int = DEFAULTS.n_jobs,
        progress: bool = DEFAULTS.progress,
    ) -> None:
        self.rank = rank
        self.lam = lam
        self.max_vocab = max_vocab
        self.min_df = min_df
        self.min_words = min_words
        self.max_words = max_words
        self.min_languages = min_languages
        self.cg_tol = cg_tol
        self.cg_maxiter = cg_maxiter
        self.eig_tol = eig_tol
        self.eig_maxiter = eig_maxiter
        self.woodbury = woodbury
        self.seed = seed
        self.n_jobs = n_jobs
        self.progress = progress

    def _check_more(self) -> None:
        """``max_words`` below ``min_words``."""
        if self.max_words is not None and self.max_words < self.min_words:
            raise HyperParameterError(f"Cr5: max_words={self.max_words} is below min_words={self.min_words}")

    # ------------------------------------------------------------------ fit
    def select_documents(self, corpus: Dataset | Mapping[str, Corpus]) -> dict[str, np.ndarray]:
        """Rows of each language used for training: a concept, ``min_words`` <= distinct tokens
        <= ``max_words``, and a concept present in at least ``min_languages`` languages.

        Args:
            corpus: a Dataset or a mapping language -> Corpus whose items carry concepts.

        Returns:
            Language -> int64 row indices into its corpus, ascending. The concept count is over
            the rows that pass the length filter, so a concept whose documents are too short in
            all but one language is dropped.

        Raises:
            DataError: a corpus without concepts, or ``corpus`` not corpora per language.
        """
        corpora = corpora_of(corpus)
        rows: dict[str, np.ndarray] = {}
        for lang, c in corpora.items():
            if c.concepts is None:
                raise DataError(f"Cr5.fit: corpus {c.dataset}/{lang} has no concepts (cross-lingual labels)")
            has = np.fromiter((x is not None for x in c.concepts), dtype=bool, count=len(c))
            nw = n_unique_tokens(c.texts)
            ok = has & (nw >= self.min_words)
            if self.max_words is not None:
                ok &= nw <= self.max_words
            rows[lang] = np.flatnonzero(ok)
        count: dict[str, int] = {}
        for lang, r in rows.items():
            for cpt in {corpora[lang].concepts[i] for i in r}:
                count[cpt] = count.get(cpt, 0) + 1
        return {
            lang: r[np.fromiter((count[corpora[lang].concepts[i]] >= self.min_languages for i in r), dtype=bool, count=len(r))]
            for lang, r in rows.items()
        }

    @fit_context
    def fit(self, corpus: Dataset | Mapping[str, Corpus]) -> "Cr5":
        """Learn vocabularies, IDF and ``Phi`` from concept-labelled documents (see the class doc).

        Args:
            corpus: a Dataset or a mapping language -> Corpus whose items carry concepts (at
                least two languages).

        Returns:
            self, fitted.

        Raises:
            HyperParameterError: a bad hyper-parameter (named).
            DataError: fewer than two languages, a corpus without concepts or without a
                training document left, or ``rank`` not below the number of training concepts.
        """
        t0 = time.perf_counter()
        corpora = corpora_of(corpus)
        if len(corpora) < 2:
            raise DataError(f"Cr5.fit: needs at least two languages, got {sorted(corpora)}")
        langs = sorted(corpora)
        rows = self.select_documents(corpora)
        blocks, labels, vocab, idf, ndocs = [], [], {}, {}, {}
        concept_index: dict[str, int] = {}
        for lang in langs:
            c = corpora[lang]
            r = rows[lang]
            if r.size == 0:
                raise DataError(
                    f"Cr5.fit: no training document left for {c.dataset}/{lang} (concepts shared with another "
                    f"language and {self.min_words}-{self.max_words} distinct tokens)"
                )
            texts = [c.texts[i] for i in r]
            vocab[lang], idf[lang] = fit_tfidf(texts, min_df=self.min_df, max_features=self.max_vocab)
            x = TfidfBow(vocab[lang], idf[lang]).transform(texts)
            nonzero = np.diff(x.indptr) > 0
            x = x[nonzero]
            cpts = [c.concepts[i] for i, keep in zip(r, nonzero) if keep]
            blocks.append(x)
            labels.append(np.fromiter((concept_index.setdefault(k, len(concept_index)) for k in cpts), dtype=np.int64, count=len(cpts)))
            ndocs[lang] = int(x.shape[0])
        t_prep = time.perf_counter() - t0
        settings = SolverSettings(
            rank=int(self.rank),
            lam=float(self.lam),
            cg_tol=float(self.cg_tol),
            cg_maxiter=int(self.cg_maxiter),
            eig_tol=float(self.eig_tol),
            eig_maxiter=int(self.eig_maxiter),
            woodbury=bool(self.woodbury),
            seed=int(self.seed),
            n_jobs=int(self.n_jobs),
            progress=bool(self.progress),
        )
        sol = solve(blocks, labels, len(concept_index), settings, names=langs)
        self.languages_ = langs
        self.vocabulary_ = vocab
        self.idf_ = idf
        self.components_ = {lang: np.ascontiguousarray(ph, dtype=np.float32) for lang, ph in zip(langs, sol.phi)}
        self.singular_values_ = sol.singular_values
        self.eigenvalues_ = sol.eigenvalues
        self.n_documents_ = ndocs
        self.n_concepts_ = len(concept_index)
        self.stats_ = sol.stats.as_dict()
        self.preprocess_seconds_ = round(t_prep, 3)
        self.fit_seconds_ = round(time.perf_counter() - t0, 3)
        self.model_ = self._make_model()
        return self

    # ------------------------------------------------------------------ use
    def _make_model(self) -> Cr5Model:
        meta = {
            "hyper_parameters": self.get_params(),
            "training": {
                "n_documents": self.n_documents_,
                "n_concepts": self.n_concepts_,
                "eigenvalues": [float(v) for v in self.eigenvalues_],
                "fit_seconds": self.fit_seconds_,
                "preprocess_seconds": self.preprocess_seconds_,
                "solver": self.stats_,
            },
        }
        return Cr5Model(self.vocabulary_, self.idf_, self.components_, self.singular_values_, meta)

    def _fitted(self) -> Cr5Model:
        self._require_fitted()
        return self.model_

    def transform(self, texts: Sequence[str], lang: str) -> np.ndarray:
        """float32 (n, rank) embeddings ``Phi_l x`` (all-zero for a text without a known token).

        Args:
            texts: the documents, all in language ``lang``; tokenised and TF-IDF weighted as in
                training (the training IDF, rows L2-normalised).
            lang: a language the model was trained on; a regional or differently written code
                resolves to it (``de_DE`` -> ``de``).

        Returns:
            float32 array (len(texts), rank), row i the embedding of ``texts[i]``; rows are not
            normalised (cosine similarity normalises them).

        Raises:
            NotFittedError: the estimator is neither fitted nor loaded.
            UnsupportedLanguageError: ``lang`` is none of the model's languages (named).
        """
        return self._fitted().transform(texts, lang)

    def word_vectors(self, lang: str) -> tuple[list[str], np.ndarray]:
        """Vocabulary of ``lang`` and its word vectors (columns of ``Phi_l``, as rows).

        Args:
            lang: a language of the model (resolved as in :meth:`transform`).

        Returns:
            ``(words, vectors)``: the vocabulary in column order and float32 (|V_l|, rank),
            row i the vector of ``words[i]``.

        Raises:
            NotFittedError: the estimator is neither fitted nor loaded.
            UnsupportedLanguageError: ``lang`` is none of the model's languages.
        """
        return self._fitted().word_vectors(lang)

    def save(self, path: str | Path, *, info: Mapping[str, Any] | None = None) -> Path:
        """Write the model directory (``encoders/trained/cr5.py`` format; usable as ``cr5:PATH``).

        Args:
            path: the model directory (created; ``model.json`` is written last, so a directory
                with one is complete).
            info: JSON-ready entries added to the directory's info (e.g. the regime and split
                a run used); the fitted model itself is not changed.

        Returns:
            The directory's path.

        Raises:
            NotFittedError: the estimator is neither fitted nor loaded.
            DataError: a language code that cannot name a file.
        """
        model = self._fitted()
        if info:
            model = copy.copy(model)
            model.meta = {**model.meta, **dict(info)}
        return model.save(path)

    @classmethod
    def load(cls, path: str | Path) -> "Cr5":
        """An estimator holding the model of a saved directory (hyper-parameters restored: the
        saved values of the names ``get_params()`` knows; others are ignored).

        Args:
            path: a directory written by :meth:`save` (or :meth:`Cr5Model.save
                <backretrieval.encoders.trained.cr5.Cr5Model.save>`).

        Returns:
            A fitted estimator: ``transform`` and ``word_vectors`` work; the training statistics
            (``eigenvalues_``, ``n_documents_``, ``stats_``, times) are those saved, empty or
            None where the directory has none.

        Raises:
            EncoderError: a directory that is not a readable Cr5 model (naming what is wrong).
        """
        model = Cr5Model.load(path)
        est = cls._from_saved_params(model.meta.get("hyper_parameters", {}))
        tr = model.meta.get("training", {})
        est.languages_ = list(model.languages)
        est.vocabulary_ = {lang: model.bow[lang].vocabulary for lang in model.languages}
        est.idf_ = {lang: model.bow[lang].idf for lang in model.languages}
        est.components_ = dict(model.phi)
        est.singular_values_ = model.singular_values
        est.eigenvalues_ = np.asarray(tr.get("eigenvalues", []), dtype=np.float64)
        est.n_documents_ = tr.get("n_documents", {})
        est.n_concepts_ = tr.get("n_concepts")
        est.stats_ = tr.get("solver", {})
        est.fit_seconds_ = tr.get("fit_seconds")
        est.preprocess_seconds_ = tr.get("preprocess_seconds")
        est.model_ = model
        return est
