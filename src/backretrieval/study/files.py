"""The study file on disk: its private mode, its SQLite companions, the lock that says it is in
use, and how a new study is moved into place.

A study ``STUDY.db`` lives with up to four companions in the same folder:

* ``STUDY.db-wal`` / ``STUDY.db-shm`` -- SQLite's write-ahead log and its index. While a server
  writes, acknowledged ratings may sit only in the ``-wal`` file; after a crash (``kill -9``)
  the next connection replays it. SQLite creates both with the database's own mode.
  (``STUDY.db-journal`` is the rollback journal of a database not in WAL mode; a study never
  is, but one left over is treated the same.)
* ``STUDY.db.lock`` -- an empty file. Every connection of :func:`store.connect` holds a shared
  ``flock`` on it for its lifetime, and a study server holds one for its whole life. Writing a
  new study over ``STUDY.db`` takes it exclusively without waiting, so a study that is being
  served (or read by another command) is never replaced; when a server dies, the operating
  system releases its lock. Never delete the lock file while a server runs.

A new study is built under a temporary name and moved into place by :func:`install`, which first
removes the old study's ``-wal`` / ``-shm`` / ``-journal``: a log left by the old study
would otherwise be replayed into the new one (its ratings and events would appear in it, and
pages of two different databases would be mixed into a damaged file).

The study file holds the raters' link tokens, so it is created with mode 0600
(:data:`PRIVATE_MODE`) explicitly; exported results (``ratings.csv``, the analysis) follow the
user's umask like other result files.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..core import BackretrievalError
from ..core.locks import LockBusy, lock_holders, take_lock

PRIVATE_MODE = 0o600
COMPANIONS = ("-wal", "-shm", "-journal")


class InUse(BackretrievalError):
    """The study is open in a server or another command, so it cannot be replaced now."""


def companions(db: str | os.PathLike) -> list[Path]:
    """The paths SQLite may keep beside ``db``: ``-wal``, ``-shm``, ``-journal``."""
    return [Path(f"{db}{suffix}") for suffix in COMPANIONS]


def lock_path(db: str | os.PathLike) -> Path:
    """``STUDY.db.lock`` beside the (symlink-resolved) study file."""
    db = Path(db).resolve()
    return db.with_name(db.name + ".lock")


class Lock:
    """An ``flock`` on a study's lock file, held until :meth:`release` (or garbage collection,
    or the death of the process)."""

    def __init__(self, fd: int | None, path: Path):
        self.fd, self.path = fd, path

    def release(self) -> None:
        """Release the lock (closing its descriptor); releasing twice does nothing."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the lock

    def __del__(self) -> None:
        self.release()

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(db: str | os.PathLike, *, exclusive: bool, wait: bool) -> Lock:
    """Lock the study ``db``: shared (servers and connections) or exclusive (replacing it).

    Args:
        db: the study file (it need not exist).
        exclusive: take the lock exclusively (only to replace the study).
        wait: block until the lock is free; else raise :class:`InUse` at once.

    Returns:
        The held :class:`Lock`. Where locks cannot be taken (no ``fcntl``, a read-only folder,
        a file system without ``flock``) a :class:`Lock` that holds nothing.

    Raises:
        InUse: ``wait`` is false and another holder conflicts.
    """
    path = lock_path(db)
    try:  # None on read-only media (nothing can replace the study either) or without flock
        return Lock(take_lock(path, exclusive=exclusive, wait=wait, mode=PRIVATE_MODE), path)
    except LockBusy:
        raise InUse(
            f"{db} is in use{describe_holders(db)}: a study server (backretrieval study serve) or another "
            f"backretrieval command has it open (it holds {path}); stop it before replacing the study, "
            "or choose another --out"
        ) from None


def in_use(db: str | os.PathLike) -> bool:
    """Whether a server or connection holds the study ``db`` now (never creates the lock file)."""
    if not lock_path(db).exists():
        return False
    try:
        acquire(db, exclusive=True, wait=False).release()
    except InUse:
        return True
    return False


def describe_holders(db: str | os.PathLike) -> str:
    """`` (process 123, 456)``: the processes that hold the study's lock, as far as
    ``/proc/locks`` tells (Linux); an empty string where it cannot be told."""
    return lock_holders(lock_path(db))


def install(tmp: str | os.PathLike, out: str | os.PathLike) -> None:
    """Move the finished study file ``tmp`` onto ``out``: under the exclusive lock of ``out``,
    remove ``out``'s ``-wal`` / ``-shm`` / ``-journal``, then ``os.replace`` and fsync the folder.

    Args:
        tmp: the complete new study file (same folder as ``out``), its connections closed.
        out: where the study goes; an existing study there is replaced with all its ratings.

    Raises:
        InUse: a server or another connection holds ``out``; nothing was changed.
    """
    out = Path(out)
    with acquire(out, exclusive=True, wait=False):
        for p in companions(out):  # first: never a moment with the new file and the old log
            p.unlink(missing_ok=True)
        os.replace(tmp, out)
        fsync_dir(out.parent)


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def private_tempfile(out: str | os.PathLike) -> Path:
    """An empty temporary file beside ``out`` with mode 0600 (set explicitly: it will hold
    rater tokens whatever the umask or the way it was created)."""
    import tempfile

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.tmp-{os.getpid()}-")  # names its writer (core.io.sweep_temp_files)
    try:
        os.fchmod(fd, PRIVATE_MODE)
    finally:
        os.close(fd)
    return Path(tmp)


def remove_tempfile(tmp: str | os.PathLike) -> None:
    """Remove a temporary study file and any SQLite companions of it."""
    for p in (Path(tmp), *companions(tmp)):
        p.unlink(missing_ok=True)


def umask() -> int:
    """The process umask, read without changing it where Linux tells it (``/proc/self/status``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)  # elsewhere: set and restore (briefly process-wide)
    os.umask(old)
    return old


def public_mode(path: str | os.PathLike) -> None:
    """Give an exported file the mode a plain ``open()`` would: ``0666 & ~umask``."""
    os.chmod(path, 0o666 & ~umask())
