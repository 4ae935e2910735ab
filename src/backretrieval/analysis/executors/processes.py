"""The ``processes[:N]`` executor: up to N worker processes (default: the usable cores), each
with single-threaded BLAS.

Sorting and counting (CORR's ranks, top-k) are single-threaded in numpy, so on a multi-core
machine this is faster than ``local`` for grids of many samples. Workers start as tasks arrive,
so a grid never starts more workers than it has tasks; they end with the process that started
them, however it ends (SIGTERM, SIGKILL), so they never outlive it holding its output pipes.
Each embedding matrix is written once per grid to a private temporary folder as a .npy file
that the workers map (:meth:`ProcessExecutor.rows_of`); tasks carry row positions, not rows.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import TypeVar

import numpy as np

from ...core import BackretrievalError
from .base import SharesMatrices, bounded_imap, resolve_rows, usable_cores
from .local import LocalExecutor

T = TypeVar("T")
R = TypeVar("R")


def _limit_threads(n: int) -> None:
    """BLAS/OpenMP pools of this process use ``n`` threads."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n)


def _exit_with_parent(parent: int) -> None:
    """End this worker when process ``parent`` (the one that started it) ends, however it ends.

    A worker blocked on its task queue never sees the parent go (it holds both ends of the
    queue's pipe itself), and a busy one would finish its task first; either way it would keep
    the caller's stdout and stderr open, so a wrapper reading them hangs. On Linux the kernel
    sends the worker SIGTERM when the parent dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere a
    daemon thread checks the parent every half second and ends the process.
    """
    import signal
    import sys
    import threading

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(1, int(signal.SIGTERM), 0, 0, 0) == 0:  # 1: PR_SET_PDEATHSIG
                if os.getppid() != parent:  # the parent ended before prctl took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        import time

        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _init_worker(threads: int, parent: int) -> None:
    """Worker initializer: end with the parent (:func:`_exit_with_parent`), ``threads`` BLAS threads."""
    _exit_with_parent(parent)
    _limit_threads(threads)


_MAPPED: dict[str, np.ndarray] = {}  # in a worker: the shared .npy files it has mapped, by path


def _run_mapped(fn: Callable[[T], R], task: T) -> R:
    """``fn(task)`` with the task's :class:`RowsRef` resolved from the shared .npy files, each
    mapped once per worker (read-only; the pages are the parent's page cache, not copies)."""

    def get(path: str) -> np.ndarray:
        if path not in _MAPPED:
            _MAPPED[path] = np.load(path, mmap_mode="r", allow_pickle=False)
        return _MAPPED[path]

    return fn(resolve_rows(task, get))


SHARED_PREFIX = "backretrieval-rows-"  # temporary folders of shared matrices: SHARED_PREFIX + "<pid>-<random>"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _sweep_stale_shared(tmp: str) -> None:
    """Remove the shared-matrix folders of processes that no longer run (a grid killed with
    SIGKILL cannot remove its own). Folders of live processes are left alone."""
    import shutil

    try:
        names = os.listdir(tmp)
    except OSError:
        return
    for name in names:
        if not name.startswith(SHARED_PREFIX):
            continue
        pid = name[len(SHARED_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


class ProcessExecutor(SharesMatrices, LocalExecutor):
    """Tasks in ``workers`` spawned processes with ``threads`` BLAS threads each (encoding stays
    in this process, where the models use every core).

    Args:
        workers: worker processes (None or 0: :func:`usable_cores`).
        threads: BLAS/OpenMP threads per worker.
    """

    def __init__(self, workers: int | None = None, threads: int = 1):
        self.workers = workers or usable_cores()
        self.threads = threads
        self.name = f"processes:{self.workers}"
        self._shared = {}  # id(matrix) -> (matrix, its .npy path)
        self._dir: str | None = None
        self.shared_bytes = 0  # bytes written to shared .npy files

    @classmethod
    def from_arg(cls, arg: str, spec: str) -> ProcessExecutor:
        """The executor of ``--executor processes[:N]``.

        Args:
            arg: what followed ``processes:``: N, the number of workers ("" for the usable cores).
            spec: the whole spec, for the error message.

        Returns:
            A :class:`ProcessExecutor`.

        Raises:
            BackretrievalError: N is not a positive integer.
        """
        try:
            workers = int(arg) if arg else None
        except ValueError:
            raise BackretrievalError(f"bad executor {spec!r}: use processes or processes:N") from None
        if workers is not None and workers < 1:
            raise BackretrievalError(f"bad executor {spec!r}: N must be positive")
        return cls(workers)

    def check(self) -> list[str]:
        """What to tell the user before a grid runs on this machine.

        Returns:
            A warning when there are more workers than usable cores.
        """
        if self.workers <= usable_cores():
            return []
        return [f"{self.workers} workers for {usable_cores()} usable CPU cores; they share the cores and each takes its "
                "own memory (no more workers start than the grid has tasks)"]

    def _put(self, matrix: np.ndarray) -> str:
        """Write ``matrix`` to a .npy file in a private temporary folder that the workers map
        read-only, and return its path. The folder is removed when the grid's ``imap`` ends (or,
        after a SIGKILL, by the next grid on this machine)."""
        import tempfile

        arr = np.asarray(matrix)
        if arr.dtype == object:
            raise BackretrievalError(f"cannot share a matrix of Python objects (shape {arr.shape}) with workers")
        if self._dir is None:
            tmp = tempfile.gettempdir()
            _sweep_stale_shared(tmp)
            self._dir = tempfile.mkdtemp(prefix=f"{SHARED_PREFIX}{os.getpid()}-", dir=tmp)
        path = os.path.join(self._dir, f"{len(self._shared)}.npy")
        np.save(path, arr, allow_pickle=False)
        return path

    def _unshare(self) -> None:
        """Remove the shared .npy files (at the end of a grid)."""
        import shutil

        super()._unshare()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def imap(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """Run ``fn`` on the tasks in a pool of ``min(workers, number of tasks)`` processes, at most
        twice as many tasks in flight.

        Args:
            fn: a picklable, module-level function of one task.
            tasks: picklable tasks, consumed lazily.

        Yields:
            ``fn(task)`` for each task in completion order; a task's exception is raised here, with
            the task named. When the loop ends early (a failed task, Ctrl-C, the caller stopping)
            the pool's workers are ended at once instead of finishing the tasks in flight.
        """
        import itertools
        import multiprocessing as mp

        try:
            it = iter(tasks)
            head = list(itertools.islice(it, self.workers))  # fewer tasks than workers: one worker per task
            if not head:
                return
            before = set(mp.active_children())

            def abort(pending: set) -> None:
                for fut in pending:
                    fut.cancel()
                for worker in set(mp.active_children()) - before:  # this pool's workers
                    worker.terminate()

            with ProcessPoolExecutor(
                len(head), mp_context=mp.get_context("spawn"), initializer=_init_worker,
                initargs=(self.threads, os.getpid())
            ) as pool:
                yield from bounded_imap(
                    lambda t: pool.submit(_run_mapped, fn, t),
                    lambda pending: wait(pending, return_when=FIRST_COMPLETED),
                    lambda fut: fut.result(),
                    itertools.chain(head, it),
                    in_flight=2 * len(head),
                    abort=abort,
                )
        finally:
            self._unshare()  # after the pool has ended: no worker still maps the files
