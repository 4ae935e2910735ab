"""``generic``: the user's own items from a .jsonl / .json / .csv / .parquet file.

One row per item. Columns:

* required: ``id`` (unique within a language), ``lang``, ``text``;
* optional: ``concept`` (the cross-lingual link: rows of two languages with the same concept
  are a ground-truth pair; empty = unknown), ``title`` and ``body`` (kept in ``extra``);
* ``id`` and ``concept`` are strings or integers (``7`` and ``"7"`` are the same id); ``lang``,
  ``text``, ``title``, ``body`` and ``image`` are strings. A value of another type (``true``,
  ``1.5``, a list) is refused with its row, not turned into a string. A text without a visible
  character (only white space, zero-width or other format characters) is empty;
* images, optional, one of two ways per row, the same way for all rows of a language:
  ``image`` -- a file path (relative paths are resolved against the data file's folder), or
  ``image_feature_row`` -- a non-negative integer row of the precomputed feature matrix given
  with the dataset option ``image_features=PATH.npy`` (shape ``(n_images, d)``).

A ``.json`` file is either a JSON array of objects or JSON lines. A ``.csv`` file is separated by
commas, semicolons, tabs or pipes (sniffed from the header, which must name the required
columns). Text files must be UTF-8 (a byte-order mark is dropped). The dataset name is the file stem. Every error names the offending
file and line (JSON lines), item (JSON array) or row (CSV, parquet; data rows counted from 1),
id, column or path.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core import DataError
from ..core.io import json_lines, json_text
from ..core.text import decode_utf8, is_blank
from .corpus import Corpus, Dataset, require_languages
from .registry import DatasetExample, DatasetInfo, register

GENERIC_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")

NAME = "generic"
REQUIRED = ("id", "lang", "text")
_INT_RE = re.compile(r"^[+-]?\d+$")


def _missing(v: Any) -> bool:
    """None, NaN, pandas' missing values, and strings without a visible character."""
    if v is None:
        return True
    if isinstance(v, (float, np.floating)) and math.isnan(v):
        return True
    if isinstance(v, str) and is_blank(v):
        return True
    return type(v).__name__ in ("NAType", "NaTType")  # pandas' missing values, without importing it


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    return decode_utf8(raw, path)


def _read_json(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows, and where each row is in the file (``line N`` or ``item N``)."""
    raw = _read_text(path)
    stripped = raw.lstrip()
    if path.suffix.lower() == ".json" and stripped.startswith("["):
        rows = json_text(raw, str(path))
        if not isinstance(rows, list):
            raise DataError(f"{path}: expected a JSON array of objects")
        where = [f"item {i + 1}" for i in range(len(rows))]
    else:
        rows, where = [], []
        for n, row in json_lines(raw.splitlines(), str(path)):
            rows.append(row)
            where.append(f"line {n}")
    for r, w in zip(rows, where):
        if not isinstance(r, dict):
            raise DataError(f"{path}: {w} is not a JSON object")
    return rows, where


def _read_table(path: Path) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Rows as dicts, the columns present, and where each row is (``line N``, ``item N`` or
    ``row N``, counting data rows from 1)."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        rows, where = _read_json(path)
        columns = list(dict.fromkeys(k for r in rows for k in r))
        return rows, columns, where
    import pandas as pd

    try:
        if suffix == ".csv":
            text = _read_text(path)
            df = pd.read_csv(io.StringIO(text), sep=_csv_delimiter(path, text), dtype=str, keep_default_na=False)
        elif suffix == ".parquet":
            df = pd.read_parquet(path)
        else:
            raise DataError(f"{path}: unsupported file type; use one of {', '.join(GENERIC_SUFFIXES)}")
    except DataError:
        raise
    except (OSError, ValueError) as e:  # pandas/pyarrow parse errors (ArrowInvalid is a ValueError)
        raise DataError(f"{path}: cannot read {suffix} file: {e}") from None
    columns = [str(c) for c in df.columns]
    df.columns = columns
    return df.to_dict(orient="records"), columns, [f"row {i + 1}" for i in range(len(df))]


DELIMITERS = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}


def _csv_delimiter(path: Path, text: str) -> str:
    """The delimiter of a CSV file, sniffed from its header: the first of :data:`DELIMITERS`
    that splits the header into columns including the required ones. A header that no
    delimiter splits that way is read as comma-separated (the missing column is then named),
    unless another delimiter is plainly meant (it occurs more often): then refused, naming it."""
    header = next((line for line in text.splitlines() if line.strip()), "")

    def columns(d: str) -> list[str]:
        return [c.strip().strip('"').strip() for c in header.split(d)]

    for d in DELIMITERS:
        if all(r in columns(d) for r in REQUIRED):
            return d
    likely = max(DELIMITERS, key=header.count)
    if likely != "," and header.count(likely) > header.count(","):
        missing = [r for r in REQUIRED if r not in columns(likely)]
        raise DataError(
            f"{path}: the header is {DELIMITERS[likely]}-separated ({header[:80]!r}) but lacks the required "
            f"column{'s' * (len(missing) > 1)} {', '.join(map(repr, missing))}; columns present: "
            f"{', '.join(columns(likely))}"
        )
    return ","


def _key(v: Any, column: str, where: str) -> str:
    """An id or concept as a string. Strings and integers are accepted (an integral float too:
    parquet stores an integer column with gaps as floats); anything else is named, not
    stringified (``True``, ``1.5``, ``[1, 2]`` would silently become ids that match nothing)."""
    if isinstance(v, str):
        return v
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return str(int(v))
    if isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer():
        return str(int(v))
    raise DataError(f"{where}: {column} must be a string or an integer, got {type(v).__name__} {v!r}")


def _string(v: Any, column: str, where: str) -> str:
    if not isinstance(v, str):
        raise DataError(f"{where}: {column} must be a string, got {type(v).__name__} {v!r}")
    return v


def _invisible_note(text: Any) -> str:
    """For a text of invisible characters only: which ones (they do not show in a message)."""
    if not isinstance(text, str) or not text or text.isspace():
        return ""
    shown = " ".join(f"U+{ord(c):04X}" for c in dict.fromkeys(text) if not c.isspace())
    return f" (only invisible characters: {shown})"


def _feature_row(v: Any, where: str) -> int:
    if isinstance(v, (bool, np.bool_)):
        ok = False
    elif isinstance(v, (int, np.integer)) or (isinstance(v, (float, np.floating)) and float(v).is_integer()):
        ok, v = True, int(v)
    elif isinstance(v, str) and _INT_RE.match(v.strip()):
        ok, v = True, int(v.strip())
    else:
        ok = False
    if not ok:
        raise DataError(f"{where}: image_feature_row must be a non-negative integer, got {v!r}")
    if v < 0:
        raise DataError(f"{where}: image_feature_row must be a non-negative integer, got {v}")
    return v


def _resolve_features(option: str | os.PathLike, base: Path) -> Path:
    p = Path(option).expanduser()
    if not p.is_absolute() and not p.is_file() and (base / p).is_file():
        p = base / p
    if not p.is_file():
        raise DataError(f"image_features: file not found: {p}")
    return p.resolve()


def open_feature_file(path: str | os.PathLike, what: str) -> np.ndarray:
    """The one array of a feature ``.npy`` file, memory-mapped (nothing is read into memory).

    Args:
        path: the file.
        what: how errors name its option, e.g. ``"image_features"``.

    Returns:
        The array (read-only memory map; its shape is the caller's to check).

    Raises:
        DataError: the file is empty, unreadable, not a ``.npy`` (an ``.npz`` archive is named
            with its arrays), or holds Python objects.
    """
    path = Path(path)
    try:
        empty = path.stat().st_size == 0
        arr = None if empty else np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise DataError(f"{what}: cannot read {path}: {e}") from None
    if arr is None:
        raise DataError(f"{what}: cannot read {path}: the file is empty (0 bytes)")
    if not isinstance(arr, np.ndarray):  # an NpzFile
        names = ", ".join(arr.files) or "none"
        arr.close()
        raise DataError(f"{what}: {path} is an .npz archive (arrays: {names}); give a .npy file holding one "
                        "(n_images, d) array (numpy.save)")
    return arr


def load(
    path: str | os.PathLike,
    langs: Sequence[str] | None = None,
    *,
    image_features: str | os.PathLike | None = None,
    name: str | None = None,
) -> Dataset:
    """Load a user file (see the module docstring for the columns)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"generic dataset: file not found: {path}")
    if path.suffix.lower() not in GENERIC_SUFFIXES:
        raise DataError(f"{path}: unsupported file type; use one of {', '.join(GENERIC_SUFFIXES)}")
    rows, columns, where = _read_table(path)
    return build_dataset(rows, columns, where, source=str(path), base=path.resolve().parent, name=name or path.stem,
                         langs=langs, image_features=image_features, description=f"items read from {path}")


def build_dataset(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    where: Sequence[str],
    *,
    source: str,
    base: Path,
    name: str,
    langs: Sequence[str] | None = None,
    image_features: str | os.PathLike | None = None,
    description: str = "",
) -> Dataset:
    """A :class:`Dataset` from rows in the generic format (the module docstring), every value
    checked and every problem named by ``source`` and the row's ``where`` (``line 3``, ``row 7``).
    Used by this loader and by other row sources (e.g. Hugging Face datasets).

    Args:
        rows: one dict per item, keys among the generic columns.
        columns: the columns present.
        where: a description of each row's place, for messages.
        source: the file or object the rows come from, for messages.
        base: folder that relative image paths and ``image_features`` are resolved against.
        name: the dataset name.
        langs: languages to keep (None: all).
        image_features: the feature matrix ``image_feature_row`` refers to.
        description: the dataset's description.

    Returns:
        The dataset, one corpus per language.

    Raises:
        DataError: a missing column, a bad value, a missing image, a duplicate id, ... named.
    """
    path = source
    dsname = name
    feat_path, n_feat_rows = _check_columns(columns, image_features, base, path)
    has_image_col, has_row_col = "image" in columns, "image_feature_row" in columns
    by_lang: dict[str, dict[str, list[Any]]] = {}
    seen: dict[str, dict[str, str]] = {}
    for i, r in enumerate(rows):
        rid, at, lang, text = _row_head(r, path, where[i])
        first = seen.setdefault(lang, {}).get(rid)
        if first is not None:
            raise DataError(f"{at}: duplicate id {rid!r} in language {lang!r} (first at {first})")
        seen[lang][rid] = where[i]
        img = r.get("image") if has_image_col else None
        frow = r.get("image_feature_row") if has_row_col else None
        img, frow = _row_image(None if _missing(img) else img, None if _missing(frow) else frow, at, base, rows, source,
                               feat_path, n_feat_rows)
        concept = r.get("concept")
        concept = None if _missing(concept) else _key(concept, "concept", at)
        col = by_lang.setdefault(
            lang, {"rows": [], "ids": [], "texts": [], "concepts": [], "images": [], "frows": [], "title": [], "body": []}
        )
        col["rows"].append(where[i])
        col["ids"].append(rid)
        col["texts"].append(text)
        col["concepts"].append(concept)
        col["images"].append(img)
        col["frows"].append(frow)
        for k in ("title", "body"):
            v = r.get(k)
            col[k].append("" if _missing(v) else _string(v, k, at))

    if not by_lang:
        raise DataError(f"{path}: no items")
    wanted = require_languages(by_lang, langs, dsname)
    corpora = {lang: _corpus(by_lang[lang], lang, columns, feat_path, dsname, path) for lang in wanted}
    return Dataset(name=dsname, corpora=corpora, description=description or f"items read from {path}")


def _check_columns(columns: Sequence[str], image_features: str | os.PathLike | None, base: Path,
                   path: str) -> tuple[Path | None, int]:
    """The required columns are there, and ``image_feature_row`` comes with ``image_features``
    (and only then): the feature file's path and row count (None, 0 without one)."""
    for col in REQUIRED:
        if col not in columns:
            raise DataError(
                f"{path}: missing required column {col!r}; columns present: {', '.join(columns) or '(none)'}"
            )
    has_row_col = "image_feature_row" in columns
    if has_row_col and image_features is None:
        raise DataError(
            f"{path}: column 'image_feature_row' needs the option image_features=PATH.npy "
            "(the feature matrix the rows refer to)"
        )
    if image_features is None:
        return None, 0
    if not has_row_col:
        raise DataError(
            f"{path}: the option image_features={image_features} needs a column 'image_feature_row'; "
            f"columns present: {', '.join(columns)}"
        )
    feat_path = _resolve_features(image_features, base)
    arr = open_feature_file(feat_path, "image_features")
    if arr.ndim != 2:
        raise DataError(f"image_features: {feat_path} must be a 2-D (n_images, d) array, got shape {arr.shape}")
    n_feat_rows = arr.shape[0]
    del arr
    return feat_path, n_feat_rows


def _row_head(r: dict[str, Any], path: str, where: str) -> tuple[str, str, str, str]:
    """A row's id, how messages name the row (``PATH: id 'ID' (line 3)``), its language and its
    text, each checked."""
    loc = f"{path}: {where}"
    rid = r.get("id")
    if _missing(rid):
        raise DataError(f"{loc} has no id")
    rid = _key(rid, "id", loc)
    at = f"{path}: id {rid!r} ({where})"
    lang = r.get("lang")
    if _missing(lang):
        raise DataError(f"{at} has no lang")
    lang = _string(lang, "lang", at).strip()
    text = r.get("text")
    if _missing(text):
        raise DataError(f"{at}: empty or whitespace-only text{_invisible_note(text)}")
    return rid, at, lang, _string(text, "text", at)


def _row_image(img: Any, frow: Any, at: str, base: Path, rows: Sequence[dict[str, Any]], source: str,
               feat_path: Path | None, n_feat_rows: int) -> tuple[str | None, int | None]:
    """A row's image file (resolved against ``base``, there) or feature row (in range), at most one."""
    if img is not None and frow is not None:
        raise DataError(f"{at}: give either image or image_feature_row, not both")
    if img is not None:
        p = Path(_string(img, "image", at)).expanduser()
        if not p.is_absolute():
            p = base / p
        if not p.is_file():
            raise DataError(f"{at}: image file not found: {p}; {_missing_images_note(rows, base, source)}")
        img = str(p)
    if frow is not None:
        frow = _feature_row(frow, at)
        if frow >= n_feat_rows:
            raise DataError(f"{at}: image_feature_row {frow} is out of range for {feat_path} ({n_feat_rows} rows)")
    return img, frow


def _corpus(col: dict[str, list[Any]], lang: str, columns: Sequence[str], feat_path: Path | None, dsname: str,
            path: str) -> Corpus:
    """One language's corpus from its checked columns (images for all items or none)."""
    image_paths = image_rows = None
    feats = None
    if _all_or_none(col, "images", path, lang, "image", "an image"):
        image_paths = col["images"]
    if _all_or_none(col, "frows", path, lang, "image_feature_row", "a row"):
        if image_paths is not None:
            raise DataError(f"{path}: language {lang!r} mixes image paths and image_feature_row; use one of them")
        feats = str(feat_path)
        image_rows = np.asarray(col["frows"], dtype=np.int64)
    extra = {k: col[k] for k in ("title", "body") if k in columns}
    return Corpus(dataset=dsname, lang=lang, ids=col["ids"], texts=col["texts"],
                  concepts=col["concepts"] if "concept" in columns else None, image_paths=image_paths,
                  image_features=feats, image_rows=image_rows, extra=extra)


def _missing_images_note(rows: Sequence[dict[str, Any]], base: Path, source: str) -> str:
    """How many rows name an image file that is not there, and where relative paths are looked
    for (the data file's folder), for the message about the first such row."""
    given = missing = 0
    for r in rows:
        img = r.get("image")
        if not isinstance(img, str) or _missing(img):
            continue
        given += 1
        p = Path(img).expanduser()
        missing += not (p if p.is_absolute() else base / p).is_file()
    folder = "the data file's folder, " if Path(source).is_file() and Path(source).resolve().parent == base else ""
    return (f"relative image paths are resolved against {folder}{base}; "
            f"{missing:,} of the {given:,} rows with an image name a file that is not there")


def _all_or_none(col: dict[str, list], key: str, path: Any, lang: str, field: str, thing: str) -> bool:
    """Whether the items of ``lang`` have column ``key`` (``field`` in the file) -- every one of
    them; raises naming the first item without it when only some do (``thing``: what to give)."""
    if all(x is None for x in col[key]):
        return False
    j = next((j for j, x in enumerate(col[key]) if x is None), None)
    if j is not None:
        raise DataError(
            f"{path}: id {col['ids'][j]!r} ({col['rows'][j]}) has no {field}, while other "
            f"{lang!r} items have one; give {thing} for every item of a language or none"
        )
    return True


EXAMPLE_ITEMS = (  # (concept, English, German): the example file's items
    ("dog", "dog\nan animal that barks", "Hund\nein Tier, das bellt"),
    ("cat", "cat\nan animal that purrs", "Katze\nein Tier, das schnurrt"),
    ("heart", "red heart\na symbol of love", "rotes Herz\nein Zeichen der Liebe"),
)


def example_rows(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of the generic format: three concepts in English and German, each with a title, a
    body and an image (a small PNG written in ``folder/images``, one per concept)."""
    from PIL import Image

    images = Path(folder) / "images"
    images.mkdir(parents=True, exist_ok=True)
    rows = []
    for k, (concept, *texts) in enumerate(EXAMPLE_ITEMS):
        image = images / f"{concept}.png"
        Image.new("RGB", (16, 16), (80 * k, 255 - 80 * k, 40)).save(image)
        for lang, text in zip(("en", "de"), texts):
            title, body = text.split("\n")
            rows.append({"id": f"{lang}-{k}", "lang": lang, "text": text, "concept": concept, "title": title,
                         "body": body, "image": str(image)})
    return rows


def write_example(folder: str | os.PathLike) -> Path:
    """The rows of :func:`example_rows` as ``folder/items.jsonl``; its path."""
    path = Path(folder) / "items.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in example_rows(folder)), encoding="utf-8")
    return path


INFO = register(
    DatasetInfo(
        name=NAME,
        loader=load,
        description=(
            "your own items from a .jsonl/.json/.csv/.parquet file: columns id, lang, text; optional "
            "concept, title, body, and image (a path) or image_feature_row (with image_features=PATH.npy)"
        ),
        has_images=False,
        has_concepts=False,
        source="a user file",
        license="the user's",
        claims=lambda spec: {"path": spec} if isinstance(spec, str) and (
            spec.lower().endswith(GENERIC_SUFFIXES) or Path(spec).exists()) else None,
        fallback=True,
        claims_text=f"a path to a {'/'.join(GENERIC_SUFFIXES)} file",
        describe=lambda spec: f"a data file ({Path(spec).name})",
        example=lambda folder: DatasetExample(str(write_example(folder)), ("en", "de")),
    )
)
