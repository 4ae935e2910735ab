"""Executors: where the per-sample tasks of the evaluation grid run, one module each, and the
table of their names (:data:`EXECUTORS`) that :func:`get_executor`, the CLI's ``--executor``
help, its error messages and the docs read.

* ``local`` (default) -- one task after another in this process (:mod:`.local`).
* ``processes[:N]`` -- up to N worker processes with single-threaded BLAS (:mod:`.processes`).
* ``ray[:ADDRESS]`` -- Ray tasks on a local or existing cluster (:mod:`.ray`).

Every executor gives identical records (tasks are pure functions of plain arrays), raises a
failing task's exception with the task named, and leaves nothing behind when the grid ends or
is interrupted (tests/analysis/test_executors.py holds every row of the table to that). A new
executor is one module here, with a class that has ``from_arg``, ``check``, ``imap`` and
``text_encoder`` (subclass :class:`LocalExecutor`), and one row of :data:`EXECUTORS`.

A model given as a Python object is encoded in the calling process with every executor -- it
is never pickled or shipped -- so unpicklable objects (lambdas, models holding a GPU) work with
``processes`` and ``ray`` alike; only the tasks' vectors travel.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from ...core import BackretrievalError
from .base import Executor, RowsRef, SharesMatrices, bounded_imap, name_task, resolve_rows, task_label, usable_cores
from .local import LocalExecutor
from .processes import SHARED_PREFIX, ProcessExecutor
from .ray import RayExecutor

__all__ = [
    "EXECUTORS", "SHARED_PREFIX", "Executor", "ExecutorEntry", "LocalExecutor", "ProcessExecutor", "RayExecutor", "RowsRef",
    "SharesMatrices", "bounded_imap", "executor_usage", "get_executor", "name_task", "resolve_rows", "task_label",
    "usable_cores",
]


@dataclasses.dataclass(frozen=True)
class ExecutorEntry:
    """One row of the executor table.

    Attributes:
        name: what ``--executor`` starts with (``"processes"``).
        arg: what may follow a colon (``"N"``, ``"ADDRESS"``); "" when nothing may.
        module: the module of this package that holds the executor (imported when it is asked for).
        class_name: the executor's class in that module; its ``from_arg(arg, spec)`` builds it.
        description: one line for the CLI help and the docs.
    """

    name: str
    arg: str
    module: str
    class_name: str
    description: str

    @property
    def usage(self) -> str:
        """How the executor is written: ``"processes[:N]"``, ``"local"``."""
        return f"{self.name}[:{self.arg}]" if self.arg else self.name

    def load(self) -> type:
        """The executor's class (importing its module).

        Returns:
            The class named by ``class_name``.
        """
        return getattr(importlib.import_module(f"{__name__}.{self.module}"), self.class_name)


EXECUTORS: tuple[ExecutorEntry, ...] = (
    ExecutorEntry("local", "", "local", "LocalExecutor", "one task after another in this process"),
    ExecutorEntry("processes", "N", "processes", "ProcessExecutor",
                  "N worker processes, by default one per usable core, single-threaded BLAS each"),
    ExecutorEntry("ray", "ADDRESS", "ray", "RayExecutor",
                  "Ray tasks on a local Ray, or on the cluster at ADDRESS; text encoding on Ray Data"),
)


def executor_usage(conjunction: str = "or") -> str:
    """The executors of the table as a user writes them: ``"local, processes[:N] or ray[:ADDRESS]"``.

    Args:
        conjunction: the word before the last one.

    Returns:
        The list, in table order.
    """
    names = [e.usage for e in EXECUTORS]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {conjunction} {names[-1]}"


def get_executor(spec: Any = None) -> Executor:
    """The executor named by ``spec``.

    Args:
        spec: ``None`` (local), a name of :data:`EXECUTORS` with its argument after a colon
            (``"processes:4"``, ``"ray:HEAD:6379"``), or an executor object (anything with
            ``imap``), which is returned as it is.

    Returns:
        The executor (a Ray executor starts or reaches Ray only when it is first used).

    Raises:
        BackretrievalError: an unknown executor name (listing the table's), or an argument the
            executor refuses (named by it).
    """
    if spec is None:
        return LocalExecutor()
    if hasattr(spec, "imap"):
        return spec
    name, _, arg = str(spec).partition(":")
    for entry in EXECUTORS:
        if entry.name == name:
            return entry.load().from_arg(arg, str(spec))
    raise BackretrievalError(f"unknown executor {spec!r}: use {executor_usage()}")
