"""``m3l:DIR`` / ``patr:DIR`` -- a trained text-to-image mapping used as a text encoder.

The model directory is written by :class:`backretrieval.train.m3l.M3LModel` (``backretrieval
train m3l|patr``): ``config.json`` (the base text model, the image model, widths, losses,
training history) and ``weights.npz`` (``W0, b0, W1, b1, W2, b2``, float32; no pickled code).
A text is embedded by the frozen base model (through the embedding cache) and mapped by the
three blocks ``x -> relu(x W^T + b)``, L2-normalised after every block but the last, in plain
numpy (no torch needed at inference). The output lives in the frozen image model's feature
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core import EncoderError, content_hash
from ._text import as_texts, check_options
from .base import EncoderInfo, check_embeddings, get_text_encoder, register_text
from .cache import CachedTextEncoder

FORMAT = "backretrieval-m3l"
FORMAT_VERSION = 1
NORM_EPS = 1e-12  # as torch.nn.functional.normalize


def forward(x: np.ndarray, layers: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The mapping: per block ``relu(x W^T + b)`` then L2-norm (not after the last block)."""
    x = np.asarray(x, dtype=np.float32)
    last = len(layers) - 1
    for i, (w, b) in enumerate(layers):
        x = x @ w.T
        x += b
        np.maximum(x, 0.0, out=x)
        if i < last:
            n = np.linalg.norm(x, axis=1, keepdims=True)
            x /= np.maximum(n, NORM_EPS)
    return x


def load_model(path: str | Path) -> tuple[dict[str, Any], list[tuple[np.ndarray, np.ndarray]]]:
    """``(config, layers)`` of a saved model directory; EncoderError naming what is wrong."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise EncoderError(f"M3L/PATR model directory not found: {path}")
    cfg_path, w_path = p / "config.json", p / "weights.npz"
    if not cfg_path.is_file():
        raise EncoderError(f"{p}: no config.json (not a trained M3L/PATR model, or training did not finish)")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EncoderError(f"{cfg_path}: unreadable ({e})") from e
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        raise EncoderError(f"{cfg_path}: not a {FORMAT} model config")
    if int(cfg.get("format_version", 0)) > FORMAT_VERSION:
        raise EncoderError(f"{cfg_path}: format version {cfg.get('format_version')} is newer than this package reads ({FORMAT_VERSION})")
    if not w_path.is_file():
        raise EncoderError(f"{p}: weights.npz is missing")
    try:
        with np.load(w_path, allow_pickle=False) as z:
            n = len(cfg["widths"])
            layers = [(z[f"W{i}"].astype(np.float32), z[f"b{i}"].astype(np.float32)) for i in range(n)]
    except (OSError, ValueError, KeyError) as e:
        raise EncoderError(f"{w_path}: unreadable or incomplete ({type(e).__name__}: {e})") from e
    dim = int(cfg["in_dim"])
    for i, (w, b) in enumerate(layers):
        if w.ndim != 2 or w.shape[1] != dim or b.shape != (w.shape[0],):
            raise EncoderError(f"{w_path}: layer {i} has weight {w.shape} and bias {b.shape}; expected input dimension {dim}")
        if not (np.isfinite(w).all() and np.isfinite(b).all()):
            raise EncoderError(f"{w_path}: NaN or inf in layer {i}")
        dim = w.shape[0]
    if dim != int(cfg["image_dim"]):
        raise EncoderError(f"{w_path}: output dimension {dim} differs from the config's image_dim {cfg['image_dim']}")
    return cfg, layers


class M3LTextEncoder:
    """A saved M3L/PATR model as a text encoder into the image-feature space."""

    cacheable = False  # the base model's vectors are cached; the mapping is cheap

    def __init__(
        self, path: str | Path, *, kind: str | None = None, progress: bool = False, base_encoder: Any = None, **base_options: Any
    ) -> None:
        self.path = Path(path).expanduser().resolve()
        self.config, self.layers = load_model(self.path)
        loss = self.config["loss"]
        if kind is not None and kind != loss:
            raise EncoderError(f"{kind}:{path} is a model trained with the {loss.upper()} loss: use {loss}:{path}")
        self.name = f"{loss}:{path}"
        self._files_version = content_hash(
            (self.path / "config.json").read_bytes() + b"\0" + (self.path / "weights.npz").read_bytes(), 8
        )
        self.dim = int(self.config["image_dim"])
        if base_encoder is not None:  # share one loaded base model between several mappings
            if getattr(base_encoder, "name", None) != self.config["base"]:
                raise EncoderError(f"{self.name}: needs base model {self.config['base']!r}, got {getattr(base_encoder, 'name', None)!r}")
            self.base = base_encoder
        else:
            opts = dict(base_options)
            if progress:
                opts["progress"] = True
            self.base = CachedTextEncoder(get_text_encoder(self.config["base"], **opts), progress=progress)
        base_version = self.config.get("base_version")
        if base_version and self.base.version != base_version:
            warnings.warn(
                f"{self.name}: trained on base model {self.config['base']} version {base_version}, "
                f"installed version is {self.base.version}; the mapping may not fit its vectors",
                UserWarning,
                stacklevel=2,
            )
        self.languages = getattr(self.base, "languages", None)
        self.image_model = self.config["image_model"]

    @property
    def version(self) -> str:
        """``<loss>-<hash of config.json and weights.npz>+<base model version>``."""
        return f"{self.config['loss']}-{self._files_version}+{self.base.version}"

    def map(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None) -> np.ndarray:
        """float32 (n, image_dim): the texts mapped into the image space (all-zero rows allowed)."""
        texts = as_texts(texts, ids, f"{self.name}/{lang}")
        x = self.base.encode(texts, lang, ids=ids)
        if x.shape[1] != self.layers[0][0].shape[1]:
            raise EncoderError(
                f"{self.name}: base model {self.config['base']} gives {x.shape[1]}-d vectors, the model expects {self.layers[0][0].shape[1]}"
            )
        return forward(x, self.layers)

    def encode(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None, **_: Any) -> np.ndarray:
        """Text-encoder protocol: :meth:`map`, checked (no NaN/inf, no all-zero row)."""
        out = self.map(texts, lang, ids=ids)
        return check_embeddings(out, len(out), f"{self.name}/{lang}", ids)

    def __repr__(self) -> str:
        return f"<M3LTextEncoder {self.name} {self.version}>"


def _factory(kind: str):
    def factory(arg: str | None = None, **options: Any) -> M3LTextEncoder:
        check_options(kind, options, ("batch_size", "progress", "threads"))
        if not arg:
            raise EncoderError(f"text model {kind!r} needs a model directory: {kind}:DIR")
        return M3LTextEncoder(arg, kind=kind, **options)

    return factory


for _kind, _what in (("m3l", "M3L (multi-modal metric loss)"), ("patr", "PATR (positive-aware triplet ranking loss)")):
    register_text(
        EncoderInfo(
            name=_kind,
            factory=_factory(_kind),
            description=f"text-to-image mapping trained with {_what} (backretrieval train {_kind}); output in the image-feature space",
            kind="text",
            takes_arg=True,
            requires="",
        )
    )
del _kind, _what
