"""Cr5: crosslingual reduced-rank ridge regression (Josifoski, Paskov, Paskov, Jaggi, West; WSDM 2019).

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

Modules: :mod:`.problem` (the ridge system and its solves), :mod:`.spectral` (Eq. 12
eigenvectors, Eq. 14-15), :mod:`.solver` (:func:`solve`), :mod:`._cg` / :mod:`._lanczos`
(compiled CG kernels, one Lanczos factorisation), :mod:`.estimator` (:class:`Cr5`),
:mod:`.splits` (splits, regimes, candidate pools), :mod:`.evaluation` (retrieval, lambda
selection, word retrieval, :func:`train_evaluate`). Markdown tables are the report layer's
(:mod:`backretrieval.report.cr5_tables`).
"""
from .estimator import Cr5
from .evaluation import (
    default_eval_pairs, evaluate_retrieval, mean_score, retrieval_precision, select_lambda, single_token_dictionary,
    train_evaluate, word_retrieval,
)
from .problem import Cr5Problem, SolverStats
from .solver import Cr5Solution, solve
from .splits import REGIMES, Split, candidate_rows, make_split, training_corpora, write_heldout

__all__ = [
    "REGIMES", "Cr5", "Cr5Problem", "Cr5Solution", "SolverStats", "Split", "candidate_rows", "default_eval_pairs",
    "evaluate_retrieval", "make_split", "mean_score", "retrieval_precision", "select_lambda", "single_token_dictionary",
    "solve", "train_evaluate", "training_corpora", "word_retrieval", "write_heldout",
]
