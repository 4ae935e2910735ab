"""core/io.py's JSON helpers: what strict JSON cannot hold becomes null."""
from __future__ import annotations

import json
import math

import numpy as np

from backretrieval.core import json_finite, json_ready


def test_json_finite_nulls_nan_and_infinity_at_any_depth():
    x = {"a": float("nan"), "b": [np.float32("inf"), -math.inf, (1.5, np.int64(3))], "c": np.bool_(True), "d": "x"}
    out = json_finite(x)
    assert out == {"a": None, "b": [None, None, [1.5, 3]], "c": True, "d": "x"}
    assert type(out["b"][2][1]) is int and type(out["c"]) is bool
    json.dumps(out, allow_nan=False)


def test_json_ready_keeps_infinity():
    assert json_ready({"a": np.float64("nan"), "b": [math.inf]}) == {"a": None, "b": [math.inf]}
