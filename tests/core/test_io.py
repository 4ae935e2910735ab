"""core/io.py's JSON helpers: what strict JSON cannot hold becomes null."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from backretrieval.core import json_finite, json_ready


def test_json_finite_nulls_nan_and_infinity_at_any_depth():
    x = {"a": float("nan"), "b": [np.float32("inf"), -math.inf, (1.5, np.int64(3))], "c": np.bool_(True), "d": "x"}
    out = json_finite(x)
    assert out == {"a": None, "b": [None, None, [1.5, 3]], "c": True, "d": "x"}
    assert type(out["b"][2][1]) is int and type(out["c"]) is bool
    json.dumps(out, allow_nan=False)


def test_json_ready_keeps_infinity():
    assert json_ready({"a": np.float64("nan"), "b": [math.inf]}) == {"a": None, "b": [math.inf]}


def test_json_lines_is_the_one_json_lines_decoder(tmp_path):
    """data/generic.py and encoders/text/precomputed.py read JSON lines with it: blank lines are
    skipped, a bad line is named by its number, a line nested too deeply too; json_text decodes a
    whole JSON file with the same refusals."""
    from backretrieval.core import DataError
    from backretrieval.core.io import json_lines, json_text

    assert list(json_lines(['{"a": 1}', "  ", "[2]"], "f")) == [(1, {"a": 1}), (3, [2])]
    with pytest.raises(DataError, match=r"^f: line 2: invalid JSON: Expecting value"):
        list(json_lines(["1", "nope"], "f"))
    with pytest.raises(DataError, match=r"^f: line 1: invalid JSON: nested too deeply \(arrays or objects inside each other\)$"):
        list(json_lines(["[" * 100_000], "f"))
    assert json_text('[{"a": 1}]', "f") == [{"a": 1}]  # a whole JSON file, as the generic loader reads one
    with pytest.raises(DataError, match=r"^f: invalid JSON: Expecting"):
        json_text("[1", "f")
    from backretrieval.encoders.text.precomputed import PrecomputedTextEncoder

    bad = tmp_path / "emb.jsonl"
    bad.write_text('{"lang": "en", "id": "1", "embedding": [1, 2]}\n{oops\n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{re.escape(f'precomputed:{bad}: {bad}: line 2: invalid JSON: ')}"):
        PrecomputedTextEncoder(str(bad)).encode(["x"], "en", ids=["1"])
