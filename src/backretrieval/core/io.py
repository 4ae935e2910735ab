"""Atomic writes and the cache directory.

A file is written under a temporary name in the same directory and moved into place with
``os.replace``: readers see either the old file or the complete new one, never a half-written
file, and an interrupted run leaves at most a stray ``*.tmp-*`` file that is ignored.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np


def cache_dir(*parts: str) -> Path:
    """The user cache (``$BACKRETRIEVAL_CACHE``, else ``$XDG_CACHE_HOME/backretrieval``,
    else ``~/.cache/backretrieval``), joined with ``parts`` and created."""
    root = os.environ.get("BACKRETRIEVAL_CACHE")
    if root:
        base = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = Path(xdg) / "backretrieval" if xdg else Path.home() / ".cache" / "backretrieval"
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb") -> Iterator[io.IOBase]:
    """Open a temporary file beside ``path``; on clean exit fsync it and move it onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-")
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path, "w") as fh:
        fh.write(text)


def atomic_save_npz(path: str | os.PathLike, **arrays: np.ndarray) -> None:
    """``np.savez`` (uncompressed) to ``path`` atomically; arrays of Python objects are refused."""
    with atomic_write(path, "wb") as fh:
        np.savez(fh, **arrays)


def content_hash(data: bytes | str, digest_size: int = 16) -> str:
    """Hex BLAKE2b digest of ``data`` (str is UTF-8 encoded)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.blake2b(data, digest_size=digest_size).hexdigest()
