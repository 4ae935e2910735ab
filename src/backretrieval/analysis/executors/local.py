"""The ``local`` executor: one task after another in this process; BLAS uses every core."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from ...core import BackretrievalError
from .base import name_task

T = TypeVar("T")
R = TypeVar("R")


class LocalExecutor:
    """Tasks one after another in this process (no constructor arguments)."""

    name = "local"
    encode_chunk = 2048  # texts per cache shard

    @classmethod
    def from_arg(cls, arg: str, spec: str) -> LocalExecutor:
        """The executor of ``--executor local`` (it takes no argument).

        Args:
            arg: what followed ``local:`` (must be empty).
            spec: the whole spec, for the error message.

        Returns:
            A :class:`LocalExecutor`.

        Raises:
            BackretrievalError: an argument was given.
        """
        if arg:
            raise BackretrievalError(f"bad executor {spec!r}: local takes no argument")
        return cls()

    def check(self) -> list[str]:
        """What to tell the user before a grid runs on this machine.

        Returns:
            Warnings (none for local execution).
        """
        return []

    def text_encoder(self, spec: str) -> Any:
        """The encoder that embeds the texts of model ``spec`` for the grid.

        Args:
            spec: a text-model spec string, e.g. ``"use-m"`` or ``"use-m@trunc=64"``.

        Returns:
            The registry's encoder, built in this process.

        Raises:
            EncoderError: an unknown spec (named).
        """
        from ...encoders.registry import get_text_encoder

        return get_text_encoder(spec)

    def imap(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """Run ``fn`` on each task in turn, in this process.

        Args:
            fn: a function of one task.
            tasks: the tasks, consumed one at a time.

        Yields:
            ``fn(task)`` in the order of ``tasks``; a task's exception is raised with the task
            named (:func:`~.base.name_task`).
        """
        for task in tasks:
            try:
                value = fn(task)
            except Exception as e:
                name_task(e, task)
                raise
            yield value
