"""Build a blinded, randomised relevance study (Backretrieval paper, end of Sec. 3.2).

For ``Q`` source-language queries and each model, the model's ``per_model`` nearest
target-language items (cosine, blocked exact search) are the suggestions. A target item
suggested by several models for the same query is shown once and credited to each of them.
Raters see each query with its suggestions in their own random order and never learn which
model suggested what (:mod:`.store`, :mod:`.server`).

Sampling (all from ``numpy.random.default_rng(seed)``, so the same seed gives the same study):

* queries: ``Q`` distinct rows of the source corpus, uniformly; or, given ``query_ids`` (e.g. the
  queries on which models disagree in an evaluation's per-query results, :mod:`.from_queries`),
  those items, all of them in the order given when there are at most ``Q``, else ``Q`` of them
  drawn uniformly (kept in the order given);
* pool (the searchable target items): the whole target corpus, less, with ``pool="disjoint"``
  (the default), every item whose concept is the concept of a sampled query -- so the query's
  own translation is never a suggestion. This is the setting of the paper's study (independent
  recipe collections, no translations) and of BkR's non-matching samples: raters judge how
  useful *related* items are, not whether the model finds an exact translation (which
  ground-truth XLR already measures where translations exist). ``pool="all"`` keeps them;
* ``pool_size`` (optional): a uniform subsample of that pool, drawn after the queries.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import sqlite3
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..core import BackretrievalError, DataError, content_hash
from ..data import Corpus, load_dataset
from ..encoders.registry import get_cached_text_encoder
from ..search import l2_normalize, topk
from . import files, store

POOLS = ("disjoint", "all")
IMAGE_MODES = ("all", "query", "none")
MAX_IMAGE_BYTES = 1 << 20  # larger images are stored as a 512 px JPEG thumbnail


@dataclasses.dataclass
class StudyConfig:
    """What a relevance study is built from (see the module doc); :meth:`validate` checks it.

    Attributes:
        dataset: the dataset spec (as ``load_dataset`` takes it).
        src, tgt: the query language and the language of the suggested items.
        models: the text models compared (spec strings, at least two, distinct).
        queries: ``Q``, the number of queries.
        per_model: suggestions per model and query (each model's nearest target items).
        seed: seeds every draw (queries, pool, order shown to raters).
        pool: ``"disjoint"`` (the queries' own concepts left out of the searchable items) or ``"all"``.
        pool_size: a uniform subsample of the pool (None: all of it).
        images: which images the study shows: ``"all"``, ``"query"`` or ``"none"``.
        dataset_options: options for the dataset loader.
        query_ids: the queries by source item id; None: sampled.
        query_texts, target_texts: the texts of the queries and of the targets retrieved in the
            per-query results the queries come from, by id; each must be the dataset's (None:
            not compared).
    """

    dataset: str
    src: str
    tgt: str
    models: list[str]
    queries: int = 20
    per_model: int = 5
    seed: int = 0
    pool: str = "disjoint"
    pool_size: int | None = None
    images: str = "all"
    dataset_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    query_ids: list[str] | None = None  # the queries by source item id (see the module doc); None: sampled
    query_texts: dict[str, str] | None = None  # their texts where they were taken from (compared with the dataset's)
    target_texts: dict[str, str] | None = None  # the texts of the targets retrieved there, by id (compared likewise)

    def validate(self) -> None:
        """Check every setting before any work; a clear error naming the first bad one."""
        models = [m.strip() for m in self.models]
        if len(models) < 2 or any(not m for m in models):
            raise BackretrievalError(f"a study compares at least two models, got {self.models!r}")
        if len(set(models)) != len(models):
            raise BackretrievalError(f"duplicate model in {self.models!r}")
        if self.src == self.tgt:
            raise BackretrievalError(f"source and target language are the same ({self.src!r})")
        for name in ("queries", "per_model"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise BackretrievalError(f"{name} must be a positive integer, got {v!r}")
        if self.pool not in POOLS:
            raise BackretrievalError(f"pool must be one of {', '.join(POOLS)}, got {self.pool!r}")
        if self.images not in IMAGE_MODES:
            raise BackretrievalError(f"images must be one of {', '.join(IMAGE_MODES)}, got {self.images!r}")
        if self.pool_size is not None and (not isinstance(self.pool_size, int) or self.pool_size < 1):
            raise BackretrievalError(f"pool_size must be a positive integer, got {self.pool_size!r}")
        if self.query_ids is not None and (isinstance(self.query_ids, str) or not list(self.query_ids)):
            raise BackretrievalError(f"query_ids must be a non-empty list of source item ids, got {self.query_ids!r}")


@dataclasses.dataclass
class Retrieved:
    """What one model suggests: ``rows[q]`` are pool rows (best first), ``scores[q]`` cosines."""

    rows: np.ndarray
    scores: np.ndarray


def sample(cfg: StudyConfig, src: Corpus, tgt: Corpus) -> tuple[np.ndarray, np.ndarray]:
    """``(query_rows, pool_rows)``: rows of the source and target corpora (see module doc)."""
    rng = np.random.default_rng(cfg.seed)
    if cfg.target_texts is not None:
        _check_target_texts(cfg.target_texts, tgt)
    if cfg.query_ids is not None:
        q_rows = _given_queries(cfg, src, rng)
    else:
        if cfg.queries > len(src):
            raise DataError(f"{src.dataset}/{src.lang}: {cfg.queries} queries asked for, the corpus has {len(src)} items")
        q_rows = rng.choice(len(src), size=cfg.queries, replace=False).astype(np.int64)
    if cfg.pool == "disjoint":
        taken = {src.concept_of(int(i)) for i in q_rows}
        pool = np.array([j for j, c in enumerate(tgt.concept_keys()) if c not in taken], dtype=np.int64)
    else:
        pool = np.arange(len(tgt), dtype=np.int64)
    if cfg.pool_size is not None:
        if cfg.pool_size > len(pool):
            raise DataError(
                f"{tgt.dataset}/{tgt.lang}: pool_size={cfg.pool_size} but only {len(pool)} target items are eligible"
            )
        pool = np.sort(rng.choice(pool, size=cfg.pool_size, replace=False))
    if cfg.per_model > len(pool):
        raise DataError(f"{tgt.dataset}/{tgt.lang}: per_model={cfg.per_model} exceeds the pool of {len(pool)} items")
    return q_rows, pool


def _check_target_texts(given: dict[str, str], tgt: Corpus) -> None:
    """Each target the per-query results retrieved is in ``tgt`` with the text they give it."""
    row_of = {str(item): i for i, item in enumerate(tgt.ids)}
    for t, text in given.items():
        if t not in row_of:
            raise DataError(f"{tgt.dataset}/{tgt.lang}: target id {t!r}, retrieved in the per-query results, is not in "
                            "the corpus; were they computed on this dataset?")
        here = tgt.texts[row_of[t]]
        if here != text:
            raise DataError(f"{tgt.dataset}/{tgt.lang}: target id {t!r}: its text {here[:60]!r} differs from the per-query "
                            f"results' ({text[:60]!r}); were they computed on this version of the dataset?")


def _given_queries(cfg: StudyConfig, src: Corpus, rng: np.random.Generator) -> np.ndarray:
    """The rows of ``cfg.query_ids`` in ``src`` (at most ``cfg.queries``, see the module doc)."""
    row_of = {item: i for i, item in enumerate(src.ids)}
    ids = list(dict.fromkeys(str(q) for q in cfg.query_ids))
    missing = [q for q in ids if q not in row_of]
    if missing:
        raise DataError(f"{src.dataset}/{src.lang}: query id {missing[0]!r} is not in the corpus ({len(missing)} of the "
                        f"{len(ids)} given are not); were the per-query results computed on this dataset?")
    for q in ids if cfg.query_texts is not None else ():
        given, text = cfg.query_texts.get(q), src.texts[row_of[q]]
        if given is not None and given != text:
            raise DataError(f"{src.dataset}/{src.lang}: query id {q!r}: its text {text[:60]!r} differs from the per-query "
                            f"results' ({given[:60]!r}); were they computed on this version of the dataset?")
    if len(ids) > cfg.queries:
        keep = np.sort(rng.choice(len(ids), size=cfg.queries, replace=False))
        ids = [ids[i] for i in keep]
    return np.array([row_of[q] for q in ids], dtype=np.int64)


def retrieve(spec: str, queries: Corpus, pool: Corpus, k: int, progress: bool = False) -> Retrieved:
    """The ``k`` nearest pool items of each query under model ``spec`` (cosine; ties by pool
    order, as :func:`backretrieval.search.topk`)."""
    enc = get_cached_text_encoder(spec, progress=progress)
    if hasattr(enc.encoder, "fit") and callable(enc.encoder.fit):
        enc.encoder.fit({queries.lang: queries.texts, pool.lang: pool.texts})
    q = l2_normalize(enc.encode(queries.texts, queries.lang, ids=queries.ids))
    d = l2_normalize(enc.encode(pool.texts, pool.lang, ids=pool.ids))
    scores, idx = topk(q, d, k)
    return Retrieved(idx, scores)


def _image_blob(path: str, item: str) -> tuple[str, str, bytes]:
    """``(image_id, mime, bytes)`` of the image of ``item`` (named in errors, e.g. ``emoji-cldr/en
    item '1F600'``); images over :data:`MAX_IMAGE_BYTES` become a JPEG thumbnail.

    The whole image is decoded now (and a PNG's chunk checksums verified), so a truncated or
    damaged file is refused when the study is built, not shown broken on the rating page.

    Raises:
        DataError: the file is missing, unreadable, truncated or not an image.
    """
    from PIL import Image

    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise DataError(f"{item}: image not found or unreadable: {path} ({e.strerror or e})") from None
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.verify()  # structure and checksums (PNG); verify() leaves the image unusable
        with Image.open(io.BytesIO(data)) as im:
            im.load()  # every pixel: a truncated file fails here
            fmt = (im.format or "").upper()
            if len(data) > MAX_IMAGE_BYTES or fmt not in ("PNG", "JPEG", "GIF", "WEBP"):
                im = im.convert("RGB")
                im.thumbnail((512, 512))
                buf = io.BytesIO()
                im.save(buf, "JPEG", quality=88)
                data, fmt = buf.getvalue(), "JPEG"
    except Exception as e:  # PIL raises OSError, SyntaxError, ValueError, struct.error, ... on bad data
        raise DataError(f"{item}: image {path} is truncated, damaged or not an image ({e})") from None
    return content_hash(data), f"image/{fmt.lower()}", data


def _read_images(corpus: Corpus, rows: list[int], blobs: dict[str, tuple[str, str, bytes]]) -> None:
    """Read (and check) the images of ``rows`` of ``corpus`` into ``blobs`` (path -> blob)."""
    assert corpus.image_paths is not None
    for row in rows:
        path = corpus.image_paths[row]
        if path not in blobs:
            blobs[path] = _image_blob(path, f"{corpus.dataset}/{corpus.lang} item {corpus.ids[row]!r}")


def create_study(
    cfg: StudyConfig,
    out: str | Path,
    *,
    raters: int = 1,
    force: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = lambda msg: None,
) -> dict[str, Any]:
    """Sample, retrieve with every model and write the study to ``out`` (SQLite, mode 0600),
    atomically: the file appears complete or not at all (:func:`files.install`).

    Args:
        cfg: the study's configuration (validated here).
        out: the study file to write.
        raters: raters to register now.
        force: replace an existing study at ``out`` (and its ratings, including those still in
            its ``-wal`` log) -- never one that a server or another command has open.
        progress: show encoding progress bars.
        log: receives one-line progress messages.

    Returns:
        :func:`store.study_summary` of the new file.

    Raises:
        BackretrievalError: bad configuration; DataError: ``out`` exists (without ``force``),
        bad data or an unreadable, truncated or damaged image (naming the file and the item;
        query images are checked before any model runs); files.InUse: the study at ``out`` is
        being served.
    """
    cfg.models = [m.strip() for m in cfg.models]
    cfg.validate()
    out = Path(out)
    store.require_new(out, force)
    ds = load_dataset(cfg.dataset, langs=[cfg.src, cfg.tgt], **cfg.dataset_options)
    src, tgt = ds[cfg.src], ds[cfg.tgt]
    q_rows, pool_rows = sample(cfg, src, tgt)
    qc, pc = src.subset(q_rows), tgt.subset(pool_rows)
    log(f"{len(qc)} {cfg.src} queries, pool of {len(pc)} {cfg.tgt} items ({cfg.pool})")
    show_q = cfg.images in ("all", "query") and qc.image_paths is not None
    show_s = cfg.images == "all" and pc.image_paths is not None
    blobs: dict[str, tuple[str, str, bytes]] = {}
    if show_q:
        _read_images(qc, list(range(len(qc))), blobs)
    found = {spec: retrieve(spec, qc, pc, cfg.per_model, progress) for spec in cfg.models}
    if show_s:
        shown = sorted({int(row) for r in found.values() for row in r.rows.ravel()})
        _read_images(pc, shown, blobs)

    tmp = files.private_tempfile(out)
    try:
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            _write(con, cfg, qc, pc, found, show_q, show_s, raters, blobs)
        finally:
            con.close()
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        files.install(tmp, out)
    except BaseException:
        files.remove_tempfile(tmp)
        raise
    return store.study_summary(out)


def _write(
    con: sqlite3.Connection,
    cfg: StudyConfig,
    qc: Corpus,
    pc: Corpus,
    found: dict[str, Retrieved],
    show_q: bool,
    show_s: bool,
    n_raters: int,
    blobs: dict[str, tuple[str, str, bytes]],
) -> None:
    from .. import __version__

    con.executescript(store.SCHEMA)
    con.execute("BEGIN")
    meta = {
        "schema_version": store.SCHEMA_VERSION,
        "dataset": cfg.dataset,
        "dataset_options": cfg.dataset_options,
        "src": cfg.src,
        "tgt": cfg.tgt,
        "models": cfg.models,
        "queries": len(qc),
        "query_ids": cfg.query_ids,
        "per_model": cfg.per_model,
        "seed": cfg.seed,
        "pool": cfg.pool,
        "pool_size": cfg.pool_size,
        "pool_n": len(pc),
        "images": cfg.images,
        "created_at": store.now(),
        "backretrieval_version": __version__,
    }
    con.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
    for i, spec in enumerate(cfg.models):
        con.execute("INSERT INTO models (model_id, spec, label) VALUES (?, ?, ?)", (i + 1, spec, _label(i)))

    images: dict[str, str] = {}  # path -> image_id

    def image(path: str | None) -> str | None:
        if path is None:
            return None
        if path not in images:
            iid, mime, data = blobs[path]
            con.execute("INSERT OR IGNORE INTO images (image_id, mime, data) VALUES (?, ?, ?)", (iid, mime, data))
            images[path] = iid
        return images[path]

    used: set[str] = set()

    def fresh_id() -> str:
        while True:
            pid = store.public_id()
            if pid not in used:
                used.add(pid)
                return pid

    for qi in range(len(qc)):
        qpath = qc.image_paths[qi] if show_q else None
        con.execute(
            "INSERT INTO queries (query_id, public_id, item_id, text, image_id) VALUES (?, ?, ?, ?, ?)",
            (qi + 1, fresh_id(), qc.ids[qi], qc.texts[qi], image(qpath)),
        )
        # pool row -> {model_id: (rank, score)}; stored in pool order, which says nothing
        # about the models (the presentation order is shuffled per rater anyway)
        credits: dict[int, dict[int, tuple[int, float]]] = {}
        for mi, spec in enumerate(cfg.models):
            r = found[spec]
            for rank, (row, sc) in enumerate(zip(r.rows[qi], r.scores[qi]), 1):
                credits.setdefault(int(row), {})[mi + 1] = (rank, float(sc))
        for row in sorted(credits):
            spath = pc.image_paths[row] if show_s else None
            cur = con.execute(
                "INSERT INTO suggestions (public_id, query_id, item_id, text, image_id) VALUES (?, ?, ?, ?, ?)",
                (fresh_id(), qi + 1, pc.ids[row], pc.texts[row], image(spath)),
            )
            sugg_id = cur.lastrowid
            for model_id, (rank, sc) in sorted(credits[row].items()):
                con.execute(
                    "INSERT INTO credits (sugg_id, model_id, rank, score) VALUES (?, ?, ?, ?)",
                    (sugg_id, model_id, rank, sc),
                )
    con.execute("COMMIT")
    for _ in range(n_raters):
        store.add_rater(con)
    con.execute("PRAGMA journal_mode = WAL")  # persistent; the web app's readers never block the writer


def _label(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"M{i + 1}"
