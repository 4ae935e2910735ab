"""``backretrieval env``: the software environment numbers are computed in -- what every results
file records (:func:`backretrieval.core.env.environment`), printed for people or as JSON."""
from __future__ import annotations

import json

import click

from .options import main


def format_environment(info: dict[str, object], packages: tuple[str, ...]) -> str:
    """The environment as aligned lines of text.

    Args:
        info: what :func:`backretrieval.core.env.environment` returns.
        packages: every distribution to list, in order; one missing from ``info["packages"]``
            is shown as not installed.

    Returns:
        Lines of text (no trailing newline): Python, platform and the metrics version, the loaded BLAS/OpenMP
        libraries with their thread counts, then one line per package.
    """
    installed = info.get("packages") or {}
    width = max(len(p) for p in packages)
    lines = [
        f"{'python':<{width}}  {info.get('python')}",
        f"{'platform':<{width}}  {info.get('platform')}",
        f"{'metrics version':<{width}}  {info.get('metrics_version')}",
    ]
    blas = info.get("blas") or []
    if not blas:
        lines.append(f"{'blas':<{width}}  (none reported; threadpoolctl missing?)")
    for lib in blas:  # user_api: "blas" or "openmp"
        threads = lib.get("num_threads")
        detail = ", ".join(x for x in (f"{threads} threads" if threads is not None else "", lib.get("architecture") or "") if x)
        lines.append(
            f"{lib.get('user_api') or 'blas':<{width}}  {lib.get('internal_api')} {lib.get('version') or '?'}"
            + (f" ({detail})" if detail else "")
        )
    for name in packages:
        lines.append(f"{name:<{width}}  {installed.get(name) or 'not installed'}")
    return "\n".join(lines)


@main.command("env")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the object results files record).")
def env(as_json: bool) -> None:
    """Print the versions that can change a number: Python, platform, numpy's BLAS (and its
    threads), numpy, scipy, torch, faiss, the model packages."""
    from ..core.env import PACKAGES, environment

    info = environment()
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
    else:
        click.echo(format_environment(info, PACKAGES))
