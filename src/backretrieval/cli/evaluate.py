"""Evaluation commands: evaluate, compare and meta."""
from __future__ import annotations

from pathlib import Path

import click

from ..core import BackretrievalError
from ..core.io import folder_lock
from .options import (N_BOOT, OPEN_UNIT, bad_option, check_grid, dataset_specs, device_option, grid_config, grid_options, main,
                      warn)
from .run_options import check_save_queries, dry_run_option, print_dry_run, queries_line, run_config, run_options


def _check_metric(metric: str, n: int, approx_k: int | None = None):
    """The table entry of ``--metric``: a metric compare can rank by (the metric table's rankable
    ones), with K <= N (with ``--approx``: a metric of that route with K <= ``approx_k``, the
    depth searched)."""
    from ..analysis.compare import check_metric

    try:
        spec, k = check_metric(metric, approx_depth=approx_k)
    except BackretrievalError as e:
        bad_option("--metric", str(e))
    if k is not None and k > n:
        bad_option("--metric", f"{metric}: K={k} is larger than N={n}")
    return spec


@main.command()
@grid_options
@device_option
@run_options
def evaluate(out, quiet, executor, approx, approx_target, approx_always, reuse_stale, save_queries, dry_run, margin,
             no_measure_speed, **grid) -> None:
    """Compute XLR, BkR, CORR and hubness for every model x pair x seed.

    Writes OUT/results.jsonl (one object per model, pair and seed), OUT/results.csv and
    OUT/summary.md, and prints the summary table; with --save-queries also OUT/queries.parquet.
    """
    cfg = run_config(grid_config(**grid), approx=approx, approx_target=approx_target, approx_always=approx_always,
                     reuse_stale=reuse_stale, margin=margin, no_measure_speed=no_measure_speed)
    check_save_queries(save_queries, cfg)
    if dry_run:
        return print_dry_run(cfg)
    check_grid(cfg, out, executor)
    with folder_lock(out):
        _evaluate(cfg, out, quiet, executor, save_queries)


def _evaluate(cfg, out, quiet, executor, save_queries: bool = False) -> None:
    from ..report.runs import grid

    result = grid.evaluate(cfg, out, save_queries=save_queries, progress=not quiet, log=warn, executor=executor)
    click.echo(grid.summary_markdown(result).rstrip("\n"))
    click.echo(f"\nwrote {Path(out) / 'results.jsonl'}, results.csv, summary.md")
    if save_queries:
        click.echo(queries_line(cfg, out))


@main.command()
@grid_options
@device_option
@run_options
@click.option("--metric", default=None, help="Metric to rank by (default bkr@K); `backretrieval metrics` lists those that can rank models.")
@click.option("--level", type=OPEN_UNIT, default=0.95, show_default=True, help="Confidence level of the bootstrap intervals, in (0, 1).")
@click.option("--alpha", type=OPEN_UNIT, default=0.05, show_default=True, help="Significance level for the gaps (Holm-adjusted), in (0, 1).")
@click.option("--n-boot", type=N_BOOT, default=1000, show_default=True, help="Bootstrap resamples, 2 to 100,000 (for corr: 200 unless given; each costs a pass over the N x N pairs).")
@click.option("--cost", type=click.Choice(["bytes", "speed", "price"]), default="bytes", show_default=True,
              help="What the verdict's cheapest model as good as the best is cheapest in: bytes per item (vector size), "
                   "encoding speed (time per item on this machine) or price per million items (API models).")
@click.option("--report", is_flag=True, help="Also write OUT/report.html (self-contained: verdicts, figures, example galleries of what each "
              "model retrieved, provenance), OUT/report.json and the figures (PNG, SVG) in OUT/figures; with ground "
              "truth, XLR beside BkR.")
def compare(out, quiet, executor, approx, approx_target, approx_always, reuse_stale, save_queries, dry_run, margin,
            no_measure_speed, metric, level, alpha, n_boot, cost, report, **grid) -> None:
    """Rank models per pair with bootstrap CIs; mark which gaps are significant.

    Needs no ground truth: with BkR (the default metric) any data with images will do. Writes
    OUT/compare.md (the verdict per pair and overall: ship a model, equivalent within --margin
    (pick by cost or speed), not enough data, or at chance; then the rankings; XLR leads where
    the data link languages, BkR is the check), OUT/compare.json and the evaluation records. With --metric corr the CORR
    baseline is ranked, its intervals from bootstrap resamples of the source queries. With
    --report also OUT/report.html, a page to share (see docs/your-data.md); with --save-queries
    also OUT/queries.parquet.
    """
    cfg = run_config(grid_config(**grid), approx=approx, approx_target=approx_target, approx_always=approx_always,
                     reuse_stale=reuse_stale, margin=margin, no_measure_speed=no_measure_speed, cost=cost)
    check_save_queries(save_queries, cfg)
    metric = (metric or f"bkr@{cfg.k}").strip()
    spec = _check_metric(metric, cfg.n, cfg.approx_depth)
    if spec.outcome is None:  # ranked by bootstrap replicates of the records (CORR)
        import dataclasses

        boot_given = click.get_current_context().get_parameter_source("n_boot") != click.core.ParameterSource.DEFAULT
        cfg = dataclasses.replace(cfg, corr_boot=n_boot if boot_given else 200)
    if dry_run:
        return print_dry_run(cfg)
    check_grid(cfg, out, executor)
    with folder_lock(out):
        _compare(cfg, out, quiet, executor, metric, level, alpha, n_boot, report, save_queries)


def _compare(cfg, out, quiet, executor, metric, level, alpha, n_boot, report, save_queries: bool = False) -> None:
    from ..report.runs import grid
    from .options import command_line

    grid.compare(cfg, metric, out_dir=out, report=report, save_queries=save_queries, n_boot=n_boot, level=level,
                    alpha=alpha, command=command_line(), executor=executor, progress=not quiet, log=warn)
    click.echo((Path(out) / grid.COMPARE_MD).read_text(encoding="utf-8").rstrip("\n"))  # what it wrote
    if save_queries:
        click.echo(queries_line(cfg, out))
    if report:
        click.echo(f"\nwrote {Path(out) / 'report.html'} (figures in {Path(out) / 'figures'})")


@main.command()
@grid_options(several_datasets=True)
@device_option
@dry_run_option
@click.option("--weak-image-models", default="", help="Extra image models for the 'how weak may g be' study, e.g. color-hist,efficientnet-lite0@noise=1.")
@click.option("--report/--no-report", default=True, show_default=True, help="Write figures and OUT/report.html.")
@click.option("--candidates", default=None, metavar="M1,M2,...",
              help="The candidate proxies judged against XLR@10 (see `backretrieval metrics`), e.g. "
                   "bkr@10,bkr@1,bkr_mrr,corr. Default: bkr@K (K from --k) and corr.")
def meta(out, quiet, executor, dry_run, no_measure_speed, weak_image_models, report, candidates, dataset, dataset_option,
         **grid) -> None:
    """Meta-evaluation: which candidate proxy tracks the ground truth XLR across models (Table 1, Fig. 2/3)?

    Each candidate (by default BkR@K, K from --k, and CORR) is correlated across at least 3 models
    with the ground truth XLR@10, whatever K is; the best one per pair is named with its interval. Writes OUT/meta.json, OUT/meta.md, OUT/results.jsonl (+ csv), and
    with --report the figures and OUT/report.html. Pairs that live in separate files: give
    --dataset once per file (or @LIST); each dataset is evaluated on the pairs it has (in
    OUT/datasets/NAME/) and the tables are merged.
    """
    import dataclasses

    from ..analysis.meta import check_candidates, default_candidates
    from ..report import runs

    datasets = dataset_specs(dataset, dataset_option)
    cfg = grid_config(dataset=datasets[0][0], dataset_option=(), **grid)
    cfg = dataclasses.replace(cfg, dataset_options=datasets[0][1], measure_speed=not no_measure_speed)
    if len(cfg.models) < 3:
        bad_option("--models", f"meta-evaluation correlates metrics across models: give at least 3 models, got {len(cfg.models)}")
    names = default_candidates(cfg.k) if candidates is None else [m.strip() for m in candidates.split(",") if m.strip()]
    try:
        names = check_candidates(names, cfg.n, cfg.k)
    except BackretrievalError as e:
        bad_option("--candidates", str(e))
    extra = list(dict.fromkeys(m.strip() for m in weak_image_models.split(",") if m.strip()))
    if dry_run:
        return print_dry_run(cfg, datasets)
    check_grid(cfg, out, executor, extra, datasets)
    with folder_lock(out):
        runs.meta(cfg, out, datasets=datasets, image_models=extra, candidates=names, report=report, progress=not quiet,
                  log=warn, executor=executor)
    click.echo((Path(out) / "meta.md").read_text(encoding="utf-8")[:-1])  # what it wrote: the Markdown and a newline
