"""Markdown of Cr5 experiments: the retrieval table in the layout of the paper's Table 1
(:func:`precision_table_md`) and a run's ``eval.md`` (:func:`write_eval_md`). The records come
from :func:`backretrieval.train.cr5.evaluate_retrieval` (keys ``xlr@K``)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core import atomic_write_text

SIMS = ("cosine", "csls")


def precision_table_md(records: Sequence[Mapping[str, Any]], ks: Sequence[int] = (1, 5, 10)) -> str:
    """Markdown table in the layout of the paper's Table 1.

    Args:
        records: retrieval records (``src``, ``tgt``, ``sim``, ``xlr@K``, ``n_queries``,
            ``n_candidates``), one per directed pair and similarity.
        ks: the cut-offs to show.

    Returns:
        One row per directed pair: XLR@K in percent with cosine, then CSLS (``-`` where a
        similarity is missing), and the numbers of queries and candidates.

    Raises:
        KeyError: a record without one of the keys above.
    """
    by: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for r in records:
        by.setdefault((r["src"], r["tgt"]), {})[r["sim"]] = r
    sims = [s for s in SIMS if any(s in v for v in by.values())]
    head = "| query | target | " + " | ".join(f"{s} xlr@{k}" for s in sims for k in ks) + " | queries | candidates |"
    lines = [head, "|---|---|" + "---:|" * (len(sims) * len(ks) + 2)]
    for (s, t), recs in by.items():
        cells = [f"{100 * recs[sim][f'xlr@{k}']:.1f}" if sim in recs else "-" for sim in sims for k in ks]
        any_rec = next(iter(recs.values()))
        lines.append(f"| {s} | {t} | " + " | ".join(cells) + f" | {any_rec['n_queries']} | {any_rec['n_candidates']} |")
    return "\n".join(lines)


def write_eval_md(out_dir: str | Path, run: Any) -> Path:
    """Write ``OUT/eval.md`` of a Cr5 run (atomic).

    Args:
        out_dir: the run's model directory.
        run: the :class:`~backretrieval.analysis.trained.cr5.Cr5Run` (its ``regime``, ``model``,
            ``lam`` and ``test`` records).

    Returns:
        The path written.
    """
    model = run.model
    md = (
        f"# Cr5 {run.regime} ({', '.join(model.languages_)}), rank {model.rank}, lambda {run.lam:g}\n\n"
        "XLR@K in percent (the share of queries whose translation ranks <= K; ties count against\n"
        "the query) on held-out test concepts, query -> target candidate pool.\n\n"
        + precision_table_md(run.test) + "\n"
    )
    path = Path(out_dir) / "eval.md"
    atomic_write_text(path, md)
    return path
