"""The options evaluate and compare share (approximate search, --reuse-stale, --save-queries,
--dry-run with --no-measure-speed, --margin), the configuration they make (:func:`run_config`)
and the dry run (:func:`print_dry_run`, meta's too)."""
from __future__ import annotations

from pathlib import Path

import click

from ..core import BackretrievalError
from .options import bad_option


def run_options(fn):
    """Every option of :mod:`this module <backretrieval.cli.run_options>` (evaluate and compare)."""
    for option in (margin_option, dry_run_option, save_queries_option, reuse_stale_option, approx_options):
        fn = option(fn)
    return fn


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


def print_dry_run(cfg, datasets=None) -> None:
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


def check_save_queries(save_queries: bool, cfg) -> None:
    """Refuse --save-queries with --approx (approximate search keeps no per-query results)."""
    if save_queries and cfg.approx is not None:
        bad_option("--save-queries", "approximate search keeps no per-query results; use exact search (no --approx)")


def queries_line(cfg, out) -> str:
    """The line that says where what each query retrieved went."""
    extra = f" (and per extra image model in {Path(out) / 'image-models'})" if cfg.extra_image_models else ""
    return f"wrote {Path(out) / 'queries.parquet'}{extra}"


def run_config(cfg, *, approx: str | None, approx_target: float, approx_always: bool, reuse_stale: bool, margin: float,
               no_measure_speed: bool, cost: str = "bytes"):
    """``cfg`` (from :func:`~.options.grid_config`) with the options of evaluate and compare:
    approximate search (checked), --reuse-stale, --margin, --no-measure-speed and --cost."""
    import dataclasses

    cfg = _approx_config(cfg, approx, approx_target, approx_always)
    return dataclasses.replace(cfg, reuse_stale=bool(reuse_stale), measure_speed=not no_measure_speed, cost=cost,
                               margin=margin)


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
