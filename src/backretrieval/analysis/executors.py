"""Executors: where the per-sample tasks of the evaluation grid run.

A task (:class:`~.evaluate.SampleTask`) holds plain arrays and :func:`~.evaluate.run_sample_task`
is a pure function of it, so every executor gives identical records. ``imap`` yields each
result as soon as it is ready (the grid stores it at once, which is what makes interrupted runs
resumable); at most a few tasks are in flight, so memory stays bounded.

* ``local`` (default) -- one task after another in this process; BLAS uses every core.
* ``processes[:N]`` -- up to N worker processes (default: the usable cores), each with
  single-threaded BLAS; sorting and counting (CORR's ranks, top-k) are single-threaded in numpy,
  so on a multi-core machine this is faster than ``local`` for grids of many samples. Workers
  start as tasks arrive, so a grid never starts more workers than it has tasks; they end with
  the process that started them, however it ends (SIGTERM, SIGKILL), so they never outlive it
  holding its output pipes. Each embedding matrix is written once per grid to a private
  temporary folder as a .npy file that the workers map (:meth:`ProcessExecutor.rows_of`);
  tasks carry row positions, not rows.
* ``ray[:ADDRESS]`` -- Ray tasks on a local or existing cluster (see :mod:`.ray_executor`).

A model given as a Python object (:mod:`.models`) is encoded in the calling process with every
executor -- it is never pickled or shipped -- so unpicklable objects (lambdas, models holding a
GPU) work with ``processes`` and ``ray`` alike; only the tasks' vectors travel.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Protocol, TypeVar

import numpy as np

from ..core import BackretrievalError

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    """What the grid needs of an executor (any object with these members will do).

    Attributes:
        name: how the run record names it, e.g. ``"local"`` or ``"processes:4"``.
    """

    name: str

    def imap(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """Run ``fn`` on every task, results in any order as they finish.

        Args:
            fn: a picklable, pure function of one task.
            tasks: the tasks (consumed lazily; only a few are in flight at a time).

        Yields:
            ``fn(task)`` for each task, as soon as it is ready.
        """
        ...

    def text_encoder(self, spec: str) -> Any:
        """The encoder that embeds the texts of registry model ``spec`` for the grid.

        Args:
            spec: a text-model spec string, e.g. ``"use-m"``.

        Returns:
            A text encoder (``encode(texts, lang)``, ``version``, ...).
        """
        ...


@dataclasses.dataclass(frozen=True)
class RowsRef:
    """Rows of a matrix that an executor shared once per grid: what a task carries in place of
    the rows themselves (``rows_of`` of :class:`ProcessExecutor` and of the Ray executor).

    Args:
        ref: where the whole matrix is: a .npy file's path (processes), an object-store
            reference (Ray).
        rows: the positions of the task's rows in it.
    """

    ref: Any
    rows: np.ndarray


def resolve_rows(x: Any, get: Callable[[Any], np.ndarray]) -> Any:
    """``x`` with every :class:`RowsRef` replaced by its rows (in dataclasses, dicts, tuples and
    lists).

    Args:
        x: a task, or any part of one.
        get: the whole matrix of a :attr:`RowsRef.ref`.

    Returns:
        ``x`` rebuilt with plain arrays (``get(ref)[rows]``: the same values as the matrix's rows).
    """
    if isinstance(x, RowsRef):
        return np.asarray(get(x.ref)[x.rows])
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: resolve_rows(getattr(x, f.name), get) for f in dataclasses.fields(x) if f.init})
    if isinstance(x, dict):
        return {k: resolve_rows(v, get) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(resolve_rows(v, get) for v in x)
    return x


class SharesMatrices:
    """``rows_of`` for executors that share each matrix once per grid (processes, Ray): the first
    time a task needs a matrix it is stored where the workers read it (the executor's ``_put``,
    which returns where it is), and every task carries only that reference and row positions.
    Matrices are recognised by identity and kept alive until :meth:`_unshare`, so an id is not
    reused during the grid.

    Attributes:
        shared_bytes: bytes of all matrices shared so far.
    """

    _shared: dict[int, tuple[np.ndarray, Any]]  # id(matrix) -> (matrix, its reference)
    shared_bytes: int

    def _put(self, matrix: np.ndarray) -> Any:  # pragma: no cover - each executor's own
        raise NotImplementedError

    def rows_of(self, matrix: np.ndarray, rows: np.ndarray) -> RowsRef:
        """What a task carries for ``matrix[rows]``: the matrix is shared once per grid (not
        pickled into every task) and the task refers to it.

        Args:
            matrix: a model's embeddings (or image features) of one language.
            rows: the positions the task needs.

        Returns:
            A :class:`RowsRef` (resolved where the task runs, before it runs).
        """
        key = id(matrix)
        if key not in self._shared:
            self._shared[key] = (matrix, self._put(matrix))
            self.shared_bytes += np.asarray(matrix).nbytes
        return RowsRef(self._shared[key][1], np.asarray(rows))

    def _unshare(self) -> None:
        """Forget the shared matrices (at the end of a grid)."""
        self._shared.clear()


class LocalExecutor:
    """Tasks one after another in this process (no constructor arguments)."""

    name = "local"
    encode_chunk = 2048  # texts per cache shard

    def text_encoder(self, spec: str) -> Any:
        """The encoder that embeds the texts of model ``spec`` for the grid.

        Args:
            spec: a text-model spec string, e.g. ``"use-m"`` or ``"use-m@trunc=64"``.

        Returns:
            The registry's encoder, built in this process.

        Raises:
            EncoderError: an unknown spec (named).
        """
        from ..encoders.registry import get_text_encoder

        return get_text_encoder(spec)

    def imap(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """Run ``fn`` on each task in turn, in this process.

        Args:
            fn: a function of one task.
            tasks: the tasks, consumed one at a time.

        Yields:
            ``fn(task)`` in the order of ``tasks``.
        """
        for task in tasks:
            yield fn(task)


def usable_cores() -> int:
    """The CPU cores this process may run on.

    Returns:
        The size of the process's CPU affinity set where the platform has one (containers,
        ``taskset``), else ``os.cpu_count()``; at least 1.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


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


def bounded_imap(submit: Callable[[T], Any], wait_any: Callable[[set], tuple[set, set]], result: Callable[[Any], R],
                 tasks: Iterable[T], in_flight: int) -> Iterator[R]:
    """Keep at most ``in_flight`` submitted tasks; yield results in completion order.

    Backend-neutral: the futures and the waiting are the caller's (``concurrent.futures`` for
    processes, ``ray.wait`` for Ray), so the bound on memory is one loop for both.

    Args:
        submit: starts one task and returns its future / handle.
        wait_any: blocks until at least one of the pending handles is done; returns
            ``(done, still_pending)``.
        result: the value of a done handle (re-raises the task's exception).
        tasks: the tasks, consumed lazily.
        in_flight: the most handles pending at any time (>= 1).

    Yields:
        ``result(handle)`` of each task, as the tasks finish.
    """
    pending: set = set()
    it = iter(tasks)
    exhausted = False
    while True:
        while not exhausted and len(pending) < in_flight:
            try:
                pending.add(submit(next(it)))
            except StopIteration:
                exhausted = True
        if not pending:
            return
        done, pending = wait_any(pending)
        for fut in done:
            yield result(fut)


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
            ``fn(task)`` for each task in completion order; a task's exception is raised here.
        """
        import itertools
        import multiprocessing as mp

        try:
            it = iter(tasks)
            head = list(itertools.islice(it, self.workers))  # fewer tasks than workers: one worker per task
            if not head:
                return
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
                )
        finally:
            self._unshare()  # after the pool has ended: no worker still maps the files


def get_executor(spec: Any = None) -> Executor:
    """The executor named by ``spec``.

    Args:
        spec: ``None`` or ``"local"``, ``"processes"`` / ``"processes:N"`` (N workers),
            ``"ray"`` / ``"ray:ADDRESS"``, or an executor object (anything with ``imap``), which
            is returned as it is.

    Returns:
        A :class:`LocalExecutor`, :class:`ProcessExecutor`, ``RayExecutor`` or ``spec`` itself.
        A Ray executor starts or reaches Ray only when it is first used.

    Raises:
        BackretrievalError: an unknown executor name, or an N that is not a positive integer.
    """
    if spec is None or spec == "local":
        return LocalExecutor()
    if hasattr(spec, "imap"):
        return spec
    name, _, arg = str(spec).partition(":")
    if name == "processes":
        try:
            workers = int(arg) if arg else None
        except ValueError:
            raise BackretrievalError(f"bad executor {spec!r}: use processes or processes:N") from None
        if workers is not None and workers < 1:
            raise BackretrievalError(f"bad executor {spec!r}: N must be positive")
        return ProcessExecutor(workers)
    if name == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(address=arg or None)
    raise BackretrievalError(f"unknown executor {spec!r}: use local, processes[:N] or ray[:ADDRESS]")
