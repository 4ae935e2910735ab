"""Model options: read from a model's signature, written in a spec string, checked once for all models.

A registered model's options are the keyword-only parameters of the class or factory it registers
(:func:`~backretrieval.encoders.registry.register_text`), each with its annotation as its type; the
one positional parameter, where there is one, is the ``ARG`` of a ``NAME:ARG`` spec. A spec string
gives options URL-query style after ``NAME[:ARG]`` and before any variant::

    random?seed=3&dim=64
    st:/models/mini?normalize=false@trunc=64

Python keyword arguments are the same options (``get_text_encoder("random", seed=3)``). Text values
are converted by the option's type (``int``, ``float``, ``bool``, ``str``, ``X | None``); a Python
value is checked against it. An unknown option, a value of the wrong type and an option given twice
are one :class:`~backretrieval.core.EncoderError` naming the model and the options it takes.
Secrets are never options: an option called ``api_key``, ``key`` or ``token`` is refused, at
registration and when given.
"""
from __future__ import annotations

import dataclasses
import inspect
import numbers
import os
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..core import EncoderError

SECRET_OPTIONS = ("api_key", "key", "token")
# Options that change how the vectors are computed (speed, memory, a progress bar), never which
# vectors: given as Python keyword arguments they stay out of the model's label.
RUN_SETTINGS = frozenset({"batch_size", "progress", "threads", "device", "backend"})
# Options that never change a model's vectors: how it runs (RUN_SETTINGS), where its files or its
# endpoint are found, how requests are batched, retried, paid and keyed. A model's short label in
# the grid (backretrieval.analysis.models.derive_label) leaves them out.
NOT_VECTOR_OPTIONS = RUN_SETTINGS | frozenset({
    "cache_dir", "base_url", "api_key_env", "batch_tokens", "concurrency", "price_per_1m_tokens", "max_retries",
    "timeout", "max_wait", "encoding_format", "trust_remote_code", "tokenizer",
})
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")
_NONE = ("none", "null")


@dataclasses.dataclass(frozen=True)
class Option:
    """One keyword option of a registered model, read from its class's or factory's signature.

    Attributes:
        name: the keyword.
        type: the resolved annotation (``int``, ``float``, ``bool``, ``str``, ``int | None``, any
            other type); ``Any`` where the parameter has none.
        default: the default value (``inspect.Parameter.empty`` for a required option).
    """

    name: str
    type: Any
    default: Any

    def describe(self) -> str:
        """``name: type = default``, as the error messages and the docs table write it."""
        text = f"{self.name}: {type_name(self.type)}"
        return text if self.default is inspect.Parameter.empty else f"{text} = {self.default!r}"


def type_name(tp: Any) -> str:
    """A readable name of an option type: ``int``, ``int | None``, ``Mapping``."""
    if tp is Any:
        return "any"
    args = _union_args(tp)
    if args is not None:
        return " | ".join("None" if a is type(None) else type_name(a) for a in args)
    origin = typing.get_origin(tp)
    return getattr(origin or tp, "__name__", str(tp))


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return None


def _resolve(annotation: Any, owner: Callable[..., Any]) -> Any:
    """The annotation of a parameter of ``owner`` as an object (``from __future__ import annotations``
    makes it a string); ``Any`` when it is absent or cannot be evaluated."""
    if annotation is inspect.Parameter.empty:
        return Any
    if not isinstance(annotation, str):
        return annotation
    target = inspect.unwrap(getattr(owner, "func", owner))
    target = getattr(target, "__init__", target) if inspect.isclass(target) else target
    try:
        return eval(annotation, getattr(target, "__globals__", {}))  # noqa: S307 -- the plugin's own annotation
    except Exception:  # noqa: BLE001 -- a name imported only for type checkers: the option is not type-checked
        return Any


def read_signature(kind: str, name: str, factory: Callable[..., Any]) -> tuple[bool, tuple[Option, ...] | None]:
    """What a registered class or factory takes: whether it needs an ``ARG`` and its options.

    Args:
        kind: ``"text"`` or ``"image"``, for messages.
        name: the registered name, for messages.
        factory: the class or function that builds the model.

    Returns:
        ``(takes_arg, options)``: ``takes_arg`` is True when the callable has one positional
        parameter (the ``ARG``); ``options`` its keyword-only parameters, or None when it also
        takes ``**kwargs`` (any option is passed on unchecked).

    Raises:
        EncoderError: more than one positional parameter, a positional parameter with a default, or
            an option called ``api_key``, ``key`` or ``token``.
    """
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError) as e:
        raise EncoderError(f"{kind} model {name!r}: cannot read the signature of {factory!r} ({e})") from None
    positional, options, any_keyword = [], [], False
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional.append(p)
        elif p.kind is p.KEYWORD_ONLY:
            options.append(Option(p.name, _resolve(p.annotation, factory), p.default))
        elif p.kind is p.VAR_KEYWORD:
            any_keyword = True
    if len(positional) > 1 or any(p.default is not p.empty for p in positional):
        raise EncoderError(
            f"{kind} model {name!r}: its factory takes ({', '.join(p.name for p in positional)}) by position; a model "
            "takes at most one positional parameter, without a default (the ARG of NAME:ARG), and its options "
            "keyword-only (after a bare *)"
        )
    secret = [o.name for o in options if o.name in SECRET_OPTIONS]
    if secret:
        raise EncoderError(f"{kind} model {name!r}: {secret[0]!r} cannot be an option; {secret_advice()}")
    return bool(positional), None if any_keyword else tuple(options)


def secret_advice() -> str:
    """Where a secret goes instead of an option."""
    return (
        "secrets are never options (they would be written into labels and records): put it in an environment "
        "variable (OPENAI_API_KEY for OpenAI models, or the variable the model's api_key_env option names)"
    )


def split_spec(spec: str) -> tuple[str, list[tuple[str, str]]]:
    """Split ``NAME[:ARG]?k=v&k=v`` into ``NAME[:ARG]`` and its ``(key, text)`` pairs in order.

    Args:
        spec: a model spec without variants (``@...``).

    Returns:
        The spec without its options, and the options as text.

    Raises:
        EncoderError: a piece without ``=``, an empty key, or a key given twice.
    """
    head, sep, query = spec.partition("?")
    if not sep:
        return spec, []
    pairs: list[tuple[str, str]] = []
    for piece in query.split("&"):
        key, eq, value = piece.partition("=")
        if not eq or not key:
            raise EncoderError(f"bad option {piece!r} in {spec!r}: write options as NAME?KEY=VALUE&KEY=VALUE")
        if key in (k for k, _ in pairs):
            raise EncoderError(f"option {key!r} is given twice in {spec!r}")
        pairs.append((key, value))
    return head, pairs


def vector_spec(spec: str) -> str:
    """``spec`` without the options that never change its vectors (:data:`NOT_VECTOR_OPTIONS`):
    the name the embedding cache files a model's vectors under, so the same model run with another
    batch size, timeout or retry count finds the vectors it already has (nothing re-sent to a paid
    API). A spec whose options cannot be read is returned as it is.

    Args:
        spec: a model's name (a spec string, options in the order written).

    Returns:
        The spec with the vector-changing options only, in their order.
    """
    try:
        head, written = split_spec(spec)
    except EncoderError:
        return spec
    kept = [f"{k}={v}" for k, v in written if k not in NOT_VECTOR_OPTIONS]
    return head + ("?" + "&".join(kept) if kept else "")


def from_text(text: str, tp: Any) -> Any:
    """The value of ``text`` (as written in a spec) for an option of type ``tp``.

    Args:
        text: the value as written.
        tp: the option's type.

    Returns:
        The converted value.

    Raises:
        ValueError: ``text`` is not a value of ``tp``, or ``tp`` cannot be written as text.
    """
    args = _union_args(tp)
    if args is not None:
        if type(None) in args and text.lower() in _NONE:
            return None
        for a in args:
            if a is not type(None):
                try:
                    return from_text(text, a)
                except ValueError:
                    continue
        raise ValueError(text)
    if tp is Any or tp is str or tp in (os.PathLike, typing.Any):
        return text
    if tp is bool:
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise ValueError(text)
    if tp is int:
        return int(text)
    if tp is float:
        return float(text)
    raise ValueError(f"a {type_name(tp)} cannot be written in a spec string")


def matches(value: Any, tp: Any) -> bool:
    """Whether a Python ``value`` is of option type ``tp`` (an int is a float; a bool is no number).

    Args:
        value: the value given.
        tp: the option's type.

    Returns:
        True when it fits.
    """
    if tp is Any:
        return True
    args = _union_args(tp)
    if args is not None:
        return any(matches(value, a) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, (bool, np.bool_))
    if tp is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    origin = typing.get_origin(tp) or tp
    try:
        return isinstance(value, origin)
    except TypeError:  # a typing construct isinstance cannot test (Literal, a TypeVar): not checked
        return True


def as_text(value: Any) -> str:
    """A value as a spec string writes it (``true``, ``none``, ``256``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


def writable(tp: Any) -> bool:
    """Whether a value of option type ``tp`` can be written in a spec string."""
    args = _union_args(tp)
    if args is not None:
        return all(a is type(None) or writable(a) for a in args)
    return tp in (int, float, bool, str)


def resolve_options(
    kind: str,
    name: str,
    options: tuple[Option, ...] | None,
    spec: str,
    written: list[tuple[str, str]],
    given: Mapping[str, Any],
) -> tuple[dict[str, Any], str]:
    """The one option check: the options of a spec string and of Python keywords, merged and checked.

    Args:
        kind: ``"text"`` or ``"image"``.
        name: the registered name.
        options: the model's options (None: it takes any keyword, unchecked).
        spec: the spec without its options (``NAME[:ARG]``), the start of the label.
        written: the spec string's ``(key, text)`` pairs.
        given: the Python keyword arguments.

    Returns:
        ``(kwargs, label)``: the keyword arguments for the factory, and the model's label: the spec
        with its written options, then the keyword options that change vectors (not
        :data:`RUN_SETTINGS`) and can be written as text.

    Raises:
        EncoderError: a secret, an unknown option, a value of the wrong type, or an option given
            both in the spec and as a keyword -- naming the model and the options it takes.
    """
    table = None if options is None else {o.name: o for o in options}
    known = "any" if table is None else ", ".join(o.name for o in options) or "none"

    def refuse(what: str) -> EncoderError:
        return EncoderError(f"{kind} model {name!r}: {what} (known: {known})")

    keys = [k for k, _ in written] + list(given)
    secret = [k for k in keys if k in SECRET_OPTIONS]
    if secret:
        raise EncoderError(f"{kind} model {name!r}: option {secret[0]!r} refused; {secret_advice()}")
    if table is not None:
        unknown = sorted({k for k in keys if k not in table})
        if unknown:
            raise refuse(f"unknown option(s) {', '.join(unknown)}")
    twice = sorted({k for k, _ in written} & set(given))
    if twice:
        raise refuse(f"option {twice[0]!r} is given both in the spec string and as a keyword")
    out: dict[str, Any] = {}
    label = []
    for key, text in written:
        tp = table[key].type if table is not None else str
        try:
            out[key] = from_text(text, tp)
        except ValueError:
            raise refuse(f"option {key}={text!r} is not of type {type_name(tp)}") from None
        label.append(f"{key}={as_text(out[key])}")
    for key, value in given.items():
        tp = table[key].type if table is not None else Any
        if not matches(value, tp):
            raise refuse(f"option {key}={value!r} is of type {type(value).__name__}, not {type_name(tp)}")
        out[key] = value
        if key not in RUN_SETTINGS and table is not None and writable(tp):
            label.append(f"{key}={as_text(value)}")
    return out, spec + ("?" + "&".join(label) if label else "")
