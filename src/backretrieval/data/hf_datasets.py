"""``hf``: items from a Hugging Face ``datasets.Dataset`` / ``DatasetDict``.

Three ways in:

* on the command line, ``--dataset hf:PATH`` reads a dataset saved with ``save_to_disk`` (no hub
  access: ``datasets.load_from_disk``);
* in Python, ``load_dataset(ds)`` or ``EvalConfig(dataset=ds, ...)`` with an in-memory
  ``datasets.Dataset`` or ``DatasetDict`` (e.g. from ``datasets.load_dataset("json",
  data_files=...)`` of local files);
* :func:`from_hf` directly.

Column names are options (``id=``, ``lang=``, ``text=``, ``concept=``, ``image=``, ``title=``,
``body=``; the defaults are the generic format's names). A ``DatasetDict``'s splits are read one
after another (``split=NAME`` picks one). The image column may be a ``datasets.Image`` feature
(its bytes, or the file it was loaded from), a file path, or raw bytes; bytes are written once to
content-addressed files in the user cache (``<cache>/hf-images/<digest><ext>``), so image models
read files as for every other dataset and the embedding cache keys them by content. Every value
is checked as in the generic loader, with its split and row in the message.
"""
from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Sequence

from ..core import DataError, atomic_write, cache_dir, content_hash
from .corpus import Dataset
from .generic import build_dataset
from .registry import DatasetExample, DatasetInfo, register

NAME = "hf"
_COLUMNS = ("id", "lang", "text", "concept", "image", "title", "body")


def _datasets():
    try:
        import datasets
    except ImportError as e:
        raise DataError("Hugging Face datasets need the `datasets` package: pip install 'backretrieval[hf]'") from e
    return datasets


def is_hf_dataset(obj: Any) -> bool:
    """Whether ``obj`` is a ``datasets.Dataset`` or ``DatasetDict`` (without importing datasets)."""
    return type(obj).__module__.startswith("datasets.") and type(obj).__name__ in ("Dataset", "DatasetDict")


def _image_file(value: Any, where: str) -> str | None:
    """A file path for an image value: a path string, ``{"bytes": ..., "path": ...}`` (a
    ``datasets.Image`` feature read without decoding), raw bytes, or a PIL image."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        data, path = value.get("bytes"), value.get("path")
        if data is None:
            if path:
                return str(path)
            raise DataError(f"{where}: image has neither bytes nor a path")
        return _stored(bytes(data), Path(path or "").suffix or ".img")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _stored(bytes(value), ".img")
    if hasattr(value, "save") and hasattr(value, "mode"):  # a decoded PIL image
        buf = io.BytesIO()
        value.save(buf, format="PNG")
        return _stored(buf.getvalue(), ".png")
    raise DataError(f"{where}: image must be a path, bytes or an Image feature, got {type(value).__name__}")


def _stored(data: bytes, suffix: str) -> str:
    path = cache_dir("hf-images") / f"{content_hash(data)}{suffix}"
    if not path.is_file() or path.stat().st_size != len(data):
        with atomic_write(path) as fh:
            fh.write(data)
    return str(path)


def from_hf(
    ds: Any,
    langs: Sequence[str] | None = None,
    *,
    id: str = "id",  # noqa: A002 - the option's name
    lang: str = "lang",
    text: str = "text",
    concept: str | None = "concept",
    image: str | None = "image",
    title: str | None = "title",
    body: str | None = "body",
    split: str | None = None,
    name: str | None = None,
    source: str | None = None,
) -> Dataset:
    """A :class:`Dataset` from a ``datasets.Dataset`` or ``DatasetDict``.

    Args:
        ds: the Hugging Face dataset.
        langs: languages to keep (None: all).
        id, lang, text: names of the required columns.
        concept, image, title, body: names of the optional columns (absent columns are skipped).
        split: for a ``DatasetDict``, the one split to read (default: all, in order).
        name: the dataset's name (default: the dataset's own name or "hf").
        source: how to name the data in messages.

    Returns:
        The dataset, one corpus per language.

    Raises:
        DataError: a missing column, an unknown split, or a bad value (named with split and row).
    """
    datasets = _datasets()
    if isinstance(ds, datasets.DatasetDict):
        if split is not None:
            if split not in ds:
                raise DataError(f"hf dataset: no split {split!r}; splits: {', '.join(ds)}")
            parts = [(split, ds[split])]
        else:
            parts = list(ds.items())
    elif isinstance(ds, datasets.Dataset):
        if split is not None and ds.split is not None and str(ds.split) != split:
            raise DataError(f"hf dataset: split={split!r} given, but the dataset is the split {ds.split!r}")
        parts = [(str(ds.split) if ds.split is not None else None, ds)]
    else:
        raise DataError(f"hf dataset: expected a datasets.Dataset or DatasetDict, got {type(ds).__name__}")
    mapping = {"id": id, "lang": lang, "text": text, "concept": concept, "image": image, "title": title, "body": body}
    label = name or getattr(parts[0][1].info, "dataset_name", None)
    source = source or (f"Hugging Face dataset {label!r}" if label else "Hugging Face dataset")
    rows: list[dict[str, Any]] = []
    where: list[str] = []
    present: set[str] = set()
    for part_name, part in parts:
        cols = set(part.column_names)
        for key in ("id", "lang", "text"):
            if mapping[key] not in cols:
                raise DataError(
                    f"{source}{f' split {part_name!r}' if part_name else ''}: missing column {mapping[key]!r} "
                    f"(the {key} column; set it with the option {key}=COLUMN); columns: {', '.join(sorted(cols))}"
                )
        use = {k: c for k, c in mapping.items() if c is not None and c in cols}
        present.update(use)
        if "image" in use and isinstance(part.features.get(use["image"]), datasets.Image):
            part = part.cast_column(use["image"], datasets.Image(decode=False))  # bytes/path, not PIL
        for i, r in enumerate(part.select_columns(list(use.values()))):
            at = f"{f'split {part_name!r} ' if part_name else ''}row {i + 1}"
            row = {k: r[c] for k, c in use.items()}
            if "image" in row:
                row["image"] = _image_file(row["image"], f"{source}: {at}")
            rows.append(row)
            where.append(at)
    if not rows:
        raise DataError(f"{source}: no rows")
    columns = [c for c in _COLUMNS if c in present]
    return build_dataset(rows, columns, where, source=source, base=Path.cwd(), name=name or NAME, langs=langs,
                         description=f"items read from {source}")


def load(
    path: str | os.PathLike | Any,
    langs: Sequence[str] | None = None,
    *,
    id: str = "id",  # noqa: A002
    lang: str = "lang",
    text: str = "text",
    concept: str = "concept",
    image: str = "image",
    title: str = "title",
    body: str = "body",
    split: str | None = None,
    name: str | None = None,
) -> Dataset:
    """The ``hf`` loader: a folder written by ``save_to_disk`` (``--dataset hf:PATH``), or an
    in-memory dataset object; options as :func:`from_hf`."""
    if is_hf_dataset(path):
        return from_hf(path, langs, id=id, lang=lang, text=text, concept=concept, image=image, title=title, body=body,
                       split=split, name=name)
    folder = Path(str(path)).expanduser()
    if not folder.exists():
        raise DataError(f"hf dataset: folder not found: {folder} (give a folder written by save_to_disk)")
    datasets = _datasets()
    try:
        ds = datasets.load_from_disk(str(folder))
    except (FileNotFoundError, ValueError, OSError) as e:
        raise DataError(f"hf dataset: cannot read {folder} (a folder written by save_to_disk?): {e}") from None
    return from_hf(ds, langs, id=id, lang=lang, text=text, concept=concept, image=image, title=title, body=body,
                   split=split, name=name or folder.name, source=str(folder))


def _example(folder: Path) -> DatasetExample:
    """The generic format's example rows as a dataset saved with ``save_to_disk``."""
    from .generic import example_rows

    path = Path(folder) / "hf"
    _datasets().Dataset.from_list(example_rows(folder)).save_to_disk(str(path))
    return DatasetExample(f"hf:{path}", ("en", "de"))


INFO = register(
    DatasetInfo(
        name=NAME,
        loader=load,
        description=(
            "a Hugging Face datasets.Dataset/DatasetDict: --dataset hf:FOLDER (save_to_disk) or the object in Python; "
            "column names are options (id=, lang=, text=, concept=, image=, title=, body=, split=)"
        ),
        has_images=False,
        has_concepts=False,
        source="the user's Hugging Face dataset",
        license="the user's",
        example=_example,
    )
)
