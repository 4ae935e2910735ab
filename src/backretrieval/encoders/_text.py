"""Machinery shared by the built-in text encoders.

* :func:`lang_key` -- normalises a CLDR/ISO language code for look-ups: lowercase, ``_`` -> ``-``,
  ``zh-CN`` / ``zh-SG`` / ``zh-Hans*`` -> ``zh`` and ``zh-TW`` / ``zh-HK`` / ``zh-MO`` / ``zh-Hant*``
  -> ``zh-tw``. A regional variant of a supported language counts as supported (``pt-PT``
  with ``pt``), except that traditional Chinese never falls back to ``zh``.
* :class:`BatchedTextEncoder` -- the ``encode`` every model encoder shares: validates the input,
  warns once per (encoder, language) when the model was not trained on the language, sorts the
  texts by length so each batch holds texts of similar length (less padding), encodes batch by
  batch behind an optional tqdm bar, restores the caller's order and validates the result with
  :func:`~backretrieval.encoders.base.check_embeddings`. The model is loaded once per encoder
  object, lazily, on first use: building an encoder (and reading its ``version``) is instant.
"""
from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..core import DataError, EncoderError
from .base import check_embeddings

_SIMPLIFIED = ("zh-cn", "zh-sg", "zh-my")
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
    try:
        v = int(value)
        ok = not isinstance(value, bool) and v >= 1 and not (isinstance(value, float) and value != v)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise EncoderError(f"{owner}: {what} must be a positive integer, got {value!r}")
    return v


def check_options(model: str, options: Mapping[str, Any], known: Sequence[str]) -> None:
    unknown = set(options) - set(known)
    if unknown:
        raise EncoderError(
            f"text model {model!r}: unknown option(s) {', '.join(sorted(unknown))} (known: {', '.join(known)})"
        )


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


def default_threads() -> int:
    """CPU cores this process may run on (the affinity mask, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class BatchedTextEncoder:
    """Base of the built-in text encoders: subclasses set ``name``, ``version``, ``dim``,
    ``languages`` and implement ``_load_model()`` and ``_encode_batch(model, texts)``."""

    name: str = ""
    version: str = ""
    dim: int | None = None
    languages: frozenset[str] | None = None
    cacheable: bool = True
    default_batch_size: int = 64

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

    # -- shared behaviour
    def _get_model(self) -> Any:
        if self._model is _NOT_LOADED:
            self._model = self._load_model()
        return self._model

    def supports(self, lang: str) -> bool:
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
        bs = self.batch_size if batch_size is None else positive_int(batch_size, "batch_size", self.name)
        show = self.progress if progress is None else bool(progress)
        model = self._get_model()
        n = len(texts)
        if n == 0:
            if self.dim is None:  # unknown until a first text is encoded
                self.dim = int(np.asarray(self._encode_batch(model, [""])).shape[1])
            return check_embeddings(np.zeros((0, self.dim), np.float32), 0, what, ids)
        # stable sort by length: batches of similar length (less padding), deterministic
        order = np.argsort(np.fromiter(map(len, texts), dtype=np.int64, count=n), kind="stable")
        out: np.ndarray | None = None
        from tqdm.auto import tqdm

        with tqdm(total=n, desc=f"encode {what}", unit="text", disable=not show) as bar:
            for start in range(0, n, bs):
                rows = order[start : start + bs]
                vec = np.asarray(self._encode_batch(model, [texts[i] for i in rows]), dtype=np.float32)
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
