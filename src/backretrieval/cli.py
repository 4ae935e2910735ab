"""Command line: a thin shell over the data, encoder, analysis and report layers."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .core import BackretrievalError


def _parse_seeds(spec: str) -> list[int]:
    try:
        if "," in spec:
            return [int(s) for s in spec.split(",") if s.strip()]
        count = int(spec)
    except ValueError:
        raise click.BadParameter(f"{spec!r}: give a count (5 -> seeds 0..4) or a list (0,3,7)") from None
    if count < 1:
        raise click.BadParameter("at least one seed")
    return list(range(count))


def _parse_options(items: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE")
        out[key] = int(value) if value.isdigit() else value
    return out


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BackretrievalError as e:
            click.secho(f"error: {e}", fg="red", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="backretrieval")
def main() -> None:
    """Evaluate cross-lingual text representations with Backretrieval (images as the pivot),
    ground-truth XLR where parallel data exists, and the CORR baseline."""


def grid_options(fn):
    """Options shared by evaluate, compare and meta: the grid of models x pairs x seeds."""
    opts = [
        click.option("--dataset", required=True, help="Registered dataset (see `backretrieval datasets`) or a .jsonl/.csv/.parquet file."),
        click.option("--pairs", required=True, help="Directed language pairs, e.g. en-de,de-en,en-ja (use en:zh-Hant for codes with hyphens)."),
        click.option("--models", required=True, help="Comma-separated text models (see `backretrieval models`); variants as BASE@trunc=64, BASE@noise=0.5, ..."),
        click.option("--image-model", default="efficientnet-lite0", show_default=True, help="Image model g for BkR/CORR; 'precomputed' reads the dataset's feature file."),
        click.option("--n", "n", default=1500, show_default=True, help="Sample size N per side."),
        click.option("--seeds", default="5", show_default=True, help="Number of seeds (0..S-1) or a comma list."),
        click.option("--k", "k", default=10, show_default=True, help="K of BkR@K (and hubness)."),
        click.option("--sim", type=click.Choice(["cosine", "csls"]), default="cosine", show_default=True),
        click.option("--csls-k", default=10, show_default=True),
        click.option("--dataset-option", "dataset_option", multiple=True, help="Loader option KEY=VALUE (e.g. text=name, source_dir=DIR)."),
        click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output directory."),
        click.option("--quiet", is_flag=True, help="No progress bars."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _config(dataset, pairs, models, image_model, n, seeds, k, sim, csls_k, dataset_option):
    from .analysis import EvalConfig, parse_pairs

    return EvalConfig(
        dataset=dataset,
        pairs=parse_pairs(pairs),
        models=list(dict.fromkeys(m.strip() for m in models.split(",") if m.strip())),
        image_model=image_model,
        n=n,
        seeds=_parse_seeds(seeds),
        k=k,
        sim=sim,
        csls_k=csls_k,
        dataset_options=_parse_options(dataset_option),
    )


def _warn(msg: str) -> None:
    click.secho(msg, fg="yellow", err=True)


@main.command()
@grid_options
def evaluate(out, quiet, **grid) -> None:
    """Compute XLR, BkR, CORR and hubness for every model x pair x seed.

    Writes OUT/results.jsonl (one object per model, pair and seed), OUT/results.csv and
    OUT/summary.md, and prints the summary table.
    """
    from .analysis import evaluate as run, summarize
    from .core import atomic_write_text
    from .report import format_summary

    cfg = _config(**grid)
    result = run(cfg, out, progress=not quiet, log=_warn)
    table = format_summary(summarize(result.records), ("xlr@1", "xlr@10", f"bkr@{cfg.k}", "bkr_mrr", "corr"))
    header = (
        f"# {cfg.dataset}: N={cfg.n}, seeds={len(cfg.seeds)}, sim={cfg.sim}, image model={cfg.image_model}\n\n"
        f"Mean ± sd over seeds. Chance level of BkR@{cfg.k} is about K/N = {cfg.k / cfg.n:.4f}.\n\n"
    )
    atomic_write_text(Path(out) / "summary.md", header + table + "\n")
    click.echo(header + table)
    click.echo(f"\nwrote {Path(out) / 'results.jsonl'}, results.csv, summary.md")


@main.command()
@grid_options
@click.option("--metric", default=None, help="Metric to rank by: bkr@K (default), bkr_mrr, xlr@K, xlr_mrr, ...")
@click.option("--level", default=0.95, show_default=True, help="Confidence level of the bootstrap intervals.")
@click.option("--alpha", default=0.05, show_default=True, help="Significance level for the gaps (Holm-adjusted).")
@click.option("--n-boot", default=1000, show_default=True)
def compare(out, quiet, metric, level, alpha, n_boot, **grid) -> None:
    """Rank models per pair with bootstrap CIs; mark which gaps are significant.

    Needs no ground truth: with BkR (the default metric) any data with images will do. Writes
    OUT/compare.md, OUT/compare.json and the evaluation records.
    """
    import json

    from .analysis import evaluate as run
    from .analysis.compare import compare as rank
    from .core import atomic_write_text
    from .report import format_comparison

    cfg = _config(**grid)
    result = run(cfg, out, progress=not quiet, log=_warn)
    c = rank(result, metric or f"bkr@{cfg.k}", n_boot=n_boot, level=level, alpha=alpha)
    md = format_comparison(c)
    atomic_write_text(Path(out) / "compare.md", md + "\n")
    atomic_write_text(Path(out) / "compare.json", json.dumps(c.to_json(), indent=1, default=float))
    click.echo(md)


@main.command()
@grid_options
@click.option("--weak-image-models", default="", help="Extra image models for the 'how weak may g be' study, e.g. color-hist,efficientnet-lite0@noise=1.")
@click.option("--report/--no-report", default=True, show_default=True, help="Write figures and OUT/report.html.")
def meta(out, quiet, weak_image_models, report, **grid) -> None:
    """Meta-evaluation: does BkR track the ground truth XLR across models (Table 1, Fig. 2/3)?

    Writes OUT/meta.json, OUT/meta.md, OUT/results.jsonl (+ csv), and with --report the figures
    and OUT/report.html.
    """
    from .analysis.meta import run_meta
    from .report.meta_report import write_meta_outputs

    cfg = _config(**grid)
    extra = [m.strip() for m in weak_image_models.split(",") if m.strip()]
    res = run_meta(cfg, out, image_models=extra, progress=not quiet, log=_warn)
    md = write_meta_outputs(res, cfg, Path(out), figures=report)
    click.echo(md)


@main.command()
def datasets() -> None:
    """List the registered datasets."""
    from .data import list_datasets

    for info in list_datasets():
        flags = ", ".join(f for f, on in (("images", info.has_images), ("cross-lingual links", info.has_concepts)) if on)
        click.echo(f"{info.name:<12} {info.description} [{flags or 'text only'}]\n{'':<12} source: {info.source}; licence: {info.license}")


@main.command()
def models() -> None:
    """List the text and image models."""
    from .encoders.base import list_image_encoders, list_text_encoders

    click.echo("text models:")
    for info in list_text_encoders():
        name = info.name + (":PATH" if info.takes_arg else "")
        click.echo(f"  {name:<22} {info.description}")
    click.echo("image models (g):")
    for info in list_image_encoders():
        click.echo(f"  {info.name:<22} {info.description}")


if __name__ == "__main__":
    main()
