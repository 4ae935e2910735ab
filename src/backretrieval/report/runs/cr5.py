"""The run writer of ``backretrieval train cr5``: :func:`train_cr5` runs one Cr5 experiment
(:func:`backretrieval.analysis.trained.cr5.train_evaluate`) and writes what the command writes."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...analysis.trained.cr5 import Cr5Run, train_evaluate
from ...core import atomic_write_text
from ...train.cr5 import write_heldout
from ...train.cr5.splits import corpora_of
from ..cr5_tables import write_eval_md


def train_cr5(dataset: Any, *, out_dir: str | Path | None = None, meta: Mapping[str, Any] | None = None,
              **options: Any) -> Cr5Run:
    """Train and evaluate Cr5 (:func:`~backretrieval.analysis.trained.cr5.train_evaluate`, which
    takes ``options``) and write what ``backretrieval train cr5`` writes.

    Args:
        dataset: a loaded :class:`~backretrieval.data.Dataset` (or corpora per language).
        out_dir: the model directory: the model (its ``experiment`` metadata:
            :meth:`~backretrieval.analysis.trained.cr5.Cr5Run.experiment`) and, with held-out
            concepts, ``split.json``, ``eval.json``, ``heldout.jsonl``
            (:func:`~backretrieval.train.cr5.write_heldout`) and, when there are test records,
            ``eval.md`` (:func:`backretrieval.report.cr5_tables.write_eval_md`). None: nothing
            is written.
        meta: entries put first in the model's ``experiment`` metadata and in ``eval.json``
            (the command puts the dataset and its loader options there).
        **options: ``train_evaluate``'s keyword arguments (``regime``, ``languages``, ``lams``, ...).

    Returns:
        The :class:`~backretrieval.analysis.trained.cr5.Cr5Run`.
    """
    run = train_evaluate(dataset, **options)
    if out_dir is None:
        return run
    out = Path(out_dir)
    info = run.experiment(meta)
    run.model.save(out, info={"experiment": info})
    if run.split is not None:
        run.split.save(out / "split.json")
        atomic_write_text(out / "eval.json", json.dumps({**info, "lam": run.lam, "test": run.test}, indent=1))
        write_heldout(corpora_of(dataset), run.split, out / "heldout.jsonl")
    if run.test:
        write_eval_md(out, run)
    return run
