"""The text and image models of a grid: registry spec strings, or Python objects named by the user.

``EvalConfig.models`` is either a list of spec strings (``["use-m", "tfidf-char"]``, what the
command line gives) or a dict from the name the records use to a spec string or a Python
object: ``{"ours-v2": model, "use-m": "use-m"}``. An object is anything with a
sentence-transformers-style ``encode(list[str], ...) -> array`` or a function ``f(list[str])``,
wrapped in :class:`~backretrieval.encoders.text.python_model.PythonTextModel` (give one yourself for
a ``version``, ``languages`` or ``batch_size``); a list may hold ``PythonTextModel`` objects too,
named by their ``name``.

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
from typing import Any, Mapping

from ..core import BackretrievalError
from ..encoders.registry import get_text_encoder
from ..encoders.image.python_model import PythonImageModel
from ..encoders.python_objects import object_name
from ..encoders.text.python_model import PythonTextModel


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


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise BackretrievalError(f"a model's name must be a non-empty string, got {name!r}")
    return name


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
    """The names the records of ``models`` (a list or a dict, see the module doc) use, in order.

    Args:
        models: a list of spec strings / :class:`PythonTextModel` objects, a dict name -> spec or
            object, or one spec string.

    Returns:
        The names in the given order: dict keys (as strings), a ``PythonTextModel``'s ``name``,
        a spec string itself. Nothing is checked (see :func:`grid_models`).
    """
    if isinstance(models, Mapping):
        return [str(k) for k in models]
    if isinstance(models, str):
        return [models]
    return [m.name if isinstance(m, PythonTextModel) else str(m) for m in models]


def describe_models(models: Any) -> list[str] | dict[str, str]:
    """JSON form of ``models`` for ``run.json``: a list of spec strings stays that list; otherwise
    name -> spec string, or ``"python:<module.Class>"`` for an object.

    Args:
        models: as for :func:`model_names`.

    Returns:
        The list of spec strings unchanged, or a dict name -> spec string or
        ``"python:<module.Class>"`` (the class of the wrapped object for a ``PythonTextModel``).
    """
    if isinstance(models, (list, tuple)) and all(isinstance(m, str) for m in models):
        return list(models)
    items = models.items() if isinstance(models, Mapping) else ((n, m) for n, m in zip(model_names(models), models))
    out = {}
    for name, value in items:
        if isinstance(value, str):
            out[name] = value
        else:
            obj = value.model if isinstance(value, PythonTextModel) else value
            out[name] = f"python:{type(obj).__module__}.{type(obj).__qualname__}"
    return out


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
    if isinstance(models, str):
        raise BackretrievalError(f"models must be a list or a dict of models, got the string {models!r} (use [{models!r}])")
    if isinstance(models, Mapping):
        entries = [(_check_name(name), value) for name, value in models.items()]
    else:
        entries = []
        for m in models:
            if isinstance(m, PythonTextModel):
                entries.append((m.name, m))
            elif isinstance(m, str):
                entries.append((m, m))
            else:
                raise BackretrievalError(
                    f"a list of models holds spec strings or PythonTextModel objects, got {type(m).__name__}; "
                    "name other objects with a dict: models={'mine': obj, 'use-m': 'use-m'}"
                )
    if not entries:
        raise BackretrievalError("no text model given")
    out: dict[str, GridModel] = {}
    for name, value in entries:
        if name in out:
            raise BackretrievalError(f"model {name!r} is given twice")
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
