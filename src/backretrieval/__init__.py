"""backretrieval: which cross-lingual text representation works best for your domain and
language pairs, with or without parallel data.

The names a user needs are here, imported on first use (PEP 562), so ``import backretrieval``
loads no numerical library::

    import backretrieval as br

    cfg = br.EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=["use-m", "random"], n=300, seeds=[0])
    result = br.evaluate(cfg, "out/api")

Evaluation: :func:`evaluate`, :func:`compare`, :func:`meta` (given an output folder they write
what the ``evaluate``, ``compare`` and ``meta`` commands write), :class:`EvalConfig`,
:class:`EvalResult`, :func:`compare_report`. Inputs: :func:`load_dataset`, :func:`text_model`,
:func:`image_model`, :class:`PythonTextModel`, :class:`PythonImageModel`. Metrics on arrays:
:func:`xlr`, :func:`bkr`, :func:`corr`, :func:`csls`. Training: :class:`Cr5`, :class:`Triplet`, :class:`M3L`;
:class:`BackretrievalEvaluator` (BkR while fine-tuning a sentence-transformers model).
The layers behind them (``core``, ``data``, ``encoders``, ``search``, ``metrics``, ``train``,
``analysis``, ``report``, ``study``, ``cli``) are documented public subpackages; ARCHITECTURE.md
maps them.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> (module, attribute in that module)
_PUBLIC: dict[str, tuple[str, str]] = {
    "evaluate": ("backretrieval.report.runs", "evaluate"),
    "compare": ("backretrieval.report.runs", "compare"),
    "meta": ("backretrieval.report.runs", "meta"),
    "EvalConfig": ("backretrieval.analysis", "EvalConfig"),
    "EvalResult": ("backretrieval.analysis", "EvalResult"),
    "compare_report": ("backretrieval.report.compare_report", "compare_report"),
    "load_dataset": ("backretrieval.data", "load_dataset"),
    "text_model": ("backretrieval.encoders", "get_text_encoder"),
    "image_model": ("backretrieval.encoders", "get_image_encoder"),
    "PythonTextModel": ("backretrieval.analysis", "PythonTextModel"),
    "PythonImageModel": ("backretrieval.analysis", "PythonImageModel"),
    "xlr": ("backretrieval.metrics", "xlr"),
    "bkr": ("backretrieval.metrics", "bkr"),
    "corr": ("backretrieval.metrics", "corr"),
    "csls": ("backretrieval.metrics", "csls"),
    "Cr5": ("backretrieval.train.cr5", "Cr5"),
    "Triplet": ("backretrieval.train.triplet", "Triplet"),
    "M3L": ("backretrieval.train.m3l", "M3L"),
    "BackretrievalEvaluator": ("backretrieval.train.st_evaluator", "BackretrievalEvaluator"),
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module 'backretrieval' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load on first use
    from .analysis import EvalConfig, EvalResult, PythonImageModel, PythonTextModel
    from .data import load_dataset
    from .encoders import get_image_encoder as image_model
    from .encoders import get_text_encoder as text_model
    from .metrics import bkr, corr, csls, xlr
    from .report.compare_report import compare_report
    from .report.runs import compare, evaluate, meta
    from .train.cr5 import Cr5
    from .train.m3l import M3L
    from .train.st_evaluator import BackretrievalEvaluator
    from .train.triplet import Triplet
