"""What the model-directory writer (:mod:`.modeldir`) and the legacy readers
(:mod:`.modeldir_legacy`) share: the file names, the error, the :class:`ModelDir` a reader
returns, and the array loader. Both import it; it imports neither.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...core import EncoderError, content_hash

FORMAT = "backretrieval.model"
FORMAT_VERSION = 1
MODEL_FILE = "model.json"
WEIGHTS_FILE = "weights.npz"
KINDS = ("cr5", "triplet", "m3l")
RESERVED = ("format", "format_version", "kind", "hyper_parameters", "arrays", "files")
LEGACY_HEADERS = ("cr5.json", "config.json")  # headers of the legacy layouts
LEGACY_FILES = ("cr5.npz",)  # Cr5's arrays file before this format


class ModelDirError(EncoderError):
    """A model directory is missing, incomplete, of another kind, or of a newer format version."""


@dataclasses.dataclass(frozen=True)
class ModelDir:
    """A model directory as read by :func:`read_model_dir`.

    Attributes:
        path: the directory.
        kind: ``"cr5"``, ``"triplet"`` or ``"m3l"`` (the estimator family; the variant --
            Triplet vs TripletXL, M3L vs PATR -- is a hyper-parameter).
        hyper_parameters: the estimator's parameters, typed JSON values (a directory written
            before this format holds what it recorded, converted to the same names).
        info: everything else the training recorded (sizes, languages, history, ...).
        arrays: the learned arrays by name (empty when read with ``arrays=False``).
        files: relative paths of the extra files (e.g. ``vocab/en.txt``).
        header: the file that describes the directory (``model.json``; for older directories
            ``cr5.json`` or ``config.json``).
        legacy: None for the current format, else the older format that was read
            (``"cr5-1"``, ``"triplet-1"``, ``"m3l-1"``).
    """

    path: Path
    kind: str
    hyper_parameters: dict[str, Any]
    info: dict[str, Any]
    arrays: dict[str, np.ndarray]
    files: tuple[str, ...] = ()
    header: str = MODEL_FILE
    legacy: str | None = None

    def files_hash(self, *names: str) -> str:
        """Content hash (16 hex) of the header, then ``weights.npz`` (or the given files),
        joined by NUL bytes: it changes whenever the saved model does."""
        parts = [self.header, *(names or (WEIGHTS_FILE,))]
        return content_hash(b"\0".join((self.path / n).read_bytes() for n in parts), 8)


def load_arrays(f: Path, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file (``allow_pickle=False``), all or the given names.

    Raises:
        ModelDirError: the file is missing or unreadable, or lacks a named array.
    """
    if not f.is_file():
        raise ModelDirError(f"{f} is missing: the model directory is incomplete")
    try:
        with np.load(f, allow_pickle=False) as z:
            missing = [n for n in (names or ()) if n not in z.files]
            if missing:
                raise ModelDirError(f"{f} lacks array(s) {', '.join(missing)}: the model directory is incomplete")
            return {n: z[n] for n in (names if names is not None else z.files)}
    except (OSError, ValueError) as e:
        raise ModelDirError(f"cannot read {f}: {e}") from None
