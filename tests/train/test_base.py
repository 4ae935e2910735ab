"""The training layer's one estimator shape (train/base.py)."""
import numbers

import pytest
import sklearn.exceptions
from sklearn.base import clone

from backretrieval.core import BackretrievalError
from backretrieval.train.base import (
    POSITIVE_REAL, Estimator, HyperParameterError, Interval, NotFittedError, StrOptions, fit_context,
)


class Toy(Estimator):
    _parameter_constraints = {
        "rank": [Interval(numbers.Integral, 1, None, closed="left")],
        "loss": [StrOptions({"a", "b"})],
        "eta": [POSITIVE_REAL, None],
        "flag": ["boolean"],
    }
    _fitted_attribute = "w_"

    def __init__(self, rank=3, loss="a", eta=None, flag=False):
        self.rank = rank
        self.loss = loss
        self.eta = eta
        self.flag = flag

    def _check_more(self):
        if self.loss == "b" and self.eta is None:
            raise HyperParameterError("loss='b' needs eta")

    @fit_context
    def fit(self, seen=None):
        if seen is not None:
            seen.append(self.rank)  # the fitting work
        self.w_ = self.rank * 2
        return self

    def transform(self):
        self._require_fitted()
        return self.w_


def test_params_from_signature_and_clone():
    t = Toy(rank=5, eta=0.5)
    assert t.get_params() == {"rank": 5, "loss": "a", "eta": 0.5, "flag": False}
    assert t.set_params(rank=7) is t and t.rank == 7
    c = clone(t)
    assert c.get_params() == t.get_params() and c is not t
    assert repr(Toy(rank=4)) == "Toy(rank=4)"


@pytest.mark.parametrize("kw, words", [
    ({"rank": 0}, ["'rank'", "Toy", "Got 0"]),
    ({"rank": 2.0}, ["'rank'", "int"]),
    ({"rank": True}, ["'rank'", "True"]),
    ({"loss": "c"}, ["'loss'", "'c'"]),
    ({"eta": -1.0}, ["'eta'", "-1.0"]),
    ({"eta": True}, ["'eta'", "a number", "True"]),
    ({"eta": float("inf")}, ["'eta'", "inf"]),
    ({"loss": "b"}, ["needs eta"]),
])
def test_bad_hyper_parameters_name_the_parameter(kw, words):
    with pytest.raises(HyperParameterError) as err:
        Toy(**kw).fit()
    assert isinstance(err.value, BackretrievalError)
    for w in words:
        assert w in str(err.value)


def test_not_fitted_is_one_error_and_sklearns():
    t = Toy()
    for kind in (NotFittedError, sklearn.exceptions.NotFittedError, BackretrievalError):
        with pytest.raises(kind, match="Toy is not fitted yet"):
            t.transform()
    assert t.fit() is t and t.transform() == 6


def test_fit_context_checks_once_before_the_fit_body(monkeypatch):
    seen, checks = [], []
    real = Toy.check_params
    monkeypatch.setattr(Toy, "check_params", lambda self: (checks.append(1), real(self)))
    with pytest.raises(HyperParameterError, match="'rank'"):
        Toy(rank=0).fit(seen)
    assert seen == [] and checks == [1]  # refused before any fitting work
    assert Toy(rank=2).fit(seen).w_ == 4 and seen == [2] and checks == [1, 1]  # one check per fit
    assert Toy.fit.__fit_context__ and Toy.fit.__name__ == "fit"
