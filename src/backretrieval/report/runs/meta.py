"""The run writer of ``backretrieval meta``: :func:`meta` (``br.meta``) runs the meta-evaluation
(:func:`backretrieval.analysis.meta.run_meta_datasets`) and, given a folder, writes what the
command writes (:func:`backretrieval.report.meta_report.write_meta_outputs`): the records,
``meta.json``, ``meta.md`` and, with ``report``, the figures and ``report.html``."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from ...analysis.meta import MetaResult, run_meta_datasets
from ...core.io import check_writable_dir, folder_lock
from ..meta_report import write_meta_outputs


def meta(
    cfg: Any,
    out_dir: str | Path | None = None,
    *,
    datasets: Sequence[tuple[str, dict[str, Any]]] | None = None,
    image_models: Sequence[Any] = (),
    candidates: Sequence[str] | None = None,
    report: bool = True,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    executor: Any = None,
) -> MetaResult:
    """Meta-evaluate the candidate proxies against the ground truth XLR@10 and, with ``out_dir``,
    write what ``backretrieval meta`` writes.

    Args:
        cfg: the grid (:class:`~backretrieval.analysis.evaluate.EvalConfig`); needs a dataset
            with ground truth and images, and at least 3 models.
        out_dir: the folder: the records (resumed from it where they are there), ``meta.json``,
            ``meta.md`` and with ``report`` the figures and ``report.html``; None: nothing is
            written.
        datasets: ``(dataset, loader options)`` of each dataset the pairs live in (None: the
            dataset of ``cfg``); each is evaluated on the pairs it has, in
            ``OUT/datasets/NAME/``, and the tables are merged.
        image_models: extra (weaker) image models g for the "how weak may g be" table: spec
            strings or Python objects.
        candidates: the candidate proxies judged (metric keys; None: BkR at ``cfg.k`` and CORR).
        report: also write the figures and ``report.html`` (needs ``out_dir``).
        progress: show progress bars.
        log: receives the notable events (resumed records, removed earlier files, ...); None:
            they are not shown, except each removal, a
            :class:`~backretrieval.report.runs.grid.RemovedOutputWarning`.
        executor: where the grid's per-sample tasks run (:mod:`backretrieval.analysis.executors`).

    Returns:
        The :class:`~backretrieval.analysis.meta.MetaResult`.

    Raises:
        BackretrievalError: as :func:`~backretrieval.analysis.meta.run_meta_datasets` (fewer
            than 3 models, a bad candidate, a pair no dataset has), an output folder that
            cannot be written or that another run is writing.
    """
    datasets = list(datasets) if datasets is not None else [(cfg.dataset, dict(cfg.dataset_options))]
    say = log if log is not None else (lambda msg: None)
    kw = dict(image_models=image_models, candidates=candidates, progress=progress, log=say, executor=executor)
    if out_dir is None:
        return run_meta_datasets(cfg, datasets, None, **kw)
    check_writable_dir(out_dir, "output folder")
    with folder_lock(out_dir, "output folder"):
        res = run_meta_datasets(cfg, datasets, out_dir, **kw)
        write_meta_outputs(res, cfg, Path(out_dir), figures=report, log=log)
    return res
