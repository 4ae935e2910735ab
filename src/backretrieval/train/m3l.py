"""Zero-shot cross-lingual image retrieval: M3L and PATR text-to-image models.

Aggarwal & Kale, "Towards Zero-shot Cross-lingual Image Retrieval" (2020), Sections 3-4.
Multilingual sentence embeddings of a frozen text encoder (``use-m``, ``e5-small``, any text
model) are mapped into the feature space of a frozen image model (``efficientnet-lite0``, or a
dataset's precomputed image features) by three blocks of

    fully connected layer -> dropout -> ReLU -> L2-norm      (no L2-norm after the last block)

with widths ``[1024, 2048, image_dim]`` (the paper's ``[1024, 2048, 2048]`` with the last width
set to the image model's feature size, 1280 for EfficientNet-Lite) and dropout
``[0.2, 0.1, 0.0]``. Only the mapping is trained, on image-caption pairs of the training
languages (English only by default); at test time queries in any language the text encoder
knows are mapped and the nearest images are retrieved.

Losses, with ``d`` the squared Euclidean distance, ``te_an`` the mapped anchor caption, ``im_p``
its image, ``im_n`` the hardest negative image of the mini-batch and ``te_n`` the mapped caption
of that negative image:

* M3L (Eq. 1): ``alpha1 d(te_an, im_p)^rho / d(te_an, im_n)^rho +
  alpha2 d(te_an, im_p)^rho / d(te_an, te_n)^rho`` (rho 4, alpha1 0.5, alpha2 1);
* PATR (Eq. 2): ``d(te_an, im_p) + max(0, eta - d(te_an, im_n))``. The paper's eta = 1100 was
  tuned for 2048-d ResNet152 features; distances scale with the image model, so by default eta
  is the median squared distance between two distinct training images (``eta_quantile=0.5``; an
  explicit ``eta`` overrides it): a negative image must end up at least as far from the
  caption as a typical unrelated image is from the positive one.

Two conditioning choices the paper does not specify (both on by default, both switchable, both
measured in docs/m3l.md): the base embeddings are centred and scaled to mean squared norm 1
(:func:`input_standardization`; folded into the first layer when saving), and the last block
starts at the image features' mean and spread (:func:`init_last_block`, ``init="match"``).
Without them M3L does not move off chance on emoji-cldr and e5-small (anisotropic) trains ~5x
slower.

Hardest negatives are mined online inside each mini-batch (Aggarwal et al. 2019): for anchor
``i`` the negative is the batch item ``j`` whose image is nearest to the mapped anchor among the
items with a different image (ties: the lowest index); its caption is the negative text.

Data and splits. An image is identified by its content (``file:`` + hash of the file's bytes, or
``feat:`` + hash of its precomputed feature row), so byte-identical images are one gallery image
and the split does not depend on paths. Each image is assigned to train / val / test by a seeded
hash of its key (``split_seed``, ``test_frac``, ``val_frac``): the assignment of an image never
depends on which other images or languages are loaded, so the English-only and the multilingual
model share their held-out test images. The texts of val and test images -- in every language --
are never trained on; validation uses the validation languages (default: the training
languages) only.

Retrieval ranks every gallery image by squared Euclidean distance to the mapped query (the
training metric; ``sim="cosine"`` is available) with the blocked kernels of
:mod:`backretrieval.search`: pessimistic ranks, so ties never help.

Saved model directory (no pickled code): ``weights.npz`` (``W0, b0, W1, b1, W2, b2`` float32),
``split.json`` (the image keys of each split) and ``config.json`` (hyper-parameters, base text
model, image model, training history; written last, it marks a complete model). The inference
half is :mod:`backretrieval.encoders.m3l` (text models ``m3l:DIR`` / ``patr:DIR``).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core import BackretrievalError, DataError, atomic_save_npz, atomic_write, atomic_write_text, content_hash
from ..data import Corpus, Dataset
from ..encoders.base import get_image_encoder, get_text_encoder
from ..encoders.cache import CachedImageEncoder, CachedTextEncoder
from ..encoders.m3l import FORMAT, FORMAT_VERSION, forward as numpy_forward, load_model
from ..encoders.precomputed_image import load_feature_rows
from ..metrics import rank_summary
from ..search import l2_normalize, rank_of_true

LOSSES = ("m3l", "patr")
SPLITS = ("train", "val", "test")
SPLIT_CODE = {name: i for i, name in enumerate(SPLITS)}
DEFAULT_WIDTHS = (1024, 2048)
DEFAULT_DROPOUT = (0.2, 0.1, 0.0)
VAL_KS = (1, 5, 10)
RETRIEVAL_SIMS = ("euclidean", "cosine")
ETA_PAIRS = 200_000  # image pairs sampled to estimate the eta quantile
INITS = ("match", "mean", "default")


# ============================================================================ images and splits
def assign_splits(keys: Sequence[str], seed: int, test_frac: float, val_frac: float) -> np.ndarray:
    """Split code per image key (0 train, 1 val, 2 test) from a seeded hash of the key.

    ``u = hash(seed, key) / 2**64``; test if ``u < test_frac``, val if ``u < test_frac +
    val_frac``, else train. An image's split depends only on its key and the seed.
    """
    check_fracs(test_frac, val_frac)
    u = np.array([int(content_hash(f"{int(seed)}\x00{k}", 8), 16) / 2.0**64 for k in keys], dtype=np.float64)
    out = np.zeros(len(keys), dtype=np.int8)
    out[u < test_frac + val_frac] = SPLIT_CODE["val"]
    out[u < test_frac] = SPLIT_CODE["test"]
    return out


def check_fracs(test_frac: float, val_frac: float) -> None:
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


# ============================================================================ retrieval
def retrieval_ranks(
    queries: np.ndarray, gallery: np.ndarray, true_image: np.ndarray, *, sim: str = "euclidean"
) -> np.ndarray:
    """Pessimistic 1-based rank of ``gallery[true_image[i]]`` for query ``i``.

    ``euclidean``: nearest first by squared distance, computed blockwise as the score
    ``2 <q, x> - |x|^2`` (the query's own norm is the same for every image). ``cosine``: by
    cosine similarity.
    """
    if sim not in RETRIEVAL_SIMS:
        raise BackretrievalError(f"unknown retrieval similarity {sim!r}; choose one of {', '.join(RETRIEVAL_SIMS)}")
    q = np.ascontiguousarray(queries, dtype=np.float32)
    g = np.ascontiguousarray(gallery, dtype=np.float32)
    if q.ndim != 2 or g.ndim != 2 or q.shape[1] != g.shape[1]:
        raise BackretrievalError(f"queries {q.shape} and gallery {g.shape} must be 2-D with the same dimension")
    if not np.isfinite(q).all():
        raise BackretrievalError(f"NaN or inf in query vector {int(np.argmin(np.isfinite(q).all(axis=1)))}")
    true_image = np.asarray(true_image, dtype=np.int64)
    if sim == "cosine":
        return rank_of_true(l2_normalize(q), l2_normalize(g), true_image)
    return rank_of_true(q, g, true_image, scale=2.0, d_bias=np.einsum("ij,ij->i", g, g).astype(np.float32))


def recall_summary(ranks: np.ndarray, ks: Sequence[int] = VAL_KS) -> dict[str, float]:
    """``r@K`` for each K, ``r_mrr`` and ``r_median_rank`` of an array of 1-based ranks."""
    if len(ranks) == 0:
        return {**{f"r@{k}": float("nan") for k in ks}, "r_mrr": float("nan"), "r_median_rank": float("nan")}
    return rank_summary(np.asarray(ranks), tuple(ks), "r")


# ============================================================================ torch parts
def build_network(in_dim: int, widths: Sequence[int], dropout: Sequence[float]):
    """The text-to-image mapping: blocks of Linear -> Dropout -> ReLU -> L2-norm (none last)."""
    import torch
    from torch import nn

    if len(widths) != len(dropout):
        raise BackretrievalError(f"{len(widths)} layer widths but {len(dropout)} dropout rates")

    class Mapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dims = [int(in_dim), *[int(w) for w in widths]]
            self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
            self.drops = nn.ModuleList(nn.Dropout(float(p)) for p in dropout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            last = len(self.linears) - 1
            for i, (lin, drop) in enumerate(zip(self.linears, self.drops)):
                x = torch.relu(drop(lin(x)))
                if i < last:
                    x = nn.functional.normalize(x, p=2.0, dim=1, eps=1e-12)
            return x

    return Mapper()


def input_standardization(x: np.ndarray, standardize: bool = True) -> tuple[np.ndarray, float]:
    """``(mean, scale)`` of the training captions' base embeddings: the mean vector and the root
    mean squared norm of the centred vectors, so that ``(x - mean) / scale`` is centred with
    mean squared norm 1. ``standardize=False`` gives ``(0, 1)`` (no change).

    Why: some multilingual encoders are strongly anisotropic -- e5 vectors of unrelated texts
    have cosine ~0.8 -- so, uncentred, every caption enters the network as nearly the same
    vector and training crawls (see docs/m3l.md). Centring and one global scale are an affine
    map, folded into the first layer when the model is saved: the saved model reads raw vectors.
    """
    x = np.asarray(x, dtype=np.float64)
    if not standardize:
        return np.zeros(x.shape[1]), 1.0
    mean = x.mean(axis=0)
    scale = float(np.sqrt(np.mean(np.einsum("ij,ij->i", x - mean, x - mean))))
    if not scale > 0:
        raise DataError("all training captions have the same base embedding; nothing to learn from")
    return mean, scale


def init_last_block(net, x: np.ndarray, targets: np.ndarray, how: str) -> float:
    """Data-dependent initialisation of the last block (the paper does not specify one).

    With PyTorch's default initialisation the mapped captions start near the origin, about
    100x closer to each other than the image features are to one another, so M3L's
    negative-text ratio ``d(te_an, im_p) / d(te_an, te_n)`` starts at ~1e4 (to the 4th power)
    and the loss only ever pushes the currently worst caption pair apart.

    * ``"default"``: leave PyTorch's initialisation;
    * ``"mean"``: last bias = mean feature of the training captions' images (outputs start at
      the image centroid);
    * ``"match"``: ``"mean"``, and the last weights scaled by ``c`` so that the total variance of
      the last layer's output over the training captions equals the total variance of their
      images' features (outputs start spread like the images). Returns ``c`` (1.0 otherwise).
    """
    import torch

    if how == "default":
        return 1.0
    lin = net.linears[-1]
    with torch.no_grad():
        lin.bias.copy_(torch.from_numpy(np.asarray(targets, dtype=np.float32).mean(axis=0)))
        if how == "mean":
            return 1.0
        was_training = net.training
        net.eval()
        h = torch.from_numpy(np.asarray(x, dtype=np.float32))
        for lin_k in net.linears[:-1]:
            h = torch.nn.functional.normalize(torch.relu(lin_k(h)), p=2.0, dim=1, eps=1e-12)
        z = (h @ lin.weight.T).double()
        out_var = float(z.var(dim=0, correction=0).sum())
        tgt_var = float(np.asarray(targets, dtype=np.float64).var(axis=0).sum())
        c = math.sqrt(tgt_var / out_var) if out_var > 0 and tgt_var > 0 else 1.0
        lin.weight.mul_(c)
        net.train(was_training)
    return float(c)


def sq_dist(a, b):
    """Row-wise squared Euclidean distance of two (B, d) tensors."""
    return ((a - b) ** 2).sum(dim=-1)


def m3l_loss(anchor, pos_img, neg_img, neg_txt, *, rho: float = 4.0, alpha1: float = 0.5, alpha2: float = 1.0, eps: float = 1e-12):
    """Mean M3L loss (Eq. 1) over the batch. Ratios are computed as ``exp(rho (log d_p - log
    d_n))`` (equal to ``(d_p / d_n)^rho``, no overflow of ``d^rho`` on its own); ``eps`` keeps
    the logarithms finite."""
    import torch

    lp = torch.log(sq_dist(anchor, pos_img) + eps)
    li = torch.log(sq_dist(anchor, neg_img) + eps)
    lt = torch.log(sq_dist(anchor, neg_txt) + eps)
    return (alpha1 * torch.exp(rho * (lp - li)) + alpha2 * torch.exp(rho * (lp - lt))).mean()


def patr_loss(anchor, pos_img, neg_img, *, eta: float):
    """Mean PATR loss (Eq. 2): ``d(a, p) + max(0, eta - d(a, n))``."""
    import torch

    return (sq_dist(anchor, pos_img) + torch.clamp(eta - sq_dist(anchor, neg_img), min=0.0)).mean()


def hardest_negatives(anchor, images, image_ids):
    """Index of the hardest negative of each anchor inside the batch.

    ``anchor`` (B, d): mapped captions; ``images`` (B, d): their positive images; ``image_ids``
    (B,): image identity (items with equal ids share an image). For anchor ``i`` the result is
    the ``j`` with ``image_ids[j] != image_ids[i]`` minimising ``|anchor[i] - images[j]|^2``
    (lowest ``j`` among equals), or -1 when every item of the batch shows the anchor's image.
    No gradient flows through the choice.
    """
    import torch

    with torch.no_grad():
        # float64 and the direct per-pair formula (not the |a|^2 + |b|^2 - 2ab shortcut): equal images
        # give exactly equal distances, so ties go to the lowest index
        d = torch.cdist(anchor.detach().double(), images.detach().double(), compute_mode="donot_use_mm_for_euclid_dist") ** 2
        same = image_ids[:, None] == image_ids[None, :]
        d = d.masked_fill(same, float("inf"))
        j = torch.argmin(d, dim=1)  # first minimal index
        j[torch.isinf(d.gather(1, j[:, None]).squeeze(1))] = -1
    return j


# ============================================================================ the estimator
class M3LModel:
    """Maps frozen multilingual text embeddings into a frozen image-feature space.

    scikit-learn style: ``__init__`` stores hyper-parameters, :meth:`fit` trains on a
    :class:`~backretrieval.data.Dataset` with images, learned attributes end in ``_``,
    :meth:`save` writes a model directory that ``m3l:DIR`` / ``patr:DIR`` load as a text model.

    Learned: ``net_`` (torch module), ``eta_`` (PATR), ``history_`` (one dict per epoch, epoch
    0 = the untrained network), ``best_epoch_``, ``data_`` (the images and splits),
    ``in_dim_``, ``image_dim_``.
    """

    def __init__(
        self,
        loss: str = "m3l",
        *,
        base: str = "use-m",
        image_model: str = "efficientnet-lite0",
        train_langs: Sequence[str] = ("en",),
        val_langs: Sequence[str] | None = None,
        widths: Sequence[int] = DEFAULT_WIDTHS,
        dropout: Sequence[float] = DEFAULT_DROPOUT,
        rho: float = 4.0,
        alpha1: float = 0.5,
        alpha2: float = 1.0,
        eta: float | None = None,
        eta_quantile: float = 0.5,
        lr: float = 1e-3,
        beta1: float = 0.99,
        beta2: float = 0.999,
        batch_size: int = 128,
        epochs: int = 50,
        patience: int | None = None,
        select: str = "best",
        init: str = "match",
        standardize: bool = True,
        seed: int = 0,
        split_seed: int = 0,
        test_frac: float = 0.25,
        val_frac: float = 0.1,
        threads: int | None = None,
        progress: bool = False,
    ) -> None:
        self.loss = loss
        self.base = base
        self.image_model = image_model
        self.train_langs = tuple(train_langs)
        self.val_langs = None if val_langs is None else tuple(val_langs)
        self.widths = tuple(widths)
        self.dropout = tuple(dropout)
        self.rho, self.alpha1, self.alpha2 = rho, alpha1, alpha2
        self.eta, self.eta_quantile = eta, eta_quantile
        self.lr, self.beta1, self.beta2 = lr, beta1, beta2
        self.batch_size, self.epochs, self.patience, self.select = batch_size, epochs, patience, select
        self.init = init
        self.standardize = standardize
        self.seed, self.split_seed, self.test_frac, self.val_frac = seed, split_seed, test_frac, val_frac
        self.threads = threads
        self.progress = progress

    # ------------------------------------------------------------------ checks
    def _check_params(self) -> None:
        if self.loss not in LOSSES:
            raise BackretrievalError(f"unknown loss {self.loss!r}; choose one of {', '.join(LOSSES)}")
        if not self.train_langs:
            raise BackretrievalError("give at least one training language")
        if len(self.widths) != 2 or any(int(w) < 1 for w in self.widths):
            raise BackretrievalError(f"widths: two positive hidden widths expected (the last is the image dimension), got {self.widths}")
        if len(self.dropout) != 3 or any(not 0.0 <= float(p) < 1.0 for p in self.dropout):
            raise BackretrievalError(f"dropout: three rates in [0, 1) expected, got {self.dropout}")
        for name in ("lr", "rho", "alpha1", "alpha2"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v > 0 or not math.isfinite(v):
                raise BackretrievalError(f"{name} must be a positive number, got {v!r}")
        for name in ("beta1", "beta2"):
            v = getattr(self, name)
            if not 0.0 <= float(v) < 1.0:
                raise BackretrievalError(f"{name} must be in [0, 1), got {v!r}")
        if self.eta is not None and not (float(self.eta) > 0 and math.isfinite(float(self.eta))):
            raise BackretrievalError(f"eta must be a positive number, got {self.eta!r}")
        if not 0.0 < float(self.eta_quantile) < 1.0:
            raise BackretrievalError(f"eta_quantile must be in (0, 1), got {self.eta_quantile!r}")
        if int(self.batch_size) < 2:
            raise BackretrievalError(f"batch_size must be at least 2 (negatives come from the batch), got {self.batch_size}")
        if int(self.epochs) < 0:
            raise BackretrievalError(f"epochs must be >= 0, got {self.epochs}")
        if self.patience is not None and int(self.patience) < 1:
            raise BackretrievalError(f"patience must be a positive number of epochs, got {self.patience}")
        if self.init not in INITS:
            raise BackretrievalError(f"unknown init {self.init!r}; choose one of {', '.join(INITS)}")
        if self.select not in ("best", "last"):
            raise BackretrievalError(f"select must be 'best' (validation R@10) or 'last', got {self.select!r}")
        if self.threads is not None and int(self.threads) < 1:
            raise BackretrievalError(f"threads must be a positive integer, got {self.threads}")
        check_fracs(self.test_frac, self.val_frac)
        if self.val_frac == 0 and (self.select == "best" or self.patience is not None):
            raise BackretrievalError("val_frac=0 leaves no validation images: use select='last' and no patience")

    # ------------------------------------------------------------------ data
    def _texts(self, data: ImageTextData, encoder: Any, langs: Sequence[str], split: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
        xs, imgs, where = [], [], []
        for lang in langs:
            rows = data.rows(lang, split)
            if len(rows) == 0:
                continue
            c = data.corpora[lang].subset(rows)
            xs.append(encoder.encode(c.texts, lang, ids=c.ids))
            imgs.append(data.image_of[lang][rows])
            where += [f"{lang}:{i}" for i in c.ids]
        if not xs:
            return np.zeros((0, 0), np.float32), np.zeros(0, np.int64), []
        return np.concatenate(xs).astype(np.float32, copy=False), np.concatenate(imgs), where

    def _eta_from_images(self, feats: np.ndarray) -> float:
        n = len(feats)
        if n < 2:
            raise DataError("PATR needs at least two distinct training images to scale eta")
        rng = np.random.default_rng(self.seed)
        m = min(ETA_PAIRS, n * (n - 1) // 2)
        i = rng.integers(0, n, size=m)
        j = (i + rng.integers(1, n, size=m)) % n  # j != i
        d = np.einsum("ij,ij->i", feats[i] - feats[j], feats[i] - feats[j], dtype=np.float64)
        return float(np.quantile(d, float(self.eta_quantile)))

    # ------------------------------------------------------------------ training
    def fit(
        self,
        dataset: Dataset,
        *,
        source: Mapping[str, Any] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> "M3LModel":
        """Train on the training images' captions in ``train_langs``; validate each epoch.

        ``source`` (e.g. ``{"dataset": "emoji-cldr", "options": {...}}``) is recorded in the
        saved config. ``log`` receives one line per epoch.
        """
        import torch

        self._check_params()
        say = log or (lambda s: None)
        val_langs = list(self.val_langs) if self.val_langs is not None else list(self.train_langs)
        langs = list(dict.fromkeys([*self.train_langs, *val_langs]))
        data = collect_images(
            dataset, langs, self.image_model,
            split_seed=self.split_seed, test_frac=self.test_frac, val_frac=self.val_frac, progress=self.progress,
        )
        text_enc = CachedTextEncoder(get_text_encoder(self.base, progress=self.progress), progress=self.progress)
        x_tr, img_tr, _ = self._texts(data, text_enc, self.train_langs, "train")
        if len(x_tr) < 2:
            raise DataError(f"{dataset.name}: {len(x_tr)} training captions in {', '.join(self.train_langs)}; need at least 2")
        if len(np.unique(img_tr)) < 2:
            raise DataError(f"{dataset.name}: the training captions show a single image; negatives need at least two")
        use_val = self.val_frac > 0
        x_va, img_va, _ = self._texts(data, text_enc, val_langs, "val") if use_val else (None, None, None)
        val_images = data.images("val")
        if use_val and (len(x_va) == 0 or len(val_images) == 0):
            raise DataError(f"{dataset.name}: no validation captions in {', '.join(val_langs)}; raise val_frac")
        # validation gallery: the val images only; true image = position inside it
        val_pos = np.full(len(data.keys), -1, dtype=np.int64)
        val_pos[val_images] = np.arange(len(val_images))
        feats = data.features
        train_images = np.unique(img_tr)
        if self.loss == "patr":
            self.eta_ = float(self.eta) if self.eta is not None else self._eta_from_images(feats[train_images])
        else:
            self.eta_ = None
        self.in_dim_, self.image_dim_ = int(x_tr.shape[1]), int(feats.shape[1])
        self.input_mean_, self.input_scale_ = input_standardization(x_tr, self.standardize)
        x_tr = ((x_tr - self.input_mean_) / self.input_scale_).astype(np.float32)
        if x_va is not None:
            x_va = ((x_va - self.input_mean_) / self.input_scale_).astype(np.float32)
        self.base_version_ = text_enc.version
        self.data_ = data
        self.source_ = dict(source or {"dataset": dataset.name})
        self.n_train_captions_, self.n_val_captions_ = int(len(x_tr)), int(0 if x_va is None else len(x_va))

        saved_threads = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(int(self.threads))
        try:
            return self._train(torch, x_tr, img_tr, x_va, img_va, val_images, val_pos, feats, use_val, say)
        finally:
            torch.set_num_threads(saved_threads)

    def _train(self, torch, x_tr, img_tr, x_va, img_va, val_images, val_pos, feats, use_val, say) -> "M3LModel":
        from tqdm.auto import tqdm

        torch.manual_seed(int(self.seed))
        net = build_network(self.in_dim_, [*self.widths, self.image_dim_], self.dropout)
        self.init_scale_ = init_last_block(net, x_tr, feats[img_tr], self.init)
        opt = torch.optim.Adam(net.parameters(), lr=float(self.lr), betas=(float(self.beta1), float(self.beta2)))
        X = torch.from_numpy(x_tr)
        IMG = torch.from_numpy(feats)
        ids_tr = torch.from_numpy(img_tr)
        rng = np.random.default_rng(int(self.seed))

        def validate() -> dict[str, float]:
            if not use_val:
                return {}
            net.eval()
            with torch.no_grad():
                out = net(torch.from_numpy(x_va)).numpy()
            net.train()
            ranks = retrieval_ranks(out, feats[val_images], val_pos[img_va])
            return {f"val_{k}": v for k, v in recall_summary(ranks).items()}

        t0 = time.perf_counter()
        history = [{"epoch": 0, "loss": None, **validate(), "seconds": 0.0}]
        say(_epoch_line(history[-1]))
        best_state, best_key, best_epoch, since_best = None, None, 0, 0
        if use_val:
            best_state, best_key = copy.deepcopy(net.state_dict()), _val_key(history[-1])
        bs = int(self.batch_size)
        bar = tqdm(range(1, int(self.epochs) + 1), desc=f"train {self.loss}", unit="epoch", disable=not self.progress)
        for epoch in bar:
            net.train()
            order = torch.from_numpy(rng.permutation(len(X)))
            total, n_used, active = 0.0, 0, 0
            for start in range(0, len(order), bs):
                b = order[start : start + bs]
                if len(b) < 2:
                    continue
                anchor = net(X[b])
                pos = IMG[ids_tr[b]]
                j = hardest_negatives(anchor, pos, ids_tr[b])
                keep = j >= 0
                if not bool(keep.any()):
                    continue
                a, p, jn = anchor[keep], pos[keep], j[keep]
                if self.loss == "m3l":
                    loss = m3l_loss(a, p, pos[jn], anchor[jn], rho=float(self.rho), alpha1=float(self.alpha1), alpha2=float(self.alpha2))
                else:
                    loss = patr_loss(a, p, pos[jn], eta=self.eta_)
                    with torch.no_grad():
                        active += int((sq_dist(a, pos[jn]) < self.eta_).sum())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if not math.isfinite(float(loss.detach())):
                    raise BackretrievalError(
                        f"{self.loss}: the loss became {float(loss)} in epoch {epoch}; lower the learning rate"
                    )
                total += float(loss.detach()) * int(keep.sum())
                n_used += int(keep.sum())
            rec = {"epoch": epoch, "loss": total / max(1, n_used), **validate(), "seconds": round(time.perf_counter() - t0, 2)}
            if self.loss == "patr":
                rec["hinge_active"] = active / max(1, n_used)
            history.append(rec)
            say(_epoch_line(rec))
            if use_val:
                bar.set_postfix(val_r10=f"{rec['val_r@10']:.3f}", loss=f"{rec['loss']:.4g}")
                key = _val_key(rec)
                if key > best_key:
                    best_state, best_key, best_epoch, since_best = copy.deepcopy(net.state_dict()), key, epoch, 0
                else:
                    since_best += 1
                if self.patience is not None and since_best >= int(self.patience):
                    say(f"early stop after epoch {epoch}: no better validation R@10 for {self.patience} epochs")
                    break
        bar.close()
        if self.select == "best" and best_state is not None:
            net.load_state_dict(best_state)
            self.best_epoch_ = best_epoch
        else:
            self.best_epoch_ = history[-1]["epoch"]
        net.eval()
        self.net_ = net
        self.history_ = history
        return self

    # ------------------------------------------------------------------ inference and saving
    def layers_(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The fitted (weight, bias) arrays, float32, weight of shape (out, in), for RAW base
        embeddings: the input standardisation ``(x - mean) / scale`` is folded into the first
        layer (``W0 / scale``, ``b0 - W0 mean / scale``, computed in float64)."""
        out = []
        for i, lin in enumerate(self.net_.linears):
            w = lin.weight.detach().numpy().astype(np.float64)
            b = lin.bias.detach().numpy().astype(np.float64)
            if i == 0:
                w = w / self.input_scale_
                b = b - w @ self.input_mean_
            out.append((w.astype(np.float32), b.astype(np.float32)))
        return out

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Map base text embeddings ``X`` (n, in_dim) into the image space (numpy forward)."""
        return numpy_forward(np.asarray(X, dtype=np.float32), self.layers_())

    def config_(self) -> dict[str, Any]:
        data = self.data_
        counts = {s: int((data.split == SPLIT_CODE[s]).sum()) for s in SPLITS}
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "loss": self.loss,
            "base": self.base,
            "base_version": self.base_version_,
            "in_dim": self.in_dim_,
            "image_model": self.image_model,
            "image_model_version": data.image_model_version,
            "image_dim": self.image_dim_,
            "widths": [*map(int, self.widths), self.image_dim_],
            "dropout": [float(p) for p in self.dropout],
            "init": self.init,
            "init_scale": self.init_scale_,
            "standardize": bool(self.standardize),
            "input_scale": float(self.input_scale_),
            "loss_params": (
                {"rho": float(self.rho), "alpha1": float(self.alpha1), "alpha2": float(self.alpha2), "d": "squared euclidean"}
                if self.loss == "m3l"
                else {
                    "eta": self.eta_,
                    "eta_rule": "given" if self.eta is not None else
                    f"quantile {self.eta_quantile} of squared distances between distinct training images",
                    "d": "squared euclidean",
                }
            ),
            "optimizer": {"name": "adam", "lr": float(self.lr), "beta1": float(self.beta1), "beta2": float(self.beta2)},
            "batch_size": int(self.batch_size),
            "epochs": int(self.epochs),
            "epochs_run": int(self.history_[-1]["epoch"]),
            "patience": self.patience,
            "select": self.select,
            "best_epoch": int(self.best_epoch_),
            "seed": int(self.seed),
            "train_langs": list(self.train_langs),
            "val_langs": list(self.val_langs) if self.val_langs is not None else list(self.train_langs),
            "source": self.source_,
            "split": {
                "seed": int(self.split_seed),
                "test_frac": float(self.test_frac),
                "val_frac": float(self.val_frac),
                "images": counts,
                "rule": "sha: u = blake2b(seed NUL image key) / 2^64; test if u < test_frac, val if u < test_frac + val_frac",
            },
            "n_train_captions": self.n_train_captions_,
            "n_val_captions": self.n_val_captions_,
            "history": self.history_,
        }

    def save(self, out_dir: str | Path) -> Path:
        """Write ``weights.npz``, ``split.json`` and (last) ``config.json`` into ``out_dir``."""
        if not hasattr(self, "net_"):
            raise BackretrievalError("fit the model before saving it")
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        arrays = {}
        for i, (w, b) in enumerate(self.layers_()):
            arrays[f"W{i}"], arrays[f"b{i}"] = w, b
        atomic_save_npz(out / "weights.npz", **arrays)
        split = {s: [k for k, c in zip(self.data_.keys, self.data_.split.tolist()) if c == SPLIT_CODE[s]] for s in SPLITS}
        atomic_write_text(out / "split.json", json.dumps(split))
        cfg = self.config_()
        cfg["weights_hash"] = content_hash((out / "weights.npz").read_bytes())
        atomic_write_text(out / "config.json", json.dumps(cfg, indent=1, default=_json_default))
        return out


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def _val_key(rec: Mapping[str, Any]) -> tuple[float, float]:
    """Model selection: validation R@10, ties broken by MRR (then the earlier epoch wins)."""
    return (rec["val_r@10"], rec["val_r_mrr"])


def _epoch_line(rec: Mapping[str, Any]) -> str:
    parts = [f"epoch {rec['epoch']:>3}"]
    if rec.get("loss") is not None:
        parts.append(f"loss {rec['loss']:.4g}")
    for k in ("val_r@1", "val_r@5", "val_r@10"):
        if k in rec:
            parts.append(f"{k} {rec[k]:.3f}")
    if "hinge_active" in rec:
        parts.append(f"hinge active {rec['hinge_active']:.2f}")
    return ", ".join(parts)


# ============================================================================ evaluation of saved models
@dataclasses.dataclass
class RetrievalResult:
    """Text-to-image retrieval of one saved model on one split, per language."""

    model_dir: str
    config: dict[str, Any]
    split: str
    sim: str
    n_images: int
    per_lang: dict[str, dict[str, float]]
    ranks: dict[str, np.ndarray]
    query_ids: dict[str, list[str]]

    def to_json(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "model_dir": self.model_dir,
            "label": model_label(cfg),
            "loss": cfg["loss"],
            "base": cfg["base"],
            "image_model": cfg["image_model"],
            "train_langs": cfg["train_langs"],
            "seed": cfg["seed"],
            "best_epoch": cfg["best_epoch"],
            "split": self.split,
            "sim": self.sim,
            "n_images": self.n_images,
            "per_lang": self.per_lang,
        }


def model_label(cfg: Mapping[str, Any]) -> str:
    return f"{cfg['base']} {cfg['loss'].upper()}"


def evaluate_retrieval(
    model_dir: str | Path,
    dataset: Dataset,
    langs: Sequence[str],
    *,
    split: str = "test",
    ks: Sequence[int] = VAL_KS,
    sim: str = "euclidean",
    data: ImageTextData | None = None,
    base_encoder: Any = None,
    progress: bool = False,
) -> RetrievalResult:
    """Text->image Recall@K per language of a saved model on ``split`` of ``dataset``.

    The gallery is every distinct image of ``split`` (``"test"``, ``"val"``, or ``"all"``)
    among the loaded languages, split by the model's own split rule, minus any image the model
    was trained on (none, when the dataset is the training dataset); the queries of a language
    are its captions of gallery images. ``data`` may be passed to reuse encoded images across
    models that share an image model and split, and ``base_encoder`` (a cached text encoder of
    the model's base) to load the base model once for several models.
    """
    from ..encoders.m3l import M3LTextEncoder

    if split not in ("test", "val", "all"):
        raise BackretrievalError(f"split must be test, val or all, got {split!r}")
    cfg, _ = load_model(model_dir)
    sp = cfg["split"]
    if data is None:
        data = collect_images(
            dataset, langs, cfg["image_model"],
            split_seed=sp["seed"], test_frac=sp["test_frac"], val_frac=sp["val_frac"], progress=progress,
        )
    elif data.image_model != cfg["image_model"]:
        raise BackretrievalError(f"{model_dir}: trained for image model {cfg['image_model']!r}, data encoded with {data.image_model!r}")
    if data.features.shape[1] != cfg["image_dim"]:
        raise BackretrievalError(
            f"{model_dir}: maps into {cfg['image_dim']}-d image features, the dataset's images are {data.features.shape[1]}-d"
        )
    with open(Path(model_dir) / "split.json", encoding="utf-8") as fh:
        trained_on = set(json.load(fh)["train"])
    gal = data.images(None if split == "all" else split)
    gal = np.array([g for g in gal if data.keys[g] not in trained_on], dtype=np.int64)
    if len(gal) == 0:
        raise DataError(f"{dataset.name}: no {split} images left to retrieve from")
    pos = np.full(len(data.keys), -1, dtype=np.int64)
    pos[gal] = np.arange(len(gal))
    enc = M3LTextEncoder(model_dir, progress=progress, base_encoder=base_encoder)
    gallery = data.features[gal]
    per_lang, ranks, qids = {}, {}, {}
    for lang in langs:
        img = data.image_of[lang]
        rows = np.flatnonzero(pos[img] >= 0)
        c = data.corpora[lang].subset(rows)
        if len(rows) == 0:
            per_lang[lang] = {"n_queries": 0, **recall_summary(np.zeros(0), ks)}
            ranks[lang], qids[lang] = np.zeros(0, np.int64), []
            continue
        q = enc.map(c.texts, lang, ids=c.ids)
        r = retrieval_ranks(q, gallery, pos[img[rows]], sim=sim)
        per_lang[lang] = {"n_queries": int(len(rows)), **recall_summary(r, ks)}
        ranks[lang], qids[lang] = r, list(c.ids)
    return RetrievalResult(str(model_dir), cfg, split, sim, int(len(gal)), per_lang, ranks, qids)


def projection_figure(
    results: Sequence[tuple[str, Any]],
    data: ImageTextData,
    langs: Sequence[str],
    path: str | Path,
    *,
    n_images: int = 40,
    n_clusters: int = 8,
    seed: int = 0,
    split: str = "test",
) -> Path:
    """Fig. 3/4 analog: t-SNE of mapped captions in several languages over the image features.

    ``results``: (panel title, text encoder with ``map``) per panel. ``n_images`` seeded test
    images are drawn once; their image features (``x``, coloured by a k-means clustering of the
    image features, as the paper colours by ResNet clusters) and the mapped captions of the
    same images in each of ``langs`` (one marker per language, same colour as their image) are
    embedded jointly by t-SNE, one panel per model.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.cluster import KMeans
    from sklearn.manifold import TSNE

    pool = data.images(None if split == "all" else split)
    have = set(pool.tolist())
    for lang in langs:
        have &= set(data.image_of[lang].tolist())
    pool = np.array(sorted(have), dtype=np.int64)
    if len(pool) < 3:
        raise DataError("too few images with captions in every plotted language")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(pool, size=min(n_images, len(pool)), replace=False))
    feats = data.features[chosen]
    k = min(n_clusters, len(chosen))
    colours = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(feats)
    cmap = plt.get_cmap("tab10" if k <= 10 else "tab20")
    markers = ["o", "^", "s", "D", "v", "P", "*", "<", ">", "h"]
    ncol = min(2, len(results))
    nrow = math.ceil(len(results) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 5.6 * nrow), squeeze=False)
    for ax, (title, enc) in zip(axes.ravel(), results):
        blocks, which = [feats], [("image", np.arange(len(chosen)))]
        for lang in langs:
            c = data.corpora[lang]
            first = {}
            for r, im in enumerate(data.image_of[lang].tolist()):
                first.setdefault(im, r)
            rows = [first[i] for i in chosen.tolist()]
            sub = c.subset(rows)
            blocks.append(enc.map(sub.texts, lang, ids=sub.ids))
            which.append((lang, np.arange(len(chosen))))
        allv = np.concatenate(blocks).astype(np.float64)
        xy = TSNE(n_components=2, perplexity=min(30.0, (len(allv) - 1) / 3), init="pca", random_state=seed).fit_transform(allv)
        start = 0
        for b, (name, idx) in zip(blocks, which):
            pts = xy[start : start + len(b)]
            start += len(b)
            col = [cmap(colours[i] % cmap.N) for i in idx]
            if name == "image":
                ax.scatter(pts[:, 0], pts[:, 1], c=col, marker="x", s=70, linewidths=2.0, label="image", zorder=3)
            else:
                m = markers[(langs.index(name)) % len(markers)]
                ax.scatter(pts[:, 0], pts[:, 1], c=col, marker=m, s=28, alpha=0.75, edgecolors="k", linewidths=0.3, label=f"text ({name})")
        ax.set_title(title, fontsize=11)
        ax.set_xticks([])
        ax.set_yticks([])
        leg = ax.legend(loc="best", fontsize=8, framealpha=0.8)
        for h in leg.legend_handles:
            h.set_color("0.3")
    for ax in axes.ravel()[len(results):]:
        ax.axis("off")
    fig.suptitle(
        f"t-SNE of {len(chosen)} held-out {split} images (x) and their captions mapped into the image space\n"
        f"(colour = k-means cluster of the image features, {k} clusters; marker = caption language)",
        fontsize=11,
    )
    fig.tight_layout()
    path = Path(path)
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)
    return path
