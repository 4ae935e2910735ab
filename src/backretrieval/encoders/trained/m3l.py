"""``m3l:DIR`` / ``patr:DIR`` -- a trained text-to-image mapping used as a text model.

The model directory is written by :class:`backretrieval.train.m3l.M3L` (``backretrieval
train m3l|patr``) through :func:`save_model`, in the one format of :mod:`.modeldir`, kind
``"m3l"``: ``model.json`` (``hyper_parameters``: the estimator's parameters -- loss, base text
model, image model, widths, PATR's ``eta`` / ``eta_quantile`` as typed values, ...; info: input
and image dimensions, versions, the used ``eta``, split sizes, training history),
``weights.npz`` (``W0, b0, W1, b1, W2, b2``, float32; no pickled code) and ``split.json`` (the
image keys of each split). Directories in the legacy layout (``config.json``) are read by
:mod:`.modeldir_legacy` and give the same vectors.
A text is embedded by the frozen base model (through the embedding cache) and mapped by the
three blocks ``x -> relu(x W^T + b)``, L2-normalised after every block but the last, in plain
numpy (no torch needed at inference); the products are canonical
(:func:`backretrieval.core.canonical.matmul`), so a vector has the same bits on every BLAS kernel. The output lives in the frozen image model's feature
space (e.g. 1280-d EfficientNet-Lite0 features): :meth:`M3LTextEncoder.map` gives it as is, for
image retrieval; :meth:`M3LTextEncoder.encode` is the text-encoder protocol used by
``evaluate`` / ``compare`` (it rejects an all-zero output row, which the final ReLU can in
principle produce, since cosine similarity is undefined for it).

``m3l:DIR`` expects a model trained with the M3L loss and ``patr:DIR`` one trained with PATR
(an EncoderError names the right spec otherwise). Options: ``batch_size``, ``progress``,
``threads`` (handed to the base model where it takes them).
"""
from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...core import EncoderError
from ...core.canonical import matmul
from .modeldir import ModelDir, read_model_dir, write_model_dir
from ..text.batching import as_texts
from ..base import Example, check_embeddings
from ..registry import get_cached_text_encoder, register_text

NORM_EPS = 1e-12  # as torch.nn.functional.normalize


def forward(x: np.ndarray, layers: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The mapping: per block ``relu(x W^T + b)`` then L2-norm (not after the last block)."""
    x = np.asarray(x, dtype=np.float32)
    last = len(layers) - 1
    for i, (w, b) in enumerate(layers):
        x = matmul(x, w.T)  # canonical: the same bits on every BLAS kernel
        x += b
        np.maximum(x, 0.0, out=x)
        if i < last:
            n = np.linalg.norm(x, axis=1, keepdims=True)
            x /= np.maximum(n, NORM_EPS)
    return x


def save_model(
    path: str | Path, layers: Sequence[tuple[np.ndarray, np.ndarray]], *, hyper_parameters: Mapping[str, Any],
    info: Mapping[str, Any], split: Mapping[str, Sequence[str]] | None = None,
) -> Path:
    """Write an ``m3l`` model directory (:func:`.modeldir.write_model_dir`; ``model.json`` last).

    Args:
        path: the directory (created).
        layers: ``(W (out, in), b (out,))`` per block, stored as ``W0, b0, W1, b1, ...``.
        hyper_parameters: the estimator's parameters (``loss``, ``base``, ``image_model``, ...).
        info: what training recorded; must hold ``in_dim`` and ``image_dim``.
        split: the image keys of each split, written as ``split.json``.

    Returns:
        The directory.
    """
    arrays = {}
    for i, (w, b) in enumerate(layers):
        arrays[f"W{i}"], arrays[f"b{i}"] = w, b
    files = {"split.json": json.dumps(split)} if split is not None else None
    return write_model_dir(path, "m3l", hyper_parameters=hyper_parameters, info=info, arrays=arrays, files=files)


def load_model(path: str | Path) -> tuple[ModelDir, list[tuple[np.ndarray, np.ndarray]]]:
    """``(model directory, layers)`` of a saved M3L/PATR model (either format).

    Raises:
        EncoderError: the directory is missing, incomplete or not an M3L/PATR model; a layer is
            missing, misshapen or not finite; the output width is not ``image_dim``.
    """
    md = read_model_dir(path, "m3l")
    w_path = md.path / "weights.npz"
    if md.hyper_parameters.get("loss") not in ("m3l", "patr") or not md.hyper_parameters.get("base"):
        raise EncoderError(f"{md.path / md.header}: not an M3L/PATR model (loss {md.hyper_parameters.get('loss')!r})")
    try:
        n = sum(1 for k in md.arrays if k.startswith("W"))
        layers = [(md.arrays[f"W{i}"].astype(np.float32), md.arrays[f"b{i}"].astype(np.float32)) for i in range(n)]
        dim, image_dim = int(md.info["in_dim"]), int(md.info["image_dim"])
    except KeyError as e:
        raise EncoderError(f"{w_path}: unreadable or incomplete (KeyError: {e})") from e
    if not layers:
        raise EncoderError(f"{w_path}: no layers")
    for i, (w, b) in enumerate(layers):
        if w.ndim != 2 or w.shape[1] != dim or b.shape != (w.shape[0],):
            raise EncoderError(f"{w_path}: layer {i} has weight {w.shape} and bias {b.shape}; expected input dimension {dim}")
        if not (np.isfinite(w).all() and np.isfinite(b).all()):
            raise EncoderError(f"{w_path}: NaN or inf in layer {i}")
        dim = w.shape[0]
    if dim != image_dim:
        raise EncoderError(f"{w_path}: output dimension {dim} differs from the model's image_dim {image_dim}")
    return md, layers


class M3LTextEncoder:
    """A saved M3L/PATR model as a text model into the image-feature space."""

    cacheable = False  # the base model's vectors are cached; the mapping is cheap

    def __init__(
        self, path: str | Path, *, kind: str | None = None, progress: bool = False, base_encoder: Any = None, **base_options: Any
    ) -> None:
        self.path = Path(path).expanduser().resolve()
        self.model, self.layers = load_model(self.path)
        hp, info = self.model.hyper_parameters, self.model.info
        loss = hp["loss"]
        if kind is not None and kind != loss:
            raise EncoderError(f"{kind}:{path} is a model trained with the {loss.upper()} loss: use {loss}:{path}")
        self.name = f"{loss}:{path}"
        self._files_version = self.model.files_hash()
        self.dim = int(info["image_dim"])
        if base_encoder is not None:  # share one loaded base model between several mappings
            if getattr(base_encoder, "name", None) != hp["base"]:
                raise EncoderError(f"{self.name}: needs base model {hp['base']!r}, got {getattr(base_encoder, 'name', None)!r}")
            self.base = base_encoder
        else:
            opts = dict(base_options)
            if progress:
                opts["progress"] = True
            self.base = get_cached_text_encoder(hp["base"], opts, progress=progress)
        base_version = info.get("base_version")
        if base_version and self.base.version != base_version:
            warnings.warn(
                f"{self.name}: trained on base model {hp['base']} version {base_version}, "
                f"installed version is {self.base.version}; the mapping may not fit its vectors",
                UserWarning,
                stacklevel=2,
            )
        self.languages = getattr(self.base, "languages", None)
        self.image_model = hp["image_model"]

    @property
    def version(self) -> str:
        """``<loss>-f2-<hash of the header (model.json, or an older config.json) and weights.npz>+<base model version>``
        (``f2``: the forward pass with canonical products)."""
        return f"{self.model.hyper_parameters['loss']}-f2-{self._files_version}+{self.base.version}"

    @property
    def versions(self) -> dict[str, str]:
        """The base model's versions (libraries and settings) and numpy's (the mapping's products)."""
        from ...core import env
        from ..base import encoder_versions

        return {**encoder_versions(self.base), **env.versions_of(("numpy",))}

    def map(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None) -> np.ndarray:
        """float32 (n, image_dim): the texts mapped into the image space (all-zero rows allowed)."""
        texts = as_texts(texts, ids, f"{self.name}/{lang}")
        x = self.base.encode(texts, lang, ids=ids)
        if x.shape[1] != self.layers[0][0].shape[1]:
            raise EncoderError(
                f"{self.name}: base model {self.model.hyper_parameters['base']} gives {x.shape[1]}-d vectors, the model expects {self.layers[0][0].shape[1]}"
            )
        return forward(x, self.layers)

    def encode(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None, **_: Any) -> np.ndarray:
        """Text-encoder protocol: :meth:`map`, checked (no NaN/inf, no all-zero row)."""
        out = self.map(texts, lang, ids=ids)
        return check_embeddings(out, len(out), f"{self.name}/{lang}", ids)

    def __repr__(self) -> str:
        return f"<M3LTextEncoder {self.name} {self.version}>"


def _factory(kind: str) -> Callable[..., M3LTextEncoder]:
    def factory(path: str, *, batch_size: int | None = None, progress: bool = False, threads: int | None = None) -> M3LTextEncoder:
        """The saved model at ``path``; ``batch_size`` and ``threads`` go to its base text model."""
        base = {k: v for k, v in (("batch_size", batch_size), ("threads", threads)) if v is not None}
        return M3LTextEncoder(path, kind=kind, progress=progress, **base)

    return factory


def _example(kind: str):
    def example(folder: Path) -> Example:
        """Two three-block mappings (512 -> 8 -> 8 -> 4, seeds 0 and 1) on the ``random`` base; the
        last bias keeps every output row positive."""
        dirs = []
        for seed in (0, 1):
            rng = np.random.default_rng(seed)
            widths = [(8, 512), (8, 8), (4, 8)]
            layers = [(rng.standard_normal(shape) / np.sqrt(shape[1]), np.zeros(shape[0])) for shape in widths]
            layers[-1] = (0.1 * layers[-1][0], np.ones(4))
            hp = {"loss": kind, "base": "random", "image_model": "color-hist"}
            dirs.append(str(save_model(folder / f"{kind}-seed{seed}", layers, hyper_parameters=hp,
                                       info={"in_dim": 512, "image_dim": 4})))
        return Example(arg=dirs[0], other=(dirs[1], {}))

    return example


for _kind, _what in (("m3l", "M3L (multi-modal metric loss)"), ("patr", "PATR (positive-aware triplet ranking loss)")):
    register_text(
        _kind,
        description=f"text-to-image mapping trained with {_what} (backretrieval train {_kind}); output in the image-feature space",
        example=_example(_kind),
    )(_factory(_kind))
del _kind, _what
