"""One estimator shape for the training layer: scikit-learn's conventions, one error of each kind.

Every trainable method (:class:`~backretrieval.train.cr5.Cr5`,
:class:`~backretrieval.train.triplet.Triplet`, :class:`~backretrieval.train.m3l.M3L`) is an
:class:`Estimator` with the same four entry points:

* ``fit(data, ...) -> self`` learns; ``transform(...)`` embeds (its inputs are the method's:
  texts and a language for Cr5, base vectors of titles and bodies for Triplet, base text
  embeddings for M3L); ``save(path, *, info=None) -> Path`` writes the model directory of
  :mod:`backretrieval.encoders.trained.modeldir` (``info``: JSON-ready entries added to the directory's
  info); ``load(path)`` (a classmethod) returns a fitted estimator whose ``transform`` gives
  the vectors of the estimator that was saved;
* ``__init__`` only stores its keyword arguments under the same names (no checks, no
  conversions), so ``get_params`` / ``set_params`` / ``clone`` / ``repr`` come from
  :class:`sklearn.base.BaseEstimator` and read the parameters from the ``__init__`` signature;
  each default is stated once, in that signature (or in the constant it names);
* the class declares ``_parameter_constraints`` (scikit-learn's ``Interval`` / ``StrOptions``
  vocabulary) and may add cross-parameter rules in :meth:`Estimator._check_more`; every public
  ``fit`` method is wrapped in :func:`fit_context` (scikit-learn's ``_fit_context``), which runs
  :meth:`Estimator.check_params` once, before any fitting work, and raises
  :class:`HyperParameterError` naming the parameter and the bad value;
* learned state lives only in attributes ending in ``_``; the training loops take one frozen
  settings object built from the checked parameters;
* using a model before ``fit`` (or ``load``) raises :class:`NotFittedError`, which is also
  scikit-learn's ``NotFittedError`` (``except sklearn.exceptions.NotFittedError`` catches it).

Using scikit-learn's own validation (``BaseEstimator._validate_params``) instead of a hand-made
checker keeps the messages and the vocabulary the ecosystem already knows.
"""
from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError as _SklearnNotFittedError
from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions

from ..core import BackretrievalError

__all__ = [
    "Estimator", "HyperParameterError", "Interval", "MAX_WIDTH", "NON_NEGATIVE_INT", "NotFittedError", "POSITIVE_INT",
    "POSITIVE_REAL", "StrOptions", "check_widths", "fit_context",
]

# the constraints every estimator uses (seeds, counts, rates); booleans are refused for all of them
POSITIVE_INT = Interval(numbers.Integral, 1, None, closed="left")
NON_NEGATIVE_INT = Interval(numbers.Integral, 0, None, closed="left")
POSITIVE_REAL = Interval(numbers.Real, 0, math.inf, closed="neither")  # finite


class NotFittedError(BackretrievalError, _SklearnNotFittedError):
    """A model was used (transform, save, ...) before ``fit`` or ``load``."""


class HyperParameterError(BackretrievalError, TypeError):
    """A hyper-parameter has a wrong type or value; the message names it and the value."""


MAX_WIDTH = 16_384  # units of one dense layer: a 16,384 x 16,384 layer is 1 GiB of float32 weights


def check_widths(widths: Any) -> None:
    """Layer widths of a network within :data:`MAX_WIDTH` units each: a width of 10^9 would ask
    for terabytes of weights before training starts (Triplet's ``layers``, M3L's ``widths``).

    Args:
        widths: the widths (positive integers, checked by the caller).

    Raises:
        HyperParameterError: naming the first width above the bound.
    """
    big = next((w for w in widths if w > MAX_WIDTH), None)
    if big is not None:
        raise HyperParameterError(f"a layer of {big:,} units; at most {MAX_WIDTH:,} per layer")


_Fit = TypeVar("_Fit", bound=Callable[..., Any])


def fit_context(fit: _Fit) -> _Fit:
    """Wrap a public ``fit`` method: check every hyper-parameter first, then fit.

    The check (:meth:`Estimator.check_params`) runs once per call, before the method's own
    body, so a bad parameter raises :class:`HyperParameterError` before any data is read or
    any model is touched. The method itself must not check again, nor call another wrapped
    method (it calls the private, unwrapped one instead).

    Args:
        fit: the estimator's fit method.

    Returns:
        The wrapped method (marked ``__fit_context__ = True``).
    """

    @functools.wraps(fit)
    def wrapper(self: "Estimator", *args: Any, **kwargs: Any) -> Any:
        self.check_params()
        return fit(self, *args, **kwargs)

    wrapper.__fit_context__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


class Estimator(BaseEstimator):
    """Base class of the training layer's estimators (see the module docstring).

    Subclasses set ``_parameter_constraints`` (a dict parameter -> list of accepted
    constraints, as in scikit-learn) and ``_fitted_attribute`` (a learned attribute that exists
    exactly when the model is fitted or loaded), wrap their ``fit`` in :func:`fit_context`, and
    define ``transform``, ``save(path, *, info=None)`` and the classmethod ``load(path)``.
    """

    _parameter_constraints: dict[str, list[Any]] = {}
    _fitted_attribute: str = ""

    def _check_more(self) -> None:
        """Rules that involve several parameters; raise :class:`HyperParameterError`."""

    def check_params(self) -> None:
        """Validate every hyper-parameter (:func:`fit_context` runs this before every fit; a
        caller that reads data before fitting, such as the CLI, may call it first to fail early).

        Raises:
            HyperParameterError: a parameter has a wrong type or value (booleans are not
                accepted where a number is expected, although scikit-learn's intervals take them).
        """
        try:
            self._validate_params()
        except InvalidParameterError as exc:
            raise HyperParameterError(str(exc)) from None
        name = type(self).__name__
        for param, constraints in self._parameter_constraints.items():
            value = getattr(self, param)
            intervals = [c for c in constraints if isinstance(c, Interval)]
            allows_bool = any(c in ("boolean", bool) for c in constraints)
            if intervals and not allows_bool and isinstance(value, bool):
                kind = "an int" if all(c.type is numbers.Integral for c in intervals) else "a number"
                raise HyperParameterError(f"The {param!r} parameter of {name} must be {kind}, got {value!r}")
        self._check_more()

    @classmethod
    def _from_saved_params(cls, saved: Mapping[str, Any]) -> "Estimator":
        """A new estimator with the saved hyper-parameters that ``__init__`` knows (the others,
        such as those of an older directory, are left out; missing ones keep their default)."""
        known = cls._get_param_names()
        return cls(**{k: v for k, v in saved.items() if k in known})

    def _require_fitted(self) -> None:
        """Raise :class:`NotFittedError` unless the model is fitted (or loaded)."""
        if not self._fitted_attribute or not hasattr(self, self._fitted_attribute):
            raise NotFittedError(
                f"{type(self).__name__} is not fitted yet: call fit() (or load a saved model) first"
            )

    def __sklearn_is_fitted__(self) -> bool:
        return bool(self._fitted_attribute) and hasattr(self, self._fitted_attribute)
