"""What a model given as a Python object shares, text or image: how it is called, and its identity.

A user's model object (:class:`~.text.python_model.PythonTextModel`,
:class:`~.image.python_model.PythonImageModel`) is called through :func:`encode_call`: its
``encode`` method with numpy output and no progress bar where its signature takes those options
(as a ``SentenceTransformer``'s does), or the object itself when it is a plain callable.

Caching is only as safe as the model's identity (:func:`object_identity`). A torch module is
identified by a hash of its class, weights and buffers and the devices they are on
(:func:`torch_fingerprint`: the object runs where the user put it, and GPU kernels round
differently), so its vectors are cached on disk like any packaged model's and a changed model
never reuses them. Any other object is cached on disk only when the user gives a ``version``
string (their promise that the same version embeds the same way); without one it is *run-only*:
its vectors live only for the run, and the records that use it are neither stored for resuming
nor resumed.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import sys
from typing import Any, Callable, Iterator

from ..core import EncoderError


def is_torch_module(model: Any) -> bool:
    """Whether ``model`` is a ``torch.nn.Module`` (without importing torch when it is not loaded)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def torch_fingerprint(model: Any) -> str | None:
    """BLAKE2b of a torch module's class and of its parameters and buffers (names, dtypes, shapes,
    bytes), followed by the devices they are on (``@cpu``, ``@cuda``: GPU kernels round
    differently); None for anything that is not a torch module."""
    if not is_torch_module(model):
        return None
    import torch

    h = hashlib.blake2b(digest_size=12)
    h.update(f"{type(model).__module__}.{type(model).__qualname__}".encode())
    for name, t in model.state_dict().items():
        arr = t.detach().cpu().contiguous()
        h.update(f"{name}|{arr.dtype}|{tuple(arr.shape)}".encode())
        h.update(arr.reshape(-1).view(torch.uint8).numpy().tobytes())
    devices = sorted({t.device.type for t in model.state_dict().values()}) or ["cpu"]
    return f"{h.hexdigest()}@{'+'.join(devices)}"


def object_identity(model: Any, version: str | None) -> tuple[bool, str]:
    """Whether a model object's vectors may be cached, and its ``version`` (the cache key).

    Args:
        model: the user's model object.
        version: the user's stable identity for it, or None.

    Returns:
        ``(cacheable, version)``: ``python:<module.Class>:<identity>``, the identity being
        ``version``, else a torch module's :func:`torch_fingerprint`; ``python:<module.Class>:run-only``
        and not cacheable for any other object without a ``version``.
    """
    identity = version if version is not None else torch_fingerprint(model)
    kind = f"{type(model).__module__}.{type(model).__qualname__}"
    return identity is not None, f"python:{kind}:{identity if identity is not None else 'run-only'}"


def object_name(model: Any) -> str:
    """The name an unnamed model object gets: its function's ``__name__`` for a plain function,
    else its class's name (``Lite0Features``)."""
    if inspect.isfunction(model) or inspect.ismethod(model):
        return model.__name__
    return type(model).__name__


def encode_call(model: Any, needs: str) -> Callable[[list[Any]], Any]:
    """The encoding function of a user's model object: ``model.encode`` with numpy output and no
    progress bar where its signature takes those options, or the callable itself.

    Args:
        model: an object with an ``encode`` method, or a callable.
        needs: the error's sentence on what such an object needs (the type found follows it).

    Returns:
        ``f(items) -> array-like``.

    Raises:
        EncoderError: ``model`` has no ``encode`` method and is not callable.
    """
    if hasattr(model, "encode") and callable(model.encode):
        fn = model.encode
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        kw: dict[str, Any] = {}
        for key, value in (("convert_to_numpy", True), ("show_progress_bar", False)):
            if key in params:
                kw[key] = value
        return lambda items: fn(items, **kw)
    if callable(model):
        return model
    raise EncoderError(f"{needs}; got {type(model).__name__}")


@contextlib.contextmanager
def inference(model: Any) -> Iterator[None]:
    """For a torch module: no autograd and eval mode for the call, the module's mode restored after;
    nothing for any other object."""
    if not is_torch_module(model):
        yield
        return
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if was_training:
            model.train()
