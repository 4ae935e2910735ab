"""Image loading and preprocessing shared by the image models (PIL + numpy, no torchvision).

The data are emoji PNGs with an alpha channel. Every image is composited on a WHITE
background before it is turned into RGB, so a fully transparent pixel becomes pure white
(255, 255, 255) and a fully transparent image equals an all-white one.

Images of more than :data:`MAX_PIXELS` pixels (25 million, e.g. 5,000 x 5,000) are refused
from their header, before they are decoded: a small compressed file can hold a huge image
(``color-hist`` keeps about 45 bytes per pixel, so a 13,300 x 13,300 PNG of 543 KB would
cost 7.8 GB). Grey images of more than 8 bits are rescaled to 8 bits: 16-bit ones (modes
``I;16*``, and ``I`` with values in 0..65535) by ``round(v * 255 / 65535)``, floating-point
ones (mode ``F``) with values in [0, 1] by ``round(v * 255)``; other ``I`` and ``F`` images
(negative, above the range, NaN) are refused, naming the file and the values.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ...core import DataError, EncoderError
from ..base import check_embeddings

WHITE = (255, 255, 255)
MAX_PIXELS = 25_000_000  # width x height of the largest image an image model reads
LOADING = "white-bg2"  # the rule of load_rgb, in every image model's version: white background, 16-bit and [0, 1] float grey to 8 bits


def load_rgb(path: str | os.PathLike[str]):
    """Open an image with PIL and return it as an RGB ``PIL.Image`` on a white background.

    RGBA / LA / PA images, and palette or RGB/L images carrying a ``transparency`` entry,
    are alpha-composited over white; 16-bit and floating-point grey images are rescaled to
    8 bits (see the module docstring). Raises :class:`DataError` naming the file when it is
    missing, PIL cannot decode it, it has more than :data:`MAX_PIXELS` pixels, or its
    integer or float pixel values are outside the range it can be rescaled from.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            w, h = im.size
            if w * h > MAX_PIXELS:
                raise DataError(
                    f"image {path} is {w:,} x {h:,} = {w * h:,} pixels; image models read at most {MAX_PIXELS:,} "
                    "(e.g. 5,000 x 5,000): downscale it"
                )
            im.load()
            return _to_rgb_on_white(_to_8_bits(im, path))
    except DataError:
        raise
    except Image.DecompressionBombError as e:
        raise DataError(f"image {path} has more than {MAX_PIXELS:,} pixels, the most image models read ({e})") from e
    except FileNotFoundError as e:
        raise DataError(f"image not found / unreadable: {path} (no such file)") from e
    except IsADirectoryError as e:
        raise DataError(f"image not found / unreadable: {path} (is a directory)") from e
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise DataError(f"image not found / unreadable: {path} ({type(e).__name__}: {e})") from e


def _to_8_bits(im, path):
    """A 16-bit or floating-point grey image as an 8-bit one (mode ``L``); other images as they are."""
    from PIL import Image

    if not (im.mode.startswith("I") or im.mode == "F"):
        return im
    arr = np.asarray(im)
    if im.mode == "F":
        lo, hi = (float(arr.min()), float(arr.max())) if arr.size else (0.0, 1.0)
        if not (np.isfinite(arr).all() and lo >= 0.0 and hi <= 1.0):
            raise DataError(f"image {path}: floating-point pixel values must be in [0, 1], got {lo:g} to {hi:g}"
                            if np.isfinite(arr).all() else f"image {path}: floating-point pixel values include NaN or inf")
        return Image.fromarray(np.rint(arr.astype(np.float64) * 255.0).astype(np.uint8), "L")
    arr = arr.astype(np.int64)
    lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
    if lo < 0 or hi > 65535:
        raise DataError(f"image {path}: integer pixel values must be in 0..65535 (16 bits), got {lo} to {hi}")
    return Image.fromarray(((arr * 255 + 32767) // 65535).astype(np.uint8), "L")


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


class BatchedImageEncoder:
    """Base of the image models: the common options and the one batching loop.

    The image counterpart of :class:`~backretrieval.encoders.text.batching.BatchedTextEncoder`. Subclasses set ``name``,
    ``dim`` and ``version``, take their options as keyword-only ``__init__`` parameters (the
    registry reads and checks them) and implement :meth:`_encode_batch`; a subclass that prepares batches ahead of
    the model (decoding in a background thread) overrides :meth:`_batches`, and one with a
    model to load before the first batch overrides :meth:`_prepare`.
    """

    name: str = ""
    dim: int | None = 0
    version: str = ""

    def __init__(self, *, batch_size: int = 64, progress: bool = False) -> None:
        self.batch_size = self._batch_size(batch_size)
        self.progress = bool(progress)

    def _batch_size(self, value: Any) -> int:
        if isinstance(value, bool) or int(value) < 1:
            raise EncoderError(f"{self.name}: batch_size must be >= 1, got {value}")
        return int(value)

    # -- subclass hooks
    def _encode_batch(self, batch: Any) -> np.ndarray:
        """(len(batch), dim) features of one prepared batch."""
        raise NotImplementedError

    def _batches(self, chunks: Sequence[list[Any]]) -> Iterator[Any]:
        """The prepared batch of each chunk of paths, in order (default: the paths themselves)."""
        return iter(chunks)

    def _prepare(self) -> None:
        """Called once before the first batch of a non-empty call (load a model)."""

    # -- encoding
    def encode_images(
        self,
        paths: Sequence[str | os.PathLike[str]],
        batch_size: int | None = None,
        progress: bool | None = None,
    ) -> np.ndarray:
        """float32 (n, dim) features of the images at ``paths``, in order.

        Args:
            paths: image files (any format PIL reads; transparency composited over white).
            batch_size: images per batch (default: the encoder's ``batch_size``).
            progress: show a progress bar (default: the encoder's ``progress``).

        Returns:
            A C-contiguous float32 array of shape ``(len(paths), dim)``.

        Raises:
            DataError: an image is missing or unreadable (naming the file).
            EncoderError: a bad ``batch_size`` or unusable features (NaN, all zero).
        """
        paths = list(paths)
        bs = self.batch_size if batch_size is None else self._batch_size(batch_size)
        show = self.progress if progress is None else bool(progress)
        out = np.empty((len(paths), self.dim), dtype=np.float32)
        chunks = [paths[start : start + bs] for start in range(0, len(paths), bs)]
        if chunks:
            self._prepare()
        start = 0
        with progress_bar(len(paths), self.name, show) as bar:
            for chunk, batch in zip(chunks, self._batches(chunks)):
                out[start : start + len(chunk)] = self._encode_batch(batch)
                start += len(chunk)
                bar.update(len(chunk))
        return check_embeddings(out, len(paths), f"{self.name} image embeddings")
