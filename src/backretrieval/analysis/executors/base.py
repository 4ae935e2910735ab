"""What every executor shares: the protocol the grid needs, tasks' shared rows (:class:`RowsRef`,
:class:`SharesMatrices`), the bounded submit-and-wait loop and the naming of a failed task.

A task (:class:`~backretrieval.analysis.evaluate.tasks.SampleTask`) holds plain arrays and
:func:`~backretrieval.analysis.evaluate.tasks.run_sample_task` is a pure function of it, so every
executor gives identical records. ``imap`` yields each result as soon as it is ready (the grid
stores it at once, which is what makes interrupted runs resumable); at most a few tasks are in
flight, so memory stays bounded.
"""
from __future__ import annotations

import dataclasses
import os
import reprlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

import numpy as np

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
            ``fn(task)`` for each task, as soon as it is ready; a task's exception is raised
            with the task named in a note (:func:`name_task`).
        """
        ...

    def text_encoder(self, spec: str) -> Any:
        """The encoder that embeds the texts of registry model ``spec`` for the grid.

        Args:
            spec: a text-model spec string, e.g. ``"use-m"``.

        Returns:
            A text model (``encode(texts, lang)``, ``version``, ...).
        """
        ...


def task_label(task: Any) -> str:
    """How an error names a task: its ``label`` (a grid task: ``"en->de seed 0"``), else a short repr.

    Args:
        task: a task.

    Returns:
        The label.
    """
    label = getattr(task, "label", None)
    return str(label) if label is not None else reprlib.repr(task)


def name_task(error: BaseException, task: Any) -> BaseException:
    """Add a note naming ``task`` to the exception it raised (the exception keeps its type).

    Args:
        error: the task's exception.
        task: the task.

    Returns:
        ``error``, with the note ``"in task <label>"`` (see :func:`task_label`).
    """
    if isinstance(error, Exception):
        error.add_note(f"in task {task_label(task)}")
    return error


@dataclasses.dataclass(frozen=True)
class RowsRef:
    """Rows of a matrix that an executor shared once per grid: what a task carries in place of
    the rows themselves (``rows_of`` of the processes and Ray executors).

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


def bounded_imap(submit: Callable[[T], Any], wait_any: Callable[[set], tuple[set, set]], result: Callable[[Any], R],
                 tasks: Iterable[T], in_flight: int, abort: Callable[[set], None] = lambda pending: None) -> Iterator[R]:
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
        abort: called with the pending handles when the loop ends early -- a task failed, the
            caller stopped iterating, or Ctrl-C -- to stop what still runs.

    Yields:
        ``result(handle)`` of each task, as the tasks finish; a task's exception is raised with
        the task named (:func:`name_task`).
    """
    pending: dict = {}  # handle -> its task
    it = iter(tasks)
    exhausted = False
    try:
        while True:
            while not exhausted and len(pending) < in_flight:
                try:
                    task = next(it)
                except StopIteration:
                    exhausted = True
                else:
                    pending[submit(task)] = task
            if not pending:
                return
            done, _ = wait_any(set(pending))
            for handle in done:
                task = pending.pop(handle)
                try:
                    value = result(handle)
                except Exception as e:
                    name_task(e, task)
                    raise
                yield value
    except BaseException:
        abort(set(pending))
        raise
