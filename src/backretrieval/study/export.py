"""A study's results on disk: ``analysis.md``, ``analysis.json`` and the unblinded ratings
(``ratings.csv``), with spreadsheet-safe text cells.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from ..core import atomic_write_text, json_finite
from ..report.study_analysis import format_study_analysis
from . import files as study_files
from . import store


def ratings_frame(path: str | Path) -> pd.DataFrame:
    """Every rating, unblinded: rater, query, suggestion, the models that retrieved it (with
    rank), score, number of writes."""
    with store.opened(path) as con:
        t = store.load_tables(con)
    cr = t["credits"].merge(t["models"], on="model_id")
    who = cr.groupby("sugg_id").apply(
        lambda g: ";".join(f"{s}#{r}" for s, r in zip(g.spec, g["rank"])), include_groups=False
    ).rename("models")
    r = (
        t["ratings"]
        .merge(t["raters"], on="rater_id")
        .merge(t["suggestions"].rename(columns={"item_id": "item", "text": "item_text", "public_id": "sid"}), on="sugg_id")
        .merge(t["queries"].rename(columns={"item_id": "query_item", "text": "query_text", "public_id": "qid"}), on="query_id")
        .merge(who, left_on="sugg_id", right_index=True)
    )
    return r[["name", "query_item", "query_text", "item", "item_text", "models", "score", "n_changes", "updated_at"]].rename(
        columns={"name": "rater"}
    )


# a cell starting with one of these is a formula (or may start one) in Excel, LibreOffice and
# Google Sheets (OWASP, "CSV Injection"); "'" itself is included so the prefix can be undone
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def csv_safe(value: Any) -> Any:
    """A text cell as a spreadsheet shows it as text: ``'`` is prepended when it starts with
    ``= + - @``, a tab, a carriage return or ``'``. Undo with :func:`csv_unsafe`. Other values
    pass unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_unsafe(value: Any) -> Any:
    """The original of a :func:`csv_safe` cell: one leading ``'`` removed (every text that
    started with ``'`` was given one)."""
    if isinstance(value, str) and value.startswith("'"):
        return value[1:]
    return value


def write_outputs(res: dict[str, Any], path: str | Path, out_dir: str | Path) -> list[Path]:
    """Write ``analysis.md``, ``analysis.json`` and ``ratings.csv`` to ``out_dir`` atomically,
    with the mode of the user's umask (they hold no tokens).

    Text cells of ``ratings.csv`` go through :func:`csv_safe` (spreadsheet formula injection);
    its lines end in CRLF (RFC 4180), so a text with a carriage return stays in its cell.

    Args:
        res: the result of :func:`.analyze.analyze`.
        path: the study file (for the ratings).
        out_dir: the output folder (created).

    Returns:
        The three paths.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = format_study_analysis(res)
    files = [out_dir / "analysis.md", out_dir / "analysis.json", out_dir / "ratings.csv"]
    frame = ratings_frame(path)
    for col in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[col]):  # text (object or pandas' str dtype)
            frame[col] = frame[col].map(csv_safe)
    # CRLF line ends (RFC 4180): then a carriage return inside a text is quoted, not a row break
    texts = [md, json.dumps(json_finite(res), indent=1, ensure_ascii=False), frame.to_csv(index=False, lineterminator="\r\n")]
    for f, text in zip(files, texts):
        atomic_write_text(f, text)
        study_files.public_mode(f)
    return files
