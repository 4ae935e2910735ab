"""Dataset registry: a dataset is one module that registers a loader with :func:`register`.

``load_dataset("emoji-cldr", langs=["en", "de"])`` or ``load_dataset("my_items.jsonl")``
(any path ending in .jsonl, .json, .csv, .parquet is read by the generic loader).
"""
from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any, Callable, Sequence

from ..core import DataError
from .corpus import Dataset


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    name: str
    loader: Callable[..., Dataset]
    description: str
    has_images: bool
    has_concepts: bool
    source: str  # where the data comes from
    license: str


_REGISTRY: dict[str, DatasetInfo] = {}
# Modules of this package that are not dataset loaders; every other public module is a loader
# that registers itself when imported: a new dataset is one file.
_NOT_LOADERS = frozenset({"corpus", "registry", "sampling"})
GENERIC_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def register(info: DatasetInfo) -> DatasetInfo:
    _REGISTRY[info.name] = info
    return info


def _load_modules() -> None:
    import pkgutil

    from .. import data

    for mod in pkgutil.iter_modules(data.__path__):
        if not mod.name.startswith("_") and mod.name not in _NOT_LOADERS:
            importlib.import_module(f"{__package__}.{mod.name}")


def list_datasets() -> list[DatasetInfo]:
    _load_modules()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def load_dataset(spec: str, langs: Sequence[str] | None = None, **options: Any) -> Dataset:
    """Load a registered dataset by name, or a user file by path."""
    _load_modules()
    if spec in _REGISTRY:
        return _REGISTRY[spec].loader(langs=langs, **options)
    if spec.lower().endswith(GENERIC_SUFFIXES) or Path(spec).exists():
        return _REGISTRY["generic"].loader(path=spec, langs=langs, **options)
    raise DataError(
        f"unknown dataset {spec!r}; known: {', '.join(sorted(k for k in _REGISTRY if k != 'generic'))}, "
        f"or a path to a {'/'.join(GENERIC_SUFFIXES)} file"
    )
