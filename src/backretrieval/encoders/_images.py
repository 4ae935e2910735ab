"""Image loading and preprocessing shared by the image encoders (PIL + numpy, no torchvision).

The data are emoji PNGs with an alpha channel. Every image is composited on a WHITE
background before it is turned into RGB, so a fully transparent pixel becomes pure white
(255, 255, 255) and a fully transparent image equals an all-white one.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..core import DataError

WHITE = (255, 255, 255)


def load_rgb(path: str | os.PathLike[str]):
    """Open an image with PIL and return it as an RGB ``PIL.Image`` on a white background.

    RGBA / LA / PA images, and palette or RGB/L images carrying a ``transparency`` entry,
    are alpha-composited over white. Raises :class:`DataError` naming the file when it is
    missing or PIL cannot decode it.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.load()
            return _to_rgb_on_white(im)
    except FileNotFoundError as e:
        raise DataError(f"image not found / unreadable: {path} (no such file)") from e
    except IsADirectoryError as e:
        raise DataError(f"image not found / unreadable: {path} (is a directory)") from e
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise DataError(f"image not found / unreadable: {path} ({type(e).__name__}: {e})") from e


def _to_rgb_on_white(im):
    from PIL import Image

    has_alpha = im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info
    if not has_alpha:
        return im.convert("RGB")
    rgba = im.convert("RGBA")
    background = Image.new("RGBA", rgba.size, WHITE + (255,))
    return Image.alpha_composite(background, rgba).convert("RGB")


def resize_center_crop(im, size: int):
    """Resize (bicubic) so the shorter side is ``size``, then center-crop ``size`` x ``size``.

    No extra margin is cropped (unlike the usual ImageNet 256->224 / TF ``crop_padding``
    evaluation crop): emoji fill their square canvas edge to edge.
    """
    from PIL import Image

    w, h = im.size
    if (w, h) != (size, size):
        scale = size / min(w, h)
        nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
        im = im.resize((nw, nh), Image.Resampling.BICUBIC)
        left, top = (nw - size) // 2, (nh - size) // 2
        im = im.crop((left, top, left + size, top + size))
    return im


def preprocess_batch(
    paths: Sequence[str | os.PathLike[str]], size: int, mean: Sequence[float], std: Sequence[float]
) -> np.ndarray:
    """Load ``paths`` into a float32 NCHW array: pixels / 255, minus ``mean``, over ``std``."""
    out = np.empty((len(paths), 3, size, size), dtype=np.float32)
    m = np.asarray(mean, dtype=np.float32).reshape(1, 1, 3)
    s = np.asarray(std, dtype=np.float32).reshape(1, 1, 3)
    for i, p in enumerate(paths):
        arr = np.asarray(resize_center_crop(load_rgb(p), size), dtype=np.float32) / 255.0
        out[i] = ((arr - m) / s).transpose(2, 0, 1)
    return out


def progress_bar(total: int, desc: str, enabled: bool):
    """A tqdm bar (disabled when ``enabled`` is false)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="img", disable=not enabled)
