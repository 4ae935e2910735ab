"""Analysis layer: the evaluation grid over models x language pairs x seeds (and, later, the
meta-evaluation and statistics built on its records)."""
from ..encoders.text.python_model import PythonTextModel
from .compare import compare
from .evaluate import EvalConfig, EvalResult, evaluate, parse_pairs, summarize

__all__ = ["EvalConfig", "EvalResult", "PythonTextModel", "compare", "evaluate", "parse_pairs", "summarize"]
