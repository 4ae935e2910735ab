"""One Cr5 experiment (Josifoski et al., WSDM 2019, Sec. 4.2): split the concepts, train a regime
(lambda chosen by validation retrieval when several are given) and evaluate on the held-out test
queries, as :class:`Cr5Run`. The retrieval measures themselves are
:mod:`backretrieval.train.cr5.retrieval`; what ``backretrieval train cr5`` writes of a run is
:func:`backretrieval.report.runs.train_cr5`.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...core import DataError
from ...data import Corpus, Dataset
from ...train.cr5 import Cr5, Split, evaluate_retrieval, make_split, plan_training, select_lambda, training_corpora
from ...train.cr5.splits import corpora_of


@dataclasses.dataclass
class Cr5Run:
    """One regime's split-train-evaluate run.

    Attributes:
        regime: ``"joint"``, ``"pairwise"`` or ``"transitive"``.
        languages: the languages used.
        pair: the trained pair (pairwise, transitive; else None).
        pivot: the pivot language (transitive; else None).
        holdout: whether concepts were held out (False: trained on every concept, no evaluation).
        model: the fitted :class:`~backretrieval.train.cr5.Cr5` of the chosen lambda.
        lam: the chosen lambda.
        lambda_table: one ``{"lam", "val_xlr@1", "fit_seconds"}`` record per lambda tried (empty
            without held-out concepts).
        test: the test records of :func:`~backretrieval.train.cr5.evaluate_retrieval` (empty
            without held-out concepts).
        split: the split (None without held-out concepts).
        seconds: the run's time, split to test, rounded to 0.1 s.
    """

    regime: str
    languages: list[str]
    pair: tuple[str, str] | None
    pivot: str | None
    holdout: bool
    model: Cr5
    lam: float
    lambda_table: list[dict[str, Any]]
    test: list[dict[str, Any]]
    split: Split | None
    seconds: float

    def experiment(self, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """What a saved model's ``experiment`` metadata and ``eval.json`` say of the run.

        Args:
            meta: entries put first (e.g. the dataset and its loader options).

        Returns:
            ``meta``'s entries, then ``regime``, ``pair``, ``pivot``, ``lambda_selection`` and
            ``heldout``.
        """
        return {
            **dict(meta or {}),
            "regime": self.regime,
            "pair": list(self.pair) if self.pair else None,
            "pivot": self.pivot,
            "lambda_selection": self.lambda_table,
            "heldout": bool(self.holdout),
        }


def default_eval_pairs(regime: str, languages: Sequence[str], pair: tuple[str, str] | None) -> list[tuple[str, str]]:
    """Pairs evaluated when none are given: the trained pair (pairwise, transitive), else the
    first language with every other one (joint).

    Args:
        regime: ``"joint"``, ``"pairwise"`` or ``"transitive"``.
        languages: the trained languages (joint: the first one pairs with each other one).
        pair: the trained pair (pairwise, transitive).

    Returns:
        The (source, target) pairs.

    Raises:
        DataError: a pairwise or transitive regime without ``pair``.
    """
    if regime in ("pairwise", "transitive"):
        if pair is None:
            raise DataError(f"{regime} training needs a pair")
        return [tuple(pair)]
    return [(languages[0], lang) for lang in languages[1:]]


def train_evaluate(
    ds: Dataset | Mapping[str, Corpus],
    *,
    regime: str = "joint",
    languages: Sequence[str] | None = None,
    pair: tuple[str, str] | None = None,
    pivot: str | None = None,
    eval_pairs: Sequence[tuple[str, str]] | None = None,
    lams: Sequence[float] = (1.0,),
    split: Split | None = None,
    split_options: Mapping[str, Any] | None = None,
    holdout: bool = True,
    params: Mapping[str, Any] | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> Cr5Run:
    """Split, train a regime (lambda by validation when several are given) and evaluate on the
    test queries. Nothing is written (:func:`backretrieval.report.runs.train_cr5` writes a run as
    ``backretrieval train cr5`` does). ``holdout=False`` trains on every concept (a model for use
    elsewhere; no evaluation, one lambda).

    Args:
        ds: the dataset, or corpora per language, whose items carry concepts.
        regime: ``"joint"``, ``"pairwise"`` or ``"transitive"``
            (:func:`~backretrieval.train.cr5.training_corpora`).
        languages: the languages used (default: all of ``ds``, sorted); with exactly two and
            the pairwise regime they are the pair; with three, the transitive regime and
            ``pivot`` among them, the other two are the pair.
        pair: the trained pair (pairwise, transitive).
        pivot: the pivot language (transitive).
        eval_pairs: the pairs to hold out and evaluate (default: :func:`default_eval_pairs`).
        lams: candidate lambdas; several are chosen among on the validation queries
            (:func:`~backretrieval.train.cr5.select_lambda`).
        split: a split to reuse (e.g. :meth:`Split.load`); default:
            :func:`~backretrieval.train.cr5.make_split` over ``languages`` and the evaluated pairs.
        split_options: keyword arguments of :func:`~backretrieval.train.cr5.make_split`.
        holdout: False: train on every concept, no split and no evaluation.
        params: further :class:`~backretrieval.train.cr5.Cr5` hyper-parameters (all but ``lam``).
        log: receives progress lines (training documents, one line per lambda).

    Returns:
        The :class:`Cr5Run`.

    Raises:
        Cr5OptionError: options that break a rule of :func:`~backretrieval.train.cr5.plan_training`
            (several lambdas without held-out concepts, a regime without its pair or pivot, ...).
        DataError: what the split and the fit reject.
    """
    corpora = corpora_of(ds)
    langs = list(languages) if languages else sorted(corpora)
    if regime == "transitive" and (pair is None or pivot is None) and len(langs) == 3 and pivot in langs:
        pair = tuple(x for x in langs if x != pivot)  # type: ignore[assignment]
    params = dict(params or {})
    words = {k: params[k] for k in ("min_words", "max_words") if k in params}
    plan = plan_training(regime=regime, languages=langs, pair=pair, pivot=pivot, lams=lams, split=split, holdout=holdout, **words)
    pair, lams = plan.pair, plan.lams
    t0 = time.perf_counter()
    if not holdout:
        if regime == "joint":
            train = {lang: corpora[lang] for lang in langs}
        else:
            empty = Split(langs, [], {}, {}, [], 0)
            train = training_corpora(corpora, empty, regime, pair=pair, pivot=pivot)
        model = Cr5(lam=lams[0], **params).fit(train)
        lam, table, test = lams[0], [], []
    else:
        pairs = list(eval_pairs) if eval_pairs else default_eval_pairs(regime, langs, pair)
        if split is None:
            split = make_split({lang: corpora[lang] for lang in langs}, pairs, **dict(split_options or {}))
        train = training_corpora(corpora, split, regime, pair=pair, pivot=pivot, languages=langs)
        log(f"{regime} training: " + ", ".join(f"{lang} {len(c)} docs" for lang, c in train.items()))
        model, lam, table = select_lambda(lambda lam: Cr5(lam=lam, **params), train, corpora, split, lams, pairs=pairs, log=log)
        test = evaluate_retrieval(model.transform, corpora, split, pairs, phase="test")
    return Cr5Run(regime, langs, pair, pivot, bool(holdout), model, lam, table, test, split if holdout else None,
                  round(time.perf_counter() - t0, 1))
