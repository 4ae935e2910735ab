"""An image model given as a Python object: the image model ``g`` of BkR and CORR as any torch
module, any object with an ``encode(images)`` method (a sentence-transformers CLIP model, an
open_clip or timm tower wrapped by the user, the user's own class) or a plain function
``f(images) -> array (n, dim)``, named by the user.

What the model is given. ``images`` is a list of ``PIL.Image.Image`` objects in RGB mode,
decoded from the dataset's image files exactly as the packaged image models see them:
transparency composited over a white background (:func:`.batching.load_rgb`), at the file's own
resolution. Resizing, cropping and normalising are the model's own business (a CLIP tower's
``preprocess``). The model returns one row per image: a numpy array, a torch tensor (on any
device, any float dtype) or anything ``numpy.asarray`` reads.

How it is called. An object with a callable ``encode`` is called as ``encode(images)`` (with
``convert_to_numpy=True`` and ``show_progress_bar=False`` where its signature takes them, as a
``SentenceTransformer`` does); any other callable, a torch module included, as ``model(images)``.
A torch module is called under ``torch.no_grad()`` and, for the call, in eval mode (dropout
off, batch-norm statistics frozen); its previous mode is restored afterwards.

Identity, as for every model object (:mod:`backretrieval.encoders.python_objects`). A torch
module is identified by a hash of its class, weights and buffers and the devices they are on, so
its features are cached on disk like a packaged model's and a retrained module never reuses them.
Any other object is cached only when the user gives a ``version`` (their promise that the same
version encodes the same way); without one it is *run-only*: its features live only for the run,
and the records that use it are neither stored for resuming nor resumed.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from ...core import EncoderError, first_bad_row, numeric_rows
from .batching import load_rgb
from ..python_objects import encode_call, inference, object_identity


class PythonImageModel:
    """A user's Python image model as the image model ``g`` of the grid (see the module doc for
    what it is given and how it is called).

    Args:
        name: the name records (``image_model``), tables and reports use.
        model: a torch module, an object with ``encode(images)``, or a callable ``f(images)``;
            ``images`` is a list of RGB ``PIL.Image.Image``.
        version: a stable identity for on-disk caching and resuming; a torch module gets one from
            its weights when this is None; any other object without one is run-only.
        batch_size: images per call.

    Raises:
        EncoderError: an empty name, a batch size below 1, an object that has no ``encode`` and is
            not callable.
    """

    def __init__(self, name: str, model: Any, *, version: str | None = None, batch_size: int = 32):
        if not isinstance(name, str) or not name.strip():
            raise EncoderError(f"an image model object needs a non-empty name, got {name!r}")
        if isinstance(batch_size, bool) or int(batch_size) < 1:
            raise EncoderError(f"image model {name!r}: batch_size must be positive, got {batch_size}")
        self.name = name
        self.model = model
        self._encode = encode_call(
            model, "an image model object needs an encode(images) method or must be callable (a torch module, a function)")
        self.batch_size = int(batch_size)
        self.cacheable, self.version = object_identity(model, version)
        self.dim: int | None = None

    def __repr__(self) -> str:
        return f"<PythonImageModel {self.name} {self.version}>"

    def encode_images(self, paths: Sequence[str | os.PathLike[str]], batch_size: int | None = None,
                      progress: bool | None = None) -> np.ndarray:
        """float32 (n, dim) features of the images at ``paths``, in order, checked image by image.

        Args:
            paths: image files (any format PIL reads; given to the model as RGB PIL images,
                transparency composited over white).
            batch_size: images per call (default: the model's ``batch_size``).
            progress: accepted for the image-encoder interface; the embedding cache shows the bar.

        Returns:
            A C-contiguous float32 array of shape ``(len(paths), dim)``.

        Raises:
            DataError: an image is missing or unreadable (naming the file).
            EncoderError: the user's model failed, returned another number of rows or another
                dimension than before, or a NaN, infinite or all-zero row -- naming the model and
                the image file.
        """
        paths = [str(p) for p in paths]
        bs = self.batch_size if batch_size is None else int(batch_size)
        out = []
        for s in range(0, len(paths), bs):
            chunk = paths[s : s + bs]
            images = [load_rgb(p) for p in chunk]
            try:
                with inference(self.model):
                    vecs = self._encode(images)
            except Exception as e:  # the user's code: say whose it is and what it was given
                raise EncoderError(
                    f"image model {self.name!r} failed to encode {len(chunk)} images (the first {chunk[0]}): "
                    f"{type(e).__name__}: {e}"
                ) from e
            out.append(self._check(vecs, chunk))
        if not out:
            return np.empty((0, self.dim or 0), dtype=np.float32)
        return np.ascontiguousarray(np.concatenate(out))

    def _check(self, vecs: Any, chunk: list[str]) -> np.ndarray:
        """The model's output for the images ``chunk`` as float32 (len(chunk), dim), or an error
        naming the model and the offending image."""
        if hasattr(vecs, "detach"):  # a torch tensor, on any device, in any dtype
            vecs = vecs.detach().float().cpu().numpy()
        arr = numeric_rows(vecs, f"image model {self.name!r}")
        if arr.ndim != 2 or arr.shape[0] != len(chunk):
            raise EncoderError(
                f"image model {self.name!r} returned shape {arr.shape} for {len(chunk)} images; "
                f"expected ({len(chunk)}, dim), one row per image"
            )
        if self.dim is None:
            self.dim = int(arr.shape[1])
        elif arr.shape[1] != self.dim:
            raise EncoderError(
                f"image model {self.name!r} returned {arr.shape[1]} dimensions for the images from {chunk[0]}, "
                f"earlier {self.dim}"
            )
        bad = first_bad_row(arr)
        if bad is not None:
            kind, i = bad
            what = "NaN or inf in the features" if kind == "nonfinite" else "all-zero features"
            raise EncoderError(f"image model {self.name!r}: {what} of image {chunk[i]}")
        return arr
