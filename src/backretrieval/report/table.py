"""Plain-text / Markdown tables of evaluation summaries."""
from __future__ import annotations

from typing import Sequence

import pandas as pd

DEFAULT_COLUMNS = ("xlr@10", "bkr@10", "bkr_mrr", "corr")


def _cell(row: pd.Series, m: str) -> str:
    if m not in row or pd.isna(row[m]):
        return "-"
    sd = row.get(f"{m}_sd")
    if sd is None or pd.isna(sd) or row.get("seeds", 1) <= 1:
        return f"{row[m]:.3f}"
    return f"{row[m]:.3f} ± {sd:.3f}"


def format_summary(summary: pd.DataFrame, columns: Sequence[str] = DEFAULT_COLUMNS) -> str:
    """One Markdown table per language pair, models sorted by BkR@10 (else XLR@10), best first.
    Cells are mean ± sd over seeds."""
    if summary.empty:
        return "(no results)"
    cols = [c for c in columns if c in summary.columns and summary[c].notna().any()]
    key = next((c for c in ("bkr@10", "xlr@10") if c in cols), cols[0] if cols else None)
    blocks = []
    for pair, grp in summary.groupby("pair", sort=False):
        if key is not None:
            grp = grp.sort_values(key, ascending=False)
        lines = [f"### {pair}", "", "| model | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for _, row in grp.iterrows():
            lines.append(f"| {row['model']} | " + " | ".join(_cell(row, c) for c in cols) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
