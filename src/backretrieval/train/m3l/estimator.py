"""The M3L/PATR estimator: hyper-parameters and their checks, the training data, the saved
model directory and loading it back (the training loop with online hardest negatives and
validation is :mod:`.loop`).

Aggarwal & Kale, "Towards Zero-shot Cross-lingual Image Retrieval" (2020), Sections 3-4.
Multilingual sentence embeddings of a frozen text model (``use-m``, ``e5-small``, any text
model) are mapped into the feature space of a frozen image model (``efficientnet-lite0``, or a
dataset's precomputed image features) by three blocks of

    fully connected layer -> dropout -> ReLU -> L2-norm      (no L2-norm after the last block)

with widths ``[1024, 2048, image_dim]`` (the paper's ``[1024, 2048, 2048]`` with the last width
set to the image model's feature size, 1280 for EfficientNet-Lite) and dropout
``[0.2, 0.1, 0.0]``. Only the mapping is trained, on image-caption pairs of the training
languages (English only by default); at test time queries in any language the text model
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
Without them M3L does not move off chance on emoji-cldr and e5-small (anisotropic) trains
several times slower.

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

Saved model directory (no pickled code; the one format of
:mod:`backretrieval.encoders.trained.modeldir`, kind ``m3l``): ``weights.npz`` (``W0, b0, W1, b1, W2,
b2`` float32), ``split.json`` (the image keys of each split) and ``model.json``
(``hyper_parameters``: the estimator's parameters, typed -- PATR's ``eta`` and ``eta_quantile``
included; info: base text model and image model versions, dimensions, the used eta, split
sizes, training history; written last, it marks a complete model). The inference half is
:mod:`backretrieval.encoders.trained.m3l` (text models ``m3l:DIR`` / ``patr:DIR``).
"""
from __future__ import annotations

import json
import numbers
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...core import BackretrievalError, DataError
from ...data import Dataset
from ...encoders.registry import get_cached_text_encoder
from ...encoders.trained.m3l import forward as numpy_forward, load_model, save_model
from ..base import (
    NON_NEGATIVE_INT, POSITIVE_INT, POSITIVE_REAL, Estimator, HyperParameterError, Interval, StrOptions, check_widths,
    fit_context,
)
from .data import SPLIT_CODE, SPLITS, ImageTextData, check_fracs, collect_images
from .loop import LoopData, LoopSettings, train_mapping
from .model import input_standardization

LOSSES = ("m3l", "patr")
DEFAULT_WIDTHS = (1024, 2048)
DEFAULT_DROPOUT = (0.2, 0.1, 0.0)
ETA_PAIRS = 200_000  # image pairs sampled to estimate the eta quantile
INITS = ("match", "mean", "default")


class M3L(Estimator):
    """Maps frozen multilingual text embeddings into a frozen image-feature space.

    A :class:`~backretrieval.train.base.Estimator`: ``__init__`` stores the hyper-parameters
    unmodified (``get_params`` / ``set_params`` / ``clone`` work), they are checked before
    :meth:`fit` does anything (:class:`~backretrieval.train.base.HyperParameterError` naming a
    bad one), :meth:`fit` trains on a :class:`~backretrieval.data.Dataset` with images,
    :meth:`transform` maps base text embeddings, :meth:`save` writes a model directory (kind
    ``m3l``) that ``m3l:DIR`` / ``patr:DIR`` load as a text model and :meth:`load` reads back.

    Learned (after :meth:`fit` and :meth:`load`): ``layers_`` (the ``(W, b)`` of each block
    for raw base embeddings, see :meth:`transform`), ``info_`` (what training recorded, saved as
    the directory's info), ``split_`` (the image keys of each split), ``eta_`` (PATR's used
    margin; None for M3L), ``history_`` (one dict per epoch, epoch 0 = the untrained network;
    validation keys ``val_t2i@K``, ``val_t2i_mrr``, ...), ``best_epoch_``, ``in_dim_``,
    ``image_dim_``. After :meth:`fit` only: ``net_`` (the torch module), ``data_`` (the images
    and splits), ``input_mean_`` / ``input_scale_`` (the input standardisation),
    ``init_scale_``, ``base_version_``, ``source_``, ``n_train_captions_``, ``n_val_captions_``.

    Args:
        loss: ``"m3l"`` (Eq. 1) or ``"patr"`` (Eq. 2).
        base: the frozen text model spec (e.g. ``"use-m"``).
        image_model: the frozen image model spec (or ``"precomputed"`` for a dataset's own
            image features).
        train_langs: languages whose captions are trained on (at least one).
        val_langs: languages of the validation captions (None: the training languages).
        widths: the two hidden widths (the last block's width is the image dimension).
        dropout: the three blocks' dropout rates, each in [0, 1).
        rho: M3L's exponent of the distance ratios (> 0).
        alpha1: M3L's weight of the image-negative ratio (> 0).
        alpha2: M3L's weight of the text-negative ratio (> 0).
        eta: PATR's margin on squared distances (None: derived with ``eta_quantile``).
        eta_quantile: the quantile, in (0, 1), of squared distances between two distinct
            training images used as eta when ``eta`` is None (200,000 seeded pairs at most).
        lr: Adam's learning rate (> 0).
        beta1: Adam's first-moment decay, in [0, 1).
        beta2: Adam's second-moment decay, in [0, 1).
        batch_size: captions per batch (>= 2: the hardest negative is another batch item).
        epochs: training epochs (>= 0; 0 keeps the initialised network).
        patience: stop after this many epochs without a better validation R@10 (None: never).
        select: keep the ``"best"`` epoch by validation R@10 (then MRR) or the ``"last"``.
        init: the last block's initialisation (``"match"``, ``"mean"``, ``"default"``).
        standardize: centre and scale the base embeddings (see the package doc).
        seed: seeds the initialisation, dropout, batch order and eta's image pairs (>= 0).
        split_seed: seed of the content-hash train/val/test image split (>= 0).
        test_frac: share of images held out for testing, in [0, 1).
        val_frac: share of images for validation, in [0, 1) (0 needs ``select="last"`` and no
            ``patience``); ``test_frac + val_frac`` must be below 1.
        threads: torch threads while fitting (None: torch's current setting).
        progress: show progress bars.

    Parameters are stored as given and checked before :meth:`fit` does anything; a bad one
    raises ``HyperParameterError`` naming it.
    """

    _parameter_constraints = {
        "loss": [StrOptions(set(LOSSES))],
        "base": [str],
        "image_model": [str],
        "train_langs": ["array-like"],
        "val_langs": ["array-like", None],
        "widths": ["array-like"],
        "dropout": ["array-like"],
        "rho": [POSITIVE_REAL],
        "alpha1": [POSITIVE_REAL],
        "alpha2": [POSITIVE_REAL],
        "eta": [POSITIVE_REAL, None],
        "eta_quantile": [Interval(numbers.Real, 0, 1, closed="neither")],
        "lr": [POSITIVE_REAL],
        "beta1": [Interval(numbers.Real, 0, 1, closed="left")],
        "beta2": [Interval(numbers.Real, 0, 1, closed="left")],
        "batch_size": [Interval(numbers.Integral, 2, None, closed="left")],
        "epochs": [NON_NEGATIVE_INT],
        "patience": [POSITIVE_INT, None],
        "select": [StrOptions({"best", "last"})],
        "init": [StrOptions(set(INITS))],
        "standardize": ["boolean"],
        "seed": [NON_NEGATIVE_INT],
        "split_seed": [NON_NEGATIVE_INT],
        "test_frac": [Interval(numbers.Real, 0, 1, closed="left")],
        "val_frac": [Interval(numbers.Real, 0, 1, closed="left")],
        "threads": [POSITIVE_INT, None],
        "progress": ["boolean"],
    }
    _fitted_attribute = "layers_"

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
        self.train_langs = train_langs
        self.val_langs = val_langs
        self.widths = widths
        self.dropout = dropout
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
    def _check_more(self) -> None:
        """The rules between parameters and inside the list-valued ones."""
        name = type(self).__name__
        if len(self.train_langs) == 0:
            raise HyperParameterError(f"The 'train_langs' parameter of {name} must name at least one training language")
        if len(self.widths) != 2 or any(not isinstance(w, numbers.Integral) or isinstance(w, bool) or w < 1 for w in self.widths):
            raise HyperParameterError(
                f"The 'widths' parameter of {name} must be two positive hidden widths (the last is the image dimension), got {self.widths!r}"
            )
        try:
            check_widths(self.widths)
        except HyperParameterError as e:
            raise HyperParameterError(f"The 'widths' parameter of {name}: {e}") from None
        if len(self.dropout) != 3 or any(not isinstance(p, numbers.Real) or not 0.0 <= float(p) < 1.0 for p in self.dropout):
            raise HyperParameterError(f"The 'dropout' parameter of {name} must be three rates in [0, 1), got {self.dropout!r}")
        try:
            check_fracs(self.test_frac, self.val_frac)
        except BackretrievalError as e:
            raise HyperParameterError(str(e)) from None
        if self.val_frac == 0 and (self.select == "best" or self.patience is not None):
            raise HyperParameterError("val_frac=0 leaves no validation images: use select='last' and no patience")

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
    @fit_context
    def fit(
        self,
        dataset: Dataset,
        *,
        source: Mapping[str, Any] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> "M3L":
        """Train on the training images' captions in ``train_langs``; validate each epoch.

        Args:
            dataset: a dataset with image paths (or precomputed features) in every loaded language.
            source: how the dataset was named, e.g. ``{"dataset": "emoji-cldr", "options":
                {...}}``, recorded in the saved config.
            log: receives one line per epoch.

        Returns:
            ``self``, fitted.

        Raises:
            HyperParameterError: a bad hyper-parameter (named).
            BackretrievalError: a loss that becomes NaN/inf.
            DataError: missing images or features, fewer than two training captions or images,
                or no validation captions.
        """
        import torch

        say = log or (lambda s: None)
        val_langs = list(self.val_langs) if self.val_langs is not None else list(self.train_langs)
        langs = list(dict.fromkeys([*self.train_langs, *val_langs]))
        data = collect_images(
            dataset, langs, self.image_model,
            split_seed=self.split_seed, test_frac=self.test_frac, val_frac=self.val_frac, progress=self.progress,
        )
        text_enc = get_cached_text_encoder(self.base, {"progress": self.progress}, progress=self.progress)
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

        settings = LoopSettings(
            loss=self.loss, widths=(*map(int, self.widths), self.image_dim_), dropout=tuple(self.dropout), init=self.init,
            rho=self.rho, alpha1=self.alpha1, alpha2=self.alpha2, eta=self.eta_, lr=self.lr, beta1=self.beta1,
            beta2=self.beta2, batch_size=self.batch_size, epochs=self.epochs, patience=self.patience, select=self.select,
            seed=self.seed, progress=bool(self.progress),
        )
        loop_data = LoopData(x_tr, img_tr, feats, x_va, img_va, val_images, val_pos)
        saved_threads = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(int(self.threads))
        try:
            result = train_mapping(settings, loop_data, say)
        finally:
            torch.set_num_threads(saved_threads)
        self.net_ = result.net
        self.history_ = result.history
        self.best_epoch_ = result.best_epoch
        self.init_scale_ = result.init_scale
        self.layers_ = self._folded_layers()
        self.split_ = {s: [k for k, c in zip(data.keys, data.split.tolist()) if c == SPLIT_CODE[s]] for s in SPLITS}
        self.info_ = self._training_info()
        return self

    # ------------------------------------------------------------------ inference and saving
    def _folded_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The trained network's (weight, bias) arrays, float32, weight of shape (out, in), for RAW
        base embeddings: the input standardisation ``(x - mean) / scale`` is folded into the first
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
        """Map base text embeddings into the image space (numpy forward through ``layers_``,
        dropout off) -- the same code as the saved text model ``m3l:DIR`` / ``patr:DIR``.

        Args:
            X: (n, in_dim) raw embeddings of the base text model (``base``).

        Returns:
            float32 (n, image_dim) mapped captions (compare them with image features by squared
            Euclidean distance, the training metric).

        Raises:
            NotFittedError: before ``fit``.
        """
        self._require_fitted()
        return numpy_forward(np.asarray(X, dtype=np.float32), self.layers_)

    def _training_info(self) -> dict[str, Any]:
        """What training recorded (``info_``, saved as the model directory's info): input and
        image dimensions, model versions, the conditioning (``init_scale``, ``input_scale``),
        PATR's used ``eta`` (None for M3L), split sizes and rule, source, caption counts and
        history."""
        data = self.data_
        counts = {s: int((data.split == SPLIT_CODE[s]).sum()) for s in SPLITS}
        return {
            "base_version": self.base_version_,
            "in_dim": self.in_dim_,
            "image_model_version": data.image_model_version,
            "image_dim": self.image_dim_,
            "init_scale": self.init_scale_,
            "input_scale": float(self.input_scale_),
            "eta": self.eta_,
            "d": "squared euclidean",
            "epochs_run": int(self.history_[-1]["epoch"]),
            "best_epoch": int(self.best_epoch_),
            "source": self.source_,
            "split": {
                "images": counts,
                "rule": "sha: u = blake2b(seed NUL image key) / 2^64; test if u < test_frac, val if u < test_frac + val_frac",
            },
            "n_train_captions": self.n_train_captions_,
            "n_val_captions": self.n_val_captions_,
            "history": self.history_,
        }

    def save(self, path: str | Path, *, info: Mapping[str, Any] | None = None) -> Path:
        """Write the model directory (kind ``m3l``): ``weights.npz`` (``layers_``), ``split.json``
        (``split_``) and (last) ``model.json`` with the hyper-parameters (``get_params()``, typed)
        and ``info_``.

        Args:
            path: the model directory (created); files are written atomically.
            info: more info to record, added to ``info_`` in the directory's info.

        Returns:
            The directory, loadable as the text model ``m3l:DIR`` / ``patr:DIR``.

        Raises:
            NotFittedError: the model is not fitted.
            ModelDirError: the directory cannot be written as a model directory (a recorded
                value JSON cannot hold).
        """
        self._require_fitted()
        return save_model(path, self.layers_, hyper_parameters=self.get_params(), info={**self.info_, **dict(info or {})},
                          split=self.split_)

    @classmethod
    def load(cls, path: str | Path) -> "M3L":
        """A fitted estimator from a model directory written by :meth:`save` (or by the format
        before the one model-directory format, ``config.json``).

        Args:
            path: the model directory.

        Returns:
            An estimator with the saved hyper-parameters (those ``__init__`` knows) and
            ``layers_``, ``info_``, ``split_``, ``eta_``, ``history_``, ``best_epoch_``,
            ``in_dim_`` and ``image_dim_`` from the directory; ``transform`` gives the vectors
            of the estimator that was saved.

        Raises:
            EncoderError: the directory is not a readable M3L/PATR model (naming what is wrong).
        """
        md, layers = load_model(path)
        est = cls._from_saved_params(md.hyper_parameters)
        info = dict(md.info)
        est.layers_ = layers
        est.info_ = info
        split_file = md.path / "split.json"
        est.split_ = json.loads(split_file.read_text(encoding="utf-8")) if split_file.is_file() else None
        est.eta_ = info.get("eta")
        est.history_ = list(info.get("history", []))
        est.best_epoch_ = info.get("best_epoch")
        est.in_dim_, est.image_dim_ = int(info["in_dim"]), int(info["image_dim"])
        return est

