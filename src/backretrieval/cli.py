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


@main.command()
@click.option("--dataset", required=True, help="Registered dataset name (see `backretrieval datasets`) or a .jsonl/.csv/.parquet file.")
@click.option("--pairs", required=True, help="Directed language pairs, e.g. en-de,de-en,en-ja.")
@click.option("--models", required=True, help="Comma-separated text models (see `backretrieval models`).")
@click.option("--image-model", default="efficientnet-lite0", show_default=True, help="Image model g for BkR/CORR; 'precomputed' reads the dataset's feature file.")
@click.option("--n", "n", default=1500, show_default=True, help="Sample size N per side.")
@click.option("--seeds", default="5", show_default=True, help="Number of seeds (0..S-1) or a comma list.")
@click.option("--k", "k", default=10, show_default=True, help="K of BkR@K (and hubness).")
@click.option("--sim", type=click.Choice(["cosine", "csls"]), default="cosine", show_default=True)
@click.option("--csls-k", default=10, show_default=True)
@click.option("--dataset-option", "dataset_option", multiple=True, help="Loader option KEY=VALUE (e.g. text=name, source_dir=DIR).")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output directory (results.jsonl, results.csv, summary.md).")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def evaluate(dataset, pairs, models, image_model, n, seeds, k, sim, csls_k, dataset_option, out, quiet) -> None:
    """Compute XLR, BkR, CORR and hubness for every model x pair x seed."""
    from .analysis import EvalConfig, evaluate as run, parse_pairs, summarize
    from .core import atomic_write_text
    from .report import format_summary

    cfg = EvalConfig(
        dataset=dataset,
        pairs=parse_pairs(pairs),
        models=[m.strip() for m in models.split(",") if m.strip()],
        image_model=image_model,
        n=n,
        seeds=_parse_seeds(seeds),
        k=k,
        sim=sim,
        csls_k=csls_k,
        dataset_options=_parse_options(dataset_option),
    )
    result = run(cfg, out, progress=not quiet, log=lambda m: click.secho(m, fg="yellow", err=True))
    table = format_summary(summarize(result.records), ("xlr@1", "xlr@10", "bkr@10", "bkr_mrr", "corr"))
    header = (
        f"# {dataset}: N={n}, seeds={len(cfg.seeds)}, sim={sim}, image model={image_model}\n\n"
        f"Mean ± sd over seeds. Chance level of BkR@{k} is about K/N = {k / n:.4f}.\n\n"
    )
    atomic_write_text(Path(out) / "summary.md", header + table + "\n")
    click.echo(header + table)
    click.echo(f"\nwrote {Path(out) / 'results.jsonl'}, results.csv, summary.md")


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
