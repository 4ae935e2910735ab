"""Cr5, crosslingual reduced-rank ridge regression (Josifoski et al., WSDM 2019): the :class:`Cr5`
estimator (:mod:`.estimator`), the ridge system and its sparse solver (:mod:`.problem`, :mod:`.settings` (the defaults),
:mod:`.spectral`, :mod:`.solver`), concept-level splits and training regimes (:mod:`.splits`), the rules between the training
options (:mod:`.plan`) and the retrieval measures with lambda selection (:mod:`.retrieval`); a whole
split-train-evaluate run is :mod:`backretrieval.analysis.trained.cr5`. The method, its solver and its
results: docs/cr5.md and docs/cr5-results.md; the equations as implemented: the docstring of :mod:`.estimator`.
"""
from .estimator import Cr5
from .retrieval import (
    evaluate_retrieval, mean_score, retrieval_precision, select_lambda, single_token_dictionary, word_retrieval,
)
from .plan import Cr5OptionError, TrainingPlan, plan_training
from .problem import Cr5Problem, SolverStats
from .settings import DEFAULTS, SolverSettings
from .solver import Cr5Solution, solve
from .splits import REGIMES, Split, candidate_rows, make_split, training_corpora, write_heldout

__all__ = [
    "DEFAULTS", "REGIMES", "Cr5", "Cr5OptionError", "Cr5Problem", "Cr5Solution", "SolverSettings", "SolverStats", "Split", "candidate_rows",
    "evaluate_retrieval", "make_split", "mean_score", "plan_training", "retrieval_precision", "select_lambda", "single_token_dictionary",
    "solve", "TrainingPlan", "training_corpora", "word_retrieval", "write_heldout",
]
