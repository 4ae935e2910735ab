"""Evaluation commands: evaluate, compare, meta, and the datasets / models / metrics listings."""
from __future__ import annotations

from pathlib import Path

import click

from ..core import BackretrievalError
from ..core.io import folder_lock
from .options import (N_BOOT, OPEN_UNIT, bad_option, check_grid, dataset_specs, device_option, grid_config, grid_options, main,
                      warn)


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


_TARGET = click.FloatRange(0, 1, min_open=True)


def approx_options(fn):
    """--approx, --approx-target and --approx-always (evaluate and compare)."""
    fn = click.option("--approx-always", is_flag=True,
                      help="With --approx: search approximately even where the cost model (counted distance "
                           "computations) says exact search is cheaper, as it is at small N.")(fn)
    fn = click.option("--approx-target", type=_TARGET, default=0.99, show_default=True,
                      help="With --approx: the top-1 agreement (and top-K recall) with exact search each search is "
                           "calibrated to reach, in (0, 1]; below it the search falls back to exact.")(fn)
    return click.option("--approx", type=click.Choice(["hnsw", "ivf"]), default=None,
                        help="For N beyond exact search: XLR@K and BkR@K from self-calibrating FAISS top-K lists "
                             "(MRR truncated at K; CORR exact on its pair subsample; no hubness).")(fn)


def reuse_stale_option(fn):
    """--reuse-stale (evaluate and compare)."""
    return click.option("--reuse-stale", is_flag=True,
                        help="Reuse the records in OUT and the cached vectors computed under other versions (metrics, "
                             "model libraries, FAISS) instead of recomputing them; a warning names what differs.")(fn)


def save_queries_option(fn):
    """--save-queries (evaluate and compare)."""
    return click.option("--save-queries", is_flag=True,
                        help="Also write OUT/queries.parquet: per record and query, what it retrieved (ids, texts, "
                             "image paths; every tied top target), its BkR rank and, with ground truth, its XLR rank "
                             "(docs/usage.md, 'What each query retrieved'). Exact search only.")(fn)


_MARGIN = click.FloatRange(0, 1, min_open=True)


def margin_option(fn):
    """--margin (evaluate and compare): EvalConfig.margin."""
    return click.option("--margin", type=_MARGIN, default=0.05, show_default=True,
                        help="The gap between two models that matters, in (0, 1]: the verdict calls models whose gap is "
                             "shown within +-margin equivalent (pick by cost or speed), and the note on power before "
                             "a run measures the detectable gap against it.")(fn)


def _with_margin(cfg, margin: float):
    import dataclasses

    return dataclasses.replace(cfg, margin=margin)


def dry_run_option(fn):
    """--dry-run and --no-measure-speed (evaluate, compare and meta)."""
    fn = click.option("--no-measure-speed", "no_measure_speed", is_flag=True,
                      help="Do not time a model on a small fixed sample of its texts when this machine has no throughput "
                           "recorded for it (its vectors all came from the cache); the report then says its speed was "
                           "not measured.")(fn)
    return click.option("--dry-run", is_flag=True,
                        help="Encode and send nothing: draw the samples, read the cache and print, per model, the texts it "
                             "would encode, the time that takes at the throughput recorded on this machine and, for "
                             "embedding APIs (openai:), the requests, tokens and cost; then stop.")(fn)


def _dry_run(cfg, datasets=None) -> None:
    """Print what each model of ``cfg`` would encode or send, and how long it would take (``--dry-run``);
    with ``datasets`` (meta over several files) once per dataset."""
    import dataclasses

    from ..analysis.evaluate import estimate
    from ..analysis.evaluate.pricing import estimate_line

    for name, options in datasets or [(cfg.dataset, cfg.dataset_options)]:
        if datasets is not None and len(datasets) > 1:
            click.echo(f"{name}:")
        try:
            found = estimate(dataclasses.replace(cfg, dataset=name, dataset_options=options))
        except BackretrievalError as e:
            raise click.ClickException(str(e)) from None
        for label, est in found.items():
            click.echo(estimate_line(label, est))


def _check_save_queries(save_queries: bool, cfg) -> None:
    if save_queries and cfg.approx is not None:
        bad_option("--save-queries", "approximate search keeps no per-query results; use exact search (no --approx)")


def _queries_line(cfg, out) -> str:
    """The line that says where what each query retrieved went."""
    extra = f" (and per extra image model in {Path(out) / 'image-models'})" if cfg.extra_image_models else ""
    return f"wrote {Path(out) / 'queries.parquet'}{extra}"


def _with_reuse(cfg, reuse_stale: bool, no_measure_speed: bool = False, cost: str = "bytes"):
    import dataclasses

    return dataclasses.replace(cfg, reuse_stale=bool(reuse_stale), measure_speed=not no_measure_speed, cost=cost)


def _approx_config(cfg, approx: str | None, target: float, always: bool = False):
    """``cfg`` with the approximate-search options (checked)."""
    import dataclasses

    if approx is None:
        if always:
            bad_option("--approx-always", "needs --approx")
        return cfg
    if cfg.sim != "cosine":
        bad_option("--approx", f"approximate search ranks by cosine only; --sim {cfg.sim} needs exact search")
    cfg = dataclasses.replace(cfg, approx=approx, approx_target=target, approx_cost_check=not always)
    from ..analysis.evaluate.tasks import check_approx

    try:
        check_approx(cfg)
    except BackretrievalError as e:
        bad_option("--approx", str(e))
    return cfg


def _approx_k(cfg) -> int | None:
    from ..metrics.table import approx_ks

    return max(approx_ks(cfg.n, cfg.k)) if cfg.approx else None


@main.command()
@grid_options
@device_option
@approx_options
@reuse_stale_option
@save_queries_option
@dry_run_option
@margin_option
def evaluate(out, quiet, executor, approx, approx_target, approx_always, reuse_stale, save_queries, dry_run, margin,
             no_measure_speed, **grid) -> None:
    """Compute XLR, BkR, CORR and hubness for every model x pair x seed.

    Writes OUT/results.jsonl (one object per model, pair and seed), OUT/results.csv and
    OUT/summary.md, and prints the summary table; with --save-queries also OUT/queries.parquet.
    """
    cfg = _with_margin(_with_reuse(_approx_config(grid_config(**grid), approx, approx_target, approx_always), reuse_stale,
                                   no_measure_speed), margin)
    _check_save_queries(save_queries, cfg)
    if dry_run:
        return _dry_run(cfg)
    check_grid(cfg, out, executor)
    with folder_lock(out):
        _evaluate(cfg, out, quiet, executor, save_queries)


def _evaluate(cfg, out, quiet, executor, save_queries: bool = False) -> None:
    from ..report import outputs

    result = outputs.evaluate(cfg, out, save_queries=save_queries, progress=not quiet, log=warn, executor=executor)
    click.echo(outputs.summary_markdown(result).rstrip("\n"))
    click.echo(f"\nwrote {Path(out) / 'results.jsonl'}, results.csv, summary.md")
    if save_queries:
        click.echo(_queries_line(cfg, out))


@main.command()
@grid_options
@device_option
@approx_options
@reuse_stale_option
@save_queries_option
@dry_run_option
@margin_option
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
    cfg = _with_margin(_with_reuse(_approx_config(grid_config(**grid), approx, approx_target, approx_always), reuse_stale,
                                   no_measure_speed, cost), margin)
    _check_save_queries(save_queries, cfg)
    metric = (metric or f"bkr@{cfg.k}").strip()
    spec = _check_metric(metric, cfg.n, _approx_k(cfg))
    if spec.outcome is None:  # ranked by bootstrap replicates of the records (CORR)
        import dataclasses

        boot_given = click.get_current_context().get_parameter_source("n_boot") != click.core.ParameterSource.DEFAULT
        cfg = dataclasses.replace(cfg, corr_boot=n_boot if boot_given else 200)
    if dry_run:
        return _dry_run(cfg)
    check_grid(cfg, out, executor)
    with folder_lock(out):
        _compare(cfg, out, quiet, executor, metric, level, alpha, n_boot, report, save_queries)


def _compare(cfg, out, quiet, executor, metric, level, alpha, n_boot, report, save_queries: bool = False) -> None:
    from ..report import outputs
    from .options import command_line

    outputs.compare(cfg, metric, out_dir=out, report=report, save_queries=save_queries, n_boot=n_boot, level=level,
                    alpha=alpha, command=command_line(), executor=executor, progress=not quiet, log=warn)
    click.echo((Path(out) / outputs.COMPARE_MD).read_text(encoding="utf-8").rstrip("\n"))  # what it wrote
    if save_queries:
        click.echo(_queries_line(cfg, out))
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

    from ..analysis.meta import check_candidates, default_candidates, run_meta_datasets
    from ..report.meta_report import write_meta_outputs

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
        return _dry_run(cfg, datasets)
    check_grid(cfg, out, executor, extra, datasets)
    with folder_lock(out):
        res = run_meta_datasets(cfg, datasets, out, image_models=extra, candidates=names, progress=not quiet, log=warn,
                                executor=executor)
        md = write_meta_outputs(res, cfg, Path(out), figures=report, log=warn)
    click.echo(md)


@main.command()
@click.option("--markdown", is_flag=True, help="Print the Markdown table of docs/datasets.md instead.")
def datasets(markdown: bool) -> None:
    """List the registered datasets."""
    from ..data import list_datasets

    if markdown:
        from ..report.catalogue import datasets_markdown

        click.echo(datasets_markdown(), nl=False)
        return
    for info in list_datasets():
        flags = ", ".join(f for f, on in (("images", info.has_images), ("cross-lingual links", info.has_concepts)) if on)
        click.echo(f"{info.name:<12} {info.description} [{flags or 'text only'}]\n{'':<12} source: {info.source}; licence: {info.license}")


@main.command()
@click.option("--markdown", is_flag=True, help="Print the Markdown tables of docs/models.md instead.")
def models(markdown: bool) -> None:
    """List the text and image models."""
    from ..encoders import list_image_encoders, list_text_encoders

    if markdown:
        from ..report.catalogue import models_markdown

        click.echo(models_markdown(), nl=False)
        return
    click.echo("text models:")
    for info in list_text_encoders():
        name = info.name + (":PATH" if info.takes_arg else "")
        click.echo(f"  {name:<22} {info.description}")
    click.echo("image models (g):")
    for info in list_image_encoders():
        click.echo(f"  {info.name:<22} {info.description}")


@main.command()
def metrics() -> None:
    """List the metrics a record can carry (the metric table); compare ranks by the rankable ones."""
    from ..metrics.table import describe

    for line in describe():
        click.echo(line)
