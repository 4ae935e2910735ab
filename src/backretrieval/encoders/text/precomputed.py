"""``precomputed:PATH`` -- text embeddings computed elsewhere, looked up by (lang, id).

Accepted files:

* ``.parquet`` or ``.jsonl`` with columns / keys ``lang``, ``id``, ``embedding`` (a list of
  floats); other columns are ignored;
* ``.npz`` with arrays ``langs`` (n,), ``ids`` (n,) and ``vectors`` (n, d).

The texts handed to ``encode`` are ignored: ``ids`` are required (EncoderError without them)
and every (lang, id) must be in the file (DataError naming the first one that is not). Ids
are compared as strings; languages after lowercasing and ``_`` -> ``-`` (``zh_Hant`` matches
``zh-Hant``). The file is read once, on first use; all vectors must have the same, non-zero
dimension (DataError naming the first row that differs) and a (lang, id) may occur only once.
``version`` is a hash of the file's bytes (computed on first use), so the evaluation's records
are recomputed when the file changes; ``cacheable`` is False (the file is the cache). The texts
are not read, so there is no maximum length.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...core import DataError, EncoderError
from ...core.fingerprint import file_digest
from ...core.io import json_lines
from ..base import EXAMPLE_TEXTS, Example, check_embeddings
from ..registry import register_text
from .batching import as_texts, positive_int

SUFFIXES = (".parquet", ".jsonl", ".npz")


def _lang(lang: Any) -> str:
    return str(lang).strip().lower().replace("_", "-")


class PrecomputedTextEncoder:
    """Vectors read from a file and looked up by (lang, id)."""

    languages = None
    cacheable = False

    def __init__(self, path: str | os.PathLike[str], *, batch_size: int | None = None, progress: bool = False) -> None:
        self.name = f"precomputed:{path}"
        p = Path(path).expanduser()
        if not p.is_file():
            raise DataError(f"{self.name}: embedding file {str(path)!r} not found")
        suffix = p.suffix.lower()
        if suffix not in SUFFIXES:
            raise DataError(f"{self.name}: unsupported file type {suffix or '(none)'!r}; use one of {', '.join(SUFFIXES)}")
        if batch_size is not None:  # nothing is batched, but a bad value is still refused
            positive_int(batch_size, "batch_size", self.name)
        self.path = p
        self.dim: int | None = None
        self._index: dict[tuple[str, str], int] | None = None
        self._vectors: np.ndarray | None = None
        self._file_langs: list[str] = []

    @property
    def version(self) -> str:
        """``file-<hash of the file's bytes>`` (see :func:`backretrieval.core.fingerprint.file_digest`)."""
        try:
            return f"file-{file_digest(self.path)[:16]}"
        except OSError as e:
            raise DataError(f"{self.name}: cannot read {self.path} ({e.strerror or e})") from None

    # -- reading
    def _read(self) -> tuple[list[Any], list[Any], np.ndarray]:
        suffix = self.path.suffix.lower()
        try:
            if suffix == ".npz":
                return self._read_npz()
            if suffix == ".parquet":
                return self._read_parquet()
            return self._read_jsonl()
        except (DataError, EncoderError):
            raise
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DataError(f"{self.name}: cannot read {self.path} ({type(e).__name__}: {e})") from e

    def _read_npz(self) -> tuple[list[Any], list[Any], np.ndarray]:
        with np.load(self.path, allow_pickle=False) as z:
            missing = [k for k in ("langs", "ids", "vectors") if k not in z.files]
            if missing:
                raise DataError(f"{self.name}: {self.path} lacks array(s) {', '.join(missing)} (has {', '.join(z.files)})")
            langs, ids, vecs = z["langs"].tolist(), z["ids"].tolist(), z["vectors"]
        if vecs.ndim != 2:
            raise DataError(f"{self.name}: 'vectors' in {self.path} must be 2-D (n, d), got shape {vecs.shape}")
        if not (len(langs) == len(ids) == len(vecs)):
            raise DataError(
                f"{self.name}: {self.path} has {len(langs)} langs, {len(ids)} ids and {len(vecs)} vectors"
            )
        if not np.issubdtype(vecs.dtype, np.number) or np.issubdtype(vecs.dtype, np.complexfloating):
            raise DataError(f"{self.name}: 'vectors' in {self.path} are not real numbers (dtype {vecs.dtype})")
        return langs, ids, vecs

    def _rows_to_matrix(self, langs: list[Any], ids: list[Any], embs: Sequence[Any], where: str) -> np.ndarray:
        d = 0
        for i, e in enumerate(embs):
            row = f"{where} {i} (lang {langs[i]!r}, id {ids[i]!r})"
            if not isinstance(e, (list, tuple)) or len(e) == 0:
                raise DataError(f"{self.name}: {row} of {self.path} has no embedding (expected a non-empty list of numbers)")
            if not d:
                d = len(e)
            elif len(e) != d:
                raise DataError(f"{self.name}: {row} of {self.path} has a {len(e)}-d embedding, the first row a {d}-d one")
        try:
            return np.asarray(embs, dtype=np.float32).reshape(len(embs), d)
        except (TypeError, ValueError) as e:
            raise DataError(f"{self.name}: non-numeric values in the embeddings of {self.path} ({e})") from e

    def _read_parquet(self) -> tuple[list[Any], list[Any], np.ndarray]:
        try:
            import pyarrow as pa
            import pyarrow.compute as pc
            import pyarrow.parquet as pq
        except ImportError as e:
            raise EncoderError(f"{self.name}: reading .parquet needs pyarrow: pip install pyarrow ({e})") from e

        schema = pq.read_schema(self.path)
        missing = [c for c in ("lang", "id", "embedding") if c not in schema.names]
        if missing:
            raise DataError(f"{self.name}: {self.path} lacks column(s) {', '.join(missing)} (has {', '.join(schema.names)})")
        table = pq.read_table(self.path, columns=["lang", "id", "embedding"])
        langs = table.column("lang").to_pylist()
        ids = table.column("id").to_pylist()
        col = table.column("embedding").combine_chunks()
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or pa.types.is_fixed_size_list(col.type):
            lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
            lengths = np.where(np.asarray(col.is_null()), -1, lengths).astype(np.int64)
            d = int(lengths[0]) if len(lengths) else 0
            bad = np.flatnonzero((lengths != d) | (lengths <= 0))
            if len(bad) == 0 and len(lengths):
                flat = pc.list_flatten(col)
                if flat.null_count:
                    first = int(np.flatnonzero(np.asarray(flat.is_null()))[0])
                    row = int(pc.list_parent_indices(col)[first].as_py())
                    raise DataError(
                        f"{self.name}: null/NaN value in the embedding of lang {langs[row]!r} id {ids[row]!r} "
                        f"(row {row}) of {self.path}"
                    )
                return langs, ids, flat.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(lengths), d)
        return langs, ids, self._rows_to_matrix(langs, ids, col.to_pylist(), "row")

    def _read_jsonl(self) -> tuple[list[Any], list[Any], np.ndarray]:
        langs, ids, embs = [], [], []
        with open(self.path, encoding="utf-8") as fh:
            for lineno, rec in json_lines(fh, f"{self.name}: {self.path}"):
                if not isinstance(rec, dict) or any(k not in rec for k in ("lang", "id", "embedding")):
                    raise DataError(f"{self.name}: {self.path} line {lineno} needs keys lang, id and embedding")
                langs.append(rec["lang"])
                ids.append(rec["id"])
                embs.append(rec["embedding"])
        return langs, ids, self._rows_to_matrix(langs, ids, embs, "record")

    def _load(self) -> None:
        if self._index is not None:
            return
        langs, ids, vecs = self._read()
        if len(vecs) == 0:
            raise DataError(f"{self.name}: {self.path} holds no embeddings")
        if vecs.shape[1] == 0:
            raise DataError(f"{self.name}: {self.path} holds 0-dimensional embeddings")
        index: dict[tuple[str, str], int] = {}
        for i, (lang, id_) in enumerate(zip(langs, ids)):
            if lang is None or id_ is None:
                raise DataError(f"{self.name}: row {i} of {self.path} has no {'lang' if lang is None else 'id'}")
            key = (_lang(lang), str(id_))
            if key in index:
                raise DataError(f"{self.name}: (lang {lang!r}, id {str(id_)!r}) occurs twice in {self.path} (rows {index[key]} and {i})")
            index[key] = i
        self._vectors = np.ascontiguousarray(vecs, dtype=np.float32)
        self._index = index
        self._file_langs = sorted({str(x) for x in langs})
        self.dim = int(self._vectors.shape[1])

    # -- encoder protocol
    def encode(
        self,
        texts: Sequence[str],
        lang: str,
        *,
        ids: Sequence[str] | None = None,
        batch_size: int | None = None,
        progress: bool | None = None,
    ) -> np.ndarray:
        """The stored vectors of ``ids`` in ``lang`` (``texts`` only sets the expected count)."""
        what = f"{self.name}/{lang}"
        if ids is None:
            raise EncoderError(f"{what}: precomputed embeddings are looked up by id; encode() needs ids=")
        texts = as_texts(texts, ids, what)
        self._load()
        assert self._index is not None and self._vectors is not None
        lk = _lang(lang)
        rows = np.empty(len(ids), dtype=np.int64)
        for i, id_ in enumerate(ids):
            r = self._index.get((lk, str(id_)))
            if r is None:
                langs = ", ".join(self._file_langs[:20]) + (" ..." if len(self._file_langs) > 20 else "")
                raise DataError(
                    f"{what}: no embedding for (lang {lang!r}, id {str(id_)!r}) in {self.path} (file languages: {langs})"
                )
            rows[i] = r
        return check_embeddings(self._vectors[rows], len(texts), what, ids)

    def __repr__(self) -> str:
        return f"<PrecomputedTextEncoder {self.path} {self.version}>"


def _example(folder: Path) -> Example:
    """Two .npz files of seeded 8-d vectors for the example texts' ids (``x0``, ``x1``, ...)."""
    ids = [f"x{i}" for i in range(len(EXAMPLE_TEXTS))]
    paths = []
    for seed in (0, 1):
        path = folder / f"vectors{seed}.npz"
        vectors = np.random.default_rng(seed).standard_normal((len(ids), 8)).astype(np.float32)
        np.savez(path, langs=np.array(["en"] * len(ids)), ids=np.array(ids), vectors=vectors)
        paths.append(str(path))
    return Example(arg=paths[0], other=(paths[1], {}), ids=tuple(ids), shows_progress=False)


register_text(
    "precomputed",
    description="embeddings from a .parquet/.jsonl (lang, id, embedding) or .npz (langs, ids, vectors) file",
    requires="pyarrow",
    example=_example,
)(PrecomputedTextEncoder)
