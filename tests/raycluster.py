"""A real multi-node Ray cluster on this machine, for tests: one ``ray start --head`` and worker
nodes started with ``ray start --address=...``, each its own process tree (GCS, raylet, object
store, agents, workers), all bound to the loopback address.

Every node is started with ``--block`` in its own session, so the node's processes share one
process group; :meth:`LocalCluster.stop_node` and :meth:`LocalCluster.stop` end exactly those
processes (the process group and every descendant found), never another Ray on the machine.

A node may run under another Python environment (``python=``): :func:`env_without` builds one
that has the main environment's packages except those named, which is how a worker node that
cannot import ``backretrieval`` (or one of its dependencies) is made on one machine.
"""
from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

LOOPBACK = "127.0.0.1"
# ``ray start`` replaces a loopback --node-ip-address (and --address host) with the machine's
# routable address on Linux; this launcher keeps the given addresses, and the nodes' child
# processes and the drivers run with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, under which Ray's
# "this node's address" is the loopback one. So every address any process connects to is
# 127.0.0.1 (Ray's C++ gRPC servers listen on every interface; nothing connects to another).
RAY_START = (
    "import sys; import ray._private.ray_constants as c; import ray._private.services as s; "
    "c.ENABLE_RAY_CLUSTER = True; s.resolve_ip_for_localhost = lambda host: host; "
    "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"
)


# ports per node for its workers, drivers, Ray Data actors and spill/IO workers (each holds one
# while it lives; a driver that connected holds its port a while after it ends)
WORKER_PORTS = 64
_HANDED_OUT: set[int] = set()  # ports given to a node already (free until the node binds them)
_PICK = random.Random()  # seeded by the OS: two processes choosing at once rarely try the same ports
LOWEST = 10_000  # below: ports of well-known services


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out by itself (a bind to port 0, an outgoing connection)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_range(width: int) -> int:
    """The first of ``width`` consecutive ports that are all free on the loopback address, never
    handed out before, and below the kernel's ephemeral range: a port chosen here stays free until
    the node binds it, even while other processes (the suite's other workers) bind port 0 or
    connect somewhere, which take their ports from that range."""
    top = _ephemeral_low() - width
    for _ in range(500):
        base = _PICK.randrange(LOWEST, top)
        if _HANDED_OUT & set(range(base, base + width)):
            continue
        socks = []
        try:
            for p in range(base, base + width):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind((LOOPBACK, p))
            _HANDED_OUT.update(range(base, base + width))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {width} consecutive free ports on {LOOPBACK} between {LOWEST} and {top + width}")


def free_port() -> int:
    """A TCP port free on the loopback address right now, never one handed out before (below the
    ephemeral range, as :func:`free_range`)."""
    return free_range(1)


def env_without(root: Path, hidden: set[str]) -> Path:
    """A Python environment at ``root`` with this interpreter and every package of the running
    environment's site-packages except the top-level names in ``hidden`` (and their
    ``.pth`` / ``__editable__`` entries, so an editable install is hidden too).

    Returns:
        The environment's ``python``.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(root), "platbase": str(root)})["purelib"])
    source = Path(sysconfig.get_paths()["purelib"])
    for entry in source.iterdir():
        name = entry.name.split("-")[0].split(".")[0].lower()
        if entry.name.startswith("__editable__"):
            name = entry.name[len("__editable__."):].split("-")[0].lower()
        if name in hidden or name.replace("_", "-") in hidden or entry.name.startswith("__pycache__"):
            continue
        target = site / entry.name
        if not target.exists():
            target.symlink_to(entry)
    return root / "bin" / "python"


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process visible in /proc."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _exe_name(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


class Node:
    """One ``ray start --block`` process and the process group it leads."""

    def __init__(self, proc: subprocess.Popen, name: str, log: Path):
        self.proc, self.name, self.log = proc, name, log
        self.pgid = os.getpgid(proc.pid)

    def processes(self) -> list[int]:
        """The pids of the node's live processes: the ``ray start`` process and every descendant."""
        if self.proc.poll() is not None:
            return []
        kids, out, todo = _children(), [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(kids.get(pid, []))
        return out

    def node_id(self) -> str:
        """The node's Ray node id (hex), from its raylet's command line; kept once read."""
        if getattr(self, "_node_id", None) is None:
            args = (Path("/proc") / str(self.raylet()) / "cmdline").read_text().split("\0")
            self._node_id = next(a.split("=", 1)[1] for a in args if a.startswith("--node_id="))
        return self._node_id

    def running(self, title: str) -> bool:
        """Whether one of the node's processes has ``title`` in its command line (Ray titles a
        worker ``ray::FUNCTION`` while it runs a task)."""
        for pid in self.processes():
            try:
                if title in (Path("/proc") / str(pid) / "cmdline").read_text():
                    return True
            except OSError:
                continue
        return False

    def raylet(self) -> int:
        """The pid of the node's raylet."""
        for pid in self.processes():
            if _exe_name(pid) == "raylet":
                return pid
        raise RuntimeError(f"node {self.name}: no raylet among its processes")

    def stop(self) -> None:
        """SIGTERM the node's ``ray start`` (it ends and reaps its processes), then SIGKILL its
        process group and every descendant still found, by id."""
        pids = self.processes()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class LocalCluster:
    """A head node and worker nodes on the loopback address, in ``tmp`` (logs, sockets, spill).

    Attributes:
        address: ``127.0.0.1:PORT`` of the head's GCS (``ray start --address`` / ``RAY_ADDRESS``).
        client_address: ``ray://127.0.0.1:PORT`` of the head's Ray Client server (started
            unless ``client=False``; it needs ``ray[client]``).
        nodes: the started nodes by name (``"head"``, ``"w1"``, ...).
    """

    def __init__(self, tmp: Path, head_cpus: int = 0, system_config: dict | None = None,
                 object_store_bytes: int = 100_000_000, client: bool = True):
        self.tmp = Path(tmp)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.client_port = free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        self.client_address = f"ray://{LOOPBACK}:{self.client_port}"
        self.nodes: dict[str, Node] = {}
        self.object_store_bytes = object_store_bytes
        self.env = self._base_env()
        # Ray's session folder holds AF_UNIX sockets (paths of at most 107 bytes): a short folder of its own
        self.ray_tmp = Path(tempfile.mkdtemp(prefix="brray-", dir="/tmp"))
        self._start("head", sys.executable, head_cpus, [
            "--head", f"--port={self.port}", *([f"--ray-client-server-port={self.client_port}"] if client else []),
            f"--temp-dir={self.ray_tmp}", "--include-dashboard=false", "--disable-usage-stats",
            f"--dashboard-host={LOOPBACK}", f"--dashboard-port={free_port()}",
            *([f"--system-config={json.dumps(system_config)}"] if system_config else []),
        ])
        self.wait_started(self.nodes["head"])

    def _base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("RAY_ADDRESS", None)
        # token authentication with a token of this cluster's own (not ~/.ray's): only processes
        # given ``env`` (the nodes, the drivers the tests start) can join or connect
        env.pop("RAY_AUTH_TOKEN_PATH", None)
        # a Ray Client connection starts a server process of its own on the head; on a busy
        # machine that takes longer than Ray's default 30 s wait
        env["RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S"] = "180"
        env.update(RAY_USAGE_STATS_ENABLED="0", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
        return env

    def _start(self, name: str, python: str | Path, cpus: int, extra: list[str], env: dict[str, str] | None = None,
               pythonpath: str | None = None) -> Node:
        ports = free_range(6 + WORKER_PORTS)
        cmd = [
            str(python), "-c", RAY_START, "start", "--block", f"--node-ip-address={LOOPBACK}",
            f"--num-cpus={cpus}", "--num-gpus=0", f"--node-manager-port={ports}", f"--object-manager-port={ports + 1}",
            f"--runtime-env-agent-port={ports + 2}", f"--dashboard-agent-grpc-port={ports + 3}",
            f"--dashboard-agent-listen-port={ports + 4}", f"--metrics-export-port={ports + 5}",
            f"--min-worker-port={ports + 6}", f"--max-worker-port={ports + 5 + WORKER_PORTS}",
            f"--object-store-memory={self.object_store_bytes}", *extra,
        ]
        env = dict(env or self.env)
        if pythonpath is not None:  # "" : none
            env["PYTHONPATH"] = pythonpath
        if not env.get("PYTHONPATH"):
            env.pop("PYTHONPATH", None)
        log = self.tmp / f"{name}.log"
        proc = subprocess.Popen(cmd, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        node = Node(proc, name, log)
        self.nodes[name] = node
        return node

    def add_worker(self, name: str, cpus: int = 1, python: str | Path = sys.executable, pythonpath: str | None = None,
                   resources: dict[str, float] | None = None) -> Node:
        """Start a worker node joined to the head, and wait until the cluster counts it."""
        extra = [f"--address={self.address}"]
        if resources:
            extra.append(f"--resources={json.dumps(resources)}")
        node = self._start(name, python, cpus, extra, pythonpath=pythonpath)
        self.wait_started(node)
        return node

    def wait_started(self, node: Node, timeout: float = 120) -> None:
        """Wait until ``ray start`` reports the node started (its raylet is registered with the
        head); a node that exits first fails with its log."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = node.log.read_text(errors="replace") if node.log.exists() else ""
            if "Ray runtime started" in text:
                return
            if node.proc.poll() is not None:
                raise RuntimeError(f"ray node {node.name} exited:\n{text[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"ray node {node.name} not started after {timeout}s")

    def stop_node(self, name: str) -> None:
        """End one node's processes (by id)."""
        self.nodes.pop(name).stop()

    def stop(self) -> None:
        """End every node this cluster started, workers first."""
        for name in [n for n in self.nodes if n != "head"] + ["head"]:
            if name in self.nodes:
                self.stop_node(name)
        shutil.rmtree(self.ray_tmp, ignore_errors=True)
