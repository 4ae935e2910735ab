"""The ``backretrieval`` click group, the ``train`` sub-group and option helpers shared by commands.

Commands live in the other modules of this package, one topic per file, and attach themselves
to :data:`main` (or :data:`train`) when imported. Modules here import the layers they call
inside the command functions, so ``backretrieval --help`` stays instant.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..core import BackretrievalError
from ._warnings import short_warnings


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
    short_warnings()


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
        click.option("--executor", default="local", show_default=True, help="Where the per-sample tasks run: local, processes[:N] (worker processes), ray[:ADDRESS] (a Ray cluster)."),
        click.option("--quiet", is_flag=True, help="No progress bars."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _config(dataset, pairs, models, image_model, n, seeds, k, sim, csls_k, dataset_option):
    from ..analysis import EvalConfig, parse_pairs

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


@main.group()
def train() -> None:
    """Train cross-lingual representations; trained models are text encoders (e.g. cr5:DIR)."""

