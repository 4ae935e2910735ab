"""Where an encoder runs: the device (``cpu`` / ``cuda`` / ``auto``), the backend (ONNX Runtime or
torch) and the CPU cores.

Devices. :func:`resolve_device` turns the ``device`` option of the model encoders into ``"cpu"``
or ``"cuda"``: ``auto`` (the default, also taken from ``$BACKRETRIEVAL_DEVICE``) picks ``cuda``
when the backend can use a CUDA GPU (torch: ``torch.cuda.is_available()``; ONNX Runtime: the
``CUDAExecutionProvider`` is available), else ``cpu``; ``cuda`` without a usable GPU is an
:class:`~backretrieval.core.EncoderError`. The device is part of every encoder's ``version``
(so of every cache key): GPU kernels round differently from CPU ones.

Backends. The CNN image models run on ONNX Runtime (:mod:`.onnx_export`) when ``onnxruntime``
and ``onnx`` import; the ``auto`` backend falls back to torch with one :class:`BackendWarning` per
model and process otherwise; asking for ``backend="onnxruntime"`` explicitly without them is an
error with a pip hint.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..core import EncoderError

DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "onnxruntime", "torch")
DEVICE_ENV = "BACKRETRIEVAL_DEVICE"
_warned: set[str] = set()


class BackendWarning(UserWarning):
    """An encoder runs on a slower backend than it could (e.g. onnxruntime is not installed)."""


def default_threads() -> int:
    """CPU cores this process may run on (the affinity mask, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


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
