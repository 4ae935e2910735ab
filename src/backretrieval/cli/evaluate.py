"""Evaluation commands: evaluate, compare, meta, and the datasets / models listings."""
from __future__ import annotations

import re
from pathlib import Path

import click

from ..core import BackretrievalError
from ._app import OPEN_UNIT, _bad, _check_grid, _config, _warn, grid_options, main


def _summary_metrics(k: int) -> tuple[str, ...]:
    """The columns of a summary table for BkR@K and hubness at ``k``."""
    return ("xlr@1", "xlr@10", "xlr_t2s@10", f"bkr@{k}", "bkr_mrr", "corr", f"hubness_skew@{k}")


def _check_metric(metric: str, n: int) -> None:
    """``--metric`` names a metric compare can rank by, with 1 <= K <= N."""
    if metric == "corr":
        return
    from ..analysis.compare import outcome_fn

    try:
        outcome_fn(metric)
    except BackretrievalError as e:
        _bad("--metric", str(e))
    m = re.search(r"@(\d+)$", metric)
    if m:
        k = int(m.group(1))
        if k < 1:
            _bad("--metric", f"{metric}: K must be at least 1")
        if k > n:
            _bad("--metric", f"{metric}: K={k} is larger than N={n}")


@main.command()
@grid_options
def evaluate(out, quiet, executor, **grid) -> None:
    """Compute XLR, BkR, CORR and hubness for every model x pair x seed.

    Writes OUT/results.jsonl (one object per model, pair and seed), OUT/results.csv and
    OUT/summary.md, and prints the summary table.
    """
    from ..analysis import evaluate as run, summarize
    from ..core import atomic_write_text
    from ..report import format_summary

    cfg = _config(**grid)
    _check_grid(cfg, out, executor)
    result = run(cfg, out, progress=not quiet, log=_warn, executor=executor)
    table = format_summary(summarize(result.records, _summary_metrics(cfg.k)), ("xlr@1", "xlr@10", f"bkr@{cfg.k}", "bkr_mrr", "corr"))
    header = (
        f"# {cfg.dataset}: N={cfg.n}, seeds={len(cfg.seeds)}, sim={cfg.sim}, image model={cfg.image_model}\n\n"
        f"Mean ± sd over seeds. Chance level of BkR@{cfg.k} is about K/N = {cfg.k / cfg.n:.4f}.\n\n"
    )
    atomic_write_text(Path(out) / "summary.md", header + table + "\n")
    click.echo(header + table)
    click.echo(f"\nwrote {Path(out) / 'results.jsonl'}, results.csv, summary.md")


@main.command()
@grid_options
@click.option("--metric", default=None, help="Metric to rank by: bkr@K (default), bkr_mrr, xlr@K, xlr_mrr, xlr_t2s@K, corr.")
@click.option("--level", type=OPEN_UNIT, default=0.95, show_default=True, help="Confidence level of the bootstrap intervals, in (0, 1).")
@click.option("--alpha", type=OPEN_UNIT, default=0.05, show_default=True, help="Significance level for the gaps (Holm-adjusted), in (0, 1).")
@click.option("--n-boot", type=click.IntRange(min=2), default=1000, show_default=True, help="Bootstrap resamples, at least 2 (for corr: 200 unless given; each costs a pass over the N x N pairs).")
def compare(out, quiet, executor, metric, level, alpha, n_boot, **grid) -> None:
    """Rank models per pair with bootstrap CIs; mark which gaps are significant.

    Needs no ground truth: with BkR (the default metric) any data with images will do. Writes
    OUT/compare.md, OUT/compare.json and the evaluation records. With --metric corr the CORR
    baseline is ranked, its intervals from bootstrap resamples of the source queries.
    """
    import json

    from ..analysis import evaluate as run
    from ..analysis.compare import compare as rank
    from ..core import atomic_write_text
    from ..report import format_comparison

    cfg = _config(**grid)
    metric = (metric or f"bkr@{cfg.k}").strip()
    _check_metric(metric, cfg.n)
    if metric == "corr":
        import dataclasses

        boot_given = click.get_current_context().get_parameter_source("n_boot") != click.core.ParameterSource.DEFAULT
        cfg = dataclasses.replace(cfg, corr_boot=n_boot if boot_given else 200)
    _check_grid(cfg, out, executor)
    result = run(cfg, out, progress=not quiet, log=_warn, executor=executor)
    c = rank(result, metric, n_boot=n_boot, level=level, alpha=alpha)
    md = format_comparison(c)
    atomic_write_text(Path(out) / "compare.md", md + "\n")
    atomic_write_text(Path(out) / "compare.json", json.dumps(c.to_json(), indent=1, default=float))
    click.echo(md)


@main.command()
@grid_options
@click.option("--weak-image-models", default="", help="Extra image models for the 'how weak may g be' study, e.g. color-hist,efficientnet-lite0@noise=1.")
@click.option("--report/--no-report", default=True, show_default=True, help="Write figures and OUT/report.html.")
def meta(out, quiet, executor, weak_image_models, report, **grid) -> None:
    """Meta-evaluation: does BkR track the ground truth XLR across models (Table 1, Fig. 2/3)?

    BkR@K (K from --k) and CORR are correlated across at least 3 models with the ground truth
    XLR@10, whatever K is. Writes OUT/meta.json, OUT/meta.md, OUT/results.jsonl (+ csv), and
    with --report the figures and OUT/report.html.
    """
    from ..analysis.meta import run_meta
    from ..report.meta_report import write_meta_outputs

    cfg = _config(**grid)
    if len(cfg.models) < 3:
        _bad("--models", f"meta-evaluation correlates metrics across models: give at least 3 models, got {len(cfg.models)}")
    extra = list(dict.fromkeys(m.strip() for m in weak_image_models.split(",") if m.strip()))
    _check_grid(cfg, out, executor, extra)
    res = run_meta(cfg, out, image_models=extra, progress=not quiet, log=_warn, executor=executor)
    md = write_meta_outputs(res, cfg, Path(out), figures=report)
    click.echo(md)


@main.command()
def datasets() -> None:
    """List the registered datasets."""
    from ..data import list_datasets

    for info in list_datasets():
        flags = ", ".join(f for f, on in (("images", info.has_images), ("cross-lingual links", info.has_concepts)) if on)
        click.echo(f"{info.name:<12} {info.description} [{flags or 'text only'}]\n{'':<12} source: {info.source}; licence: {info.license}")


@main.command()
def models() -> None:
    """List the text and image models."""
    from ..encoders.base import list_image_encoders, list_text_encoders

    click.echo("text models:")
    for info in list_text_encoders():
        name = info.name + (":PATH" if info.takes_arg else "")
        click.echo(f"  {name:<22} {info.description}")
    click.echo("image models (g):")
    for info in list_image_encoders():
        click.echo(f"  {info.name:<22} {info.description}")

