"""Analysis layer: the evaluation grid over models x language pairs x seeds (and, later, the
meta-evaluation and statistics built on its records)."""
from .evaluate import EvalConfig, EvalResult, evaluate, parse_pairs, summarize

__all__ = ["EvalConfig", "EvalResult", "evaluate", "parse_pairs", "summarize"]
