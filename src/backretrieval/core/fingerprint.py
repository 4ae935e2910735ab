"""Content fingerprints of input files and directories (model files, feature matrices, images).

A fingerprint is a hex BLAKE2b digest of the bytes, so it changes whenever the content does --
whatever happens to the file's size or modification time. Hashing a large model directory
takes a moment (about 1 s per GB), so digests are memoised *within this process* by
``(absolute path, size, mtime_ns, inode, ctime_ns)``; a new process always hashes again.
"""
from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

DIGEST_SIZE = 16
_CHUNK = 1 << 20
_memo: dict[tuple, str] = {}
_lock = threading.Lock()


def _stat_key(path: Path) -> tuple:
    st = path.stat()
    return (str(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def file_digest(path: str | os.PathLike[str], *, memo: bool = True) -> str:
    """Hex BLAKE2b digest of a file's bytes.

    Args:
        path: the file.
        memo: reuse a digest computed earlier in this process for the same path, size,
            modification time, inode and change time (False: always read the file).

    Returns:
        32 hex characters.

    Raises:
        OSError: the file cannot be read.
    """
    p = Path(path).absolute()
    key = _stat_key(p) if memo else None
    if key is not None:
        with _lock:
            hit = _memo.get(key)
        if hit is not None:
            return hit
    h = hashlib.blake2b(digest_size=DIGEST_SIZE)
    with open(p, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            h.update(block)
    digest = h.hexdigest()
    if key is not None:
        with _lock:
            _memo[key] = digest
    return digest


def dir_digest(path: str | os.PathLike[str], *, memo: bool = True) -> str:
    """Hex BLAKE2b digest of a directory: every file's relative path and content digest.

    Files and folders whose name starts with a dot (``.git``, ``.cache``, editor files) are
    left out; symbolic links are followed.

    Args:
        path: the directory.
        memo: as for :func:`file_digest`, per file.

    Returns:
        32 hex characters.

    Raises:
        OSError: a file cannot be read.
    """
    root = Path(path)
    h = hashlib.blake2b(digest_size=DIGEST_SIZE)
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not f.is_file():
            continue
        h.update(rel.as_posix().encode("utf-8") + b"\0" + file_digest(f, memo=memo).encode() + b"\n")
    return h.hexdigest()


def clear_memo() -> None:
    """Forget every memoised digest (the next call reads the files again)."""
    with _lock:
        _memo.clear()
