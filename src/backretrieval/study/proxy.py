"""Automatic proxy raters for a dry run of a study (a pilot before paying people), on data where
every suggested target item also exists in the query's language (e.g. emoji-cldr).

A proxy rater looks at the *source-language version* of each suggested item (the item of the
same concept in the query's language, which the models never compared against the query) and
scores it by the Jaccard overlap ``J`` of its terms with the query's terms:

    J >= 0.5 -> 1 (very relevant),  J >= 0.25 -> 2,  J > 0 -> 3,  J = 0 -> 4 (not relevant)

Terms (``terms=``): ``"words"`` -- lower-cased word tokens of the name and keywords;
``"keywords"`` -- the whole name and keyword phrases (stricter). The name and keywords are the
corpus' ``extra["title"]`` / ``extra["body"]`` where the loader provides them, else its text.

This is a proxy, not a person: it only sees lexical overlap of CLDR annotations. Its purpose is
to exercise the study end to end and give a rough expectation; it is never a substitute for the
human ratings the study exists for. Proxy ratings are written to a *copy* of the study file,
whose raters get new link tokens (the study's links never reach the copy).
"""
from __future__ import annotations

import re
import secrets
import sqlite3
from pathlib import Path
from typing import Any

from ..core import DataError
from ..data import Corpus, load_dataset
from . import files, store

TERMS = ("words", "keywords")
THRESHOLDS = ((0.5, 1), (0.25, 2), (1e-12, 3))
_WORD = re.compile(r"\w+", re.UNICODE)


def terms_of(corpus: Corpus, row: int, kind: str) -> frozenset[str]:
    """The set of casefolded terms of row ``row``: its words (``"words"``) or its title and comma-separated
    keyword phrases (``"keywords"``)."""
    title = corpus.extra.get("title", corpus.texts)[row]
    body = corpus.extra.get("body", [""] * len(corpus))[row] if "title" in corpus.extra else ""
    if kind == "words":
        return frozenset(w.casefold() for w in _WORD.findall(f"{title} {body}"))
    if kind == "keywords":
        phrases = [title] + [p for p in body.split(",")]
        return frozenset(p.strip().casefold() for p in phrases if p.strip())
    raise DataError(f"unknown proxy terms {kind!r}; choose one of {', '.join(TERMS)}")


def score_from_overlap(a: frozenset[str], b: frozenset[str]) -> int:
    """A 1-4 relevance score from the Jaccard overlap of two term sets (1: very relevant, 4: not
    relevant)."""
    j = len(a & b) / len(a | b) if a | b else 0.0
    for threshold, score in THRESHOLDS:
        if j >= threshold:
            return score
    return 4


def proxy_rate(db: str | Path, out: str | Path, terms: list[str], *, force: bool = False) -> dict[str, Any]:
    """Copy ``db`` to ``out`` and rate every suggestion there by one proxy rater per entry of
    ``terms`` (rater name ``proxy-<terms>``), through :func:`store.record_rating`. Returns
    ``{rater: {"rated": n, "unrated": m}}``; a suggestion whose concept has no item in the query
    language stays unrated."""
    for t in terms:
        if t not in TERMS:
            raise DataError(f"unknown proxy terms {t!r}; choose one of {', '.join(TERMS)}")
    out = Path(out)
    if Path(db).resolve() == out.resolve():
        raise DataError("proxy ratings go to a copy of the study: --out must differ from the study file")
    store.require_new(out, force)
    with store.opened(db, check=True) as src_con:
        meta = store.read_meta(src_con)
        tmp = files.private_tempfile(out)
        try:
            dst = sqlite3.connect(tmp, isolation_level=None)
            try:
                src_con.backup(dst)  # a consistent copy even while the study is being served
                # new link tokens: a rater's link to the study must never reach this copy (a page
                # left open while the copy is served would rate the pilot instead of the study)
                dst.execute("BEGIN")
                for (rater_id,) in dst.execute("SELECT rater_id FROM raters").fetchall():
                    dst.execute("UPDATE raters SET token = ? WHERE rater_id = ?", (secrets.token_urlsafe(32), rater_id))
                dst.execute("COMMIT")
            finally:
                dst.close()
            files.install(tmp, out)
        except BaseException:
            files.remove_tempfile(tmp)
            raise
    ds = load_dataset(meta["dataset"], langs=[meta["src"], meta["tgt"]], **(meta.get("dataset_options") or {}))
    src, tgt = ds[meta["src"]], ds[meta["tgt"]]
    if not (src.has_concepts and tgt.has_concepts):
        raise DataError(f"{meta['dataset']}: proxy raters need items linked across languages (concepts)")
    src_row = {sid: i for i, sid in enumerate(src.ids)}
    src_by_concept: dict[str, int] = {}
    for i, c in enumerate(src.concept_keys()):
        src_by_concept.setdefault(c, i)
    tgt_row = {tid: i for i, tid in enumerate(tgt.ids)}
    con = store.connect(out)
    report: dict[str, Any] = {}
    try:
        rows = con.execute(
            "SELECT s.public_id, s.item_id, q.item_id FROM suggestions s JOIN queries q USING (query_id) ORDER BY s.sugg_id"
        ).fetchall()
        for kind in terms:
            name = f"proxy-{kind}"
            have = {r["name"]: r["token"] for r in store.list_raters(con)}
            token = have[name] if name in have else store.add_rater(con, name)["token"]
            rated = unrated = 0
            for sid, item, query_item in rows:
                if query_item not in src_row or item not in tgt_row:
                    raise DataError(f"study item {query_item!r} / {item!r} is not in the dataset any more")
                twin = src_by_concept.get(tgt.concept_of(tgt_row[item]))
                if twin is None:
                    unrated += 1
                    continue
                sc = score_from_overlap(terms_of(src, src_row[query_item], kind), terms_of(src, twin, kind))
                store.record_rating(con, token, sid, sc)
                rated += 1
            report[name] = {"rated": rated, "unrated": unrated}
    finally:
        con.close()
    return report
