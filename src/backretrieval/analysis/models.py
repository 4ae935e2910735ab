"""The text and image models of a grid: registry spec strings, or Python objects named by the user.

``EvalConfig.models`` is either a list of spec strings (``["use-m", "tfidf-char"]``, what the
command line gives) or a dict from the name the records use to a spec string or a Python
object: ``{"ours-v2": model, "use-m": "use-m"}``. An object is anything with a
sentence-transformers-style ``encode(list[str], ...) -> array`` or a function ``f(list[str])``,
wrapped in :class:`~backretrieval.encoders.text.python_model.PythonTextModel` (give one yourself for
a ``version``, ``languages`` or ``batch_size``); a list may hold ``PythonTextModel`` objects too,
named by their ``name``.

Labels. The name a model's records, tables and figures use is short: a spec string in a list gets
a *derived label* (:func:`derive_label`): the hub name without the ``hf:`` prefix and the
organisation (``hf:intfloat/multilingual-e5-small`` -> ``multilingual-e5-small``), a path's last
part (``st:/models/ours`` -> ``st:ours``), the options that change the vectors (``prompt_name``,
``dimensions``, ``normalize``, ...) and the variants (``@trunc=128``) kept; the options that do not
(:data:`~backretrieval.encoders.options.NOT_VECTOR_OPTIONS`: ``cache_dir``, ``base_url``, keys,
batch sizes, prices, retries) left out, so the same model read from two folders has one label.
``LABEL=SPEC`` in a list (the command line's ``--models 'e5=hf:intfloat/multilingual-e5-small'``)
or a dict key (``models={"e5": "hf:..."}``) names a model explicitly. Two models whose derived
labels meet get their longer forms (organisation, whole path), and if those meet too the run is
refused with advice to name them. Every label is shorter than :data:`MAX_LABEL` + 1 characters; a
derived one that would be longer is cut with a digest of the spec. The full spec stays in
``run.json`` (``config.models``: label -> spec) and in every record (``model_spec``).

Identity. Every model's records carry ``model`` (the user's name) and ``model_identity`` (the
fingerprint the records are keyed by: the spec's ``version``, a torch module's weight hash, or
the user's version string). A *run-only* model -- an object that is not a torch module and was
given no version -- has no identity that survives the process, so the grid neither resumes its
records from ``OUT/.partial`` nor stores them there, and its vectors are not cached on disk.

Image models. ``EvalConfig.image_model`` (and each of ``extra_image_models``) is an image model
spec string (``"efficientnet-lite0"``) or a Python object: a
:class:`~backretrieval.encoders.image.python_model.PythonImageModel` (named by its ``name``), a
torch module, an object with ``encode(images)`` or a function ``f(images)`` (named by
:func:`~backretrieval.encoders.python_objects.object_name`: its class's or function's name).
Records carry the name as ``image_model``; the identity (the spec's ``version``, a torch
module's weight hash, the user's version string) keys them, and a run-only image object makes
every record that uses it run-only, as a run-only text model does.

Executors. A Python object is encoded in this process by every executor (it is never pickled
or sent to a worker or a Ray cluster); only the per-sample tasks, plain arrays, go to the
executor, so ``processes`` and ``ray`` work with any object.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import PurePosixPath
from typing import Any, Mapping

from ..core import BackretrievalError, EncoderError, content_hash
from ..encoders.options import NOT_VECTOR_OPTIONS, split_spec
from ..encoders.registry import get_text_encoder
from ..encoders.image.python_model import PythonImageModel
from ..encoders.python_objects import object_name
from ..encoders.text.python_model import PythonTextModel
from ..encoders.variants import split_variants


RUN_ONLY_NOTE = "no stable identity"  # in the one log line that names the run-only models


def run_only_note(names: list[str], *, image: bool = False) -> str:
    """The line a run logs once about its run-only models ``names``.

    Args:
        names: the run-only models' names (at least one).
        image: they are image models (``g``) rather than text models.

    Returns:
        One sentence naming them, containing :data:`RUN_ONLY_NOTE` (how a log filter recognises
        it) and how to make them resumable.
    """
    many = len(names) > 1
    what, wrapper = ("image model", "PythonImageModel") if image else ("model", "PythonTextModel")
    vectors = "features" if image else "vectors"
    return (
        f"{what}{'s' * many} {', '.join(map(repr, names))}: {RUN_ONLY_NOTE} (a Python object that is not a torch "
        f"module, given no version), so {'their' if many else 'its'} records and {vectors} are computed afresh in "
        f"every run and never stored for resuming or caching; give {wrapper}(name, model, version=...) to keep them"
    )


@dataclasses.dataclass
class GridModel:
    """One text model of the grid.

    Attributes:
        name: what the records call it (``model``).
        spec: its registry spec string; None for a Python object.
        encoder: the encoder, built once (a spec's is rebuilt by the executor to encode; a Python
            object's encodes itself, in this process).
    """

    name: str
    spec: str | None
    encoder: Any

    @property
    def run_only(self) -> bool:
        """True for a Python object without a stable identity (records and vectors live only for the run)."""
        return self.spec is None and not getattr(self.encoder, "cacheable", False)


MAX_LABEL = 39  # characters of a model's label (the name of its records, tables and figures)
_LABEL = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.+-]*)=(.+)", re.S)  # LABEL=SPEC (a label has no : ? @ / =)


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise BackretrievalError(f"a model's name must be a non-empty string, got {name!r}")
    if len(name) > MAX_LABEL:
        raise BackretrievalError(
            f"model name {name[:60]!r}{'...' if len(name) > 60 else ''} has {len(name)} characters: a model's name labels "
            f"its rows and figures, so it has at most {MAX_LABEL}; give a short one (LABEL=SPEC on the command line, "
            f"a dict key in Python) and the spec keeps the rest")
    if any(ord(c) < 32 or c == "|" for c in name):
        raise BackretrievalError(f"model name {name!r} holds a control character or '|': it would split the result tables")
    return name


def split_label(item: str) -> tuple[str | None, str]:
    """``"LABEL=SPEC"`` as ``(LABEL, SPEC)``; a plain spec as ``(None, spec)``.

    A label starts with a letter or digit and holds only letters, digits and ``_ . + -``, so the
    ``=`` of a spec's own options (``random?dim=16``) or variants (``use-m@trunc=64``) never reads
    as one.

    Args:
        item: one entry of a list of models.

    Returns:
        The label (None when none is given) and the spec.
    """
    m = _LABEL.fullmatch(item.strip())
    return (m.group(1), m.group(2).strip()) if m else (None, item.strip())


def derive_label(spec: str, *, long: bool = False) -> str:
    """The short label of a spec string (see the module docstring).

    Args:
        spec: a text model spec, variants included.
        long: the longer form, used where two short labels meet: the hub organisation and the whole
            path kept.

    Returns:
        The label: at most :data:`MAX_LABEL` characters. A spec whose options cannot be read is its
        own label (building the model then names what is wrong with it).
    """
    base, ops = split_variants(spec)
    try:
        head, written = split_spec(base)
    except EncoderError:
        return _fit(spec, spec)
    kind, sep, arg = head.partition(":")
    if sep and arg and not long:
        last = PurePosixPath(arg.replace("\\", "/").rstrip("/")).name or arg
        head = last if kind == "hf" else f"{kind}:{last}"
    elif kind == "hf" and arg:
        head = arg
    kept = [f"{k}={v}" for k, v in written if k not in NOT_VECTOR_OPTIONS]
    return _fit(head + ("?" + "&".join(kept) if kept else "") + "".join(f"@{op}" for op in ops), spec)


def _fit(label: str, spec: str) -> str:
    """``label`` within :data:`MAX_LABEL` characters: a longer one is cut and ends with a digest of ``spec``."""
    return label if len(label) <= MAX_LABEL else f"{label[:MAX_LABEL - 7]}~{content_hash(spec, 3)}"


def labelled(models: Any) -> list[tuple[str, Any]]:
    """``(label, spec or object)`` for each model of ``models``, in order: given labels (dict keys,
    ``LABEL=SPEC``, a ``PythonTextModel``'s name) as given, derived ones for plain spec strings
    (their longer form where two short labels meet).

    Args:
        models: a list of spec strings (``LABEL=SPEC`` allowed) / ``PythonTextModel`` objects, or
            a dict label -> spec string or object.

    Returns:
        The pairs; nothing is built or checked but the labels themselves.

    Raises:
        BackretrievalError: a bare string, an object in a list that is not a ``PythonTextModel``,
            an empty, too long or repeated label, two specs whose labels meet in every form.
    """
    if isinstance(models, str):
        raise BackretrievalError(f"models must be a list or a dict of models, got the string {models!r} (use [{models!r}])")
    if isinstance(models, Mapping):
        return [(_check_name(name), value) for name, value in _no_twice(list(models.items()))]
    given: list[tuple[str | None, Any]] = []
    for m in models:
        if isinstance(m, PythonTextModel):
            given.append((m.name, m))
        elif isinstance(m, str):
            given.append(split_label(m))
        else:
            raise BackretrievalError(
                f"a list of models holds spec strings or PythonTextModel objects, got {type(m).__name__}; "
                "name other objects with a dict: models={'mine': obj, 'use-m': 'use-m'}"
            )
    taken = [name for name, _ in given if name is not None]
    short = [derive_label(v) if name is None else name for name, v in given]
    out = []
    for (name, value), label in zip(given, short):
        if name is None and (short.count(label) > 1 or label in taken):
            label = derive_label(value, long=True)
        out.append((label, value))
    return [(_check_name(name), value) for name, value in _no_twice(out, given)]


def _no_twice(entries: list[tuple[str, Any]], given: list[tuple[str | None, Any]] | None = None) -> list[tuple[str, Any]]:
    """``entries`` unchanged when no label is repeated; else the error naming the repeat (two
    different specs whose derived labels meet are told how to name them)."""
    seen: dict[str, int] = {}
    for i, (name, value) in enumerate(entries):
        j = seen.setdefault(name, i)
        if j == i:
            continue
        other = entries[j][1]
        derived = given is not None and given[i][0] is None and given[j][0] is None
        if derived and isinstance(value, str) and isinstance(other, str) and value != other:
            raise BackretrievalError(
                f"models {other!r} and {value!r} would both be labelled {name!r} (the options that tell them apart "
                f"do not change the vectors): name them, e.g. --models 'a={other},b={value}'")
        raise BackretrievalError(f"model {name!r} is given twice")
    return entries


def _object(name: str, value: Any) -> PythonTextModel:
    """``value`` as a :class:`PythonTextModel` named ``name`` (a given one is copied, not renamed in place)."""
    if isinstance(value, PythonTextModel):
        if value.name == name:
            return value
        renamed = copy.copy(value)
        renamed.name = name
        return renamed
    return PythonTextModel(name, value)


def model_names(models: Any) -> list[str]:
    """The labels the records of ``models`` (a list or a dict, see the module doc) use, in order.

    Args:
        models: a list of spec strings (``LABEL=SPEC`` allowed) / :class:`PythonTextModel`
            objects, a dict label -> spec or object, or one spec string.

    Returns:
        The labels in the given order (:func:`labelled`); only the labels are checked (see
        :func:`grid_models`).
    """
    if isinstance(models, str):
        models = [models]
    return [name for name, _ in labelled(models)]


def describe_models(models: Any) -> list[str] | dict[str, str]:
    """JSON form of ``models`` for ``run.json``: a list of spec strings each of which is its own
    label stays that list; otherwise label -> spec string, or ``"python:<module.Class>"`` for an
    object.

    Args:
        models: as for :func:`model_names`.

    Returns:
        The list of spec strings unchanged, or a dict label -> full spec string or
        ``"python:<module.Class>"`` (the class of the wrapped object for a ``PythonTextModel``).
    """
    pairs = labelled([models] if isinstance(models, str) else models)
    if not isinstance(models, Mapping) and all(isinstance(v, str) and v == name for name, v in pairs):
        return [name for name, _ in pairs]
    return {name: model_spec(value) for name, value in pairs}


def model_spec(value: Any) -> str:
    """What the records and ``run.json`` say a model is: its full spec string, or
    ``"python:<module.Class>"`` for an object (the wrapped object's class for a ``PythonTextModel``).

    Args:
        value: a spec string or a model object.

    Returns:
        The description.
    """
    if isinstance(value, str):
        return value
    obj = value.model if isinstance(value, PythonTextModel) else value
    return f"python:{type(obj).__module__}.{type(obj).__qualname__}"


def grid_models(models: Any) -> dict[str, GridModel]:
    """Every model of ``models`` (a list of specs / ``PythonTextModel`` objects, or a dict name ->
    spec string or object), built and checked before anything is encoded.

    Args:
        models: a list of spec strings / ``PythonTextModel`` objects, or a dict name -> spec
            string or Python object (wrapped in a ``PythonTextModel`` of that name).

    Returns:
        name -> :class:`GridModel`, in the order given.

    Raises:
        BackretrievalError: a bare string instead of a list, no model, an empty or repeated
            name, an object in a list that is neither a spec nor a ``PythonTextModel``, an
            unknown spec, an object without ``encode`` that is not callable (each named; the
            last two as its subclass ``EncoderError``).
    """
    entries = labelled(models)
    if not entries:
        raise BackretrievalError("no text model given")
    out: dict[str, GridModel] = {}
    for name, value in entries:
        if isinstance(value, str):
            out[name] = GridModel(name, value, get_text_encoder(value))
        else:
            out[name] = GridModel(name, None, _object(name, value))
    return out


def image_model_name(value: Any) -> str:
    """The name records give image model ``value`` (``image_model``): a spec string itself, a
    :class:`PythonImageModel`'s ``name``, else the object's class or function name.

    Args:
        value: a spec string or an image model object (see the module doc).

    Returns:
        The name. Nothing is checked or built (see :func:`grid_image_models`).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, PythonImageModel):
        return value.name
    return object_name(value)


def describe_image_model(value: Any) -> str | dict[str, str]:
    """JSON form of image model ``value`` for ``run.json``: a spec string stays that string; an
    object is ``{name: "python:<module.Class>"}`` (the wrapped object's class for a
    ``PythonImageModel``).

    Args:
        value: a spec string or an image model object.

    Returns:
        The spec string, or a one-entry dict name -> ``"python:<module.Class>"``.
    """
    if isinstance(value, str):
        return value
    obj = value.model if isinstance(value, PythonImageModel) else value
    return {image_model_name(value): f"python:{type(obj).__module__}.{type(obj).__qualname__}"}


def grid_image_models(main: Any, extra: Any = ()) -> dict[str, str | PythonImageModel]:
    """The image models of a grid, main one first: each spec string as given, each object wrapped
    in a :class:`PythonImageModel` (its identity taken now: a torch module's weights are hashed
    once per call), before anything is encoded.

    Args:
        main: ``EvalConfig.image_model``: a spec string or an object.
        extra: ``EvalConfig.extra_image_models``: spec strings and objects.

    Returns:
        name (:func:`image_model_name`) -> spec string or ``PythonImageModel``, in order; the same
        spec, or the same object, given twice is kept once.

    Raises:
        BackretrievalError: ``extra`` given as a bare string, an empty name or spec, two different
            image models under one name (wrap one in ``PythonImageModel(name, obj)``), an object
            without ``encode`` that is not callable (named; as the subclass ``EncoderError``).
    """
    if isinstance(extra, str):
        raise BackretrievalError(f"extra_image_models must be a list, got the string {extra!r} (use [{extra!r}])")
    out: dict[str, str | PythonImageModel] = {}
    given: dict[str, Any] = {}
    for value in (main, *extra):
        name = image_model_name(value)
        if not isinstance(name, str) or not name.strip():
            raise BackretrievalError(f"an image model's name must be a non-empty string, got {name!r}")
        if name in out:
            if given[name] is value or (isinstance(value, str) and value == given[name]):
                continue
            raise BackretrievalError(
                f"two different image models are called {name!r}: name one with PythonImageModel(name, model)"
            )
        given[name] = value
        out[name] = value if isinstance(value, (str, PythonImageModel)) else PythonImageModel(name, value)
    return out


def image_run_only(model: str | PythonImageModel) -> bool:
    """Whether image model ``model`` is run-only: its records and features live only for the run.

    Args:
        model: a value of :func:`grid_image_models`: a spec string or a ``PythonImageModel``.

    Returns:
        True for a ``PythonImageModel`` without a stable identity (no torch weights, no version).
    """
    return not isinstance(model, str) and not model.cacheable
