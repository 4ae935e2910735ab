"""The files an evaluation and a comparison write: one writer for the command line and Python.

``backretrieval evaluate`` and :func:`evaluate` (``br.evaluate``) write the same folder, and so do
``backretrieval compare`` and :func:`compare` (``br.compare``); the commands only parse options
and call these functions. What a folder holds:

* the records: ``results.jsonl``, ``results.csv``, ``run.json``
  (:func:`backretrieval.analysis.evaluate.run_grid`; per extra image model under ``image-models/``);
* evaluate: ``summary.md``, :func:`summary_markdown` of :meth:`EvalResult.summary`;
* compare: ``compare.md`` (:func:`comparison_markdown`: the verdict, then the rankings) and
  ``compare.json`` (:meth:`Comparison.to_json`), both from the one finished
  :class:`~backretrieval.analysis.comparison.Comparison`;
* with ``save_queries``: ``queries.parquet`` (:meth:`EvalResult.queries`; one per extra image model);
* compare with ``report``: ``report.html``, ``report.json`` and ``figures/``
  (:func:`~backretrieval.report.compare_report.write_compare_report`, from the same comparison).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from ...analysis.compare import check_metric, compare_models
from ...analysis.comparison import Comparison
from ...analysis.costs import cost_basis
from ...analysis.evaluate import EvalConfig, EvalResult, run_grid
from ...analysis.evaluate.result import slug
from ...analysis.evaluate.queries import write_queries
from ...analysis.evaluate.records import write_results
from ...analysis.verdict import lead_and_check
from ...core import atomic_write_text
from ...core.io import check_writable_dir, folder_lock
from ...metrics.table import chance_level, shown_columns
from ..table import approx_note, format_comparison, format_summary, format_verdict, md_text

SUMMARY = "summary.md"
COMPARE_MD = "compare.md"
COMPARE_JSON = "compare.json"
QUERIES = "queries.parquet"


def summary_markdown(result: EvalResult) -> str:
    """``summary.md``: what was computed, on what and what to keep in mind, then one table per
    pair of :meth:`EvalResult.summary` (mean ± sd over seeds).

    Args:
        result: a finished evaluation.

    Returns:
        The Markdown, ending in a newline.
    """
    cfg = result.config
    images = any(v.get("bkr") is not None for v in result.largest_n.values())  # BkR left out at this N, not for want of images
    what = ("XLR only (BkR's samples do not fit at this N)" if images else "text only (no images): XLR only") \
        if result.text_only else f"image model={cfg.image_model_name}"
    lines = [f"# {md_text(cfg.dataset)}: N={cfg.n}, seeds={len(cfg.seeds)}, sim={cfg.sim}, {what}", ""]
    if result.text_only:
        lines.append("Mean ± sd over seeds. " + ("BkR and CORR were not computed: N is more than their samples allow "
                                                 "(see the note)." if images else
                                                 "The dataset has no images, so BkR and CORR were not computed."))
    else:
        lines.append(f"Mean ± sd over seeds. Chance level of BkR@{cfg.k} is about K/N = {chance_level(f'bkr@{cfg.k}', cfg.n):.4f}.")
    note = approx_note(result.records)
    for extra in ([note] if note else []) + [f"Note: {md_text(n)}." for n in result.notes]:
        lines += ["", extra]
    table = format_summary(result.summary(), shown_columns(cfg.k, cfg.approx_depth))
    return "\n".join(lines) + "\n\n" + table + "\n"


def comparison_markdown(c: Comparison, result: EvalResult | None = None) -> str:
    """``compare.md``: the verdict (:func:`~.table.format_verdict`: overall, per pair with its
    power note, the check, the four answers and the margin) and, where the verdict tests
    equivalence, the cheapest model as good as the best (:attr:`Comparison.cheapest`), the notes
    of the run, then the rankings, the ground truth's first where the records hold it
    (:func:`~backretrieval.analysis.verdict.lead_and_check`), and what the check says per pair.

    Args:
        c: the finished comparison.
        result: the evaluation behind it, for its notes and the note on approximate search
            (None: no notes).

    Returns:
        The Markdown, ending in a newline.
    """
    lead, check = lead_and_check(c)
    parts = []
    note = approx_note(result.records) if result is not None else None
    if note:
        parts.append(note)
    if c.verdict:
        parts.append(format_verdict(c.verdict))
        if getattr(c, "cheapest", None):
            parts.append(f"**The cheapest model as good as the best** ({cost_basis(c.cheapest['cost'])}): "
                         f"{md_text(c.cheapest['text'])}")
    if result is not None and result.notes:
        parts.append("\n".join(f"Note: {md_text(n)}." for n in result.notes))
    parts.append(format_comparison(lead))
    if check is not None:
        parts.append(format_comparison(check))
    agree = c.verdict.get("agreement") if c.verdict else None
    if agree:
        lines = [f"## {check.metric} against the ground truth {lead.metric}", ""]
        lines += [f"* {md_text(a['pair'])}: {md_text(a['text'])}" for a in agree]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


# what a grid command writes only when asked: (file or folder name, the option that asks for it,
# the keyword that asks for it in Python)
OPTIONAL_OUTPUTS = (("queries.parquet", "--save-queries", "save_queries=True"), ("report.html", "--report", "report=True"),
                    ("report.json", "--report", "report=True"), ("figures", "--report", "report=True"))


class RemovedOutputWarning(UserWarning):
    """An earlier run's optional output (``report.html``, ``figures/``, ...) was removed from the
    output folder because this run wrote none (:func:`remove_earlier_outputs`)."""


def remove_earlier_outputs(out: str | Path, written: Sequence[str] = (), log: Callable[[str], None] | None = None) -> None:
    """Once a run's results are written: remove the optional files and folders in ``out`` (and
    below ``out/image-models``) the run did not write (``written``), saying so, so that a
    queries.parquet, report.html or figures/ of an earlier run with another configuration is
    never taken for this run's.

    Args:
        out: the output folder.
        written: the optional outputs (:data:`OPTIONAL_OUTPUTS`) this run wrote.
        log: receives one line per file or folder removed, naming the command-line option; None:
            a :class:`RemovedOutputWarning` per removal, naming the Python keyword.
    """
    import shutil
    import warnings

    o = Path(out)
    for name, flag, keyword in OPTIONAL_OUTPUTS:
        if name in written:
            continue
        for p in [o / name, *sorted(o.glob(f"image-models/*/{name}"))]:
            if p.is_file():
                p.unlink()
            elif name == "figures" and p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                continue
            if log is None:
                warnings.warn(f"removed {p}, an earlier run's (this run wrote no {name}: {keyword})", RemovedOutputWarning,
                              stacklevel=4)
            else:
                log(f"removed {p}, an earlier run's (this run wrote no {name}: {flag})")


def write_query_files(result: EvalResult, out_dir: str | Path) -> list[Path]:
    """``queries.parquet`` of every record, and one per extra image model under ``image-models/``.

    Args:
        result: a finished evaluation (exact search: approximate search keeps no per-query results).
        out_dir: the folder.

    Returns:
        The files written, the main one first.
    """
    paths = [Path(out_dir) / QUERIES]
    write_queries(result.queries(), paths[0])
    for g, res in result.others.items():
        paths.append(Path(out_dir) / "image-models" / slug(g) / QUERIES)
        write_queries(res.queries(), paths[-1])
    return paths


def write_evaluation(result: EvalResult, out_dir: str | Path, *, save_queries: bool = False,
                     log: Callable[[str], None] | None = None) -> list[Path]:
    """What ``evaluate`` writes beside the records: ``summary.md`` (and ``queries.parquet``); an
    earlier run's optional files this run did not write are removed (:func:`remove_earlier_outputs`).

    Args:
        result: a finished evaluation.
        out_dir: the folder.
        save_queries: also write what each query retrieved (:func:`write_query_files`).
        log: receives a line per earlier file removed (None: a :class:`RemovedOutputWarning` each).

    Returns:
        The files written.
    """
    path = Path(out_dir) / SUMMARY
    atomic_write_text(path, summary_markdown(result))
    paths = [path, *(write_query_files(result, out_dir) if save_queries else [])]
    remove_earlier_outputs(out_dir, [QUERIES] if save_queries else [], log)
    return paths


def write_comparison(c: Comparison, result: EvalResult, out_dir: str | Path, *, report: bool = False,
                     save_queries: bool = False, command: str | Sequence[str] | None = None,
                     log: Callable[[str], None] | None = None) -> list[Path]:
    """What ``compare`` writes beside the records: ``compare.md``, ``compare.json`` (and
    ``queries.parquet``; with ``report`` the page, ``report.json`` and the figures); an earlier
    run's optional files this run did not write are removed (:func:`remove_earlier_outputs`).

    Args:
        c: the finished comparison.
        result: the evaluation it was computed from.
        out_dir: the folder.
        report: also write the report (:func:`~backretrieval.report.compare_report.write_compare_report`).
        save_queries: also write what each query retrieved (:func:`write_query_files`).
        command: the provenance the report shows (default: the Python call).
        log: receives a line per earlier file or folder removed (None: a :class:`RemovedOutputWarning` each).

    Returns:
        The files written (``report.html`` last).
    """
    import json

    out = Path(out_dir)
    atomic_write_text(out / COMPARE_MD, comparison_markdown(c, result))
    atomic_write_text(out / COMPARE_JSON, json.dumps(c.to_json(), indent=1, default=float))
    paths = [out / COMPARE_MD, out / COMPARE_JSON, *(write_query_files(result, out) if save_queries else [])]
    if report:
        from ..compare_report import write_compare_report

        paths.append(write_compare_report(c, result, out, command=command))
    remove_earlier_outputs(out, [QUERIES] * save_queries + ["report.html", "report.json", "figures"] * report, log)
    return paths


def evaluate(
    cfg: EvalConfig,
    out_dir: str | Path | None = None,
    *,
    save_queries: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    executor: Any = None,
) -> EvalResult:
    """Run the evaluation grid and, with ``out_dir``, write what ``backretrieval evaluate`` writes.

    Args:
        cfg: the grid.
        out_dir: the folder: the records (resumed from it where they are there), ``summary.md``
            and with ``save_queries`` ``queries.parquet``; None: nothing is written.
        save_queries: also write what each query retrieved (exact search only).
        progress: show progress bars.
        log: receives the notable events (resumed records, changed inputs, an earlier run's file
            removed, ...); None: they are not shown, except each removal, a :class:`RemovedOutputWarning`.
        executor: where the per-sample tasks run (:mod:`backretrieval.analysis.executors`).

    Returns:
        The :class:`~backretrieval.analysis.evaluate.EvalResult` (:meth:`~EvalResult.summary`:
        the summary table).

    Raises:
        BackretrievalError: as :func:`backretrieval.analysis.evaluate.run_grid`; with
            ``save_queries``, records of approximate search (before anything is computed).
    """
    _check_save_queries(cfg, save_queries)
    say = _quiet if log is None else log
    if out_dir is None:
        return run_grid(cfg, None, progress=progress, log=say, executor=executor)
    check_writable_dir(out_dir, "output folder")
    with folder_lock(out_dir, "output folder"):
        result = run_grid(cfg, out_dir, progress=progress, log=say, executor=executor)
        write_evaluation(result, out_dir, save_queries=save_queries, log=log)
    return result


def _quiet(msg: str) -> None:
    """The events of a grid a Python caller did not ask to see."""


def compare(
    result: EvalResult | EvalConfig,
    metric: str | None = None,
    *,
    out_dir: str | Path | None = None,
    report: bool = False,
    save_queries: bool = False,
    n_boot: int = 1000,
    n_perm: int = 5000,
    level: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
    margin: float | None = None,
    command: str | Sequence[str] | None = None,
    executor: Any = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> Comparison:
    """Rank the models per pair (:func:`backretrieval.analysis.compare.compare_models`) and, with
    ``out_dir``, write what ``backretrieval compare`` writes.

    Args:
        result: a finished evaluation, or an :class:`EvalConfig` to evaluate first (into
            ``out_dir``, resuming the records there).
        metric: the metric to rank by (None: ``bkr@K``); ``backretrieval metrics`` lists them.
        out_dir: the folder: the records, ``compare.md``, ``compare.json`` (and with ``report``
            ``report.html``, ``report.json``, ``figures/``; with ``save_queries``
            ``queries.parquet``); None: nothing is written.
        report: also write the shareable report (needs ``out_dir``).
        save_queries: also write what each query retrieved (needs ``out_dir``; exact search only).
        n_boot: bootstrap resamples.
        n_perm: permutations of each gap's test.
        level: confidence level of the intervals.
        alpha: significance level of the gaps (Holm-adjusted).
        seed: the resampling seed.
        margin: the verdict's equivalence margin (None: the configuration's, 0.05 unless set).
        command: the provenance the report shows (default: this Python call).
        executor: for a configuration, where its per-sample tasks run.
        progress: for a configuration, show progress bars.
        log: receives the notable events of the evaluation (for a configuration) and a line per
            earlier file or folder removed; None: they are not shown, except each removal, a
            :class:`RemovedOutputWarning`.

    Returns:
        The finished :class:`~backretrieval.analysis.comparison.Comparison`: what ``compare.json``
        holds and the report shows.

    Raises:
        BackretrievalError: as :func:`backretrieval.analysis.compare.compare_models`; ``report`` or
            ``save_queries`` without ``out_dir``, ``save_queries`` with approximate search.
    """
    from ...core import BackretrievalError

    cfg = result if isinstance(result, EvalConfig) else result.config
    if out_dir is None and (report or save_queries):
        raise BackretrievalError(f"{'report' if report else 'save_queries'} needs out_dir: the folder to write into")
    _check_save_queries(cfg, save_queries)
    stats = dict(n_boot=n_boot, n_perm=n_perm, level=level, alpha=alpha, seed=seed, margin=margin)
    say = _quiet if log is None else log
    if out_dir is None:
        return compare_models(result, metric, executor=executor, progress=progress, log=say, **stats)
    metric = f"bkr@{cfg.k}" if metric is None else metric
    check_metric(metric, approx_depth=cfg.approx_depth)  # before the folder is touched
    if command is None:
        command = (f"Python: backretrieval.compare(..., metric={metric!r}, out_dir={str(out_dir)!r}, report={report}, "
                   f"n_boot={n_boot}, level={level}, alpha={alpha}, margin={margin})")
    check_writable_dir(out_dir, "output folder")
    with folder_lock(out_dir, "output folder"):
        if isinstance(result, EvalConfig):
            spec, _ = check_metric(metric)
            import dataclasses

            if spec.outcome is None and cfg.corr_boot == 0:
                cfg = dataclasses.replace(cfg, corr_boot=200)
            if margin is not None:  # the note before the run measures against the same margin
                cfg = dataclasses.replace(cfg, margin=margin)
            result = run_grid(cfg, out_dir, progress=progress, log=say, executor=executor,
                              needs=("xlr",) if spec.needs_truth else ("bkr",), purpose=f"compare --metric {metric}")
        else:
            write_results(result.records, Path(out_dir), result.run)
            for g, res in result.others.items():
                write_results(res.records, Path(out_dir) / "image-models" / slug(g), res.run)
        c = compare_models(result, metric, **stats)
        write_comparison(c, result, out_dir, report=report, save_queries=save_queries, command=command, log=log)
    return c


def _check_save_queries(cfg: EvalConfig, save_queries: bool) -> None:
    if save_queries and cfg.approx is not None:
        from ...core import BackretrievalError

        raise BackretrievalError("save_queries: approximate search keeps no per-query results; use exact search (approx=None)")

