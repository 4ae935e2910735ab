"""Encoder protocols, the encoder registry, and the checks every embedding passes.

A text encoder is anything with ``name``, ``version``, ``dim`` and
``encode(texts, lang, *, ids=None) -> float32 (n, d)``; an image encoder has
``encode_images(paths) -> float32 (n, d)``. No inputs give a ``(0, d)`` array. Each built-in
lives in its own module and registers a factory with :func:`register_text` /
:func:`register_image`, with an ``example`` hook that builds a tiny real instance for the
contract checks (:mod:`.checks`); a model is asked for by a spec string: ``"use-m"``,
``"precomputed:emb.parquet"``, ``"st:/path/to/model"``.
"""
from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ..core import EncoderError, first_bad_row


@runtime_checkable
class TextEncoder(Protocol):
    """What a text model offers: ``encode(texts, lang)`` -> one row per text, plus its name, version,
    dimension, languages and whether its vectors may be cached."""

    name: str  # the spec it was built from, e.g. "use-m"
    version: str  # changes whenever the vectors would change (package + options)
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
    name: str
    factory: Callable[..., Any]  # factory(arg: str | None, **options) -> encoder
    description: str
    kind: str  # "text" or "image"
    takes_arg: bool = False  # spec is "name:ARG"
    requires: str = ""  # pip package(s) needed
    # example(folder) -> Example: builds a tiny real instance in ``folder`` for the contract checks
    example: Callable[[Path], Example] | None = None


_TEXT: dict[str, EncoderInfo] = {}
_IMAGE: dict[str, EncoderInfo] = {}
# Every public module of this package (no leading "_") is imported on first use of the registry;
# an encoder module registers its models (a new encoder is one file), a helper module (base,
# cache, variants) registers nothing.


def register_text(info: EncoderInfo) -> EncoderInfo:
    """Add a text model to the registry under ``info.name`` and return ``info``."""
    _TEXT[info.name] = info
    return info


def register_image(info: EncoderInfo) -> EncoderInfo:
    """Add an image model to the registry under ``info.name`` and return ``info``."""
    _IMAGE[info.name] = info
    return info


_loaded = False


def _load() -> None:
    """Import every encoder module once (they import their heavy libraries lazily)."""
    global _loaded
    if _loaded:
        return
    import pkgutil

    from .. import encoders

    for mod in pkgutil.iter_modules(encoders.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__package__}.{mod.name}")
    _loaded = True


def list_text_encoders() -> list[EncoderInfo]:
    """Every registered text model, sorted by name (imports the encoder modules first)."""
    _load()
    return [_TEXT[k] for k in sorted(_TEXT)]


def list_image_encoders() -> list[EncoderInfo]:
    """Every registered image model, sorted by name (imports the encoder modules first)."""
    _load()
    return [_IMAGE[k] for k in sorted(_IMAGE)]


def _build(spec: str, table: dict[str, EncoderInfo], kind: str, options: Mapping[str, Any]) -> Any:
    name, _, arg = spec.partition(":")
    info = table.get(name)
    if info is None:
        raise EncoderError(f"unknown {kind} model {spec!r}; known: {', '.join(sorted(table))}")
    if info.takes_arg and not arg:
        raise EncoderError(f"{kind} model {name!r} needs an argument: {name}:PATH")
    if arg and not info.takes_arg:
        raise EncoderError(f"{kind} model {name!r} takes no argument (got {spec!r})")
    return build_encoder(info, arg or None, **options)


def build_encoder(info: EncoderInfo, arg: str | None = None, **options: Any) -> Any:
    """The encoder ``info.factory(arg, **options)`` builds, named by its spec (``NAME`` or
    ``NAME:ARG``); a missing package becomes an EncoderError with its pip command.

    Raises:
        EncoderError: a missing package, or whatever the factory refuses.
    """
    try:
        enc = info.factory(arg, **options)
    except ImportError as e:
        raise EncoderError(
            f"{info.kind} model {info.name!r} needs {info.requires or e.name}: pip install {info.requires or e.name} ({e})"
        ) from e
    enc.name = f"{info.name}:{arg}" if arg else info.name
    return enc


def get_text_encoder(spec: str, **options: Any) -> TextEncoder:
    """Build a text encoder from its spec, e.g. ``"e5-small"``, ``"precomputed:emb.parquet"`` or a
    variant such as ``"use-m@trunc=64@noise=0.5"`` (see :mod:`.variants`)."""
    return _get(spec, "text", options)


def get_image_encoder(spec: str, **options: Any) -> ImageEncoder:
    """Build an image encoder from its spec, e.g. ``"efficientnet-lite0"`` or ``"color-hist"``; a
    deliberately weakened g as ``IMAGE_MODEL@noise=S`` (see :mod:`.variants`)."""
    return _get(spec, "image", options)


def _get(spec: str, kind: str, options: dict[str, Any]) -> Any:
    """The encoder of ``spec`` from the ``kind`` ("text" / "image") registry; ``BASE@OP=VALUE...``
    wraps the (cached) encoder of ``BASE`` in the variant."""
    if "@" in spec:
        from .cache import CachedImageEncoder, CachedTextEncoder
        from .variants import ImageVariantEncoder, VariantEncoder, parse_variant

        base, ops = parse_variant(spec)
        cached, variant = (CachedTextEncoder, VariantEncoder) if kind == "text" else (CachedImageEncoder, ImageVariantEncoder)
        enc = variant(cached(_get(base, kind, options)), ops)
        enc.name = spec
        return enc
    _load()
    return _build(spec, _TEXT if kind == "text" else _IMAGE, kind, options)


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
    """Installed version of a distribution, for cache keys."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"
