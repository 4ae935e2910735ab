"""A study's queries taken from an evaluation's per-query results (``queries.parquet``, written by
``evaluate --save-queries`` / ``compare --save-queries``; the columns of ``EvalResult.queries``,
docs/usage.md "What each query retrieved"): the queries on which some models retrieved different
targets, so raters judge exactly the cases that decide which model wins.

Which rows count: those of the study's pair; of BkR's queries (``sample_kind == "non-matching"``)
where the file has them for the pair, else of XLR's (``"matching"``). A query *disagrees* when,
for some seed, the models do not all retrieve the same set of tied top targets
(``retrieved_ids``); every named model must have rows for the pair.

The file is checked before it is trusted: the columns a selection reads must hold what
``EvalResult.queries`` writes (ids as strings or integers, ``retrieved_ids`` as lists of ids),
and :func:`query_texts` and :func:`target_texts` give each query's and each retrieved target's
text, which the study compares with the dataset's (an id alone does not say the results were
computed on this version of the data: a dataset whose target texts all changed is refused as
one whose query texts changed).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..core import BackretrievalError, DataError

NEEDED = ("src_lang", "tgt_lang", "model", "seed", "query_id", "query_text", "retrieved_id", "retrieved_text", "retrieved_ids",
          "sample_kind")


def _is_id(v) -> bool:
    return isinstance(v, (str, int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _check_types(df: pd.DataFrame, path: Path) -> None:
    """The columns a selection reads hold what ``EvalResult.queries`` writes (first bad row named)."""
    checks = (
        ("query_id", _is_id, "item ids (strings or integers)"),
        ("model", lambda v: isinstance(v, str), "model names (strings)"),
        ("src_lang", lambda v: isinstance(v, str), "language codes (strings)"),
        ("tgt_lang", lambda v: isinstance(v, str), "language codes (strings)"),
        ("seed", lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)), "integer seeds"),
        ("query_text", lambda v: isinstance(v, str), "texts (strings)"),
        ("retrieved_id", _is_id, "item ids (strings or integers)"),
        ("retrieved_text", lambda v: isinstance(v, str), "texts (strings)"),
    )
    for col, ok, what in checks:
        for i, v in enumerate(df[col].tolist(), 1):
            if not ok(v):
                raise DataError(f"{path}: column {col!r} must hold {what}; row {i} holds {type(v).__name__} {v!r}")
    for i, v in enumerate(df["retrieved_ids"].tolist(), 1):
        if not isinstance(v, (list, tuple, np.ndarray)) or not all(_is_id(x) for x in v):
            raise DataError(f"{path}: column 'retrieved_ids' must hold lists of item ids; row {i} holds {type(v).__name__}")


def read_query_table(path: str | Path) -> pd.DataFrame:
    """Read a ``queries.parquet`` and check it has the columns a selection needs.

    Args:
        path: the file.

    Returns:
        The table.

    Raises:
        DataError: the file cannot be read as Parquet, lacks a needed column, or a column holds
            values of the wrong type (each named, with the first bad row).
    """
    path = Path(path)
    try:
        df = pd.read_parquet(path)
    except (OSError, ValueError, ImportError) as e:
        raise DataError(f"{path}: cannot read per-query results ({type(e).__name__}: {e}); write them with "
                        "evaluate --save-queries") from None
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise DataError(f"{path}: not per-query results of evaluate --save-queries: no column {missing[0]!r}")
    _check_types(df, path)
    return df


def query_texts(table: pd.DataFrame, src: str, tgt: str) -> dict[str, str]:
    """Each query's text in the per-query results of the pair, by source item id (as a string).

    Args:
        table: per-query results (:func:`read_query_table`).
        src, tgt: the pair.

    Returns:
        ``{query_id: query_text}``.

    Raises:
        DataError: one id with two different texts (the file mixes versions of the data).
    """
    return _texts_by_id(table, src, tgt, "query_id", "query_text", "query")


def target_texts(table: pd.DataFrame, src: str, tgt: str) -> dict[str, str]:
    """The text of each target the per-query results of the pair retrieved first for some query
    (``retrieved_id``, ``retrieved_text``), by target item id (as a string).

    Args:
        table: per-query results (:func:`read_query_table`).
        src, tgt: the pair.

    Returns:
        ``{target_id: target_text}``.

    Raises:
        DataError: one id with two different texts (the file mixes versions of the data).
    """
    return _texts_by_id(table, src, tgt, "retrieved_id", "retrieved_text", "target")


def _texts_by_id(table: pd.DataFrame, src: str, tgt: str, id_column: str, text_column: str, what: str) -> dict[str, str]:
    """``{id: text}`` of the pair's rows from two columns; one id with two texts is a DataError
    naming ``what`` (query or target) and both texts."""
    rows = table[(table["src_lang"] == src) & (table["tgt_lang"] == tgt)]
    out: dict[str, str] = {}
    for i, text in zip(rows[id_column].map(str), rows[text_column]):
        if out.setdefault(i, text) != text:
            raise DataError(f"the per-query results give {what} id {i!r} two texts ({out[i][:60]!r}, {text[:60]!r})")
    return out


def disagreeing_queries(table: pd.DataFrame, src: str, tgt: str, models: Sequence[str]) -> list[str]:
    """The source item ids of the queries on which ``models`` retrieved different targets.

    Args:
        table: per-query results (:func:`read_query_table`).
        src, tgt: the pair.
        models: two or more model names as the table's ``model`` column has them.

    Returns:
        The ids, each once, in the order the table first lists them (by seed, then query).

    Raises:
        BackretrievalError: fewer than two distinct models, a pair the table does not hold, or
            a model without rows for the pair (each named, with what the table holds).
    """
    models = list(dict.fromkeys(m.strip() for m in models))
    if len(models) < 2:
        raise BackretrievalError(f"disagreement needs two or more models, got {models!r}")
    rows = table[(table["src_lang"] == src) & (table["tgt_lang"] == tgt)]
    if rows.empty:
        held = sorted({f"{s}-{t}" for s, t in zip(table["src_lang"], table["tgt_lang"])})
        raise BackretrievalError(f"the per-query results hold no pair {src}-{tgt}; they hold {', '.join(held) or 'nothing'}")
    kinds = set(rows["sample_kind"])
    rows = rows[rows["sample_kind"] == ("non-matching" if "non-matching" in kinds else "matching")]
    held = sorted(set(rows["model"]))
    for m in models:
        if m not in held:
            raise BackretrievalError(f"model {m!r} has no per-query results for {src}-{tgt}; they hold {', '.join(held)}")
    rows = rows[rows["model"].isin(models)]
    targets = rows.assign(retrieved=[frozenset(ids) for ids in rows["retrieved_ids"]])
    per_query = targets.groupby(["seed", "query_id"], sort=False)["retrieved"].agg(lambda s: len(set(s)) > 1)
    return list(dict.fromkeys(q for (_, q), differ in per_query.items() if differ))
