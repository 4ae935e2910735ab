"""The one file lock: an advisory ``flock`` on a lock file (POSIX), and who holds it.

:func:`take_lock` is what the output folder's lock (:func:`backretrieval.core.io.folder_lock`), a
study's lock (:mod:`backretrieval.study.files`) and :func:`held_lock` are built on; :func:`held_lock`
holds the ONNX export's lock, the embedding cache's lock on a namespace whose texts are being sent
(:func:`backretrieval.encoders.cache.sending`) and the price book's lock on its records. Where locks cannot be taken (no ``fcntl``, a lock file that cannot be created, a
file system without ``flock``) it returns None and the caller goes on without a lock; a lock that
another process holds raises :class:`LockBusy` (or is waited for). Closing the descriptor releases
the lock, and so does the end of the process.
"""
from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Callable, Iterator

try:  # POSIX; elsewhere nothing is locked
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class LockBusy(Exception):
    """Another holder conflicts with the lock asked for (and the caller would not wait)."""


def take_lock(path: str | os.PathLike, *, exclusive: bool = True, wait: bool = False, mode: int = 0o666,
              same_file: bool = False) -> int | None:
    """An ``flock`` on the file ``path`` (created with ``mode`` if needed).

    Args:
        path: the lock file.
        exclusive: an exclusive lock (else shared).
        wait: block until the lock is free (else :class:`LockBusy` at once).
        mode: the permissions of a lock file created now (before the umask).
        same_file: make sure the lock is held on the file that is at ``path`` now (a holder that
            ends may remove the file while this one waits for it: then the new file is locked).

    Returns:
        The descriptor that holds the lock; None where locks cannot be taken.

    Raises:
        LockBusy: ``wait`` is false and another holder conflicts.
    """
    if fcntl is None:
        return None
    for _ in range(10 if same_file else 1):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), mode)
        except OSError:
            return None
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB))
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LockBusy(str(path)) from None
            return None  # flock not supported here (ENOLCK, EOPNOTSUPP, ...)
        if not same_file:
            return fd
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    return None


@contextlib.contextmanager
def held_lock(path: str | os.PathLike, on_busy: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (its folder and the file created if needed) for the
    block, waiting for it; where locks cannot be taken the block runs without one.

    Args:
        path: the lock file.
        on_busy: called once, before waiting, when another holder has the lock (e.g. to say
            that this run waits for it); None: wait without a word.

    Yields:
        Nothing; the lock is released when the block ends.
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = take_lock(path, wait=on_busy is None)
    except LockBusy:
        on_busy()  # type: ignore[misc]
        fd = take_lock(path, wait=True)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def lock_holders(path: str | os.PathLike) -> str:
    """`` (process 123, 456)``: the processes that hold an ``flock`` on ``path``, as far as
    ``/proc/locks`` tells (Linux; this process is named as such); an empty string where it cannot
    be told.

    Args:
        path: the lock file.

    Returns:
        The text to append to a message, or "".
    """
    try:
        ino = Path(path).stat().st_ino
        text = Path("/proc/locks").read_text()
    except OSError:
        return ""
    pids = []
    for line in text.splitlines():
        f = line.split()
        # "1: FLOCK  ADVISORY  READ  1234 08:01:5678 0 EOF" (blocked waiters: "1: -> FLOCK ...")
        if len(f) >= 6 and f[1] == "FLOCK" and f[5].rsplit(":", 1)[-1] == str(ino):
            pids.append("this process" if f[4] == str(os.getpid()) else f[4])
    return f" (process {', '.join(dict.fromkeys(pids))})" if pids else ""
