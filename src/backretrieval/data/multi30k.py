"""``multi30k``: Multi30K task 1 -- line-aligned translations of Flickr30k captions.

Layout under ``root`` (a checkout of https://github.com/multi30k/dataset):
``data/task1/raw/{split}.{lang}.gz`` (or uncompressed) and ``data/task1/image_splits/{split}.txt``
(the Flickr30k image file of each line; ``test_2016_flickr`` also matches ``test_2016.txt``).

``root``: the option, else ``$BACKRETRIEVAL_MULTI30K``, else ``../shared/data/multi30k`` relative
to the current folder. Multi30K is not on a package registry and its terms are non-commercial
research use, so it is never downloaded here.

Items: id ``f"{split}-{i}"`` with ``i`` the 0-based line index (= the row of an image-feature
matrix), concept = the image file name (lines of the same image in two languages are a pair).
Images are optional: ``images_dir`` (a folder holding the Flickr30k jpgs) gives image paths,
``image_features`` (a .npy with one row per line of the split) gives feature rows; by default
the corpora are text-only.
"""
from __future__ import annotations

import gzip
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..core import DataError
from ..core.text import decode_utf8, is_blank
from .corpus import Corpus, Dataset, require_languages
from .registry import DatasetExample, DatasetInfo, register

NAME = "multi30k"
ENV_ROOT = "BACKRETRIEVAL_MULTI30K"
LANGUAGES = ("en", "de", "fr", "cs")
DEFAULT_SPLIT = "test_2016_flickr"


def find_root(root: str | os.PathLike | None = None) -> Path:
    """The Multi30K checkout: ``root``, else ``$BACKRETRIEVAL_MULTI30K``, else
    ``../shared/data/multi30k``; a clear error when none holds ``data/task1``."""
    if root is not None:
        p = Path(root).expanduser()
        if not (p / "data" / "task1").is_dir():
            raise DataError(f"{NAME}: root {p} has no data/task1 folder (expected a Multi30K checkout)")
        return p
    env = os.environ.get(ENV_ROOT)
    if env:
        p = Path(env).expanduser()
        if not (p / "data" / "task1").is_dir():
            raise DataError(f"{NAME}: ${ENV_ROOT}={env} has no data/task1 folder (expected a Multi30K checkout)")
        return p
    p = Path("..") / "shared" / "data" / "multi30k"
    if (p / "data" / "task1").is_dir():
        return p.resolve()
    raise DataError(
        f"{NAME}: Multi30K not found; get it from https://github.com/multi30k/dataset "
        f"(non-commercial research use; not downloaded automatically) and pass root=<its folder> "
        f"or set ${ENV_ROOT}"
    )


def _raw_file(task1: Path, split: str, lang: str) -> Path | None:
    for suffix in (".gz", ""):
        p = task1 / "raw" / f"{split}.{lang}{suffix}"
        if p.is_file():
            return p
    return None


def _image_split_file(task1: Path, split: str) -> Path:
    names = [split]
    for tag in ("_flickr", "_mscoco"):
        if split.endswith(tag):
            names.append(split[: -len(tag)])
    names += [f"{split}_flickr", f"{split}_images"]
    for n in names:
        p = task1 / "image_splits" / f"{n}.txt"
        if p.is_file():
            return p
    avail = sorted(p.stem for p in (task1 / "image_splits").glob("*.txt"))
    raise DataError(f"{NAME}: no image split file for split {split!r}; present: {', '.join(avail)}")


def _read_lines(path: Path) -> list[str]:
    """The lines of a (gzipped) UTF-8 file; a file that is not UTF-8 is named with its line."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                raw = fh.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError) as e:
        raise DataError(f"{NAME}: cannot read {path}: {e}") from None
    lines = [line.rstrip("\r") for line in decode_utf8(raw, path).split("\n")]
    if lines and lines[-1] == "":  # the file's last newline ends a line, it does not start one
        lines.pop()
    return lines


def splits(root: str | os.PathLike | None = None) -> list[str]:
    """The names of the splits whose raw caption files the checkout holds, sorted."""
    raw = find_root(root) / "data" / "task1" / "raw"
    return sorted({p.name.split(".")[0] for p in raw.iterdir() if p.is_file()})


def languages(split: str = DEFAULT_SPLIT, root: str | os.PathLike | None = None) -> list[str]:
    """The languages that have captions for ``split`` in the checkout, in :data:`LANGUAGES` order."""
    task1 = find_root(root) / "data" / "task1"
    return [lang for lang in LANGUAGES if _raw_file(task1, split, lang) is not None]


def load(
    langs: Sequence[str] | None = None,
    *,
    root: str | os.PathLike | None = None,
    split: str = DEFAULT_SPLIT,
    images_dir: str | os.PathLike | None = None,
    image_features: str | os.PathLike | None = None,
) -> Dataset:
    """Load Multi30K task-1 corpora of one split (see the module docstring)."""
    if images_dir is not None and image_features is not None:
        raise DataError(f"{NAME}: give images_dir or image_features, not both")
    base = find_root(root)
    task1 = base / "data" / "task1"
    present = [lang for lang in LANGUAGES if _raw_file(task1, split, lang) is not None]
    if not present:
        raise DataError(
            f"{NAME}: no caption files for split {split!r} in {task1 / 'raw'}; splits: {', '.join(splits(base))}"
        )
    wanted = require_languages(present, langs, f"{NAME}/{split}")
    split_file = _image_split_file(task1, split)
    images = [line.strip() for line in _read_lines(split_file)]
    while images and not images[-1]:
        images.pop()
    n = len(images)
    for i, im in enumerate(images):
        if not im:
            raise DataError(f"{NAME}: {split_file}: line {i + 1} names no image")
    image_paths: list[str] | None = None
    feat: str | None = None
    if images_dir is not None:
        d = Path(images_dir).expanduser()
        if not d.is_dir():
            raise DataError(f"{NAME}: images_dir is not a folder: {d}")
        image_paths = [str((d / im).resolve()) for im in images]
        missing = [p for p in image_paths if not os.path.isfile(p)]
        if missing:
            raise DataError(
                f"{NAME}: {len(missing)} of {n} images of split {split!r} missing in {d}, e.g. {missing[0]}"
            )
    if image_features is not None:
        fp = Path(image_features).expanduser()
        if not fp.is_file():
            raise DataError(f"{NAME}: image_features: file not found: {fp}")
        try:
            shape = np.load(fp, mmap_mode="r").shape
        except (OSError, ValueError) as e:
            raise DataError(f"{NAME}: image_features: cannot read {fp}: {e}") from None
        if len(shape) != 2 or shape[0] != n:
            raise DataError(
                f"{NAME}: image_features {fp} has shape {shape}; need ({n}, d), one row per line of split {split!r}"
            )
        feat = str(fp.resolve())
    corpora = {}
    for lang in wanted:
        path = _raw_file(task1, split, lang)
        lines = _read_lines(path)
        while len(lines) > n and not lines[-1].strip():
            lines.pop()
        if len(lines) != n:
            raise DataError(f"{NAME}: {path} has {len(lines)} lines but {split_file} names {n} images")
        keep = [i for i, t in enumerate(lines) if not is_blank(t)]  # an empty caption is left out
        corpora[lang] = Corpus(
            dataset=NAME,
            lang=lang,
            ids=[f"{split}-{i}" for i in keep],
            texts=[lines[i].strip() for i in keep],
            concepts=[images[i] for i in keep],
            image_paths=None if image_paths is None else [image_paths[i] for i in keep],
            image_features=feat,
            image_rows=None if feat is None else np.asarray(keep, dtype=np.int64),
        )
    return Dataset(name=NAME, corpora=corpora, description=f"{INFO.description} (split {split})")


INFO = register(
    DatasetInfo(
        name=NAME,
        loader=load,
        description=(
            "Multi30K task 1: Flickr30k captions translated into de, fr, cs (line-aligned with en); "
            "text-only unless Flickr30k images or features are given"
        ),
        has_images=False,
        has_concepts=True,
        source="https://github.com/multi30k/dataset (local copy: root=, $BACKRETRIEVAL_MULTI30K)",
        license="non-commercial research use (Multi30K README); Flickr30k image terms apply to images",
        example=lambda folder: DatasetExample(NAME, ("en", "de")),
    )
)
