"""Machinery shared by the built-in text models.

* :func:`lang_key` -- normalises a CLDR/ISO language code for look-ups: lowercase, ``_`` -> ``-``,
  ``zh-CN`` / ``zh-SG`` / ``zh-Hans*`` -> ``zh`` and ``zh-TW`` / ``zh-HK`` / ``zh-MO`` / ``zh-Hant*``
  -> ``zh-tw``. A regional variant of a supported language counts as supported (``pt-PT``
  with ``pt``), except that traditional Chinese never falls back to ``zh``.
* :class:`BatchedTextEncoder` -- the ``encode`` every model encoder shares: validates the input,
  warns once per (encoder, language) when the model was not trained on the language, sorts the
  texts by length so each batch holds texts of similar length (less padding), encodes batch by
  batch behind an optional tqdm bar, restores the caller's order and validates the result with
  :func:`~backretrieval.encoders.base.check_embeddings`. The model is loaded once per encoder
  object, lazily, on first use: building an encoder is instant (reading the ``version`` of a
  model kept in files, ``st:DIR`` or ``cr5:DIR``, hashes the files once per process).

Maximum length. Every model embeds at most a documented length of text (``max_length``, e.g.
``"512 tokens"``): :meth:`BatchedTextEncoder.truncate` first cuts each text to ``max_chars``
characters -- for a token limit T that is ``T * CHARS_PER_TOKEN``, more characters than T tokens
span in any real text, so tokenisation never sees a multi-megabyte string -- and then, for
models with a token limit, to the longest prefix that fits it. The truncated text is what is
embedded, and what the embedding cache is keyed by: a text and its truncation have the same
vector and share one cache entry. Each ``encode`` call that cuts texts says so with one
:class:`TruncationWarning` ("use-m: 3 of 1,942 de texts longer than 8,192 characters were
truncated"). Batches hold at most ``batch_size`` texts and ``batch_chars`` characters (at least
one text), so the memory a batch needs is bounded whatever the input.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...core import DataError, EncoderError
from ..base import check_embeddings

_SIMPLIFIED = ("zh-cn", "zh-sg", "zh-my")
# Characters per token in the character cap that precedes tokenisation. The longest pieces of the
# bundled vocabularies have 16-18 characters (MiniLM's WordPiece: "telecommunications"); real
# text averages 1-6 characters per token, so T tokens never need more than 16 * T characters
# except for runs of whitespace or single "words" of dozens of characters (URLs, hashes).
CHARS_PER_TOKEN = 16  # part of the cache and record keys of the models it caps ("chars per token")
DEFAULT_BATCH_CHARS = 1 << 20  # characters per batch (at least one text)
_TRADITIONAL = ("zh-tw", "zh-hk", "zh-mo")
_NOT_LOADED = object()


# --------------------------------------------------------------------------- shared helpers
def lang_key(lang: str) -> str:
    """Normalised language code for look-ups (see the module docstring)."""
    k = str(lang).strip().lower().replace("_", "-")
    if k in _SIMPLIFIED or k == "zh-hans" or k.startswith("zh-hans-"):
        return "zh"
    if k in _TRADITIONAL or k == "zh-hant" or k.startswith("zh-hant-"):
        return "zh-tw"
    return k


def supports_language(languages: Iterable[str] | None, lang: str) -> bool:
    """Whether ``lang`` (any CLDR/ISO spelling) is covered by ``languages`` (None: any)."""
    if languages is None:
        return True
    keys = {lang_key(x) for x in languages}
    k = lang_key(lang)
    if k in keys:
        return True
    return k != "zh-tw" and k.split("-")[0] in keys


def require(module: str, dist: str) -> None:
    """Raise ImportError (turned into a pip hint by the registry) if ``module`` is missing."""
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"No module named {module!r} (distribution {dist})", name=dist)


def positive_int(value: Any, what: str, owner: str) -> int:
    """``value`` as an int >= 1, or an EncoderError naming ``owner`` and ``what``."""
    try:
        v = int(value)
        ok = not isinstance(value, bool) and v >= 1 and not (isinstance(value, float) and value != v)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise EncoderError(f"{owner}: {what} must be a positive integer, got {value!r}")
    return v


def as_texts(texts: Sequence[str], ids: Sequence[str] | None, what: str) -> list[str]:
    """``texts`` as a list of str; DataError naming the first non-string or an ids mismatch."""
    if isinstance(texts, str):
        raise DataError(f"{what}: expected a sequence of texts, got a single string")
    texts = list(texts)
    if ids is not None and len(ids) != len(texts):
        raise DataError(f"{what}: {len(texts)} texts but {len(ids)} ids")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            label = f"id {ids[i]!r}" if ids is not None else f"row {i}"
            raise DataError(f"{what}: text of {label} is {type(t).__name__}, not str")
    return texts


class TruncationWarning(UserWarning):
    """Texts longer than a model's maximum length were cut to it before embedding."""


def truncation_message(model: str, lang: str, n_cut: int, n: int, limit: str) -> str:
    """The one line that says how many texts of an encode call were truncated."""
    return f"{model}: {n_cut:,} of {n:,} {lang} texts longer than {limit} were truncated"


def warn_truncated(model: str, lang: str, n_cut: int, n: int, limit: str) -> None:
    """Issue the :class:`TruncationWarning` of one encode call (nothing when ``n_cut`` is 0)."""
    if n_cut:
        warnings.warn(truncation_message(model, lang, n_cut, n, limit), TruncationWarning, stacklevel=3)


def cut_chars(texts: Sequence[str], max_chars: int | None) -> list[str]:
    """Each text cut to its first ``max_chars`` characters (``None``: unchanged)."""
    if max_chars is None:
        return list(texts)
    return [t[:max_chars] if len(t) > max_chars else t for t in texts]


class BatchedTextEncoder:
    """Base of the built-in text models: subclasses set ``name``, ``version``, ``dim``,
    ``languages`` and implement ``_load_model()`` and ``_encode_batch(model, texts)``.

    Parallel engines: a subclass whose ``_encode_batch`` may run in several threads at once
    (the model releases the GIL and holds no per-call state) returns more than 1 from
    :meth:`_workers`; the length-sorted batches are then handed to that many threads, each
    taking the next batch when it finishes one, and :meth:`_parallel` wraps the whole run
    (e.g. to make each engine single-threaded). A batch's vectors do not depend on which
    thread encodes it."""

    name: str = ""
    version: str = ""
    dim: int | None = None
    languages: frozenset[str] | None = None
    cacheable: bool = True
    default_batch_size: int = 64
    max_chars: int | None = None  # character cap applied before anything else (None: none)
    batch_chars: int = DEFAULT_BATCH_CHARS
    libraries: tuple[str, ...] = ()  # distributions that compute the vectors (see versions)
    cut_per_token: bool = False  # max_chars is a token limit times CHARS_PER_TOKEN

    @property
    def versions(self) -> dict[str, str]:
        """What can change the vectors besides ``version`` (the model's files and options): the
        installed versions of :attr:`libraries`, ``"chars per token"`` (:data:`CHARS_PER_TOKEN`,
        the pre-cut rule) where the character cap comes from a token limit, and the settings of
        :meth:`_settings`. The embedding cache and the stored records are keyed by them."""
        from ...core import env

        out = env.versions_of(self.libraries)
        if self.cut_per_token:
            out["chars per token"] = str(CHARS_PER_TOKEN)
        out.update(self._settings())
        return out

    def _settings(self) -> dict[str, str]:
        """Settings that can change the vectors' bits (e.g. ``{"torch threads": "1"}``); default none."""
        return {}

    def __init__(self, *, batch_size: int | None = None, progress: bool = False) -> None:
        bs = self.default_batch_size if batch_size is None else batch_size
        self.batch_size = positive_int(bs, "batch_size", self.name)
        self.progress = bool(progress)
        self._model: Any = _NOT_LOADED
        self._warned: set[str] = set()

    # -- subclass hooks
    def _load_model(self) -> Any:
        raise NotImplementedError

    def _encode_batch(self, model: Any, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _workers(self) -> int:
        """Threads that encode batches at the same time (1: batches run one after another)."""
        return 1

    def _parallel(self) -> Any:
        """Context manager around a parallel run (default: nothing)."""
        import contextlib

        return contextlib.nullcontext()

    def _cut_tokens(self, texts: list[str]) -> list[str]:
        """Hook for models with a token limit: each (character-capped) text cut to the longest
        prefix the model takes whole. Must be idempotent. Default: unchanged."""
        return texts

    @property
    def max_length(self) -> str:
        """The documented maximum length, for messages: ``"8,192 characters"``, ``"512 tokens"``."""
        return "no limit" if self.max_chars is None else f"{self.max_chars:,} characters"

    def truncate(self, texts: Sequence[str]) -> tuple[list[str], int]:
        """The texts as the model embeds them: each cut to ``max_chars`` characters, then (for
        models with a token limit) to the longest prefix within it.

        Args:
            texts: the texts (strings).

        Returns:
            ``(truncated texts, number of texts that were cut)``; ``truncate`` of the result
            returns it unchanged.
        """
        texts = list(texts)
        out = self._cut_tokens(cut_chars(texts, self.max_chars))
        return out, sum(len(a) != len(b) for a, b in zip(texts, out))

    # -- shared behaviour
    def _get_model(self) -> Any:
        if self._model is _NOT_LOADED:
            self._model = self._load_model()
        return self._model

    def supports(self, lang: str) -> bool:
        """Whether the model was trained on ``lang`` (see :func:`supports_language`)."""
        return supports_language(self.languages, lang)

    def _check_language(self, lang: str) -> None:
        if not isinstance(lang, str) or not lang.strip():
            raise DataError(f"{self.name}: language must be a non-empty string, got {lang!r}")
        key = lang_key(lang)
        if key in self._warned or self.supports(lang):
            return
        self._warned.add(key)
        trained = ", ".join(sorted(self.languages or ()))
        warnings.warn(
            f"{self.name}: the model was not trained on language {lang!r} (trained on: {trained}); "
            "its embeddings for it may be poor",
            UserWarning,
            stacklevel=3,
        )

    def encode(
        self,
        texts: Sequence[str],
        lang: str,
        *,
        ids: Sequence[str] | None = None,
        batch_size: int | None = None,
        progress: bool | None = None,
    ) -> np.ndarray:
        """float32 (n, dim) embeddings of ``texts`` (in ``lang``), in the order given."""
        what = f"{self.name}/{lang}"
        texts = as_texts(texts, ids, what)
        self._check_language(lang)
        texts, n_cut = self.truncate(texts)
        warn_truncated(self.name, lang, n_cut, len(texts), self.max_length)
        bs = self.batch_size if batch_size is None else positive_int(batch_size, "batch_size", self.name)
        show = self.progress if progress is None else bool(progress)
        model = self._get_model()
        n = len(texts)
        if n == 0:
            if self.dim is None:  # unknown until a first text is encoded
                self.dim = int(np.asarray(self._encode_batch(model, [""])).shape[1])
            return check_embeddings(np.zeros((0, self.dim), np.float32), 0, what, ids)
        # stable sort by length: batches of similar length (less padding), deterministic
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=n)
        order = np.argsort(lengths, kind="stable")
        out: np.ndarray | None = None
        from tqdm.auto import tqdm

        batches = list(_batches(order, lengths, bs, self.batch_chars))
        workers = min(self._workers(), len(batches))
        with tqdm(total=n, desc=f"encode {what}", unit="text", disable=not show) as bar, _run_batches(
            self, model, texts, batches, workers
        ) as results:
            for rows, vec in zip(batches, results):
                vec = np.asarray(vec, dtype=np.float32)
                if vec.ndim != 2 or vec.shape[0] != len(rows):
                    raise EncoderError(f"{what}: model returned shape {vec.shape} for a batch of {len(rows)} texts")
                if self.dim is None:
                    self.dim = int(vec.shape[1])
                if vec.shape[1] != self.dim:
                    raise EncoderError(f"{what}: model returned {vec.shape[1]}-d vectors, expected {self.dim}")
                if out is None:
                    out = np.empty((n, self.dim), dtype=np.float32)
                out[rows] = vec
                bar.update(len(rows))
        return check_embeddings(out, n, what, ids)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.version}>"


@contextlib.contextmanager
def _run_batches(enc: BatchedTextEncoder, model: Any, texts: list[str], batches: list[np.ndarray], workers: int):
    """An iterator over the model's vectors for each batch, in order: one batch after another
    (``workers`` <= 1) or in ``workers`` threads inside ``enc._parallel()``."""
    if workers <= 1:
        yield (enc._encode_batch(model, [texts[i] for i in rows]) for rows in batches)
        return
    from concurrent.futures import ThreadPoolExecutor

    with enc._parallel(), ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{enc.name}-engine") as pool:
        futures = [pool.submit(enc._encode_batch, model, [texts[i] for i in rows]) for rows in batches]
        try:
            yield (f.result() for f in futures)
        finally:
            for f in futures:
                f.cancel()


def _batches(order: np.ndarray, lengths: np.ndarray, size: int, max_chars: int):
    """Consecutive slices of ``order`` with at most ``size`` rows and ``max_chars`` characters
    (a row longer than ``max_chars`` is a batch of its own)."""
    start, n = 0, len(order)
    while start < n:
        stop, chars = start + 1, int(lengths[order[start]])
        while stop < n and stop - start < size and chars + int(lengths[order[stop]]) <= max_chars:
            chars += int(lengths[order[stop]])
            stop += 1
        yield order[start:stop]
        start = stop
