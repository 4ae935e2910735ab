"""Atomic writes, the cache directory and checks of output locations.

A file is written under a temporary name in the same directory and moved into place with
``os.replace``: readers see either the old file or the complete new one, never a half-written
file. The temporary name, ``.NAME.tmp-PID-XXXX``, names the writing process: a writer killed
mid-write (``kill -9``) leaves it behind, and the next run that holds the folder
(:func:`folder_lock`) removes the temporary files of writers that are gone
(:func:`sweep_temp_files`).

Result files get the mode a plain ``open()`` would give them (``0o666`` less the umask), so they
can be shared like any other file; a caller that writes a secret asks for ``private=True``
(``0o600``). Output and cache folders are checked with :func:`check_writable_dir` before any
work starts, so a run never computes for an hour and then fails to save.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import math
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from .errors import DataError, OutputError
from .locks import LockBusy, lock_holders, take_lock

CACHE_ENV = "BACKRETRIEVAL_CACHE"


def current_umask() -> int:
    """The process's umask, read without changing it where the system allows (Linux
    ``/proc/self/status``), else by setting and restoring it."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def cache_root() -> Path:
    """The user cache folder, not created: ``$BACKRETRIEVAL_CACHE``, else
    ``$XDG_CACHE_HOME/backretrieval``, else ``~/.cache/backretrieval``."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "backretrieval" if xdg else Path.home() / ".cache" / "backretrieval"


def _cache_what() -> str:
    return f"cache folder (${CACHE_ENV})" if os.environ.get(CACHE_ENV) else "cache folder"


def cache_dir(*parts: str) -> Path:
    """The user cache (see :func:`cache_root`) joined with ``parts``, created.

    Raises:
        OutputError: the folder cannot be created (e.g. ``$BACKRETRIEVAL_CACHE`` names a file).
    """
    path = cache_root().joinpath(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(_why_not_writable(path, _cache_what(), e)) from None
    return path


def _why_not_writable(path: Path, what: str, err: OSError | None = None) -> str:
    """One sentence: why ``path`` cannot be used as a folder to write into."""
    anc = next((a for a in (path, *path.parents) if a.exists() or a.is_symlink()), None)
    if anc is not None and not anc.is_dir():
        where = "is a file" if anc == path else f"is below {anc}, which is a file"
        return f"{what} {path} {where}, not a folder"
    reason = (err.strerror or str(err)) if err is not None else "not writable"
    if anc is not None and anc != path:
        return f"{what} {path} cannot be created: {anc} is not writable ({reason})"
    return f"{what} {path} is not writable: {reason}"


def check_writable_dir(path: str | os.PathLike, what: str) -> Path:
    """Check, before any work, that files can be created in folder ``path``.

    Nothing is left behind: the check creates and removes a probe file in ``path`` if it exists,
    else in its nearest existing ancestor (where the missing folders would be created).

    Args:
        path: the folder results will be written to (it need not exist yet).
        what: how the error names it, e.g. ``"--out"`` or ``"cache folder ($BACKRETRIEVAL_CACHE)"``.

    Returns:
        ``path`` as a :class:`~pathlib.Path` (``~`` expanded).

    Raises:
        OutputError: ``path`` or one of its ancestors is a file, or the folder is not writable.
    """
    path = Path(path).expanduser()
    anc = next((a for a in (path, *path.parents) if a.exists() or a.is_symlink()), None)
    if anc is None or not anc.is_dir():
        raise OutputError(_why_not_writable(path, what))
    try:
        fd, probe = tempfile.mkstemp(dir=anc, prefix=".backretrieval-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputError(_why_not_writable(path, what, e)) from None
    return path


def check_writable_file(path: str | os.PathLike, what: str) -> Path:
    """Like :func:`check_writable_dir` for a file to be written: ``path`` must not be a folder and
    its folder must be writable.

    Args:
        path: the file to be written (it need not exist yet).
        what: how the error names it, e.g. ``"--figure"``.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OutputError: ``path`` is a folder, or its folder cannot be written.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise OutputError(f"{what} {path} is a folder, not a file")
    check_writable_dir(path.parent, f"the folder of {what}")
    return path


LOCK_FILE = ".backretrieval.lock"  # in an output folder while a run writes it
_held: dict[Path, int] = {}  # folder -> depth: the folders this process holds
_held_guard = threading.Lock()


@contextlib.contextmanager
def folder_lock(path: str | os.PathLike, what: str = "--out") -> Iterator[Path]:
    """Hold the output folder ``path`` for one run: an exclusive ``flock`` on ``path/.backretrieval.lock``.

    Two runs that write one folder at once would leave files of both (records of one, a summary
    of the other); the second is refused at once instead. The folder is created if needed; when
    the block ends and the folder holds nothing but the lock file, both are removed again (a run
    refused on its data leaves nothing behind). Re-entrant within a process (``evaluate``
    inside a command that already holds the folder). Where ``flock`` does not exist or is not
    supported by the file system the folder is used without a lock.

    Args:
        path: the output folder.
        what: how the error names it, e.g. ``"--out"``.

    Yields:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OutputError: another process holds the folder (its process id where the system says).
    """
    path = Path(path).expanduser()
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    key = path.resolve()
    with _held_guard:
        nested = key in _held
        _held[key] = _held.get(key, 0) + 1
    fd = None
    try:
        if not nested:
            try:
                fd = take_lock(key / LOCK_FILE, same_file=True)  # a run ending now may remove the file
            except LockBusy:
                raise OutputError(f"{what} {path} is being written by another run{lock_holders(key / LOCK_FILE)}: "
                                  "wait for it to finish or choose another folder") from None
            sweep_temp_files(key)
        yield path
    finally:
        with _held_guard:
            _held[key] -= 1
            if not _held[key]:
                del _held[key]
        if not nested and created:
            with contextlib.suppress(OSError):
                if [p.name for p in key.iterdir()] == [LOCK_FILE]:
                    (key / LOCK_FILE).unlink()
                    key.rmdir()
        if fd is not None:
            os.close(fd)


_TEMP = re.compile(r"\..+\.tmp-(?:(\d+)-)?[^/]*")  # .NAME.tmp-PID-XXXX (.NAME.tmp-XXXX: no writer named)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def sweep_temp_files(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of :func:`atomic_write` in ``folder`` and below whose writer
    is gone (no live process of the pid in the name, or no pid in it): what a writer killed
    mid-write leaves. Call it only while holding the folder (:func:`folder_lock` does), so no
    writer of another run is mid-write there.

    Args:
        folder: the output folder.

    Returns:
        The files removed.
    """
    removed = []
    for root, _, names in os.walk(folder):
        for name in names:
            m = _TEMP.fullmatch(name)
            if m and not (m.group(1) and _alive(int(m.group(1)))):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(root, name))
                    removed.append(Path(root, name))
    return removed


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", *, private: bool = False) -> Iterator[io.IOBase]:
    """Open a temporary file beside ``path``; on clean exit fsync it and move it onto ``path``.

    Args:
        path: the final file; missing parent folders are created.
        mode: ``open`` mode, ``"wb"`` or ``"w"`` (UTF-8 text).
        private: give the file mode ``0o600`` (for secrets); by default it gets ``0o666`` less
            the umask, as ``open()`` would.

    Raises:
        OSError: the file cannot be written; nothing is left at ``path`` from this call. An
            error of the system that names no file (a full disk, ``File too large``) is raised
            with ``filename=path``, so its message names the file being written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():  # found before writing, and named (os.replace would name the temporary file)
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-{os.getpid()}-")  # always 0o600
    try:
        if not private and hasattr(os, "fchmod"):
            os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename in (None, tmp) and e.errno is not None:
            raise OSError(e.errno, e.strerror or str(e), str(path)) from e
        raise


def atomic_write_text(path: str | os.PathLike, text: str, *, private: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`atomic_write` for ``private``."""
    with atomic_write(path, "w", private=private) as fh:
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


def json_text(text: str, where: str) -> Any:
    """The one JSON decoder of user files: ``text`` decoded, a refusal naming ``where``.

    Args:
        text: a JSON document (or one line of JSON lines).
        where: how errors name it, e.g. ``"FILE"`` or ``"FILE: line 3"``.

    Returns:
        The decoded value.

    Raises:
        DataError: ``text`` is not JSON (``WHERE: invalid JSON: ...``), or it is nested too deeply
            for the decoder.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: invalid JSON: {e}") from None
    except RecursionError:
        raise DataError(f"{where}: invalid JSON: nested too deeply (arrays or objects inside each other)") from None


def json_lines(lines: Iterable[str], where: str) -> Iterator[tuple[int, Any]]:
    """The one JSON-lines decoder: each non-blank line decoded (:func:`json_text`), with its
    1-based line number.

    Args:
        lines: the lines (a file opened as text, or ``text.splitlines()``).
        where: how errors name the source, e.g. the file's path.

    Yields:
        ``(line number, value)`` for every line that is not blank.

    Raises:
        DataError: a line that is not JSON (``WHERE: line N: invalid JSON: ...``), or one nested
            too deeply for the decoder.
    """
    for n, line in enumerate(lines, 1):
        if line.strip():
            yield n, json_text(line, f"{where}: line {n}")


def json_default(o: object) -> object:
    """``default=`` hook of :func:`json.dumps` for numpy values: the project's one JSON encoder.

    Args:
        o: the object :mod:`json` cannot serialise itself.

    Returns:
        ``o.item()`` for a numpy scalar (int, float or bool), ``o.tolist()`` for an array.

    Raises:
        TypeError: for anything else (as :mod:`json` expects), naming the type.
    """
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def json_ready(x: Any) -> Any:
    """A copy of ``x`` that :func:`json.dumps` writes as strict JSON: dicts and lists/tuples
    recursively, numpy scalars as Python values, NaN as ``None`` (null)."""
    if isinstance(x, dict):
        return {k: json_ready(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_ready(v) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return None
    if hasattr(x, "item"):  # numpy scalars
        return json_ready(x.item())
    return x


def json_finite(x: Any) -> Any:
    """A copy of ``x`` with every NaN or infinite float (Python or numpy) as ``None``, numpy
    scalars as Python values, dicts and lists/tuples recursively: what ``json.dumps(...,
    allow_nan=False)`` accepts (:func:`json_ready` keeps infinities)."""
    if isinstance(x, dict):
        return {k: json_finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_finite(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
