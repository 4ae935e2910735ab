"""Analysis layer: the evaluation grid over models x language pairs x seeds (:mod:`.evaluate`; its
models as spec strings or Python objects, :mod:`.models`) and where its tasks run (the local,
process and Ray executors, :mod:`.executors`, one module each and their table); what is built on
its records: model comparison with confidence intervals and paired tests (:mod:`.compare`,
:mod:`.stats`, the finished :mod:`.comparison`), its verdict (:mod:`.verdict`) and the price of
each answer (:mod:`.costs`), the meta-evaluation of candidate proxies against XLR (:mod:`.meta`)
with its calibration (:mod:`.calibration`); and evaluating trained models (:mod:`.trained`: Cr5
experiments, M3L/PATR image retrieval, the Triplet case study). What the commands write of them
is :mod:`backretrieval.report.runs`; ARCHITECTURE.md maps the layer."""
from ..encoders.image.python_model import PythonImageModel
from ..encoders.text.python_model import PythonTextModel
from .compare import compare_models
from .evaluate import EvalConfig, EvalResult, parse_pairs, run_grid, summarize

__all__ = [
    "EvalConfig", "EvalResult", "PythonImageModel", "PythonTextModel", "compare_models", "parse_pairs", "run_grid", "summarize",
]
