"""The encoder registry: registration, the list of models, and a spec string -> an encoder.

Each built-in model lives in its own module of :mod:`.text`, :mod:`.image` or :mod:`.trained` and
registers a factory with :func:`register_text` / :func:`register_image`; a model is asked for by
a spec string: ``"use-m"``, ``"precomputed:emb.parquet"``, ``"st:/path/to/model"``.
"""
from __future__ import annotations

import importlib
from typing import Any, Mapping

from ..core import EncoderError
from ..core.hints import did_you_mean, install_hint
from .base import EncoderInfo, ImageEncoder, TextEncoder

_TEXT: dict[str, EncoderInfo] = {}
_IMAGE: dict[str, EncoderInfo] = {}
PLUGIN_PACKAGES = ("text", "image", "trained")
# Every module of these sub-packages is imported on first use of the registry; a model module
# registers its models (a new encoder is one file), a helper module (image.batching,
# trained.modeldir, ...) registers nothing.


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

    for kind in PLUGIN_PACKAGES:
        package = importlib.import_module(f"{__package__}.{kind}")
        for mod in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{mod.name}")
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
        raise EncoderError(f"unknown {kind} model {spec!r}{did_you_mean(name, table)}; known: {', '.join(sorted(table))}")
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
            f"{info.kind} model {info.name!r} needs {info.requires or e.name}: {install_hint(info.requires or e.name)} ({e})"
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
