"""Named, reproducible variants of any text model: a model family of graded quality.

The Backretrieval paper's meta-evaluation correlates BkR with XLR across "methods and their
variations". A variant is written ``BASE@OP=VALUE`` and can be stacked
(``use-m@trunc=64@noise=0.5``):

* ``trunc=D`` -- keep the first D dimensions.
* ``pca=D`` -- project on the first D principal components, fitted on all evaluated texts of the
  run (every language together); needs the ``fit`` hook, so it is not cached.
* ``noise=S`` -- add isotropic Gaussian noise with expected norm S times the (unit) signal norm:
  ``x/|x| + S * e / sqrt(d)``, e ~ N(0, I) drawn from a generator seeded by the text (BLAKE2b),
  so the same text always gets the same noise.
* ``mix=A`` -- ``(1 - A) x/|x| + A r`` with r the ``random`` encoder's unit vector of the text:
  A=0 is the base model, A=1 is the random baseline.
* ``seed=K`` -- changes the noise / random draws (default 0).

The base model's vectors come through the embedding cache; the variant is computed on top.
"""
from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ..core import EncoderError, normalize_rows

OPS = ("trunc", "pca", "noise", "mix", "seed")
# A variant starts at an "@" followed by one of OPS and "="; any other "@" (in a path, or in an
# option's value such as a URL) belongs to the base spec.
_VARIANT_AT = re.compile(r"@(?=(?:%s)=)" % "|".join(OPS))


def split_variants(spec: str) -> tuple[str, list[str]]:
    """``BASE@OP=VALUE@...`` as ``(BASE, ["OP=VALUE", ...])``; a spec without variants gives ``(spec, [])``.

    Only an ``@`` followed by a variant's name and ``=`` starts a variant, so an ``@`` inside a
    path or an option's value (``openai:m?base_url=...``) stays in the base spec.
    """
    base, *ops = _VARIANT_AT.split(spec)
    return base, ops


def parse_variant(spec: str) -> tuple[str, list[tuple[str, float]]]:
    """Split ``BASE@OP=VALUE@...`` into the base spec and its ``(op, value)`` list; a clear error for an
    unknown op or a bad value."""
    base, ops = split_variants(spec)
    parsed = []
    for op in ops:
        key, sep, value = op.partition("=")
        if key not in OPS or not sep:
            raise EncoderError(f"bad variant {op!r} in {spec!r}: use one of {', '.join(o + '=VALUE' for o in OPS)}")
        try:
            val = float(value)
        except ValueError:
            raise EncoderError(f"bad variant value {value!r} in {spec!r}: expected a number") from None
        if key in ("trunc", "pca") and (val < 1 or val != int(val)):
            raise EncoderError(f"{key} in {spec!r} needs a positive integer number of dimensions")
        if key in ("noise",) and val < 0 or key == "mix" and not 0 <= val <= 1:
            raise EncoderError(f"{key}={value} in {spec!r} is out of range")
        parsed.append((key, val))
    return base, parsed


def text_rng(text: str, seed: int, salt: str) -> np.random.Generator:
    """A random generator seeded by BLAKE2b of ``(salt, seed, text)``: the same text always draws the same
    numbers."""
    h = hashlib.blake2b(f"{salt}\x00{seed}\x00{text}".encode("utf-8"), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(h, "little"))


def _unit(x: np.ndarray) -> np.ndarray:
    return normalize_rows(x)


class VariantEncoder:
    """A base model followed by the variant operations, applied left to right."""

    cacheable = False

    def __init__(self, base: Any, ops: list[tuple[str, float]]):
        self.base = base
        self.ops = ops
        self.seed = int(next((v for k, v in ops if k == "seed"), 0))
        self.name = base.name + "".join(f"@{k}={v:g}" for k, v in ops)
        self.languages = getattr(base, "languages", None)
        self.dim = None
        self._pca: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._fitted = not any(k == "pca" for k, _ in ops)

    @property
    def fitted_on_texts(self) -> bool:
        """Whether ``fit`` learns from the texts (a PCA operation, or a base model that is fitted)."""
        return any(k == "pca" for k, _ in self.ops) or callable(getattr(self.base, "fit", None))

    @property
    def version(self) -> str:
        """The base model's version and the operations."""
        return f"{self.base.version}|" + ",".join(f"{k}={v:g}" for k, v in self.ops)

    @property
    def versions(self) -> dict[str, str]:
        """The base model's versions (libraries and settings; the operations are plain numpy)."""
        from .base import encoder_versions

        return encoder_versions(self.base)

    def _truncated(self, texts: Sequence[str], lang: str) -> list[str]:
        """The texts as the base model embeds them (noise and mix are seeded by those), with the
        base model's truncation warning."""
        cut = getattr(self.base, "truncate", None)
        if not callable(cut):
            return list(texts)
        out, n_cut = cut(list(texts))
        if n_cut:
            from .text.batching import warn_truncated

            warn_truncated(self.base.name, lang, n_cut, len(out), self.base.max_length)
        return out

    def fit(self, texts_by_lang: Mapping[str, Sequence[str]]) -> "VariantEncoder":
        """Fit the base model (if it fits) and the PCA of ``pca=D`` variants on all evaluated texts; returns
        ``self``."""
        if hasattr(self.base, "fit"):
            self.base.fit(texts_by_lang)
        if any(k == "pca" for k, _ in self.ops):
            cut = {lang: self._truncated(t, lang) for lang, t in texts_by_lang.items()}
            x = np.concatenate([self.base.encode(t, lang) for lang, t in cut.items()])
            texts = [t for ts in cut.values() for t in ts]
            self._pca = {}
            for i, (key, val) in enumerate(self.ops):
                x = self._apply(i, key, val, x, texts, fitting=True)
        self._fitted = True
        return self

    def _apply(self, i: int, key: str, val: float, x: np.ndarray, texts: Sequence[str], fitting: bool = False) -> np.ndarray:
        d = x.shape[1]
        if key == "trunc":
            if int(val) > d:
                raise EncoderError(f"{self.name}: trunc={int(val)} exceeds the base dimension {d}")
            return np.ascontiguousarray(x[:, : int(val)])
        if key == "pca":
            if fitting:
                from sklearn.decomposition import PCA

                if int(val) > min(x.shape):
                    raise EncoderError(f"{self.name}: pca={int(val)} needs at least that many texts and dimensions")
                p = PCA(n_components=int(val), random_state=self.seed).fit(x)
                self._pca[i] = (p.mean_.astype(np.float32), p.components_.T.astype(np.float32))
            mean, comp = self._pca[i]
            return (x - mean) @ comp
        if key == "noise":
            e = np.stack([text_rng(t, self.seed, "noise").standard_normal(d) for t in texts]).astype(np.float32)
            return _unit(x) + np.float32(val / np.sqrt(d)) * e
        if key == "mix":
            r = np.stack([text_rng(t, self.seed, "random").standard_normal(d) for t in texts]).astype(np.float32)
            return (1 - np.float32(val)) * _unit(x) + np.float32(val) * _unit(r)
        return x  # seed

    def encode(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None, **kw: Any) -> np.ndarray:
        """The base model's vectors of ``texts`` with the variant's operations applied in order."""
        if not self._fitted:
            raise EncoderError(f"{self.name}: PCA variants must be fitted on the evaluated texts first (fit)")
        texts = self._truncated(texts, lang)
        x = np.asarray(self.base.encode(texts, lang, ids=ids, **kw), dtype=np.float32)
        for i, (key, val) in enumerate(self.ops):
            x = self._apply(i, key, val, x, texts)
        self.dim = x.shape[1]
        return np.ascontiguousarray(x, dtype=np.float32)


class ImageVariantEncoder:
    """``IMAGE_MODEL@noise=S[@seed=K]``: image features with seeded Gaussian noise of expected
    norm S (relative to the unit signal), to make g deliberately weaker. The noise of an image
    is seeded by its file content, so the same image always gets the same noise."""

    def __init__(self, base: Any, ops: list[tuple[str, float]]):
        bad = [k for k, _ in ops if k not in ("noise", "seed")]
        if bad:
            raise EncoderError(f"image variants support noise= and seed= only, not {bad[0]}=")
        self.base, self.ops = base, ops
        self.seed = int(next((v for k, v in ops if k == "seed"), 0))
        self.noise = float(next((v for k, v in ops if k == "noise"), 0.0))
        self.name = base.name + "".join(f"@{k}={v:g}" for k, v in ops)
        self.version = f"{base.version}|" + ",".join(f"{k}={v:g}" for k, v in ops)
        self.dim = getattr(base, "dim", None)

    @property
    def versions(self) -> dict[str, str]:
        """The base model's versions (libraries and settings)."""
        from .base import encoder_versions

        return encoder_versions(self.base)

    def encode_images(self, paths: Sequence[str], **kw: Any) -> np.ndarray:
        """The base image model's features with the variant's noise, seeded by each image's content."""
        x = np.asarray(self.base.encode_images(paths, **kw), dtype=np.float32)
        keys = [hashlib.blake2b(open(p, "rb").read(), digest_size=16).hexdigest() for p in paths]
        return self.weaken(x, keys)

    def weaken(self, x: np.ndarray, keys: Sequence[str]) -> np.ndarray:
        """The features ``x`` (one row per image) with this variant's noise, the noise of row i
        seeded by ``keys[i]`` (a digest of that image's content)."""
        x = _unit(np.asarray(x, dtype=np.float32))
        d = x.shape[1]
        e = np.stack([text_rng(k, self.seed, "image-noise").standard_normal(d) for k in keys]).astype(np.float32)
        return np.ascontiguousarray(x + np.float32(self.noise / np.sqrt(d)) * e)
