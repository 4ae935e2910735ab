"""Encoder protocols, the description of a registered model, and the checks every embedding passes.

A text model is anything with ``name``, ``version``, ``dim`` and
``encode(texts, lang, *, ids=None) -> float32 (n, d)``; an image model has
``encode_images(paths) -> float32 (n, d)``. No inputs give a ``(0, d)`` array. Each built-in
lives in its own module and declares its class or factory with
:func:`~backretrieval.encoders.registry.register_text` / :func:`~backretrieval.encoders.registry.register_image`,
with an ``example`` hook that builds a tiny real instance for the contract checks (:mod:`.checks`);
a model is asked for by a spec string: ``"use-m"``, ``"precomputed:emb.parquet"``,
``"st:/path/to/model"``, ``"random?seed=3"``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ..core import EncoderError, first_bad_row
from .options import Option


@runtime_checkable
class TextEncoder(Protocol):
    """What a text model offers: ``encode(texts, lang)`` -> one row per text, plus its name, version,
    dimension, languages and whether its vectors may be cached."""

    name: str  # the spec it was built from, e.g. "use-m"
    version: str  # changes whenever the vectors would change (package + options)
    # optional: versions: {library or setting: version} that can change the vectors (see encoder_versions)
    dim: int | None  # None until known (e.g. TF-IDF before fit)
    languages: frozenset[str] | None  # languages the model was trained on; None: any
    cacheable: bool  # False when vectors depend on more than (text, lang)
    # Optional: ``unit_norm = True`` promises that every row has L2 norm 1 (the encoder ends with
    # core.normalize_rows or an equivalent); absent or False promises nothing.

    def encode(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None) -> np.ndarray:
        """float32 (n, dim) vectors of ``texts``, all in language ``lang`` (``ids``: the rows' ids, for
        models that use them)."""


@runtime_checkable
class ImageEncoder(Protocol):
    """What an image model offers: ``encode_images(paths)`` -> one row per image, plus its name, version and
    dimension."""

    name: str
    version: str
    dim: int | None

    def encode_images(self, paths: Sequence[str]) -> np.ndarray:
        """float32 (n, dim) features of the image files ``paths``."""


# Texts the contract checks encode when a model's example names none: short English texts of
# different lengths, none empty.
EXAMPLE_TEXTS = (
    "grinning face with big eyes: face, mouth, open, smile",
    "dog",
    "red heart",
    "man technologist: medium-dark skin tone, coder, developer, inventor, software",
    "face with tears of joy: face, joy, laugh, tear",
    "cat face",
)


@dataclasses.dataclass(frozen=True)
class Example:
    """A tiny real instance of a registered model, for the contract checks
    (:mod:`backretrieval.encoders.checks`). An :class:`EncoderInfo`'s ``example`` hook writes what
    the instance needs (a file, a model directory) into the folder it is given and returns this.

    Attributes:
        arg: the ARG of a ``NAME:ARG`` spec (a file or directory the hook wrote); None for a
            model that takes none.
        options: the options the instance is built with.
        other: ``(arg, options)`` of a second instance whose vectors differ (another file, seed,
            option): its ``version`` must differ too. None for a model with fixed weights and no
            option that changes its vectors.
        texts: what the checks encode (image models: image files the hook wrote); None: the
            contract's own (:data:`EXAMPLE_TEXTS`, or a few images the checks write).
        ids: the ids of ``texts`` (default ``x0``, ``x1``, ...).
        lang: the language of ``texts``.
        shows_progress: False for a model that does no per-item work a bar could show (it reads
            stored vectors).
    """

    arg: str | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    other: tuple[str | None, Mapping[str, Any]] | None = None
    texts: tuple[str, ...] | None = None
    ids: tuple[str, ...] | None = None
    lang: str = "en"
    shows_progress: bool = True


@dataclasses.dataclass(frozen=True)
class EncoderInfo:
    """A registered model: what the registry, the model list, the docs table and the contract checks
    know of it. :func:`~backretrieval.encoders.registry.register_text` /
    :func:`~backretrieval.encoders.registry.register_image` make one from a declaration (the kind from
    which of the two is called, ``takes_arg`` and ``options`` from the factory's signature);
    :func:`~backretrieval.encoders.registry.encoder_info` makes one without registering it.

    Attributes:
        name: the name specs use (``NAME``, ``NAME:ARG``, ``NAME?KEY=VALUE``).
        factory: the class or function that builds the encoder: ``factory(arg, **options)`` when
            ``takes_arg``, ``factory(**options)`` otherwise.
        description: one line for ``backretrieval models`` and the docs table.
        kind: ``"text"`` or ``"image"``.
        takes_arg: whether the spec is ``NAME:ARG`` (a file, a directory, a hub name).
        requires: the pip package(s) the model needs, for the missing-package message.
        example: ``example(folder) -> Example``: builds a tiny real instance in ``folder`` for the
            contract checks (:mod:`backretrieval.encoders.checks`); None fails them.
        options: the keyword options the factory takes, with their types and defaults; None for a
            factory that takes any keyword (``**options``), whose options are not checked.
    """

    name: str
    factory: Callable[..., Any]
    description: str
    kind: str
    takes_arg: bool = False
    requires: str = ""
    example: Callable[[Path], Example] | None = None
    options: tuple[Option, ...] | None = ()

    def options_text(self) -> str:
        """The options as the model list and the docs table write them: ``seed: int = 0, dim: int = 512``
        (``any`` for a factory that takes any keyword, empty for none)."""
        return "any" if self.options is None else ", ".join(o.describe() for o in self.options)


def check_embeddings(x: np.ndarray, n: int, what: str, ids: Sequence[str] | None = None) -> np.ndarray:
    """Return ``x`` as C-contiguous float32 (n, d) or raise naming the first bad row.

    Rejects a wrong shape, NaN/inf values and all-zero rows (cosine similarity is undefined
    for them).
    """
    x = np.ascontiguousarray(np.asarray(x), dtype=np.float32)
    if x.ndim != 2 or x.shape[0] != n:
        raise EncoderError(f"{what}: expected an array of {n} rows, got shape {x.shape}")
    bad = first_bad_row(x)
    if bad is not None:
        kind, i = bad
        label = f"id {ids[i]!r}" if ids is not None else f"row {i}"
        if kind == "nonfinite":
            raise EncoderError(f"{what}: NaN or inf in the embedding of {label}")
        raise EncoderError(f"{what}: all-zero embedding for {label}")
    return x


def package_version(dist: str) -> str:
    """Installed version of a distribution, for cache keys (``"unknown"`` when not installed)."""
    from ..core import env

    return env.version_of(dist) or "unknown"


def encoder_versions(enc: Any) -> dict[str, str]:
    """The versions that can change ``enc``'s vectors besides its files and options (which its
    ``version`` names): its ``versions`` mapping -- libraries that compute the vectors
    (``"numpy": "2.1.3"``) and settings such as ``"torch threads"`` -- as strings; empty for an
    encoder without one. They key the embedding cache and the stored records beside ``version``.

    Args:
        enc: any text or image model (a cache or variant wrapper gives its base model's).

    Returns:
        ``{name: version}``.
    """
    v = getattr(enc, "versions", None)
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, Mapping) else {}
