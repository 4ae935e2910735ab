"""A model given as a Python object: anything with a sentence-transformers-style
``encode(list[str], ...) -> array`` (a ``SentenceTransformer``, an MTEB-style encoder, a user's
class) or a plain function ``f(list[str]) -> array``, named by the user.

How it is called and its identity (the cache key) are those of every model object
(:mod:`backretrieval.encoders.python_objects`): a torch module (a ``SentenceTransformer`` is one)
is identified by a hash of its weights and buffers and the device they are on (the object runs
where the user put it; ``--device`` and ``$BACKRETRIEVAL_DEVICE`` do not move it); any other
object is cached on disk only when the user gives a ``version`` string; without one its vectors
live only for the run.

In the evaluation grid (:mod:`backretrieval.analysis.models`) the same identity keys the stored
records: a run-only model's records are recomputed in every run and never stored for resuming.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...core import EncoderError, UnsupportedLanguageError, numeric_rows
from .batching import supports_language
from ..base import check_embeddings
from ..python_objects import encode_call, object_identity


class PythonTextModel:
    """A user's Python model as a text model of the grid.

    Args:
        name: the name records and tables use.
        model: an object with ``encode(list[str], ...)`` or a callable ``f(list[str])``.
        version: a stable identity for on-disk caching (see the module doc); a torch module gets
            one from its weights when this is None.
        languages: the languages it embeds (None: any); asked for another, :meth:`encode` raises
            ``UnsupportedLanguageError`` and the grid skips the pairs with that language, saying so.
        batch_size: texts per call.
    """

    wants_extra = ()

    def __init__(self, name: str, model: Any, *, version: str | None = None, languages: Sequence[str] | None = None,
                 batch_size: int = 256):
        if not isinstance(name, str) or not name.strip():
            raise EncoderError(f"a model object needs a non-empty name, got {name!r}")
        if batch_size < 1:
            raise EncoderError(f"{name}: batch_size must be positive, got {batch_size}")
        self.name = name
        self.model = model
        self._encode = encode_call(model, "a model object needs an encode(list[str]) method or must be callable")
        self.languages = tuple(languages) if languages else None
        self.batch_size = int(batch_size)
        self.cacheable, self.version = object_identity(model, version)
        self.dim: int | None = None

    @property
    def versions(self) -> dict[str, str]:
        """The model object's own ``versions`` mapping (libraries or settings that compute its
        vectors, keys of the cache and records) when it has one; empty otherwise."""
        from ..base import encoder_versions

        return encoder_versions(self.model)

    @property
    def bytes_per_item(self) -> int | None:
        """The model object's own ``bytes_per_item`` (the bytes a vector store holds per item, for a
        model whose vectors are not stored as float32) when it declares a positive integer; else None."""
        v = getattr(self.model, "bytes_per_item", None)
        return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    def encode(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None) -> np.ndarray:
        """float32 (n, dim) embeddings of ``texts`` (in ``lang``), in order, checked row by row.

        Raises:
            UnsupportedLanguageError: ``lang`` is not one of ``languages``.
            EncoderError: the user's model failed or returned a bad array (naming the model).
        """
        if self.languages is not None and not supports_language(self.languages, lang):
            raise UnsupportedLanguageError(f"model {self.name!r} embeds only {', '.join(self.languages)}, not {lang!r}")
        texts = list(texts)
        out = []
        for s in range(0, len(texts), self.batch_size):
            chunk = texts[s : s + self.batch_size]
            try:
                vecs = self._encode(chunk)
            except Exception as e:  # the user's code: say whose it is
                raise EncoderError(f"model {self.name!r} failed to encode {len(chunk)} {lang} texts: {type(e).__name__}: {e}") from e
            if hasattr(vecs, "detach"):  # a torch tensor
                vecs = vecs.detach().cpu().numpy()
            arr = numeric_rows(vecs, f"model {self.name!r}")
            if arr.ndim != 2 or arr.shape[0] != len(chunk):
                raise EncoderError(
                    f"model {self.name!r} returned shape {arr.shape} for {len(chunk)} texts; expected ({len(chunk)}, dim)"
                )
            if self.dim is None:
                self.dim = int(arr.shape[1])
            elif arr.shape[1] != self.dim:
                raise EncoderError(f"model {self.name!r} returned {arr.shape[1]} dimensions, earlier {self.dim}")
            out.append(arr)
        if not out:
            return np.empty((0, self.dim or 0), dtype=np.float32)
        return check_embeddings(np.concatenate(out), len(texts), f"{self.name} ({lang})", ids)
