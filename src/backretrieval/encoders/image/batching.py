"""Image loading and preprocessing shared by the image encoders (PIL + numpy, no torchvision).

The data are emoji PNGs with an alpha channel. Every image is composited on a WHITE
background before it is turned into RGB, so a fully transparent pixel becomes pure white
(255, 255, 255) and a fully transparent image equals an all-white one.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ...core import DataError, EncoderError
from ..base import check_embeddings

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


class BatchedImageEncoder:
    """Base of the image encoders: options, their checks, and the one batching loop.

    The image counterpart of :class:`~backretrieval.encoders.text_batching.BatchedTextEncoder`. Subclasses set ``name``,
    ``dim`` and ``version``, may extend :attr:`options` (the keyword options their factory
    accepts) and implement :meth:`_encode_batch`; a subclass that prepares batches ahead of
    the model (decoding in a background thread) overrides :meth:`_batches`, and one with a
    model to load before the first batch overrides :meth:`_prepare`.
    """

    name: str = ""
    dim: int | None = 0
    version: str = ""
    options: tuple[str, ...] = ("batch_size", "progress")

    def __init__(self, *, batch_size: int = 64, progress: bool = False) -> None:
        self.batch_size = self._batch_size(batch_size)
        self.progress = bool(progress)

    @classmethod
    def check_options(cls, model: str, options: dict[str, Any]) -> None:
        """Raise :class:`EncoderError` naming any option ``model``'s factory does not take.

        Args:
            model: the registered name, for the message.
            options: the keyword options given.

        Raises:
            EncoderError: an unknown option (the known ones are listed).
        """
        unknown = set(options) - set(cls.options)
        if unknown:
            raise EncoderError(
                f"image model {model!r}: unknown option(s) {', '.join(sorted(unknown))} (known: {', '.join(cls.options)})"
            )

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
