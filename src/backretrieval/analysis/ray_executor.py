"""Run the evaluation grid on Ray (https://docs.ray.io): the per-sample tasks as Ray tasks, and
text encoding as Ray Data batch inference (see :mod:`backretrieval.encoders.ray_data`).

``RayExecutor(address=None)`` starts a local Ray instance on this machine's cores, or connects
to an existing cluster: ``address="auto"`` (this node is part of a running cluster),
``"ray://HEAD:10001"`` (Ray Client) or ``"HEAD:6379"``. When connecting to a cluster the
``backretrieval`` package itself is shipped to the workers with ``runtime_env={"py_modules":
[...]}``; its dependencies (numpy, scipy, scikit-learn, pandas and the model packages used)
must be installed on every node, e.g. in the cluster's image.

Tasks are pure functions of plain arrays, so the records equal the local executor's; results
are handed back as they finish (at most twice the cluster's CPUs in flight) and the driver
stores each at once, so an interrupted grid resumes as with local execution.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from ..core import BackretrievalError
from .executors import LocalExecutor, bounded_imap

T = TypeVar("T")
R = TypeVar("R")


def ray_init(address: str | None = None, num_cpus: int | None = None):
    """``ray.init`` once per process (no dashboard, quiet); returns the ``ray`` module.

    Args:
        address: a cluster to connect to (``"ray://HEAD:10001"`` or ``"HEAD:6379"``; the
            ``backretrieval`` package is shipped to it); None starts a local Ray.
        num_cpus: CPUs of a local Ray (None: all); ignored with ``address``.

    Returns:
        The imported ``ray`` module, initialised (an existing initialisation is kept as it is).

    Raises:
        BackretrievalError: Ray is not installed, or cannot be started or reached (the address
            and Ray's message are named).
    """
    try:
        import ray
    except ImportError as e:
        raise BackretrievalError("executor 'ray' needs Ray: pip install 'ray[data]' (or backretrieval[ray])") from e
    if not ray.is_initialized():
        kwargs: dict = {"include_dashboard": False, "ignore_reinit_error": True, "log_to_driver": False}
        if address:
            import backretrieval

            kwargs["address"] = address
            kwargs["runtime_env"] = {"py_modules": [backretrieval]}
        elif num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
        try:
            ray.init(**kwargs)
        except Exception as e:  # connection refused, bad address, ...
            raise BackretrievalError(f"cannot start or reach Ray ({address or 'local'}): {e}") from e
    return ray


class RayExecutor(LocalExecutor):
    """Per-sample tasks as Ray tasks (one CPU each); text encoding on Ray Data.

    Building one does not touch Ray; the first ``imap`` or ``text_encoder`` call initialises it.

    Args:
        address: the cluster (see :func:`ray_init`); None: a local Ray.
        num_cpus: CPUs of a local Ray (None: all).
    """

    encode_chunk = 32768  # texts per Ray Data job (and cache shard): amortises the job start

    def __init__(self, address: str | None = None, num_cpus: int | None = None):
        self.address = address
        self.num_cpus = num_cpus
        self.name = f"ray:{address}" if address else "ray"

    def text_encoder(self, spec: str):
        """Ray Data batch inference for models whose vectors depend only on (text, language);
        models fitted on the evaluated texts (tfidf-char, PCA variants) stay local.

        Args:
            spec: a text-model spec string.

        Returns:
            A ``RayDataTextEncoder`` for ``spec``, or the local encoder for a model that is not
            cacheable, is fitted on the evaluated texts, or needs extra inputs (``wants_extra``).

        Raises:
            EncoderError: an unknown spec.
            BackretrievalError: Ray is missing or unreachable (see :func:`ray_init`).
        """
        local = super().text_encoder(spec)
        if not getattr(local, "cacheable", True) or callable(getattr(local, "fit", None)) or getattr(local, "wants_extra", None):
            return local
        from ..encoders.ray_data import RayDataTextEncoder

        ray_init(self.address, self.num_cpus)
        return RayDataTextEncoder(spec)

    def imap(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """Run ``fn`` as Ray tasks (one CPU each), at most twice the cluster's CPUs in flight.

        Args:
            fn: a pure function of one task (serialised to the workers).
            tasks: tasks of plain arrays, consumed lazily.

        Yields:
            ``fn(task)`` for each task in completion order; a task's exception is raised here.

        Raises:
            BackretrievalError: Ray is missing or unreachable (see :func:`ray_init`).
        """
        ray = ray_init(self.address, self.num_cpus)
        remote = ray.remote(num_cpus=1)(fn)
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))

        def wait_any(pending: set) -> tuple[set, set]:
            done, rest = ray.wait(list(pending), num_returns=1)
            return set(done), set(rest)

        yield from bounded_imap(lambda t: remote.remote(t), wait_any, ray.get, tasks, in_flight=2 * cpus)
