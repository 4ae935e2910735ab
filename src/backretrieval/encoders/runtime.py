"""Where an encoder runs: the device choice (``cpu`` / ``cuda`` / ``auto``) and ONNX Runtime.

Devices. :func:`resolve_device` turns the ``device`` option of the model encoders into ``"cpu"``
or ``"cuda"``: ``auto`` (the default, also taken from ``$BACKRETRIEVAL_DEVICE``) picks ``cuda``
when the backend can use a CUDA GPU (torch: ``torch.cuda.is_available()``; ONNX Runtime: the
``CUDAExecutionProvider`` is available), else ``cpu``; ``cuda`` without a usable GPU is an
:class:`~backretrieval.core.EncoderError`. The device is part of every encoder's ``version``
(so of every cache key): GPU kernels round differently from CPU ones.

ONNX Runtime. The CNN image encoders run their frozen feature extractor through ONNX Runtime
(about 4x the throughput of eager torch on CPU, features equal to torch's within 1e-4). The
ONNX graph is exported once from the packaged weights with ``torch.onnx.export`` and kept in
the user cache (:func:`backretrieval.core.cache_dir` ``("onnx")``) under a name made of the
model, the digest of the weights file, the opset, the torch and onnxruntime versions and
:data:`EXPORT_REVISION` (bumped when the export code changes). The file is written atomically
(:func:`~backretrieval.core.atomic_write`) under an exclusive ``fcntl`` lock, so concurrent
first runs export it once and never read a partial file. A freshly exported graph is checked
against torch on a fixed input before it is kept (max abs difference <= :data:`EXPORT_ATOL`);
a cached file that ONNX Runtime cannot load is exported again.

Missing packages. The ``auto`` backend uses ONNX Runtime when ``onnxruntime`` imports and falls
back to torch with one :class:`BackendWarning` per model and process otherwise (export also
needs ``onnx``); asking for ``backend="onnxruntime"`` explicitly without it is an error with a
pip hint.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core import EncoderError, atomic_write, cache_dir

DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "onnxruntime", "torch")
OPSET = 17
EXPORT_REVISION = 1  # bump when the exported graph would change for the same weights
EXPORT_ATOL = 1e-4  # largest |onnx - torch| accepted on the export check
DEVICE_ENV = "BACKRETRIEVAL_DEVICE"
_warned: set[str] = set()


class BackendWarning(UserWarning):
    """An encoder runs on a slower backend than it could (e.g. onnxruntime is not installed)."""


def check_choice(value: Any, allowed: Sequence[str], what: str, owner: str) -> str:
    """``value`` lower-cased if it is one of ``allowed``; else EncoderError naming it."""
    v = str(value).strip().lower() if isinstance(value, str) else value
    if v not in allowed:
        raise EncoderError(f"{owner}: {what} must be one of {', '.join(allowed)}, got {value!r}")
    return v


def requested_device(device: str | None, owner: str) -> str:
    """The device asked for: ``device``, else ``$BACKRETRIEVAL_DEVICE``, else ``"auto"`` (checked)."""
    if device is None:
        device = os.environ.get(DEVICE_ENV) or "auto"
    return check_choice(device, DEVICES, "device", owner)


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def ort_installed() -> bool:
    """Whether ``onnxruntime`` imports."""
    return _importable("onnxruntime")


def onnx_installed() -> bool:
    """Whether ``onnx`` (needed by the exporter) imports."""
    return _importable("onnx")


def ort_cuda_available() -> bool:
    """Whether ONNX Runtime offers its ``CUDAExecutionProvider`` here *and* a CUDA GPU is present
    (``onnxruntime-gpu`` lists the provider on machines without a GPU too): torch sees one, or the
    NVIDIA driver lists one."""
    if not ort_installed():
        return False
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return torch_cuda_available() or (gpus.is_dir() and any(gpus.iterdir()))


def torch_cuda_available() -> bool:
    """Whether torch sees a CUDA GPU."""
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(device: str | None, backend: str, owner: str) -> str:
    """``"cpu"`` or ``"cuda"`` for ``device`` (``auto``/``cpu``/``cuda``/None) on ``backend``.

    Args:
        device: the requested device; None reads ``$BACKRETRIEVAL_DEVICE`` (default ``auto``).
        backend: ``"onnxruntime"`` or ``"torch"`` (whose CUDA support is asked).
        owner: the model's name, for messages.

    Returns:
        ``"cuda"`` when asked for (or ``auto``) and available, else ``"cpu"``.

    Raises:
        EncoderError: an unknown device, or ``cuda`` asked for where the backend has no GPU.
    """
    dev = requested_device(device, owner)
    if dev == "cpu":
        return "cpu"
    has_cuda = ort_cuda_available() if backend == "onnxruntime" else torch_cuda_available()
    if dev == "cuda" and not has_cuda:
        what = "ONNX Runtime's CUDAExecutionProvider (pip install onnxruntime-gpu)" if backend == "onnxruntime" else "torch.cuda"
        raise EncoderError(f"{owner}: device 'cuda' was asked for, but no CUDA GPU is usable through {what}")
    return "cuda" if has_cuda else "cpu"


def any_cuda_available() -> bool:
    """Whether torch or ONNX Runtime can use a CUDA GPU here (False where torch is not installed)."""
    try:
        if torch_cuda_available():
            return True
    except ImportError:
        pass
    return ort_cuda_available()


@contextlib.contextmanager
def use_device(device: str, owner: str = "device") -> Iterator[str]:
    """Within the block, encoders built without their own ``device`` option run on ``device``
    (``auto``/``cpu``/``cuda``): ``$BACKRETRIEVAL_DEVICE`` is set, and restored afterwards. The
    device ends up in the ``version`` (so the cache keys) only of the encoders whose outputs
    depend on it: the torch and ONNX Runtime models (``st:``, ``minilm-en``, the CNN image
    models); the CPU-only ones (``use-m``, ``e5-small``, TF-IDF, colour histograms) ignore it, and
    a user's Python object runs where the user put it.

    Args:
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        owner: how messages name the choice (e.g. ``"--device"``).

    Yields:
        The device, lower-cased.

    Raises:
        EncoderError: an unknown device, or ``cuda`` where neither torch nor ONNX Runtime sees a GPU.
    """
    dev = check_choice(device, DEVICES, "device", owner)
    if dev == "cuda" and not any_cuda_available():
        raise EncoderError(
            f"{owner}: device 'cuda' was asked for, but no CUDA GPU is usable here (neither torch.cuda nor ONNX "
            "Runtime's CUDAExecutionProvider sees one); use cpu or auto"
        )
    old = os.environ.get(DEVICE_ENV)
    os.environ[DEVICE_ENV] = dev
    try:
        yield dev
    finally:
        if old is None:
            os.environ.pop(DEVICE_ENV, None)
        else:
            os.environ[DEVICE_ENV] = old


def choose_backend(backend: str | None, owner: str) -> str:
    """``"onnxruntime"`` or ``"torch"`` for the ``backend`` option (``auto`` when None).

    ``auto`` takes ONNX Runtime when ``onnxruntime`` and ``onnx`` are installed and otherwise
    warns once per model and process (:class:`BackendWarning`) and takes torch.

    Raises:
        EncoderError: an unknown backend, or ``onnxruntime`` asked for but not installed.
    """
    b = check_choice("auto" if backend is None else backend, BACKENDS, "backend", owner)
    if b == "torch":
        return b
    missing = [d for d, ok in (("onnxruntime", ort_installed()), ("onnx", onnx_installed())) if not ok]
    if not missing:
        return "onnxruntime"
    if b == "onnxruntime":
        raise EncoderError(f"{owner}: backend 'onnxruntime' needs {' and '.join(missing)}: pip install {' '.join(missing)}")
    if owner not in _warned:
        _warned.add(owner)
        warnings.warn(
            f"{owner}: {' and '.join(missing)} not installed, so the model runs on torch (about 4x slower on CPU); "
            f"pip install {' '.join(missing)}",
            BackendWarning,
            stacklevel=4,
        )
    return "torch"


def ort_version() -> str:
    """The installed onnxruntime version."""
    import onnxruntime as ort

    return ort.__version__


def torch_version() -> str:
    """torch's version without importing it (ImportError when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        raise ImportError("No module named 'torch'", name="torch") from None


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created) for the duration of the block."""
    try:
        import fcntl
    except ImportError:  # not POSIX: atomic writes alone keep readers safe
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def export_path(model: str, weights_digest: str) -> Path:
    """Cache path of the ONNX graph of ``model`` exported from weights with ``weights_digest``."""
    name = (
        f"{model}-w{weights_digest[:16]}-opset{OPSET}-torch{torch_version()}-ort{ort_version()}-rev{EXPORT_REVISION}.onnx"
    )
    return cache_dir("onnx") / name.replace("+", "_")


def export_onnx(module: Any, example: np.ndarray, path: Path) -> None:
    """Export ``module`` (torch, eval mode, input NCHW float32) to ``path`` atomically.

    The batch axis is dynamic; the graph is checked against ``module`` on ``example`` with
    ONNX Runtime before it is moved into place.

    Raises:
        EncoderError: the export fails or the ONNX graph disagrees with torch by more than
            :data:`EXPORT_ATOL`.
    """
    import io

    import torch

    buf = io.BytesIO()
    x = torch.from_numpy(np.ascontiguousarray(example))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's notes on Slice folding etc.
            torch.onnx.export(
                module,
                (x,),
                buf,
                dynamo=False,
                opset_version=OPSET,
                input_names=["pixels"],
                output_names=["features"],
                dynamic_axes={"pixels": {0: "n"}, "features": {0: "n"}},
                do_constant_folding=True,
            )
    except Exception as e:  # noqa: BLE001 - any exporter failure: say which model
        raise EncoderError(f"cannot export {path.name} to ONNX: {type(e).__name__}: {e}") from e
    data = buf.getvalue()
    with torch.inference_mode():
        want = module(x).numpy()
    got = make_session(data, threads=1, device="cpu").run(None, {"pixels": example})[0]
    diff = float(np.abs(got - want).max())
    if not diff <= EXPORT_ATOL:
        raise EncoderError(f"ONNX export {path.name} differs from torch by {diff:.3g} (> {EXPORT_ATOL}); not used")
    with atomic_write(path) as fh:
        fh.write(data)


def cached_export(model: str, weights_digest: str, build: Callable[[], Any], example: np.ndarray) -> Path:
    """The ONNX graph of ``model`` in the user cache, exported on first use.

    Args:
        model: the model name (part of the file name).
        weights_digest: content digest of the weights the graph holds (part of the file name).
        build: returns the torch module to export (only called when the file is missing).
        example: a float32 NCHW batch used for the export and its check against torch.

    Returns:
        The path of the ``.onnx`` file.

    Raises:
        EncoderError: the export fails or disagrees with torch.
    """
    path = export_path(model, weights_digest)
    if path.is_file():
        return path
    with file_lock(path.with_name(path.name + ".lock")):
        if not path.is_file():  # another process may have exported it while we waited
            export_onnx(build(), example, path)
    return path


def make_session(model: str | os.PathLike[str] | bytes, *, threads: int, device: str):
    """An ``onnxruntime.InferenceSession`` for ``model`` (a path or the graph's bytes).

    CPU: ``threads`` intra-op threads, one inter-op thread, all graph optimisations, no
    busy-waiting between runs (which only burns a shared machine's cores). CUDA: the
    ``CUDAExecutionProvider`` first, the CPU provider for anything it lacks.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = int(threads)
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    src = model if isinstance(model, bytes) else os.fspath(model)
    return ort.InferenceSession(src, so, providers=providers)
