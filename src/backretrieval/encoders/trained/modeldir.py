"""One model-directory format for every trained model (Cr5, Triplet/TripletXL, M3L/PATR).

A model directory holds

* ``weights.npz`` -- every learned array under a plain name (``np.savez``; read back with
  ``allow_pickle=False``, so no pickled object can be stored or loaded);
* optional extra files named in ``model.json`` (e.g. Cr5's ``vocab/<lang>.txt``, M3L's
  ``split.json``), UTF-8 text or bytes;
* ``model.json``, written LAST, so a directory with it is complete::

    {"format": "backretrieval.model", "format_version": 1, "kind": "triplet",
     "hyper_parameters": {"method": "tripletxl", "layers": [300, 300], "lr": 0.01, ...},
     "arrays": ["b0", "b1", "w0", "w1"], "files": [],
     ...info: what training recorded (languages, sizes, history, ...)}

``hyper_parameters`` are the estimator's ``get_params()`` as typed JSON values (numbers stay
numbers, tuples become lists, ``None`` is ``null``); everything else at the top level is the
model's ``info``. Every file is written atomically (:mod:`backretrieval.core.io`); before
anything is written, an existing ``model.json`` (and the header of a directory written by an
older version: ``cr5.json``, ``config.json``) is removed, so an interrupted re-training leaves an
*incomplete* directory that no reader accepts -- never old metadata over new weights.

One reader, :func:`read_model_dir`, returns a :class:`ModelDir` (kind, hyper-parameters, info,
arrays) and raises :class:`ModelDirError` naming the directory or file: missing, incomplete, of
another kind, or of a newer format version than this code reads. It also reads the legacy
layouts -- Cr5's ``cr5.json`` + ``cr5.npz`` + ``vocab/``, Triplet's
``model.json`` with ``"format": 1``, M3L/PATR's ``config.json`` -- and converts each to the same
object (:mod:`.modeldir_legacy`), so they keep loading and give the same vectors. Re-saving into
such a directory writes the current format (the older header and Cr5's ``cr5.npz`` are removed
first).

Why hand-written: the pieces are the ecosystem's (``numpy.savez``, :mod:`json`, the project's
atomic writes); what is ours is only the header's schema and the readers of the three formats
this project wrote before, which no library knows.
"""
from __future__ import annotations

import json
import math
import numbers
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ...core import atomic_save_npz, atomic_write, atomic_write_text
from . import modeldir_legacy as legacy
from .modeldir_base import (
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    LEGACY_FILES,
    LEGACY_HEADERS,
    MODEL_FILE,
    RESERVED,
    WEIGHTS_FILE,
    ModelDir,
    ModelDirError,
    load_arrays,
)

__all__ = [
    "FORMAT", "FORMAT_VERSION", "KINDS", "MODEL_FILE", "RESERVED", "WEIGHTS_FILE",
    "ModelDir", "ModelDirError", "load_arrays", "read_model_dir", "write_model_dir",
]

# ----------------------------------------------------------------------------- writing
def _typed(value: Any, where: str, strict: bool = True) -> Any:
    """``value`` as a JSON value: tuples -> lists, numpy scalars and arrays -> Python values.

    A non-finite number is an error naming ``where`` when ``strict`` (hyper-parameters), else
    ``None`` (recorded statistics, as :func:`backretrieval.core.json_ready` does), and a path
    is its string; anything else JSON cannot hold (an object) is an error naming ``where``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        if not math.isfinite(value):
            if strict:
                raise ModelDirError(f"{where}: {value!r} is not a finite number")
            return None
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_typed(v, f"{where}[{i}]", strict) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return {str(k): _typed(v, f"{where}.{k}", strict) for k, v in value.items()}
    if not strict and isinstance(value, os.PathLike):
        return os.fspath(value)
    raise ModelDirError(f"{where}: a {type(value).__name__} cannot be saved as a typed JSON value")


def _safe_name(name: str, what: str) -> str:
    p = Path(name)
    if not name or p.is_absolute() or any(part in ("", ".", "..") or part.startswith(".") for part in p.parts):
        raise ModelDirError(f"{what} {name!r} cannot name a file inside a model directory")
    if p.as_posix() in (MODEL_FILE, WEIGHTS_FILE, *LEGACY_HEADERS, *LEGACY_FILES):
        raise ModelDirError(f"{what} {name!r} is reserved")
    return p.as_posix()


def write_model_dir(
    path: str | Path,
    kind: str,
    *,
    hyper_parameters: Mapping[str, Any],
    info: Mapping[str, Any],
    arrays: Mapping[str, np.ndarray],
    files: Mapping[str, str | bytes] | None = None,
) -> Path:
    """Write a model directory (see the module docstring); ``model.json`` last.

    Args:
        path: the directory (created).
        kind: one of :data:`KINDS`.
        hyper_parameters: the estimator's parameters (typed JSON values, see :func:`_typed`).
        info: what training recorded; must not use the header's own keys.
        arrays: learned arrays by name (no object arrays).
        files: extra files, relative path -> text (UTF-8) or bytes.

    Returns:
        ``path``.

    Raises:
        ModelDirError: an unknown kind, a value JSON cannot hold, an object array, a reserved or
            unsafe file name, or an ``info`` key that is a header key.
    """
    if kind not in KINDS:
        raise ModelDirError(f"unknown model kind {kind!r}; known: {', '.join(KINDS)}")
    clash = sorted(set(info) & set(RESERVED))
    if clash:
        raise ModelDirError(f"model info may not use the header key(s) {', '.join(clash)}")
    hp = _typed(dict(hyper_parameters), "hyper_parameters")
    inf = _typed(dict(info), "info", strict=False)
    arr = {}
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.dtype == object:
            raise ModelDirError(f"array {name!r} holds Python objects; a model directory stores plain arrays only")
        arr[str(name)] = a
    extra = {_safe_name(n, "file"): v for n, v in dict(files or {}).items()}
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    for stale in (MODEL_FILE, *LEGACY_HEADERS, *LEGACY_FILES):  # the directory is incomplete until model.json is back
        (p / stale).unlink(missing_ok=True)
    atomic_save_npz(p / WEIGHTS_FILE, **arr)
    for name, content in extra.items():
        if isinstance(content, str):
            atomic_write_text(p / name, content)
        else:
            with atomic_write(p / name, "wb") as fh:
                fh.write(content)
    header = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": kind, "hyper_parameters": hp,
              "arrays": sorted(arr), "files": sorted(extra), **inf}
    atomic_write_text(p / MODEL_FILE, json.dumps(header, indent=1, ensure_ascii=False, allow_nan=False))
    return p


# ----------------------------------------------------------------------------- reading
def _read_json(f: Path) -> Any:
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelDirError(f"cannot read {f}: {e}") from None
    except RecursionError:
        raise ModelDirError(f"cannot read {f}: JSON nested too deeply (arrays or objects inside each other)") from None


def read_model_dir(path: str | Path, kinds: Sequence[str] | str | None = None, *, arrays: bool = True) -> ModelDir:
    """Read a model directory of the current format or of a legacy layout.

    Args:
        path: the directory.
        kinds: the kinds the caller accepts (None: any).
        arrays: load ``weights.npz`` (False: only check that it is there).

    Returns:
        A :class:`ModelDir`.

    Raises:
        ModelDirError: the directory does not exist; it has no header (incomplete: training did
            not finish); the header is unreadable, of an unknown format, of a newer format
            version, or of another kind; a listed array or file is missing.
    """
    p = Path(path).expanduser()
    want = (kinds,) if isinstance(kinds, str) else tuple(kinds or KINDS)
    what = "/".join(want)
    if not p.is_dir():
        raise ModelDirError(f"{what} model directory not found: {path} (not a folder)")
    mf = p / MODEL_FILE
    if mf.is_file():
        head = _read_json(mf)
        if isinstance(head, dict) and head.get("format") == 1 and "kind" not in head:
            md = legacy.read_triplet(p, head, arrays)
        elif not isinstance(head, dict) or head.get("format") != FORMAT:
            raise ModelDirError(f"{mf} is not a model header (format {head.get('format') if isinstance(head, dict) else None!r})")
        else:
            md = _read_current(p, head, arrays)
    elif (p / legacy.CR5_HEADER).is_file():
        md = legacy.read_cr5(p, _read_json(p / legacy.CR5_HEADER), arrays)
    elif (p / legacy.M3L_HEADER).is_file():
        md = legacy.read_m3l(p, _read_json(p / legacy.M3L_HEADER), arrays)
    else:
        raise ModelDirError(
            f"{p}: no {MODEL_FILE}: not a trained {what} model directory, or its training did not finish"
        )
    if md.kind not in want:
        raise ModelDirError(f"{p / md.header} holds a {md.kind} model, not a {what} model")
    return md


def _read_current(p: Path, head: dict[str, Any], with_arrays: bool) -> ModelDir:
    mf = p / MODEL_FILE
    version = head.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ModelDirError(f"{mf}: format_version {version!r} is not a number")
    if version > FORMAT_VERSION:
        raise ModelDirError(
            f"{mf}: format version {version} is newer than this package reads ({FORMAT_VERSION}); update backretrieval"
        )
    kind = head.get("kind")
    if kind not in KINDS:
        raise ModelDirError(f"{mf}: unknown model kind {kind!r}; known: {', '.join(KINDS)}")
    hp = head.get("hyper_parameters")
    names, files = head.get("arrays"), head.get("files", [])
    if not isinstance(hp, dict) or not isinstance(names, list) or not isinstance(files, list):
        raise ModelDirError(f"{mf}: hyper_parameters, arrays or files are missing or malformed")
    for name in files:
        if not (p / _safe_name(str(name), "file")).is_file():
            raise ModelDirError(f"{p / name} is missing: the model directory is incomplete")
    if with_arrays:
        arr = load_arrays(p / WEIGHTS_FILE, names)
    elif not (p / WEIGHTS_FILE).is_file():
        raise ModelDirError(f"{p / WEIGHTS_FILE} is missing: the model directory is incomplete")
    else:
        arr = {}
    info = {k: v for k, v in head.items() if k not in RESERVED}
    return ModelDir(p, kind, hp, info, arr, tuple(files))
