"""Analysis layer: the evaluation grid over models x language pairs x seeds (:mod:`.evaluate`),
and what is built on its records: model comparison with confidence intervals and paired tests
(:mod:`.compare`, :mod:`.stats`) and its verdict (:mod:`.verdict`), the meta-evaluation of BkR and CORR against XLR (:mod:`.meta`),
image retrieval (:mod:`.image_retrieval`), the case study (:mod:`.case_study`) and the local,
process and Ray executors (:mod:`.executors`, one module each and their table)."""
from ..encoders.image.python_model import PythonImageModel
from ..encoders.text.python_model import PythonTextModel
from .compare import compare_models
from .evaluate import EvalConfig, EvalResult, parse_pairs, run_grid, summarize

__all__ = [
    "EvalConfig", "EvalResult", "PythonImageModel", "PythonTextModel", "compare_models", "parse_pairs", "run_grid", "summarize",
]
