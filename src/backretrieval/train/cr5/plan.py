"""What a Cr5 training run is asked for, checked as a whole before any data is read.

The rules between the options of ``backretrieval train cr5`` and of
:func:`backretrieval.analysis.trained.cr5.train_evaluate` live here, once: the lambdas are positive; a pairwise or
transitive regime names its pair (pairwise with exactly two languages takes them as the pair),
a transitive one its pivot; ``min_words <= max_words``; a reused split needs held-out concepts;
training without them takes one lambda. :func:`plan_training` returns the checked
:class:`TrainingPlan`, with the languages to load (the trained ones and all of a reused
split's, whose candidate pools span them). A broken rule raises :class:`Cr5OptionError`, which
names the option in the caller's spelling (``--no-holdout`` on the command line,
``holdout=False`` in Python).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from ..base import HyperParameterError
from .splits import REGIMES, Split

# option -> (command-line spelling, Python spelling)
_SPELLING = {
    "lam": ("--lam", "lam"),
    "pair": ("--pair", "pair"),
    "pivot": ("--pivot", "pivot"),
    "regime": ("--regime", "regime"),
    "min_words": ("--min-words", "min_words"),
    "max_words": ("--max-words", "max_words"),
    "split": ("--split", "split"),
    "no_holdout": ("--no-holdout", "holdout=False"),
}


class Cr5OptionError(HyperParameterError):
    """A Cr5 training option that breaks a rule of :func:`plan_training`.

    Attributes:
        option: the option at fault (``"lam"``, ``"pair"``, ``"pivot"``, ``"regime"``,
            ``"max_words"``, ``"split"``).
        flag: its command-line spelling (``"--max-words"``).
    """

    def __init__(self, option: str, template: str, **values: Any) -> None:
        self.option = option
        self.flag = _SPELLING[option][0]
        self._template, self._values = template, values
        super().__init__(f"{option}: {self.reason(cli=False)}")

    def reason(self, *, cli: bool = False) -> str:
        """Why the option is refused, naming the options involved.

        Args:
            cli: spell the options as the command line does (``--min-words``); else as Python
                does (``min_words``).

        Returns:
            The reason, without the option's own name in front.
        """
        names = {k: v[0 if cli else 1] for k, v in _SPELLING.items()}
        return self._template.format(**names, **self._values)


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    """A checked Cr5 training run.

    Attributes:
        regime: ``"joint"``, ``"pairwise"`` or ``"transitive"``.
        trained: the languages trained on (None: every language of the dataset; joint only).
        load: the languages to load (None: all): the trained ones and a reused split's.
        pair: the trained pair (pairwise, transitive; joint keeps what was given, unused).
        pivot: the pivot language (transitive; the others keep what was given, unused).
        lams: the candidate lambdas (one without held-out concepts).
        split: a split to reuse, or None.
        holdout: False: train on every concept, no evaluation.
    """

    regime: str
    trained: list[str] | None
    load: list[str] | None
    pair: tuple[str, str] | None
    pivot: str | None
    lams: list[float]
    split: Split | None
    holdout: bool


def plan_training(
    *,
    regime: str = "joint",
    languages: Sequence[str] | None = None,
    pair: tuple[str, str] | None = None,
    pivot: str | None = None,
    lams: Sequence[float] = (1.0,),
    min_words: int = 5,
    max_words: int = 1000,
    split: Split | None = None,
    holdout: bool = True,
) -> TrainingPlan:
    """Check the options of a Cr5 training run against each other, before any data is read.

    Args:
        regime: ``"joint"``, ``"pairwise"`` or ``"transitive"``.
        languages: the languages asked for (None: all of the dataset).
        pair: the trained pair (pairwise, transitive); pairwise with exactly two ``languages``
            defaults to them.
        pivot: the pivot language (transitive).
        lams: candidate ridge lambdas, each > 0; several are chosen among on validation queries.
        min_words: the fewest distinct tokens of a training document.
        max_words: the most distinct tokens of a training document (>= ``min_words``).
        split: a split to reuse (it needs held-out concepts).
        holdout: False: train on every concept (one lambda, no evaluation).

    Returns:
        The :class:`TrainingPlan`.

    Raises:
        Cr5OptionError: naming the first option that breaks a rule.
    """
    if regime not in REGIMES:
        raise Cr5OptionError("regime", "unknown training regime {value!r}; use one of {known}", value=regime,
                             known=", ".join(REGIMES))
    lams = [float(x) for x in lams]
    if not lams:
        raise Cr5OptionError("lam", "give at least one lambda")
    for x in lams:
        if not x > 0:
            raise Cr5OptionError("lam", "lambda {value:g} is not positive", value=x)
    langs = list(languages) if languages is not None else None
    if regime == "pairwise" and pair is None and langs and len(langs) == 2:
        pair = (langs[0], langs[1])
    if regime != "joint" and pair is None:
        raise Cr5OptionError("pair", "{regime_name} training needs {pair}", regime_name=regime)
    if regime == "transitive" and not pivot:
        raise Cr5OptionError("pivot", "transitive training needs {pivot}")
    if min_words > max_words:
        raise Cr5OptionError("max_words", "{max_words} {top} is below {min_words} {bottom}", top=max_words, bottom=min_words)
    if split is not None and not holdout:
        raise Cr5OptionError("split", "{split} and {no_holdout} exclude each other")
    if not holdout and len(lams) != 1:
        raise Cr5OptionError("lam", "training without held-out concepts ({no_holdout}) cannot choose lambda: give one lambda")
    if regime == "joint":
        trained = langs or (list(split.languages) if split else None)
    else:
        trained = [*pair] + ([pivot] if regime == "transitive" else [])
    load = None if trained is None else list(dict.fromkeys([*trained, *(split.languages if split else [])]))
    return TrainingPlan(regime, trained, load, tuple(pair) if pair else None, pivot, lams, split, holdout)
