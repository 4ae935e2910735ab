"""One estimator shape for the training layer: scikit-learn's conventions, one error of each kind.

Every trainable method (:class:`~backretrieval.train.cr5.Cr5`, Triplet/TripletXL, M3L/PATR) is an
:class:`Estimator`:

* ``__init__`` only stores its keyword arguments under the same names (no checks, no
  conversions), so ``get_params`` / ``set_params`` / ``clone`` / ``repr`` come from
  :class:`sklearn.base.BaseEstimator` and read the parameters from the ``__init__`` signature;
* the class declares ``_parameter_constraints`` (scikit-learn's ``Interval`` / ``StrOptions``
  vocabulary) and may add cross-parameter rules in :meth:`Estimator._check_more`;
  :meth:`Estimator._check_params` runs both at the start of ``fit`` and raises
  :class:`HyperParameterError` naming the parameter and the bad value;
* ``fit(...)`` returns ``self``; learned attributes end in ``_``;
* using a model before ``fit`` (or ``load``) raises :class:`NotFittedError`, which is also
  scikit-learn's ``NotFittedError`` (``except sklearn.exceptions.NotFittedError`` catches it).

Using scikit-learn's own validation (``BaseEstimator._validate_params``) instead of a hand-made
checker keeps the messages and the vocabulary the ecosystem already knows.
"""
from __future__ import annotations

import math
import numbers
from typing import Any

from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError as _SklearnNotFittedError
from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions

from ..core import BackretrievalError

__all__ = [
    "Estimator", "HyperParameterError", "Interval", "NON_NEGATIVE_INT", "NotFittedError", "POSITIVE_INT",
    "POSITIVE_REAL", "StrOptions",
]

# the constraints every estimator uses (seeds, counts, rates); booleans are refused for all of them
POSITIVE_INT = Interval(numbers.Integral, 1, None, closed="left")
NON_NEGATIVE_INT = Interval(numbers.Integral, 0, None, closed="left")
POSITIVE_REAL = Interval(numbers.Real, 0, math.inf, closed="neither")  # finite


class NotFittedError(BackretrievalError, _SklearnNotFittedError):
    """A model was used (transform, save, ...) before ``fit`` or ``load``."""


class HyperParameterError(BackretrievalError, TypeError):
    """A hyper-parameter has a wrong type or value; the message names it and the value."""


class Estimator(BaseEstimator):
    """Base class of the training layer's estimators (see the module docstring).

    Subclasses set ``_parameter_constraints`` (a dict parameter -> list of accepted
    constraints, as in scikit-learn) and ``_fitted_attribute`` (a learned attribute that exists
    exactly when the model is fitted).
    """

    _parameter_constraints: dict[str, list[Any]] = {}
    _fitted_attribute: str = ""

    def _check_more(self) -> None:
        """Rules that involve several parameters; raise :class:`HyperParameterError`."""

    def _check_params(self) -> None:
        """Validate every hyper-parameter.

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

    def _require_fitted(self) -> None:
        """Raise :class:`NotFittedError` unless the model is fitted (or loaded)."""
        if not self._fitted_attribute or not hasattr(self, self._fitted_attribute):
            raise NotFittedError(
                f"{type(self).__name__} is not fitted yet: call fit() (or load a saved model) first"
            )

    def __sklearn_is_fitted__(self) -> bool:
        return bool(self._fitted_attribute) and hasattr(self, self._fitted_attribute)
