"""The ``ray[:ADDRESS]`` executor: the evaluation grid on Ray (https://docs.ray.io), the
per-sample tasks as Ray tasks, and text encoding as Ray Data batch inference (see
:mod:`backretrieval.encoders.ray_data`).

``RayExecutor(address=None)`` starts a local Ray instance on this machine's cores, or connects
to an existing cluster: ``address="auto"`` (this node is part of a running cluster),
``"ray://HEAD:10001"`` (Ray Client) or ``"HEAD:6379"``. When connecting to a cluster the
``backretrieval`` package itself is shipped to the workers with ``runtime_env={"py_modules":
[...]}``; its dependencies (numpy, scipy, scikit-learn, pandas and the model packages used)
must be installed on every node, e.g. in the cluster's image.

Before the first task, one probe per node with CPUs imports what the tasks import; a node that
lacks a package fails the run at once with an error naming the node and the package. Each task
reports the node that ran it (:attr:`RayExecutor.nodes`, recorded in ``run.json``).

Tasks are pure functions of plain arrays, so the records equal the local executor's; results
are handed back as they finish (at most twice the cluster's CPUs in flight) and the driver
stores each at once, so an interrupted grid resumes as with local execution. A task whose node
dies is run again on another node (Ray's task retries).

Ray's and Ray Data's own INFO logs and Ray Data's progress bars stay out of the terminal (the
grid shows one progress bar of its own); ``BACKRETRIEVAL_RAY_LOGS=1`` keeps Ray's defaults.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np

from ...core import BackretrievalError
from .base import RowsRef, SharesMatrices, bounded_imap, resolve_rows
from .local import LocalExecutor

T = TypeVar("T")
R = TypeVar("R")
CONNECT_TIMEOUT_S = 10  # a cluster's head (HOST:PORT) must accept a TCP connection within this


# HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5)
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4  # the frame type every HTTP/2 server sends first


def _first_frame(sock: Any, timeout: float) -> bytes:
    """The first 9 bytes the server sends after the HTTP/2 preface (fewer where it closes)."""
    import time

    sock.sendall(_H2_PREFACE)
    got = b""
    end = time.monotonic() + timeout
    while len(got) < 9:
        sock.settimeout(max(0.01, end - time.monotonic()))
        chunk = sock.recv(9 - len(got))
        if not chunk:
            break
        got += chunk
    return got


def check_address(address: str | None, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """A ``HOST:PORT`` cluster address is a Ray head's: it accepts a connection and answers the
    HTTP/2 preface with a SETTINGS frame, as the head's gRPC server (GCS) does, all within
    ``timeout`` seconds. Ray's own client retries an address where nothing listens for minutes,
    and one where another program listens for ever. ``None``, ``"auto"``, ``"local"`` and
    ``ray://`` addresses (Ray Client fails at once by itself) are not checked.

    Args:
        address: the address as given to :func:`ray_init`.
        timeout: seconds to wait for the connection and for the answer.

    Raises:
        BackretrievalError: nothing accepts the connection, or what does is not a gRPC server
            (the address and what it did named).
    """
    import socket

    if not address or address in ("auto", "local") or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return  # not HOST:PORT: Ray says what is wrong with it
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            try:
                frame = _first_frame(sock, timeout)
            except OSError as e:
                frame = b"" if not isinstance(e, TimeoutError) else None
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise BackretrievalError(f"cannot reach Ray at {address} within {timeout:g} s ({why}): is the cluster's head "
                                 "running there (`ray start --head`)?") from None
    if frame is not None and len(frame) == 9 and frame[3] == _H2_SETTINGS:
        return
    did = ("accepts connections but did not answer within " f"{timeout:g} s" if frame is None
           else "closed the connection without answering" if not frame
           else f"answers {frame[:9]!r}, not gRPC (HTTP/2)")
    raise BackretrievalError(f"{address} is not a Ray cluster's head: the program listening there {did}; give the "
                             "head's address (`ray start --head` prints it; port 6379 by default)")
NO_RAY = "executor 'ray' needs Ray: pip install 'backretrieval[ray]' (or: pip install 'ray[data,client]')"


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
        raise BackretrievalError(NO_RAY) from e
    quiet = os.environ.get("BACKRETRIEVAL_RAY_LOGS", "") in ("", "0")
    if quiet:
        _quiet_ray_logs()
    if not ray.is_initialized():
        kwargs: dict = {"include_dashboard": False, "ignore_reinit_error": True, "log_to_driver": False}
        if quiet:
            kwargs["logging_level"] = logging.WARNING
        if address:
            from ...core.env import package_dir

            check_address(address)
            kwargs["address"] = address
            # the package's folder (a path, not the module object: Ray Client pickles the runtime env)
            kwargs["runtime_env"] = {"py_modules": [str(package_dir())]}
        elif num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
        try:
            ray.init(**kwargs)
        except Exception as e:  # connection refused, bad address, ...
            raise BackretrievalError(f"cannot start or reach Ray ({address or 'local'}): {e}") from e
    if quiet:
        _quiet_ray_logs()
    return ray


def _quiet_ray_logs() -> None:
    """Ray's loggers at WARNING, Ray Data's at ERROR (its warnings are notices about its own
    settings, e.g. that its progress bars are off), Ray Data without its progress bars."""
    for name in ("ray", "ray.util.client", "ray._private"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    try:
        from ray.data import DataContext
    except ImportError:  # Ray without its data extra: nothing of Ray Data to quiet
        return
    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    if hasattr(ctx, "enable_operator_progress_bars"):
        ctx.enable_operator_progress_bars = False
    if hasattr(ctx, "print_on_execution_start"):
        ctx.print_on_execution_start = False


# Imported on each node by the probe: what a grid task imports. The probe itself is compiled
# from source, so Ray ships it by value and it runs on a node that cannot import backretrieval.
_PROBE_MODULES = ("numpy", "backretrieval.analysis.evaluate.tasks", "backretrieval.analysis.executors.ray")
_PROBE_SOURCE = """
def probe(modules):
    import importlib
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            return module, getattr(e, "name", None) or module, f"{type(e).__name__}: {e}"
    return None
"""


def _probe_function() -> Callable:
    namespace: dict[str, Any] = {"__name__": "backretrieval_ray_probe"}
    exec(compile(_PROBE_SOURCE, "<backretrieval ray probe>", "exec"), namespace)  # noqa: S102 - fixed source above
    return namespace["probe"]


def node_label(node: dict[str, Any]) -> str:
    """How errors and run records name a Ray node.

    Args:
        node: one node's description (keys ``ip``, ``hostname``, ``node_id``).

    Returns:
        ``IP (host HOSTNAME, node ID)``.
    """
    return f"{node.get('ip')} (host {node.get('hostname')}, node {node.get('node_id')})"


def check_nodes(ray: Any, modules: Iterable[str] = _PROBE_MODULES) -> list[dict[str, Any]]:
    """Every alive node with CPUs can import ``modules`` (the package as shipped, and its
    dependencies from the node's own environment).

    Args:
        ray: the initialised ``ray`` module.
        modules: the modules to import on each node.

    Returns:
        The checked nodes: ``{"node_id", "ip", "hostname"}`` each.

    Raises:
        BackretrievalError: a node cannot import one of ``modules``; the node (IP, host name,
            node id), the module and the missing package are named.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [_node_info(n) for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
    probe = ray.remote(num_cpus=0, max_retries=0)(_probe_function())
    modules = list(modules)
    refs = {
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["node_id"], soft=False)).remote(modules): n
        for n in nodes
    }
    checked = []
    for ref, node in refs.items():
        try:
            missing = ray.get(ref)
        except Exception:  # the node died or left since it was listed: no task will run there
            continue
        if missing is not None:
            module, package, message = missing
            raise BackretrievalError(
                f"Ray node {node_label(node)} cannot import {package!r} (needed by {module}): {message}; install "
                f"{package!r} in that node's Python environment (backretrieval itself is shipped to the cluster, "
                "its dependencies are not)"
            )
        checked.append(node)
    return checked


def _node_info(n: dict[str, Any]) -> dict[str, Any]:
    return {"node_id": n.get("NodeID"), "ip": n.get("NodeManagerAddress"), "hostname": n.get("NodeManagerHostname")}


def _run_on_node(fn: Callable[[T], R], task: T) -> tuple[R, str]:
    """``fn(task)`` (its :class:`RowsRef` resolved, each matrix fetched once per node and read in
    place) and the id of the node that ran it: the body of every grid task."""
    import ray

    fetched: dict[Any, np.ndarray] = {}

    def get(ref: Any) -> np.ndarray:
        if ref not in fetched:
            fetched[ref] = ray.get(ref)
        return fetched[ref]

    return fn(resolve_rows(task, get)), ray.get_runtime_context().get_node_id()


class RayExecutor(SharesMatrices, LocalExecutor):
    """Per-sample tasks as Ray tasks (one CPU each); text encoding on Ray Data.

    Building one does not touch Ray; the first ``imap`` or ``text_encoder`` call initialises it.

    Attributes:
        nodes: the nodes that ran this executor's tasks, ``{"node_id", "ip", "hostname",
            "tasks"}`` each (``tasks``: how many), in order of node id; ``encode_nodes``: the same
            for Ray Data text encoding (``texts``, how many it embedded, instead of ``tasks``).

    Args:
        address: the cluster (see :func:`ray_init`); None: a local Ray.
        num_cpus: CPUs of a local Ray (None: all).
    """

    encode_chunk = 32768  # texts per Ray Data job (and cache shard): amortises the job start

    def __init__(self, address: str | None = None, num_cpus: int | None = None):
        self.address = address
        self.num_cpus = num_cpus
        self.name = f"ray:{address}" if address else "ray"
        self._task_counts: dict[str, int] = {}
        self._encoders: list[Any] = []
        self._node_infos: dict[str, dict[str, Any]] = {}
        self._shared = {}  # id(matrix) -> (matrix, its object ref)
        self.shared_bytes = 0  # bytes put into the object store

    @classmethod
    def from_arg(cls, arg: str, spec: str) -> RayExecutor:
        """The executor of ``--executor ray[:ADDRESS]``.

        Args:
            arg: what followed ``ray:``: the cluster's address ("" for a local Ray).
            spec: the whole spec (unused: every address is tried when the grid starts).

        Returns:
            A :class:`RayExecutor` (Ray is not touched yet).
        """
        return cls(address=arg or None)

    def check(self) -> list[str]:
        """Ray is installed, and a ``HOST:PORT`` address accepts a connection within
        :data:`CONNECT_TIMEOUT_S` (:func:`check_address`; joining the cluster waits until the grid starts).

        Returns:
            No warnings.

        Raises:
            BackretrievalError: Ray is not installed, or nothing listens at the address.
        """
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise BackretrievalError(NO_RAY)
        check_address(self.address)
        return []

    def _put(self, matrix: np.ndarray) -> Any:
        """Put ``matrix`` into the object store (until the end of the grid) and return its
        reference: a language's embeddings travel to each node once instead of once per task."""
        return ray_init(self.address, self.num_cpus).put(matrix)

    def _describe(self, counts: dict[str, int], what: str) -> list[dict[str, Any]]:
        if not counts:
            return []
        missing = [nid for nid in counts if nid not in self._node_infos]
        if missing:
            ray = ray_init(self.address, self.num_cpus)
            self._node_infos.update({info["node_id"]: info for info in map(_node_info, ray.nodes())})
        return [{**self._node_infos.get(nid, {"node_id": nid, "ip": None, "hostname": None}), what: counts[nid]}
                for nid in sorted(counts)]

    @property
    def nodes(self) -> list[dict[str, Any]]:
        """The nodes that ran the grid's tasks, each with its number of tasks."""
        return self._describe(self._task_counts, "tasks")

    @property
    def encode_nodes(self) -> list[dict[str, Any]]:
        """The nodes that ran Ray Data text encoding, each with its number of texts."""
        counts: dict[str, int] = {}
        for enc in self._encoders:
            for nid, k in enc.node_rows.items():
                counts[nid] = counts.get(nid, 0) + k
        return self._describe(counts, "texts")

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
        from ...encoders.ray_data import RayDataTextEncoder

        ray_init(self.address, self.num_cpus)
        enc = RayDataTextEncoder(spec)
        self._encoders.append(enc)
        return enc

    def imap(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """Run ``fn`` as Ray tasks (one CPU each), at most twice the cluster's CPUs in flight.

        Args:
            fn: a pure function of one task (serialised to the workers).
            tasks: tasks of plain arrays, consumed lazily.

        Yields:
            ``fn(task)`` for each task in completion order; a task's exception is raised here, with
            the task named. When the loop ends early (a failed task, Ctrl-C, the caller stopping)
            the tasks still running are cancelled.

        Raises:
            BackretrievalError: Ray is missing or unreachable (see :func:`ray_init`), or a node
                cannot import what the tasks need (see :func:`check_nodes`).
        """
        ray = ray_init(self.address, self.num_cpus)
        for info in check_nodes(ray):
            self._node_infos[info["node_id"]] = info
        remote = ray.remote(num_cpus=1)(_run_on_node)
        fn_ref = ray.put(fn)
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))

        def wait_any(pending: set) -> tuple[set, set]:
            done, rest = ray.wait(list(pending), num_returns=1)
            return set(done), set(rest)

        def result(ref: Any) -> R:
            value, node_id = ray.get(ref)
            self._task_counts[node_id] = self._task_counts.get(node_id, 0) + 1
            return value

        try:
            yield from bounded_imap(lambda t: remote.remote(fn_ref, t), wait_any, result, tasks, in_flight=2 * cpus,
                                    abort=lambda pending: [ray.cancel(ref, force=True) for ref in pending])
        finally:
            self._unshare()  # the matrices leave the object store with their last reference
