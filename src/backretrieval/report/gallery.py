"""Example galleries: what each model retrieved for a few queries, side by side.

Input is a per-query frame as :meth:`~backretrieval.analysis.evaluate.EvalResult.queries`
returns it (one row per pair, model, seed, sample and query: ``query_id``, ``query_text``,
``retrieved_id``, ``retrieved_ids``, ``retrieved_text``, ``bkr_rank``, ``xlr_rank``,
``is_translation``, ``query_image``, ``retrieved_image``, ``sample_kind``). BkR's queries
(``sample_kind == "non-matching"``) have a round-trip rank; XLR's (``"matching"``, where the
data link the languages) the rank of the translation.

:func:`select_queries` picks, per pair and sample, the queries a gallery shows, in this order:
those on which the models disagree most (the widest spread of their ranks, then the most
different items retrieved), then those every model fails (no round trip leads back, or the
translation is missed), then random ones (seeded). A query drawn by several seeds is shown once.
:func:`gallery_table` renders a selection as an HTML table: the source text and image, then
per model the retrieved target text and image with its round-trip rank (BkR's queries) or
whether it is the translation (XLR's). Texts are escaped and carry ``lang`` and ``dir="auto"``, so
Arabic and Hebrew run right to left. Images are small embedded thumbnails (:class:`Thumbnails`):
each distinct image is encoded once, as one CSS class named by the SHA-256 of its file's bytes,
and every cell that shows it uses that class, so the page stays self-contained and small.
"""
from __future__ import annotations

import base64
import hashlib
import html
import io
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..core import DataError

DISAGREE, ALL_FAIL, RANDOM = "models disagree", "every model fails", "random"
THUMB_PX = 96  # longest side of an embedded thumbnail
TEXT_CHARS = 240  # longer texts are cut, with an ellipsis
ID_CHARS = 40  # longer ids are shown cut, with the full id on hover (the element's title)

CSS = """
table.gallery { table-layout: fixed; width: 100%; font-size: .85em; }
table.gallery td, table.gallery th { vertical-align: top; text-align: left; overflow-wrap: anywhere; }
table.gallery td.hit { background: #eef8ee; }
table.gallery td.miss { background: #fbefef; }
table.gallery small { display: block; color: #555; margin-top: .2em; }
.th { display: block; width: 64px; height: 64px; margin: .2em 0;
      background: center / contain no-repeat; border: 1px solid #ddd; }
"""


def _outcome(df: pd.DataFrame) -> pd.Series:
    """The rank a query is judged by: its round-trip rank (BkR), or where the records have no
    BkR (text-only data) the rank of the translation (XLR)."""
    bkr, xlr = (pd.to_numeric(df[c], errors="coerce").astype("float64") for c in ("bkr_rank", "xlr_rank"))
    return bkr.fillna(xlr)


def select_queries(df: pd.DataFrame, n: int = 12, seed: int = 0) -> pd.DataFrame:
    """The queries a gallery shows, per pair and sample, in the order it shows them.

    About half of ``n`` are the queries on which the models disagree most (the spread of the
    logarithm of their round-trip ranks, then the number of different items retrieved; only
    queries where they differ at all), a quarter are queries every model fails (no round trip
    leads back; the hardest first, by the best model's rank), the rest random (drawn with
    ``seed``); a group with too few queries leaves its places to the next. A query drawn by
    several seeds counts once, with its first seed.

    Args:
        df: the per-query frame (see the module docstring).
        n: queries per pair and sample.
        seed: seed of the random draw.

    Returns:
        One row per selected query: ``pair``, ``sample_kind``, ``seed``, ``query_id``, ``why`` (one of
        ``"models disagree"``, ``"every model fails"``, ``"random"``); each (pair, sample) is
        selected on its own, in order of first appearance (``sample_kind``: BkR's non-matching or
        XLR's matching sample, None where ``df`` has no such column).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rows = []
    if "sample_kind" not in df.columns:
        df = df.assign(sample_kind=None)
    for (pair, sample), g in df.groupby(["pair", "sample_kind"], sort=False, dropna=False):
        g = g[g["seed"] == g.groupby("query_id", sort=False)["seed"].transform("min")]
        g = g.assign(_r=_outcome(g))
        per_q = g.groupby(["seed", "query_id"], sort=False).agg(
            lo=("_r", "min"), hi=("_r", "max"), known=("_r", "count"), models=("model", "size"),
            distinct=("retrieved_id", "nunique"))
        per_q["spread"] = np.log2(per_q["hi"]) - np.log2(per_q["lo"])
        keys = list(per_q.index)
        disagree = per_q[(per_q["spread"] > 0) | (per_q["distinct"] > 1)]
        disagree = disagree.sort_values(["spread", "distinct"], ascending=False, kind="stable")
        chosen = [(k, DISAGREE) for k in disagree.index[: n - n // 2]]
        taken = {k for k, _ in chosen}
        fail = per_q[(per_q["lo"] > 1) & (per_q["known"] == per_q["models"])]
        fail = fail[~fail.index.isin(list(taken))].sort_values("lo", ascending=False, kind="stable")
        chosen += [(k, ALL_FAIL) for k in fail.index[: n - n // 2 + n // 4 - len(chosen)]]
        taken = {k for k, _ in chosen}
        rest = [k for k in keys if k not in taken]
        draw = np.random.default_rng(seed).permutation(len(rest))[: max(0, n - len(chosen))]
        chosen += [(rest[i], RANDOM) for i in draw]
        rows += [{"pair": pair, "sample_kind": _or_none(sample), "seed": k[0], "query_id": k[1], "why": why}
                 for k, why in chosen]
    return pd.DataFrame(rows, columns=["pair", "sample_kind", "seed", "query_id", "why"])


class Thumbnails:
    """The embedded images of one page, each distinct image once.

    :meth:`tag` returns the element that shows an image (a CSS class named by the SHA-256 of the
    image file's bytes) and remembers the image; :meth:`style` returns the CSS that defines each
    remembered class once, with the image as a WebP thumbnail (longest side ``px``, composited on
    white) in a base64 data URI.
    """

    def __init__(self, px: int = THUMB_PX, quality: int = 80):
        self.px, self.quality = px, quality
        self._by_path: dict[str, str] = {}  # image path -> content hash
        self._uri: dict[str, str] = {}  # content hash -> data URI

    def _add(self, path: str, item: str) -> str:
        if path in self._by_path:
            return self._by_path[path]
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise DataError(f"gallery: image of {item} not found or unreadable: {path} ({e.strerror or e})") from None
        key = hashlib.sha256(data).hexdigest()
        if key not in self._uri:
            from ..encoders.image.batching import load_rgb

            im = load_rgb(path)
            im.thumbnail((self.px, self.px))
            buf = io.BytesIO()
            im.save(buf, "WEBP", quality=self.quality, method=6)
            self._uri[key] = "data:image/webp;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
        self._by_path[path] = key
        return key

    def tag(self, image: Any, item: str) -> str:
        """The element showing ``image`` (a file path; anything else, e.g. a row of a feature
        file or a missing value, shows nothing); ``item`` names it in its label and in errors."""
        if not isinstance(image, (str, Path)) or not str(image):
            return ""
        key = self._add(str(image), item)
        label = item if len(item) <= 2 * ID_CHARS else item[: 2 * ID_CHARS - 1] + "\u2026"  # errors name the whole item
        return f'<i class="th i{key[:24]}" role="img" aria-label="{html.escape(label)}"></i>'

    def style(self) -> str:
        """The CSS of the remembered images, one rule per distinct image."""
        return "".join(f".i{k[:24]}{{background-image:url({u})}}\n" for k, u in self._uri.items())

    def __len__(self) -> int:
        return len(self._uri)


def _lang(code: Any) -> str:
    """A language code as an HTML ``lang`` value (BCP 47 uses hyphens: ``zh_CN`` -> ``zh-CN``)."""
    return html.escape(str(code).replace("_", "-"))


def _text(text: Any, lang: Any) -> str:
    t = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
    if len(t) > TEXT_CHARS:
        t = t[: TEXT_CHARS - 1] + "\u2026"
    return f'<div dir="auto" lang="{_lang(lang)}">{html.escape(t)}</div>'


def _id(item_id: Any) -> str:
    """An id as shown: cut to ``ID_CHARS`` with an ellipsis, the full id in the title (on hover)."""
    t = str(item_id)
    if len(t) <= ID_CHARS:
        return html.escape(t)
    return f'<span title="{html.escape(t)}">{html.escape(t[: ID_CHARS - 1])}\u2026</span>'


def _known(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v)) and v is not pd.NA


def _or_none(v: Any) -> Any:
    return v if _known(v) else None


def _cell(r: Any, thumbs: Thumbnails) -> str:
    """One model's answer to one query: the retrieved item and, on BkR's sample, its round-trip
    rank, on XLR's (with ground truth), whether it is the translation."""
    notes, hit = [], None
    if _known(r.bkr_rank):
        hit = r.bkr_rank == 1
        notes.append("leads back (rank 1)" if hit else f"round trip: rank {int(r.bkr_rank)}")
    if _known(r.xlr_rank):  # a row of the matching sample: the translation is among the targets
        hit = bool(r.is_translation)
        notes.append("the translation" if hit else f"not the translation (it ranks {int(r.xlr_rank)})")
    ties = r.retrieved_ids if isinstance(r.retrieved_ids, (list, tuple, np.ndarray)) else []
    if len(ties) > 1:
        notes.append(f"{len(ties) - 1} more tied")
    cls = "" if hit is None else (' class="hit"' if hit else ' class="miss"')
    return (f"<td{cls}>{thumbs.tag(r.retrieved_image, f'{r.tgt_lang} item {r.retrieved_id}')}"
            f"{_text(r.retrieved_text, r.tgt_lang)}<small>{_id(r.retrieved_id)}: "
            f"{html.escape('; '.join(notes))}</small></td>")


def gallery_table(df: pd.DataFrame, selected: pd.DataFrame, thumbs: Thumbnails, models: Sequence[str] | None = None) -> str:
    """A gallery as an HTML table: a row per selected query (in the order of ``selected``), the
    query in the first column, each model's retrieval in the next.

    Args:
        df: the per-query frame (see the module docstring).
        selected: rows of :func:`select_queries` (usually of one pair and sample).
        thumbs: the page's images (each image is added once).
        models: the models' column order (default: their order in ``df``).

    Returns:
        The ``<table>``; an empty string when nothing is selected.
    """
    if selected.empty:
        return ""
    models = list(models) if models is not None else list(dict.fromkeys(df["model"]))
    if "sample_kind" not in df.columns:
        df = df.assign(sample_kind=None)
    by = {(r.pair, _or_none(r.sample_kind), r.seed, r.query_id, r.model): r for r in df.itertuples(index=False)}
    head = "<th>query</th>" + "".join(f"<th>{html.escape(str(m))}</th>" for m in models)
    body = []
    for s in selected.itertuples(index=False):
        rows = [by.get((s.pair, _or_none(s.sample_kind), s.seed, s.query_id, m)) for m in models]
        q = next(r for r in rows if r is not None)
        src = (f"<td>{thumbs.tag(q.query_image, f'{q.src_lang} item {q.query_id}')}{_text(q.query_text, q.src_lang)}"
               f"<small>{_id(q.query_id)} ({html.escape(s.why)}, seed {html.escape(str(s.seed))})</small></td>")
        cells = "".join("<td></td>" if r is None else _cell(r, thumbs) for r in rows)
        body.append(f"<tr>{src}{cells}</tr>")
    return f'<table class="gallery"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


HOW_TO_READ = (
    "Each row is one query: its text and image on the left, then what each model retrieved for it in the "
    "target language (the first step of BkR: the nearest target text). Green: the retrieved item's image "
    "leads back to the query (round-trip rank 1); red: it does not (the rank says how far the query's own "
    "image fell). With ground truth, each cell also says whether the retrieved item is the query's translation. "
    "Rows come in three groups: queries on which the models disagree most, queries every model fails, "
    "and random queries."
)
