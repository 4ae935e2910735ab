"""M3L data: images identified by content, their seeded hash split, and the captions pointing at them.

An image is ``file:`` + hash of the file's bytes, or ``feat:`` + hash of its precomputed feature
row, so byte-identical images are one gallery image and the split does not depend on paths.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...core import BackretrievalError, DataError, content_hash
from ...data import Corpus, Dataset
from ...data.splits import hash_split
from ...encoders.base import get_image_encoder
from ...encoders.cache import CachedImageEncoder
from ...encoders.precomputed_image import load_feature_rows

SPLITS = ("train", "val", "test")
SPLIT_CODE = {name: i for i, name in enumerate(SPLITS)}


def assign_splits(keys: Sequence[str], seed: int, test_frac: float, val_frac: float) -> np.ndarray:
    """Split code per image key (0 train, 1 val, 2 test) from a seeded hash of the key.

    :func:`backretrieval.data.splits.hash_split` with bands (test, val): ``u = hash(seed, key) /
    2**64``; test if ``u < test_frac``, val if ``u < test_frac + val_frac``, else train. An
    image's split depends only on its key and the seed.

    Raises:
        BackretrievalError: fractions outside [0, 1) or summing to 1 or more.
    """
    check_fracs(test_frac, val_frac)
    band = hash_split(keys, seed, (test_frac, val_frac))
    codes = np.array([SPLIT_CODE["test"], SPLIT_CODE["val"], SPLIT_CODE["train"]], dtype=np.int8)
    return codes[band]


def check_fracs(test_frac: float, val_frac: float) -> None:
    """Raise :class:`BackretrievalError` unless both fractions are in [0, 1) and sum to below 1."""
    for name, v in (("test_frac", test_frac), ("val_frac", val_frac)):
        if not isinstance(v, (int, float)) or not 0.0 <= float(v) < 1.0 or math.isnan(float(v)):
            raise BackretrievalError(f"{name} must be in [0, 1), got {v!r}")
    if test_frac + val_frac >= 1.0:
        raise BackretrievalError(f"test_frac + val_frac must be below 1 (no training images left), got {test_frac} + {val_frac}")


@dataclasses.dataclass
class ImageTextData:
    """Distinct images (the gallery) and the captions of several languages pointing into it.

    ``keys[i]`` and ``features[i]`` describe image ``i``; ``split[i]`` is its split code;
    ``image_of[lang][r]`` is the image of row ``r`` of ``corpora[lang]``.
    """

    keys: list[str]
    features: np.ndarray
    split: np.ndarray
    corpora: dict[str, Corpus]
    image_of: dict[str, np.ndarray]
    image_model: str
    image_model_version: str

    def rows(self, lang: str, split: str | None) -> np.ndarray:
        """Rows of ``lang``'s corpus whose image is in ``split`` (None: every row)."""
        img = self.image_of[lang]
        if split is None:
            return np.arange(len(img))
        return np.flatnonzero(self.split[img] == SPLIT_CODE[split])

    def images(self, split: str | None) -> np.ndarray:
        """Indices of the images of ``split`` (all images for None)."""
        return np.arange(len(self.keys)) if split is None else np.flatnonzero(self.split == SPLIT_CODE[split])


def _corpus_image_keys(c: Corpus, use_features: bool, memo: dict[Any, str]) -> list[str]:
    what = f"{c.dataset}/{c.lang}"
    if use_features:
        if c.image_features is None:
            raise DataError(
                f"{what}: image model 'precomputed' needs image features (image_feature_row + image_features=PATH.npy)"
                + ("; this language has image paths: pick an image model such as efficientnet-lite0" if c.image_paths else "")
            )
        feats = load_feature_rows(c.image_features, c.image_rows, f"{what} images")
        out = []
        for r, row in zip(c.image_rows.tolist(), feats):
            k = (c.image_features, r)
            if k not in memo:
                memo[k] = "feat:" + content_hash(np.ascontiguousarray(row, dtype=np.float32).tobytes())
            out.append(memo[k])
        return out
    if c.image_paths is None:
        raise DataError(
            f"{what}: no image paths"
            + (" (the images are precomputed features: use image model 'precomputed')" if c.image_features else "")
        )
    out = []
    for item_id, p in zip(c.ids, c.image_paths):
        k = memo.get(p)
        if k is None:
            try:
                k = "file:" + content_hash(Path(p).read_bytes())
            except OSError as e:
                raise DataError(f"{what}: image of id {item_id!r} not found or unreadable: {p} ({e.strerror or e})") from None
            memo[p] = k
        out.append(k)
    return out


def collect_images(
    dataset: Dataset,
    langs: Sequence[str],
    image_model: str,
    *,
    split_seed: int = 0,
    test_frac: float = 0.25,
    val_frac: float = 0.1,
    progress: bool = False,
) -> ImageTextData:
    """Distinct images of ``langs`` (encoded once, through the embedding cache) and their splits.

    ``image_model="precomputed"`` reads the dataset's feature file (``image_feature_row``);
    otherwise every language must have image paths, encoded by ``image_model``.

    Args:
        dataset: the dataset; langs: languages whose captions point at the images.
        image_model: an image model spec, or ``"precomputed"``.
        split_seed, test_frac, val_frac: the content-hash split (:func:`assign_splits`).
        progress: bars.

    Returns:
        An :class:`ImageTextData`: distinct images sorted by content key, their features and
        split codes, and each language's row -> image map.

    Raises:
        BackretrievalError: no language, or bad fractions.
        DataError: a language without images (or features), an unreadable image (named), or
            feature files of different dimensions.
    """
    check_fracs(test_frac, val_frac)
    langs = list(dict.fromkeys(langs))
    if not langs:
        raise BackretrievalError("no language given")
    use_features = image_model == "precomputed"
    corpora = {lang: dataset[lang] for lang in langs}
    memo: dict[Any, str] = {}
    item_keys = {lang: _corpus_image_keys(c, use_features, memo) for lang, c in corpora.items()}
    keys = sorted({k for ks in item_keys.values() for k in ks})
    pos = {k: i for i, k in enumerate(keys)}
    image_of = {lang: np.array([pos[k] for k in ks], dtype=np.int64) for lang, ks in item_keys.items()}
    # one representative source per image
    rep: dict[str, tuple[str, int]] = {}
    for lang, ks in item_keys.items():
        for r, k in enumerate(ks):
            rep.setdefault(k, (lang, r))
    if use_features:
        files = {corpora[lang].image_features for lang in langs}
        feats = []
        for k in keys:
            lang, r = rep[k]
            c = corpora[lang]
            feats.append((c.image_features, int(c.image_rows[r])))
        by_file: dict[str, list[int]] = {}
        for f, r in feats:
            by_file.setdefault(f, []).append(r)
        dims = {f: load_feature_rows(f, [0], f"{dataset.name} image features").shape[1] for f in files}
        if len(set(dims.values())) > 1:
            raise DataError(f"{dataset.name}: image feature files of different dimensions: {dims}")
        features = np.empty((len(keys), next(iter(dims.values()))), dtype=np.float32)
        for f in by_file:
            idx = [i for i, (ff, _) in enumerate(feats) if ff == f]
            features[idx] = load_feature_rows(f, [feats[i][1] for i in idx], f"{dataset.name} image features")
        version = "precomputed"
    else:
        enc = CachedImageEncoder(get_image_encoder(image_model, progress=progress), progress=progress)
        paths = [corpora[rep[k][0]].image_paths[rep[k][1]] for k in keys]
        features = enc.encode_images(paths)
        version = enc.version
    return ImageTextData(
        keys=keys,
        features=np.ascontiguousarray(features, dtype=np.float32),
        split=assign_splits(keys, split_seed, test_frac, val_frac),
        corpora=corpora,
        image_of=image_of,
        image_model=image_model,
        image_model_version=version,
    )
