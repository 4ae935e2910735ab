"""The frozen ImageNet CNN feature extractors (EfficientNet-Lite, MobileNetV2): one encode loop,
two backends.

:class:`CNNFeatureEncoder` holds what the CNN encoders share: options, the ``version`` (cache
key), the backend and device choice, and ``encode_images``, which decodes and resizes the next
batch in a background thread while the model runs the current one (PIL and the model release
the GIL), so the model never waits for PIL.

Backends (option ``backend``): ``onnxruntime`` runs the feature extractor exported to ONNX
(see :mod:`~backretrieval.encoders.onnx_export`; several times the images per CPU-second of eager torch, timings in
BENCHMARKS.md; features within 1e-4 of torch's); ``torch`` runs the packaged PyTorch model (the reference, and the fallback when
onnxruntime is missing); ``auto`` (default) takes ONNX Runtime when it is installed. The torch
model is only built when it is needed (torch backend, first export, or ``.model``).

Determinism: with ONNX Runtime (CPU) an image's features are bit-identical whatever the batch
it is in, its position there and the number of threads (every CNN;
tests/encoders/test_image_encoders.py). With torch they agree within ~1e-5 but not to the bit: eager
torch picks its convolution kernels by batch shape and thread count (differences in BENCHMARKS.md), so the torch backend
runs with ``threads`` torch threads on the CPU and its ``versions`` name that count. The ``version``
names the backend, its version and the device, so vectors of different backends never share a
cache entry; ``versions`` names the installed Pillow, numpy and backend library.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ...core import EncoderError
from ...core.fingerprint import file_digest
from ..devices import choose_backend, default_threads, ort_version, resolve_device, torch_version
from ..onnx_export import EXPORT_REVISION, OPSET, cached_export, make_session
from .batching import BatchedImageEncoder, preprocess_batch

MAX_VERSION_CHARS = 120  # the embedding cache keeps this many characters of a version


def prefetched(chunks: Sequence[Any], load: Callable[[Any], np.ndarray]) -> Iterator[np.ndarray]:
    """``load(chunk)`` for each chunk in order, the next one computed in a background thread
    while the caller works on the current one. An exception of ``load`` is raised when its
    chunk is reached; leaving the loop early cancels what is pending."""
    if len(chunks) <= 1:
        for c in chunks:
            yield load(c)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="image-decode") as pool:
        pending = pool.submit(load, chunks[0])
        try:
            for i in range(len(chunks)):
                batch = pending.result()
                if i + 1 < len(chunks):
                    pending = pool.submit(load, chunks[i + 1])
                yield batch
        finally:
            pending.cancel()


class CNNFeatureEncoder(BatchedImageEncoder):
    """Base of the CNN image models (a :class:`.batching.BatchedImageEncoder` whose batches are
    decoded ahead in a background thread). Subclasses set ``name``, ``dim``, ``resolution``, ``mean``,
    ``std`` and ``describe`` (the preprocessing part of the version) and implement
    ``weights_path()``, ``build_torch()`` (the ImageNet classifier with weights loaded) and
    ``feature_module(model)`` (a module mapping NCHW pixels to pooled features)."""

    name: str = ""
    dim: int = 0
    resolution: int = 0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    describe: str = ""  # e.g. "bicubic-crop/m127s128/white-bg/gap1280"

    def __init__(
        self,
        *,
        batch_size: int = 64,
        progress: bool = False,
        backend: str | None = None,
        device: str | None = None,
        threads: int | None = None,
    ) -> None:
        super().__init__(batch_size=batch_size, progress=progress)
        if threads is not None and (isinstance(threads, bool) or int(threads) < 1):
            raise EncoderError(f"{self.name}: threads must be >= 1, got {threads}")
        self.threads = default_threads() if threads is None else int(threads)
        self.weights = self.weights_path()
        self.weights_digest = file_digest(self.weights)
        self.backend = choose_backend(backend, self.name)
        self.device = resolve_device(device, self.backend, self.name)
        self._torch: Any = None
        self._features: Any = None  # torch feature module (torch backend)
        self._session: Any = None  # onnxruntime session
        if self.backend == "onnxruntime":
            tag = f"ort{ort_version()}-{self.device}-x{OPSET}.{EXPORT_REVISION}-pt{torch_version().split('+')[0]}"
        else:
            tag = f"pt{torch_version()}-{self.device}"
        self.version = f"{self.name}/{self.weights_id()}/{self.resolution}/{self.describe}/{tag}"
        if len(self.version) > MAX_VERSION_CHARS:  # the cache would cut it and could mix backends
            raise EncoderError(f"{self.name}: version {self.version!r} is longer than {MAX_VERSION_CHARS} characters")

    # -- subclass hooks
    def weights_path(self) -> str:
        """The packaged weights file (subclasses say where)."""
        raise NotImplementedError

    @property
    def versions(self) -> dict[str, str]:
        """What can change the features besides ``version``: the installed Pillow and numpy
        (decoding, resizing, normalisation) and the backend's library; with torch also the
        thread count its convolutions run with (:attr:`threads`, set for each batch on the CPU).
        The embedding cache and the stored records are keyed by them."""
        from ...core import env

        out = env.versions_of(("pillow", "numpy", self.backend))
        if self.backend == "torch" and self.device == "cpu":
            out["torch threads"] = str(self.threads)
        return out

    def weights_id(self) -> str:
        """The weights part of the version: the weights file's digest (12 hex digits)."""
        return f"w{self.weights_digest[:12]}"

    def build_torch(self) -> Any:
        """The torch model with its packaged weights (subclasses build it)."""
        raise NotImplementedError

    def feature_module(self, model: Any) -> Any:
        """The part of ``model`` that maps a preprocessed batch to pooled features (subclasses say which)."""
        raise NotImplementedError

    # -- models
    @property
    def model(self) -> Any:
        """The torch ImageNet classifier (eval mode, channels_last, on CPU), built on first use."""
        if self._torch is None:
            import torch

            self._torch = self.build_torch().eval().to(memory_format=torch.channels_last)
        return self._torch

    def _torch_features(self) -> Any:
        if self._features is None:
            if self.device == "cuda":  # a copy on the GPU; .model stays on the CPU
                import copy

                self._features = self.feature_module(copy.deepcopy(self.model)).eval().to("cuda")
            else:
                self._features = self.feature_module(self.model).eval()
        return self._features

    def _ort_session(self) -> Any:
        if self._session is None:
            example = np.random.default_rng(0).uniform(-1, 1, (2, 3, self.resolution, self.resolution)).astype(np.float32)

            def build():
                import copy

                import torch

                # export from a float32, contiguous-format copy on the CPU
                return self.feature_module(copy.deepcopy(self.model).to(memory_format=torch.contiguous_format)).eval()

            path = cached_export(self.name, self.weights_digest, build, example)
            try:
                self._session = make_session(path, threads=self.threads, device=self.device)
            except Exception:  # noqa: BLE001 - a damaged cache file: export it again, once
                path.unlink(missing_ok=True)
                path = cached_export(self.name, self.weights_digest, build, example)
                self._session = make_session(path, threads=self.threads, device=self.device)
            if self.device == "cuda" and self._session.get_providers()[0] != "CUDAExecutionProvider":
                # ONNX Runtime falls back to the CPU silently when the CUDA provider cannot load
                self._session = None
                raise EncoderError(
                    f"{self.name}: ONNX Runtime could not start its CUDAExecutionProvider (CUDA/cuDNN libraries "
                    "missing or no GPU); use device='cpu' (or BACKRETRIEVAL_DEVICE=cpu)"
                )
        return self._session

    # -- encoding
    def preprocess(self, paths: Sequence[str | os.PathLike[str]]) -> np.ndarray:
        """The float32 NCHW batch the model sees for ``paths``."""
        return preprocess_batch(paths, self.resolution, self.mean, self.std)

    def _run(self, x: np.ndarray) -> np.ndarray:
        if self.backend == "onnxruntime":
            return self._ort_session().run(None, {"pixels": x})[0]
        import torch

        feats = self._torch_features()
        before = torch.get_num_threads()
        if self.device == "cpu":  # torch picks its kernels by thread count: run with the keyed one
            torch.set_num_threads(self.threads)
        try:
            with torch.inference_mode():
                t = torch.from_numpy(x)
                t = t.to("cuda") if self.device == "cuda" else t
                return feats(t.contiguous(memory_format=torch.channels_last)).float().cpu().numpy()
        finally:
            if self.device == "cpu":
                torch.set_num_threads(before)

    # -- BatchedImageEncoder hooks: decode the next batch while the model runs this one
    def _batches(self, chunks: Sequence[list[Any]]) -> Iterator[np.ndarray]:
        return prefetched(chunks, self.preprocess)

    def _encode_batch(self, batch: np.ndarray) -> np.ndarray:
        return self._run(batch)

    def _prepare(self) -> None:
        self._run_ready()  # load or export the model before the first batch is decoded

    def _run_ready(self) -> None:
        if self.backend == "onnxruntime":
            self._ort_session()
        else:
            self._torch_features()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.version}>"
