"""`import backretrieval as br` is the surface users learn: every public name resolves, lazily."""
from __future__ import annotations

import subprocess
import sys

import backretrieval as br

EXPECTED = {
    "evaluate", "compare", "meta", "EvalConfig", "EvalResult", "compare_report", "load_dataset", "text_model",
    "image_model", "PythonTextModel", "PythonImageModel", "xlr", "bkr", "corr", "csls", "Cr5", "Triplet", "M3L",
    "BackretrievalEvaluator", "__version__",
}


def test_public_names():
    assert set(br.__all__) == EXPECTED
    assert 12 <= len(br.__all__) <= 20
    for name in br.__all__:
        assert getattr(br, name) is not None, name
    assert set(br.__all__) <= set(dir(br))


def test_public_names_are_the_layers_objects():
    from backretrieval.analysis import EvalConfig
    from backretrieval.metrics import xlr
    from backretrieval.report.runs import compare, evaluate, meta
    from backretrieval.train.cr5 import Cr5

    assert br.EvalConfig is EvalConfig and br.evaluate is evaluate and br.compare is compare and br.meta is meta
    assert br.xlr is xlr and br.Cr5 is Cr5
    assert br.text_model("random").dim > 0


def test_unknown_name_is_an_attribute_error():
    try:
        br.no_such_thing
    except AttributeError as e:
        assert "no_such_thing" in str(e)
    else:
        raise AssertionError("br.no_such_thing resolved")


def test_import_loads_no_numerical_library():
    """``import backretrieval`` stays fast because it imports nothing heavy (names load on use)."""
    code = ("import sys, backretrieval; heavy = [m for m in ('numpy', 'scipy', 'torch', 'pandas', 'numba', 'click') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"import backretrieval loaded {out}"
