"""The encoder registry: declarations, the list of models, and a spec string -> an encoder.

Each built-in model lives in its own module of :mod:`.text`, :mod:`.image` or :mod:`.trained` and
declares itself once, on its class or factory::

    @register_text("random", description="seeded random unit vectors", example=...)
    class RandomTextEncoder:
        def __init__(self, *, seed: int = 0, dim: int = 512) -> None: ...

``register_text`` / ``register_image`` say the kind; the signature says the rest (:mod:`.options`):
one positional parameter is the ``ARG`` of ``NAME:ARG``, the keyword-only parameters are the
options, their annotations the types. A model is asked for by a spec string: ``"use-m"``,
``"precomputed:emb.parquet"``, ``"random?seed=3&dim=64"``, ``"use-m@trunc=64"``.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from ..core import EncoderError
from ..core.hints import did_you_mean, install_hint
from .base import EncoderInfo, Example, ImageEncoder, TextEncoder
from .options import read_signature, resolve_options, split_spec

F = TypeVar("F", bound=Callable[..., Any])
_TEXT: dict[str, EncoderInfo] = {}
_IMAGE: dict[str, EncoderInfo] = {}
PLUGIN_PACKAGES = ("text", "image", "trained")
# Every module of these sub-packages is imported on first use of the registry; a model module
# registers its models (a new encoder is one file), a helper module (image.batching,
# trained.modeldir, ...) registers nothing.


def encoder_info(
    kind: str,
    name: str,
    factory: Callable[..., Any],
    *,
    description: str,
    requires: str = "",
    example: Callable[[Path], Example] | None = None,
) -> EncoderInfo:
    """The :class:`EncoderInfo` of a model, its ``ARG`` and options read from ``factory``'s signature,
    without registering it (:func:`register_text` registers; the contract checks take either).

    Args:
        kind: ``"text"`` or ``"image"``.
        name: the name specs use (``NAME``, ``NAME:ARG``).
        factory: the class or function that builds the model: at most one positional parameter
            (the ``ARG``), options keyword-only and annotated.
        description: one line for ``backretrieval models`` and the docs table.
        requires: the pip package(s) it needs, for the missing-package message.
        example: ``example(folder) -> Example``, a tiny real instance for the contract checks.

    Returns:
        The description of the model.

    Raises:
        EncoderError: an unknown kind, or a signature a model cannot have (see :func:`.options.read_signature`).
    """
    if kind not in ("text", "image"):
        raise EncoderError(f"model {name!r}: kind must be 'text' or 'image', got {kind!r}")
    takes_arg, options = read_signature(kind, name, factory)
    return EncoderInfo(
        name=name, factory=factory, description=description, kind=kind, takes_arg=takes_arg, requires=requires,
        example=example, options=options,
    )


def _register(kind: str, name: str, description: str, requires: str, example: Any) -> Callable[[F], F]:
    def declare(factory: F) -> F:
        info = encoder_info(kind, name, factory, description=description, requires=requires, example=example)
        (_TEXT if kind == "text" else _IMAGE)[name] = info
        return factory

    return declare


def register_text(
    name: str, *, description: str, requires: str = "", example: Callable[[Path], Example] | None = None
) -> Callable[[F], F]:
    """Declare a text model: a decorator for its class or factory (returned unchanged).

    Args:
        name: the name specs use.
        description: one line for the model list and the docs table.
        requires: the pip package(s) it needs.
        example: ``example(folder) -> Example`` for the contract checks.

    Returns:
        The decorator; ``register_text(name, ...)(factory)`` registers a factory made elsewhere.
    """
    return _register("text", name, description, requires, example)


def register_image(
    name: str, *, description: str, requires: str = "", example: Callable[[Path], Example] | None = None
) -> Callable[[F], F]:
    """Declare an image model: a decorator for its class or factory (see :func:`register_text`).

    Args:
        name: the name specs use.
        description: one line for the model list and the docs table.
        requires: the pip package(s) it needs.
        example: ``example(folder) -> Example`` for the contract checks.

    Returns:
        The decorator.
    """
    return _register("image", name, description, requires, example)


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
    head, written = split_spec(spec)
    name, _, arg = head.partition(":")
    info = table.get(name)
    if info is None:
        raise EncoderError(f"unknown {kind} model {spec!r}{did_you_mean(name, table)}; known: {', '.join(sorted(table))}")
    return _make(info, arg or None, written, options)


def build_encoder(info: EncoderInfo, arg: str | None = None, /, **options: Any) -> Any:
    """The encoder ``info`` describes, built with ``arg`` and keyword ``options`` after the one
    option check (:func:`.options.resolve_options`), named by its spec; a missing package
    becomes an EncoderError with its pip command.

    Args:
        info: a registered (or :func:`encoder_info`) model.
        arg: the ``ARG`` of ``NAME:ARG`` (None for a model that takes none).
        **options: the model's options.

    Returns:
        The encoder.

    Raises:
        EncoderError: a missing or unexpected ``arg``, a bad option, a missing package, or whatever
            the factory refuses.
    """
    return _make(info, arg, [], options)


def _make(info: EncoderInfo, arg: str | None, written: list[tuple[str, str]], options: Mapping[str, Any]) -> Any:
    if info.takes_arg and not arg:
        raise EncoderError(f"{info.kind} model {info.name!r} needs an argument: {info.name}:PATH")
    if arg and not info.takes_arg:
        raise EncoderError(f"{info.kind} model {info.name!r} takes no argument (got {info.name}:{arg})")
    head = f"{info.name}:{arg}" if arg else info.name
    kwargs, label = resolve_options(info.kind, info.name, info.options, head, written, options)
    try:
        enc = info.factory(arg, **kwargs) if info.takes_arg else info.factory(**kwargs)
    except ImportError as e:
        raise EncoderError(
            f"{info.kind} model {info.name!r} needs {info.requires or e.name}: {install_hint(info.requires or e.name)} ({e})"
        ) from e
    enc.name = label
    return enc


def get_text_encoder(spec: str, **options: Any) -> TextEncoder:
    """Build a text model from its spec, e.g. ``"e5-small"``, ``"precomputed:emb.parquet"``,
    ``"random?seed=3"`` or a variant such as ``"use-m@trunc=64@noise=0.5"`` (see :mod:`.variants`);
    keyword ``options`` are the spec's options given in Python (``get_text_encoder("random", seed=3)``)."""
    return _get(spec, "text", options)


def get_cached_text_encoder(spec: str, options: Mapping[str, Any] | None = None, *, progress: bool = False) -> Any:
    """The text model of ``spec`` behind the embedding cache: what the layers above use where they
    embed texts with a model named by its spec (a training base, a study's model).

    Args:
        spec: the text model's spec.
        options: the model's keyword options (:func:`get_text_encoder`).
        progress: show the cache's progress bar while it encodes.

    Returns:
        A :class:`~backretrieval.encoders.cache.CachedTextEncoder` of the model.
    """
    from .cache import CachedTextEncoder

    return CachedTextEncoder(get_text_encoder(spec, **dict(options or {})), progress=progress)


def get_image_encoder(spec: str, **options: Any) -> ImageEncoder:
    """Build an image model from its spec, e.g. ``"efficientnet-lite0"``, ``"color-hist?batch_size=16"``;
    a deliberately weakened g as ``IMAGE_MODEL@noise=S`` (see :mod:`.variants`); keyword ``options`` as
    for :func:`get_text_encoder`."""
    return _get(spec, "image", options)


def _get(spec: str, kind: str, options: dict[str, Any]) -> Any:
    """The encoder of ``spec`` from the ``kind`` ("text" / "image") registry; ``BASE@OP=VALUE...``
    wraps the (cached) encoder of ``BASE`` in the variant."""
    from .variants import split_variants

    if split_variants(spec)[1]:
        from .cache import CachedImageEncoder, CachedTextEncoder
        from .variants import ImageVariantEncoder, VariantEncoder, parse_variant

        base, ops = parse_variant(spec)
        cached, variant = (CachedTextEncoder, VariantEncoder) if kind == "text" else (CachedImageEncoder, ImageVariantEncoder)
        inner = _get(base, kind, options)
        enc = variant(cached(inner), ops)
        enc.name = inner.name + spec[len(base):]
        return enc
    _load()
    return _build(spec, _TEXT if kind == "text" else _IMAGE, kind, options)
