"""On-disk embedding cache that wraps any encoder without the encoder knowing.

Layout: ``<root>/<kind>/<model>/<version>/<lang>/shard-<digest>.npz``; a shard holds ``keys``
(hex content hashes of the texts, or of the image files' bytes) and ``vecs`` (float32).
Vectors are looked up by content, so a text shared by two datasets is encoded once. Missing
items are encoded in chunks and each chunk is written as its own shard atomically, so an
interrupted run keeps every finished chunk and resumes from there; a second identical run
encodes nothing. A shard that cannot be read or whose arrays are malformed (keys not a 1-D
array of strings, vectors not a finite float matrix with one row per key and the width of the
other shards) is ignored with a :class:`CacheWarning` naming the file, and its items are
encoded again. A model with ``encode_stream(texts, lang)`` (an embedding API, whose calls are
paid) yields each batch as it is answered, and each is stored as its own shard before the next
request is sent: an interrupted run loses only the batches in flight. Encoders with ``cacheable = False`` (fitted or seeded per run, or Python objects
without a stable identity) pass through.

Progress. Missing texts are sent to the model in steps of the model's ``batch_size`` (or its
``progress_step``; 64 texts / 32 images when it has neither), longest-last (texts sorted by length,
stable, as :class:`~.text.batching.BatchedTextEncoder` would sort them), so the bar (``progress=True``:
tqdm with items/s and an ETA) moves once per batch instead of once per 2,048-text shard. A
variant (``use-m@noise=1``) is not cached itself; its base model's cache shows the bar. Each
call to the model is timed (``timer``: :class:`~.prices.EncodeTimer`), which is what a model's
measured throughput is made of (:mod:`.prices`).

The key of a text is the hash of the text *as the model embeds it*: an encoder with a maximum
length (``truncate(texts) -> (texts, n_cut)``, see :mod:`.text.batching`) truncates first, so a text and
its truncation share one entry, and the truncation warning is given here, once per call. A model's
folder is its spec without the options that never change vectors (batch size, retries, timeout,
where its files or endpoint are found: :func:`~.options.vector_spec`), so a rerun with other run
settings finds its vectors; the namespace ``<version>`` changes whenever the model's files do (encoders hash their files into
``version``), and image vectors are keyed by the bytes of the image file.

Versions. Each shard also holds ``versions``: the versions its vectors were computed under --
the model's ``versions`` (:func:`~.base.encoder_versions`: the installed libraries that compute
them, e.g. sentence-transformers / transformers / tokenizers / torch, Pillow and numpy, and
settings such as ``torch threads`` and ``chars per token``), as sorted JSON. A vector is found
only in a shard of the current versions; one found only in a shard of other versions (or in a
shard without ``versions``) is recomputed, with a :class:`~backretrieval.core.env.StaleVersionsWarning`
that names what changed ("numpy 2.1.3 -> 2.2.0"), and the new shard replaces it in the look-up.
``reuse_stale=True`` reuses such vectors instead, with the same warning.
"""
from __future__ import annotations

import contextlib
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from ..core import DataError, EncoderError, atomic_save_npz, cache_dir, content_hash
from ..core.env import StaleVersionsWarning, describe_changes
from ..core.locks import held_lock
from .text.batching import as_texts, warn_truncated
from .base import check_embeddings, encoder_versions
from .options import vector_spec
from .prices import EncodeTimer

DEFAULT_CHUNK = 2048  # texts per shard
DEFAULT_IMAGE_CHUNK = 256  # images per shard: images are slow, so shards (and the bar) advance often
DEFAULT_TEXT_STEP = 64  # texts per call to a model without batch_size: one bar update each
DEFAULT_IMAGE_STEP = 32


def _safe(part: str) -> str:
    """A file-name-safe form of ``part``: readable, and never merging two names -- a name that had
    to be changed or shortened gets a digest of the original."""
    safe = re.sub(r"[^A-Za-z0-9._+-]+", "_", part) or "_"
    if safe == part and len(safe) <= 120:
        return safe
    return f"{safe[:100]}~{content_hash(part, 8)}"


def _shard_versions(z: Any) -> dict[str, str] | None:
    """The versions a shard was written under; None when it has none (or they cannot be read)."""
    if "versions" not in z.files:
        return None
    try:
        v = json.loads(str(z["versions"]))
    except ValueError:
        return None
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else None


def _shard_width(shard: Path) -> int | None:
    """The width of a shard's vectors, read from the header of its ``vecs`` array (None: unreadable)."""
    import zipfile

    try:
        with zipfile.ZipFile(shard) as z, z.open("vecs.npy") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape = read(fh)[0]
    except Exception:  # noqa: BLE001 -- a damaged shard tells nothing
        return None
    return int(shape[1]) if len(shape) == 2 else None


class CacheWarning(UserWarning):
    """A damaged cache shard was ignored (its items are encoded again)."""


def _ignore(shard: Path, why: str) -> None:
    warnings.warn(f"cache shard {shard} ignored ({why}); its items are encoded again", CacheWarning, stacklevel=4)


class CacheWaitWarning(UserWarning):
    """Another run is sending texts of the same model and language; this one waits for it."""


LOCK_NAME = ".sending.lock"


@contextlib.contextmanager
def sending(store: "EmbeddingStore", what: str) -> Iterator[None]:
    """Hold ``store``'s namespace while texts are sent to a paid model: an exclusive lock on its
    ``.sending.lock`` (:func:`~backretrieval.core.locks.held_lock`). A second run (or thread) that
    needs the namespace meanwhile waits, with one :class:`CacheWaitWarning`, and then reads what
    the first one stored. Where locks cannot be taken the namespace is used without one."""

    def say_wait() -> None:
        warnings.warn(f"{what}: another run is sending texts of this model to be cached in {store.path}; "
                      "waiting for it, so no text is sent (and paid for) twice", CacheWaitWarning, stacklevel=7)

    with held_lock(store.path / LOCK_NAME, on_busy=say_wait):
        yield


def _shard_problem(keys: np.ndarray, vecs: np.ndarray, dim: int | None) -> str | None:
    """What is wrong with a shard's arrays (None: nothing): ``keys`` 1-D strings, ``vecs`` a
    finite float matrix with one row per key and the width of the namespace's other shards."""
    if keys.ndim != 1 or keys.dtype.kind != "U":
        return f"keys must be a 1-D array of strings, got {keys.dtype} of shape {keys.shape}"
    if vecs.ndim != 2 or vecs.dtype.kind != "f" or vecs.shape[0] != len(keys):
        return f"vecs must be a float matrix with one row per key ({len(keys)}), got {vecs.dtype} of shape {vecs.shape}"
    if dim is not None and vecs.shape[1] != dim:
        return f"vectors of width {vecs.shape[1]}, the other shards' are {dim}"
    if not np.isfinite(vecs).all():
        return "vecs hold NaN or inf"
    return None


class EmbeddingStore:
    """Content-addressed vectors of one namespace (model, version, language), computed under
    ``versions`` (the model's libraries and settings); vectors of shards written under other
    versions are kept apart (:meth:`stale`)."""

    def __init__(self, path: Path, versions: dict[str, str] | None = None):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.versions = dict(versions or {})
        self._index: dict[str, np.ndarray] | None = None
        self._stale: dict[str, tuple[np.ndarray, dict[str, str] | None]] = {}
        self._dim: int | None = None

    @property
    def dim(self) -> int | None:
        """The width of the namespace's vectors (None: it holds none yet)."""
        self._load()
        return self._dim

    def reload(self) -> None:
        """Forget what was read, so the next look-up reads the shards again (another run may have added some)."""
        self._index, self._stale, self._dim = None, {}, None

    def _load(self) -> dict[str, np.ndarray]:
        if self._index is None:
            self._index = {}
            dim: int | None = None
            for shard in sorted(self.path.glob("shard-*.npz")):
                try:
                    with np.load(shard, allow_pickle=False) as z:
                        keys, vecs = z["keys"], z["vecs"]
                        old = _shard_versions(z)
                except Exception as e:  # unreadable shard (e.g. disk full on another tool): re-encode
                    _ignore(shard, f"unreadable: {type(e).__name__}: {e}")
                    continue
                why = _shard_problem(keys, vecs, dim)
                if why is not None:
                    _ignore(shard, why)
                    continue
                dim = self._dim = vecs.shape[1]
                # a shard without versions holds current vectors only for a model that has none
                current = old == self.versions or (old is None and not self.versions)
                for k, v in zip(keys.tolist(), vecs):
                    if current:
                        self._index[k] = v
                    else:
                        self._stale[k] = (v, old)
        return self._index

    def stale(self, keys: Sequence[str]) -> dict[str, tuple[np.ndarray, dict[str, str] | None]]:
        """The vectors of ``keys`` found only in shards of other versions: key -> (vector, the
        versions it was computed under, None when its shard has none)."""
        index = self._load()
        return {k: self._stale[k] for k in keys if k not in index and k in self._stale}

    def __len__(self) -> int:
        return len(self._load())

    def get(self, keys: Sequence[str]) -> list[np.ndarray | None]:
        """The stored vector of each key, None where nothing is stored."""
        index = self._load()
        return [index.get(k) for k in keys]

    def model_dim(self) -> int | None:
        """The width of the vectors cached of this model and version: this namespace's, else
        another language's (read from a shard's header); None when there are none."""
        if self.dim is not None:
            return self.dim
        try:
            siblings = sorted(p for p in self.path.parent.iterdir() if p.is_dir() and p != self.path)
        except OSError:
            return None
        for folder in siblings:
            for shard in sorted(folder.glob("shard-*.npz")):
                width = _shard_width(shard)
                if width is not None:
                    return width
        return None

    def put(self, keys: Sequence[str], vecs: np.ndarray, what: str = "", dim: int | None = None) -> None:
        """Store ``vecs`` (one row per key) as one new shard, written atomically.

        Raises:
            EncoderError: the vectors' width differs from the namespace's (else from ``dim``, the
                model's width in other namespaces); ``what`` names the model; nothing is stored.
        """
        keys = list(keys)
        vecs = np.asarray(vecs, np.float32)
        width = self.dim if self.dim is not None else dim
        if width is not None and (vecs.ndim != 2 or vecs.shape[1] != width):
            raise EncoderError(f"{what or self.path}: the model gave vectors of shape {vecs.shape}, but the cache "
                               f"holds {width}-d vectors of this model and version ({self.path.parent}); nothing of "
                               "them is cached: the model changed without a new version, so give it another name or "
                               "option (a cache of its own), or remove that folder")
        digest = content_hash("\n".join(keys))
        atomic_save_npz(self.path / f"shard-{digest}.npz", keys=np.array(keys), vecs=vecs,
                        versions=np.array(json.dumps(self.versions, sort_keys=True)))
        index = self._load()
        self._dim = vecs.shape[1]
        for k, v in zip(keys, vecs):
            index[k] = v


class _Cached:
    kind = ""
    unit = "item"
    default_step = DEFAULT_TEXT_STEP
    bar_options: dict[str, Any] = {}  # extra tqdm options of the progress bars (e.g. mininterval=0)

    def __init__(self, encoder: Any, root: str | Path | None = None, chunk: int = DEFAULT_CHUNK, progress: bool = False,
                 reuse_stale: bool = False):
        self.encoder = encoder
        self.root = Path(root) if root is not None else cache_dir("embeddings")
        self.chunk = chunk
        self.progress = progress
        self.reuse_stale = bool(reuse_stale)  # reuse vectors of other versions (with a warning)
        self.n_encoded = 0  # items actually sent to the model (for tests and logs)
        self.timer = EncodeTimer()  # each call to the model, timed (its measured throughput: .prices)

    def __getattr__(self, name: str) -> Any:  # name, version, dim, languages, fit, ...
        return getattr(self.encoder, name)

    def store(self, lang: str) -> EmbeddingStore:
        enc = self.encoder
        path = self.root / self.kind / _safe(vector_spec(enc.name)) / _safe(enc.version) / _safe(lang)
        return EmbeddingStore(path, encoder_versions(enc))

    def step(self) -> int:
        """Items per call to the model (one progress update each): the model's ``progress_step``
        or ``batch_size``, else :attr:`default_step`; at most a shard (``chunk``)."""
        for name in ("progress_step", "batch_size"):
            value = getattr(self.encoder, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                return min(value, self.chunk)
        return min(self.default_step, self.chunk)

    def _missing_rows(self, store: EmbeddingStore, keys: list[str], lengths: Sequence[int] | None):
        """``(stale, rows)``: the vectors of other versions found for ``keys``, and the rows whose
        vectors are to be computed (each key once; shortest first when ``lengths`` are given)."""
        found = store.get(keys)
        stale = store.stale([k for k, v in zip(keys, found) if v is None])
        if stale and self.reuse_stale:
            found = [v if v is not None or k not in stale else stale[k][0] for k, v in zip(keys, found)]
        missing: dict[str, int] = {}
        for i, (k, v) in enumerate(zip(keys, found)):
            if v is None and k not in missing:
                missing[k] = i
        rows = list(missing.values())
        if lengths is not None:
            rows.sort(key=lambda i: lengths[i])  # stable: equal lengths keep their order
        return stale, rows

    def _lookup_or_encode(self, keys: list[str], lang: str, encode_rows, what: str,
                          lengths: Sequence[int] | None = None, stream_rows=None) -> np.ndarray:
        """Vectors for ``keys``; rows not in the cache are encoded by ``encode_rows(rows)``, one
        :meth:`step` at a time (shortest first when ``lengths`` are given), each shard of
        ``chunk`` rows stored as soon as it is complete. With ``stream_rows(rows, dim)`` (a model
        with ``encode_stream``: a paid API) every batch it yields, ``(some of rows, vectors)``, is
        stored as its own shard as soon as it arrives; ``dim`` is the width the cache holds, and
        the namespace is held (:func:`sending`) while texts are sent, so runs sharing the cache
        never send the same texts twice."""
        store = self.store(lang)
        stale, rows = self._missing_rows(store, keys, lengths)
        if stale:
            self._say_stale(stale, store.versions, what)
        step = self.step()

        def chars(part: Sequence[int]) -> int:
            return sum(lengths[i] for i in part) if lengths is not None else 0

        streaming = stream_rows is not None and bool(rows)
        with sending(store, what) if streaming else contextlib.nullcontext():
            if streaming:  # another run may have stored some of them while this one waited
                store.reload()
                stale, rows = self._missing_rows(store, keys, lengths)
            dim = store.model_dim() if rows else None
            with tqdm(total=len(rows), desc=f"encode {what}", unit=self.unit, disable=not (self.progress and rows),
                      **self.bar_options) as bar:
                if streaming:
                    for part, vecs in (self.timer.stream(stream_rows(rows, dim), chars) if rows else ()):
                        store.put([keys[i] for i in part], np.asarray(vecs, dtype=np.float32), what, dim)
                        self.n_encoded += len(part)
                        bar.update(len(part))
                    rows = []
                for start in range(0, len(rows), self.chunk):
                    part = rows[start : start + self.chunk]
                    vecs = []
                    for s in range(0, len(part), step):
                        some = part[s : s + step]
                        vecs.append(np.asarray(self.timer.call(encode_rows, some, chars(some)), dtype=np.float32))
                        bar.update(len(some))
                    store.put([keys[i] for i in part], np.concatenate(vecs), what, dim)
                    self.n_encoded += len(part)
        if self.reuse_stale and stale:
            fresh = store.get(keys)
            return np.stack([v if v is not None else stale[k][0] for k, v in zip(keys, fresh)]).astype(np.float32, copy=False)
        return np.stack(store.get(keys)).astype(np.float32, copy=False)

    def _say_stale(self, stale: dict[str, tuple[np.ndarray, dict[str, str] | None]], current: dict[str, str],
                   what: str) -> None:
        """One :class:`StaleVersionsWarning` naming the versions that differ from the current ones."""
        changes: dict[str, None] = {}
        for _, old in stale.values():
            changes.update(dict.fromkeys(describe_changes(old, current)))
        n = len(stale)
        head = f"{what}: {n:,} cached vector{'s' * (n != 1)} computed under other versions ({', '.join(changes)})"
        if self.reuse_stale:
            warnings.warn(f"{head}: reusing them as asked (reuse_stale)", StaleVersionsWarning, stacklevel=4)
        else:
            warnings.warn(f"{head}: recomputing them", StaleVersionsWarning, stacklevel=4)


class CachedTextEncoder(_Cached):
    """A text model whose vectors are cached by (model, version, language, text). For models
    that also take per-item columns (``extra={"title": [...], "body": [...]}``) those values are
    part of the key, and each chunk sent to the model gets its own rows of them."""

    kind = "text"
    unit = "text"

    def encode(
        self,
        texts: Sequence[str],
        lang: str,
        *,
        ids: Sequence[str] | None = None,
        extra: dict[str, Sequence[str]] | None = None,
        **kw: Any,
    ) -> np.ndarray:
        """The wrapped model's vectors of ``texts``: cached ones read, missing ones encoded one batch at a
        time and stored."""
        enc = self.encoder
        if extra is not None:
            kw["extra"] = extra
        if not getattr(enc, "cacheable", True):
            base = getattr(enc, "base", None)  # a variant: its base model's cache shows the progress
            if isinstance(base, _Cached):
                base.progress = base.progress or self.progress
                base.reuse_stale = base.reuse_stale or self.reuse_stale
            self.n_encoded += len(texts)
            if isinstance(base, _Cached):  # the base model's cache times the encoding
                return enc.encode(texts, lang, ids=ids, **kw)
            return self.timer.call(lambda rows: enc.encode(rows, lang, ids=ids, **kw), texts,
                                   sum(len(t) for t in texts if isinstance(t, str)))
        texts = as_texts(texts, ids, f"{enc.name}/{lang}")
        cut = getattr(enc, "truncate", None)
        if callable(cut):
            texts, n_cut = cut(texts)
            warn_truncated(enc.name, lang, n_cut, len(texts), enc.max_length)
        if extra is None:
            keys = [content_hash(t) for t in texts]
        else:
            names = sorted(extra)
            keys = [
                content_hash("\x00".join([t, *(f"{n}={extra[n][i]}" for n in names)])) for i, t in enumerate(texts)
            ]

        def encode_rows(rows: list[int]) -> np.ndarray:
            sub_ids = None if ids is None else [ids[i] for i in rows]
            sub_kw = dict(kw)
            if extra is not None:
                sub_kw["extra"] = {n: [col[i] for i in rows] for n, col in extra.items()}
            return enc.encode([texts[i] for i in rows], lang, ids=sub_ids, **sub_kw)

        stream = getattr(enc, "encode_stream", None)

        def stream_rows(rows: list[int], dim: int | None):
            sub_ids = None if ids is None else [ids[i] for i in rows]
            for part, vecs in stream([texts[i] for i in rows], lang, ids=sub_ids, dim=dim):
                yield [rows[j] for j in part], vecs

        out = self._lookup_or_encode(keys, lang, encode_rows, f"{enc.name}/{lang}", [len(t) for t in texts],
                                     stream_rows if callable(stream) and extra is None else None)
        return check_embeddings(out, len(texts), f"{enc.name}/{lang}", ids)


    def missing(self, texts: Sequence[str], lang: str) -> list[str]:
        """The distinct texts of ``texts`` (as the model embeds them) that the cache lacks: what
        :meth:`encode` would send to the model, in the order it would send them."""
        enc = self.encoder
        texts = as_texts(texts, None, f"{enc.name}/{lang}")
        cut = getattr(enc, "truncate", None)
        if callable(cut):
            texts, _ = cut(texts)
        unique = list(dict.fromkeys(texts))
        found = self.store(lang).get([content_hash(t) for t in unique])
        return sorted((t for t, v in zip(unique, found) if v is None), key=len)


class CachedImageEncoder(_Cached):
    """An image model whose vectors are cached by (model, version, file content)."""

    kind = "image"
    unit = "img"
    default_step = DEFAULT_IMAGE_STEP

    def __init__(self, encoder: Any, root: str | Path | None = None, chunk: int = DEFAULT_IMAGE_CHUNK, progress: bool = False,
                 reuse_stale: bool = False):
        super().__init__(encoder, root, chunk, progress, reuse_stale)

    def encode_images(self, paths: Sequence[str], **kw: Any) -> np.ndarray:
        """The wrapped model's features of the image files ``paths``, keyed by their content: cached ones
        read, missing ones encoded and stored (a model with ``cacheable = False`` passes through)."""
        enc = self.encoder
        paths = [str(p) for p in paths]
        if not getattr(enc, "cacheable", True):  # a run-only model: its features are never stored
            self.n_encoded += len(paths)
            return check_embeddings(enc.encode_images(paths, **kw), len(paths), enc.name)
        keys = []
        for p in paths:
            try:
                keys.append(content_hash(Path(p).read_bytes()))
            except OSError as e:
                raise DataError(f"image not found or unreadable: {p} ({e.strerror or e})") from None

        def encode_rows(rows: list[int]) -> np.ndarray:
            return enc.encode_images([paths[i] for i in rows], **kw)

        out = self._lookup_or_encode(keys, "all", encode_rows, f"{enc.name} images")
        return check_embeddings(out, len(paths), enc.name)
