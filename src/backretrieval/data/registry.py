"""Dataset registry: a dataset is one module that registers a loader with :func:`register`.

``load_dataset("emoji-cldr", langs=["en", "de"])`` or ``load_dataset("my_items.jsonl")``
(any path ending in .jsonl, .json, .csv, .parquet is read by the generic loader).
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..core import DataError
from ..core.hints import did_you_mean
from .corpus import Dataset


@dataclasses.dataclass(frozen=True)
class DatasetExample:
    """A small real load of a registered dataset, for the contract checks
    (:mod:`backretrieval.data.checks`). A :class:`DatasetInfo`'s ``example`` hook writes what the
    load needs (a data file) into the folder it is given and returns this; a dataset the loader
    finds on its own (its data folder, an environment variable) writes nothing.

    Attributes:
        spec: what :func:`load_dataset` is given (a registered name, a file path, ``hf:FOLDER``).
        langs: the languages asked for (at least two for a dataset with concepts).
        options: the loader options (e.g. a cap on the items read).
    """

    spec: str
    langs: tuple[str, ...]
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """A registered dataset loader: what :func:`load_dataset`, ``backretrieval datasets``, the docs
    table and the contract checks (:mod:`backretrieval.data.checks`) know of it. A dataset module
    makes one and passes it to :func:`register`; the loader's options are the keyword parameters
    of ``loader`` (read from its signature, see :func:`dataset_option_names`).

    Attributes:
        name: the name ``load_dataset`` and ``--dataset`` take.
        loader: ``loader(langs=..., **options)`` (plus the arguments ``claims`` gives) -> a
            :class:`~backretrieval.data.corpus.Dataset`.
        description: one line for the dataset list and the docs table.
        has_images: whether items have images (an image model can compute CORR on them).
        has_concepts: whether items of different languages share concepts (translations: the
            ground truth XLR needs).
        source: where the data comes from.
        license: the data's licence.
        example: ``example(folder) -> DatasetExample``, a small real load for the contract checks;
            None fails them.
        claims: for a loader that reads specs besides its name (a file path, ``hf:FOLDER``):
            ``claims(spec)`` gives its extra arguments (e.g. ``{"path": ...}``) for a spec it
            reads, None for one it does not.
        fallback: a fallback loader claims only what no other loader claims and is not offered as
            a name in the unknown-dataset message.
        claims_text: how the unknown-dataset message describes a fallback loader's specs.
        describe: ``describe(spec)``, the name errors give a spec the loader claims.
    """

    name: str
    loader: Callable[..., Dataset]
    description: str
    has_images: bool
    has_concepts: bool
    source: str
    license: str
    example: Callable[[Path], DatasetExample] | None = None
    claims: Callable[[Any], dict[str, Any] | None] | None = None
    fallback: bool = False
    claims_text: str = ""
    describe: Callable[[Any], str] | None = None


_REGISTRY: dict[str, DatasetInfo] = {}
# Every public module of this package is imported once; a loader registers itself when imported
# (a new dataset is one file), a helper module (corpus, sampling, splits, ...) registers nothing.


def register(info: DatasetInfo) -> DatasetInfo:
    """Add a dataset loader to the registry under ``info.name`` and return ``info``."""
    _REGISTRY[info.name] = info
    return info


def _load_modules() -> None:
    import pkgutil

    from .. import data

    for mod in pkgutil.iter_modules(data.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__package__}.{mod.name}")


def list_datasets() -> list[DatasetInfo]:
    """Every registered dataset loader, sorted by name (imports the loader modules first)."""
    _load_modules()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def loader_for(spec: Any) -> tuple[DatasetInfo, dict[str, Any]]:
    """The loader of ``spec`` (a registered name, ``hf:FOLDER``, a file path, or a Hugging Face
    dataset object) and the arguments it gets besides ``langs`` and the options."""
    _load_modules()
    if isinstance(spec, Path):
        spec = str(spec)
    if isinstance(spec, str) and spec in _REGISTRY:
        return _REGISTRY[spec], {}
    for fallback in (False, True):
        for info in _REGISTRY.values():
            if info.claims is not None and info.fallback is fallback:
                args = info.claims(spec)
                if args is not None:
                    return info, args
    if not isinstance(spec, str):
        raise DataError(f"a dataset is a name, a file path, hf:FOLDER or a Hugging Face dataset, not {type(spec).__name__}")
    known = ", ".join(sorted(k for k, info in _REGISTRY.items() if not info.fallback))
    claimed = "".join(f", or {info.claims_text}" for k, info in sorted(_REGISTRY.items()) if info.fallback)
    hint = did_you_mean(spec, [k for k, info in _REGISTRY.items() if not info.fallback])
    raise DataError(f"unknown dataset {spec!r}{hint}; known: {known}{claimed}")


def dataset_option_names(spec: str) -> dict[str, inspect.Parameter]:
    """The options a dataset's loader takes (its keyword-only parameters), by name.

    Args:
        spec: a registered dataset name or a file path.

    Returns:
        ``{name: inspect.Parameter}`` in the loader's order.

    Raises:
        DataError: ``spec`` is neither a registered dataset nor a data file.
    """
    info, _ = loader_for(spec)
    params = inspect.signature(info.loader).parameters
    return {k: p for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def _what(spec: Any, info: DatasetInfo) -> str:
    if info.describe is not None:
        return info.describe(spec)
    return f"dataset {spec!r}" if isinstance(spec, str) else f"the {info.name} dataset"


def check_dataset_options(spec: str, options: Mapping[str, Any]) -> None:
    """Refuse an option the loader of ``spec`` does not take, naming the options it does take.

    Raises:
        DataError: an unknown option, or an unknown dataset.
    """
    known = dataset_option_names(spec)
    for key in options:
        if key not in known:
            info, _ = loader_for(spec)
            raise DataError(
                f"unknown option {key!r} for {_what(spec, info)}{did_you_mean(key, known)}; "
                f"its options: {', '.join(known) or '(none)'}"
            )


def parse_dataset_options(spec: str, options: Mapping[str, str]) -> dict[str, Any]:
    """Options given as text (``KEY=VALUE`` on a command line), checked and converted to the
    loader's types: an ``int`` parameter gets an integer, a ``float`` one a number, a ``bool`` one
    true/false/1/0/yes/no; anything else stays text.

    Args:
        spec: a registered dataset name or a file path.
        options: option name -> value as text.

    Returns:
        The options with converted values.

    Raises:
        DataError: an unknown option (the loader's options are listed) or a value of the wrong type.
    """
    check_dataset_options(spec, options)
    known = dataset_option_names(spec)
    out: dict[str, Any] = {}
    for key, value in options.items():
        ann = known[key].annotation
        ann = ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))
        types = set(re.findall(r"[A-Za-z_][A-Za-z_.]*", ann))
        text = str(value).strip()
        if "None" in types and text.lower() == "none":
            out[key] = None
        elif "int" in types and "str" not in types:
            if not re.fullmatch(r"[+-]?\d+", text):
                raise DataError(f"option {key}={value!r}: expected an integer")
            out[key] = int(text)
        elif "float" in types and "str" not in types:
            try:
                out[key] = float(text)
            except ValueError:
                raise DataError(f"option {key}={value!r}: expected a number") from None
        elif "bool" in types and "str" not in types:
            flags = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
            if text.lower() not in flags:
                raise DataError(f"option {key}={value!r}: expected true or false")
            out[key] = flags[text.lower()]
        else:
            out[key] = value
    return out


def load_dataset(spec: Any, langs: Sequence[str] | None = None, **options: Any) -> Dataset:
    """Load a registered dataset by name, a user file by path, a saved Hugging Face dataset
    (``hf:FOLDER``) or an in-memory ``datasets.Dataset`` / ``DatasetDict``.

    Raises:
        DataError: an unknown dataset or option, or bad data (the loader's own errors).
    """
    info, args = loader_for(spec)
    check_dataset_options(spec, options)
    return info.loader(langs=langs, **args, **options)
