"""The contract every registered dataset loader keeps, as a check a plugin author can run.

:func:`check_dataset_loader` loads the small real sample a :class:`~.registry.DatasetInfo`'s
``example`` hook describes (a loader without one fails, with a message saying to add one) and
checks, as scikit-learn's ``check_estimator`` checks an estimator:

* **it loads** -- :func:`~.registry.load_dataset` of the example gives a :class:`~.corpus.Dataset`
  with at least one item per language;
* **languages as declared** -- exactly the languages asked for, each corpus under its own code;
* **ids unique, texts non-empty** -- string ids, unique within a language; every text a string
  with a visible character; the columns aligned;
* **concepts where declared** -- a loader with ``has_concepts`` gives concepts, and two languages
  share at least one (ground-truth pairs exist);
* **images exist where declared** -- a loader with ``has_images`` gives images; every image path
  of any corpus is a readable file, every feature row is inside its ``.npy`` file;
* **the same data twice** -- a second load gives the same rows (content digests) and images;
* **clear errors** -- an unknown option and an unknown language raise
  :class:`~backretrieval.core.DataError` naming them.

Every failure raises :class:`ContractError` (an AssertionError) naming the dataset and the check.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..core import DataError
from ..core.text import is_blank
from .corpus import Dataset
from .registry import DatasetExample, DatasetInfo, list_datasets, load_dataset
from .registry import loader_for as _spec_info

BAD_OPTION = "contract_no_such_option"  # an option no loader takes
BAD_LANGUAGE = "xx-contract"  # a language no dataset has


class ContractError(AssertionError):
    """A registered plugin breaks its contract (the message names it and the check)."""


def _fail(name: str, check: str, detail: str) -> ContractError:
    return ContractError(f"dataset {name!r} fails '{check}': {detail}")


def registered(what: str, spec: Any, kind: type, entries: Callable[[], Sequence[Any]]) -> Any:
    """The one look-up of the contract checks: the registered entry named ``spec``.

    Args:
        what: how errors name the kind of plugin (``"dataset"``, ``"text model"``).
        spec: the entry's name, or the entry itself (an instance of ``kind``), returned as it is.
        kind: the class of the entries (:class:`DatasetInfo`, ``EncoderInfo``).
        entries: lists the registered entries (called only for a name).

    Returns:
        The entry.

    Raises:
        ContractError: no registered entry has that name (the registered ones are listed).
    """
    if isinstance(spec, kind):
        return spec
    table = {i.name: i for i in entries()}
    if spec not in table:
        raise ContractError(f"no registered {what} {spec!r}; registered: {', '.join(sorted(table))}")
    return table[spec]


def example_from(what: str, info: Any, folder: str | Path, kind: type, how: str) -> Any:
    """The example of a registered plugin, its files written in ``folder`` (created).

    Args:
        what: how errors name the kind of plugin (``"dataset"``, ``"text model"``).
        info: the entry (its ``name`` and ``example`` hook).
        folder: where the hook writes its files.
        kind: the class the hook must return (:class:`DatasetExample`, ``Example``).
        how: what the error for a missing hook tells the author to add.

    Returns:
        What the hook returned.

    Raises:
        ContractError: the entry registers no example, or its hook returns something else.
    """
    if info.example is None:
        raise ContractError(f"{what} {info.name!r} registers no example: {how}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ex = info.example(folder)
    if not isinstance(ex, kind):
        article = "an" if kind.__name__[0] in "AEIOU" else "a"
        raise ContractError(f"{what} {info.name!r}: its example hook returned {type(ex).__name__}, not {article} {kind.__name__}")
    return ex


def dataset_example_of(info: DatasetInfo, folder: str | Path) -> DatasetExample:
    """The example load of a registered dataset, its files written in ``folder``.

    Raises:
        ContractError: the dataset registers no example, or its hook does not return a DatasetExample.
    """
    return example_from("dataset", info, folder, DatasetExample,
                        "give its DatasetInfo an example=hook (folder -> DatasetExample) naming a small real load, so the "
                        "contract checks (backretrieval.data.checks) can test it")


def _load(info: DatasetInfo, ex: DatasetExample) -> Dataset:
    """``info``'s loader on the example: the arguments :func:`load_dataset` would pass it."""
    _, args = _spec_info(ex.spec)
    return info.loader(langs=list(ex.langs), **args, **dict(ex.options))


def check_dataset_loader(spec: str | DatasetInfo, folder: str | Path | None = None) -> None:
    """Check a registered dataset loader against the contract (see the module docstring).

    Args:
        spec: the registered name (``"emoji-cldr"``, ``"generic"``) or its DatasetInfo.
        folder: where the example writes its files (default: a temporary folder, removed after).

    Raises:
        ContractError: the first check the loader fails, named with the dataset.
    """
    info = registered("dataset", spec, DatasetInfo, list_datasets)
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="contract-") as tmp:
            return check_dataset_loader(info, tmp)
    ex = dataset_example_of(info, Path(folder) / "example")
    name = info.name
    try:
        ds = _load(info, ex)
    except Exception as e:
        raise _fail(name, "loads", f"{ex.spec!r} langs={list(ex.langs)} options={dict(ex.options)}: {type(e).__name__}: {e}") from e
    if not isinstance(ds, Dataset):
        raise _fail(name, "loads", f"the loader returned {type(ds).__name__}, not a Dataset")
    if sorted(ds.corpora) != sorted(set(ex.langs)):
        raise _fail(name, "languages as declared", f"asked for {sorted(set(ex.langs))}, got {sorted(ds.corpora)}")
    for lang, c in ds.corpora.items():
        _check_corpus(name, lang, c)
    if info.has_concepts:
        _check_concepts(name, ds, ex)
    if info.has_images and not ds.has_images:
        raise _fail(name, "images exist where declared", f"declares has_images but languages "
                    f"{[lang for lang, c in ds.corpora.items() if not c.has_images]} have none")
    for lang, c in ds.corpora.items():
        _check_images(name, lang, c)
    again = _load(info, ex)
    for lang, c in ds.corpora.items():
        d = again.corpora.get(lang)
        if d is None or d.row_digests() != c.row_digests():
            raise _fail(name, "the same data twice", f"a second load gives other rows for {lang!r}")
        if c.has_images and d.image_digests() != c.image_digests():
            raise _fail(name, "the same data twice", f"a second load gives other images for {lang!r}")
    _check_errors(info, ex)


def _check_corpus(name: str, lang: str, c: Any) -> None:
    if c.lang != lang:
        raise _fail(name, "languages as declared", f"the corpus under {lang!r} says its language is {c.lang!r}")
    if not len(c):
        raise _fail(name, "loads", f"no items in {lang!r}")
    if not all(isinstance(i, str) for i in c.ids):
        raise _fail(name, "ids unique", f"{lang!r} has ids that are not strings")
    if len(set(c.ids)) != len(c.ids):
        dup = next(i for i in c.ids if c.ids.count(i) > 1)
        raise _fail(name, "ids unique", f"{lang!r} has the id {dup!r} more than once")
    if len(c.texts) != len(c.ids):
        raise _fail(name, "texts non-empty", f"{lang!r} has {len(c.texts)} texts for {len(c.ids)} ids")
    for i, t in zip(c.ids, c.texts):
        if not isinstance(t, str) or is_blank(t):
            raise _fail(name, "texts non-empty", f"{lang!r} id {i!r} has the text {t!r}")


def _check_concepts(name: str, ds: Dataset, ex: DatasetExample) -> None:
    missing = [lang for lang, c in ds.corpora.items() if not c.has_concepts]
    if missing:
        raise _fail(name, "concepts where declared", f"declares has_concepts but {missing} have none")
    if len(ds.corpora) < 2:
        raise _fail(name, "concepts where declared", f"its example asks for {list(ex.langs)}: give two languages, so pairs can be checked")
    concepts = [{k for k in c.concepts if k is not None} for c in ds.corpora.values()]
    if not any(a & b for i, a in enumerate(concepts) for b in concepts[i + 1 :]):
        raise _fail(name, "concepts where declared", f"no concept is shared by two of {sorted(ds.corpora)}: no ground-truth pairs")


def _check_images(name: str, lang: str, c: Any) -> None:
    if c.image_paths is not None:
        for i, p in zip(c.ids, c.image_paths):
            if not Path(p).is_file():
                raise _fail(name, "images exist where declared", f"{lang!r} id {i!r}: image {p!r} is not a file")
    if c.image_features is not None:
        path = Path(c.image_features)
        if not path.is_file():
            raise _fail(name, "images exist where declared", f"{lang!r}: feature file {str(path)!r} is not a file")
        n = np.load(path, mmap_mode="r", allow_pickle=False).shape[0]
        rows = np.asarray(c.image_rows)
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            raise _fail(name, "images exist where declared", f"{lang!r}: feature rows outside the {n} rows of {path}")


def _check_errors(info: DatasetInfo, ex: DatasetExample) -> None:
    name = info.name
    for check, kw, needle in (
        ("a bad option is a clear error", {"options": {**dict(ex.options), BAD_OPTION: 1}}, BAD_OPTION),
        ("an unknown language is a clear error", {"langs": [*ex.langs[:1], BAD_LANGUAGE]}, BAD_LANGUAGE),
    ):
        langs = kw.get("langs", list(ex.langs))
        options = kw.get("options", dict(ex.options))
        try:
            load_dataset(ex.spec, langs, **options)
        except DataError as e:
            if needle not in str(e):
                raise _fail(name, check, f"DataError does not name {needle!r}: {e}") from None
        except Exception as e:  # noqa: BLE001 -- any other exception is the failure being reported
            raise _fail(name, check, f"raised {type(e).__name__} ({e}), not DataError naming {needle!r}") from None
        else:
            raise _fail(name, check, f"{needle!r} was accepted")
