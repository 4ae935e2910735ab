"""The M3L/PATR estimator: hyper-parameter checks, the training loop with online hardest
negatives and validation, and the saved model directory."""
from __future__ import annotations

import copy
import json
import math
import numbers
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...core import BackretrievalError, DataError
from ...data import Dataset
from ...encoders.registry import get_text_encoder
from ...encoders.cache import CachedTextEncoder
from ...encoders.trained.m3l import forward as numpy_forward, save_model
from ..base import NON_NEGATIVE_INT, POSITIVE_INT, POSITIVE_REAL, Estimator, HyperParameterError, Interval, StrOptions
from .data import SPLIT_CODE, SPLITS, ImageTextData, check_fracs, collect_images
from .evaluation import recall_summary, retrieval_ranks
from .losses import hardest_negatives, m3l_loss, patr_loss, sq_dist
from .model import build_network, init_last_block, input_standardization

LOSSES = ("m3l", "patr")
DEFAULT_WIDTHS = (1024, 2048)
DEFAULT_DROPOUT = (0.2, 0.1, 0.0)
ETA_PAIRS = 200_000  # image pairs sampled to estimate the eta quantile
INITS = ("match", "mean", "default")


class M3L(Estimator):
    """Maps frozen multilingual text embeddings into a frozen image-feature space.

    A :class:`~backretrieval.train.base.Estimator`: ``__init__`` stores the hyper-parameters
    unmodified (``get_params`` / ``set_params`` / ``clone`` work), :meth:`fit` checks them
    (:class:`~backretrieval.train.base.HyperParameterError` naming a bad one) and trains on a
    :class:`~backretrieval.data.Dataset` with images, learned attributes end in ``_``,
    :meth:`save` writes a model directory (kind ``m3l``) that ``m3l:DIR`` / ``patr:DIR`` load as
    a text model.

    Learned: ``net_`` (torch module), ``eta_`` (PATR), ``history_`` (one dict per epoch, epoch
    0 = the untrained network; validation keys ``val_t2i@K``, ``val_t2i_mrr``, ...),
    ``best_epoch_``, ``data_`` (the images and splits), ``in_dim_``, ``image_dim_``.

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

    Parameters are stored as given and checked by :meth:`fit`, which raises
    ``HyperParameterError`` naming a bad one.
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
    _fitted_attribute = "net_"

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

    def _train(self, torch, x_tr, img_tr, x_va, img_va, val_images, val_pos, feats, use_val, say) -> "M3L":
        from tqdm.auto import tqdm

        torch.manual_seed(int(self.seed))
        net = build_network(self.in_dim_, [*map(int, self.widths), self.image_dim_], tuple(self.dropout))
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
                bar.set_postfix(val_t2i10=f"{rec['val_t2i@10']:.3f}", loss=f"{rec['loss']:.4g}")
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
        layer (``W0 / scale``, ``b0 - W0 mean / scale``, computed in float64).

        Returns:
            One ``(W, b)`` per block: W float32 (out, in), b float32 (out,).

        Raises:
            NotFittedError: before ``fit``.
        """
        self._require_fitted()
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
        """Map base text embeddings into the image space (numpy forward, dropout off).

        Args:
            X: (n, in_dim) raw embeddings of the base text model.

        Returns:
            float32 (n, image_dim) mapped captions (compare them with image features by squared
            Euclidean distance, the training metric).

        Raises:
            NotFittedError: before ``fit``.
        """
        return numpy_forward(np.asarray(X, dtype=np.float32), self.layers_())

    def info_(self) -> dict[str, Any]:
        """What training recorded, saved as the model directory's info: input and image
        dimensions, model versions, the conditioning (``init_scale``, ``input_scale``), PATR's
        used ``eta`` (None for M3L), split sizes and rule, source, caption counts and history.

        Returns:
            A JSON-ready dict.

        Raises:
            NotFittedError: before ``fit``.
        """
        self._require_fitted()
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

    def save(self, out_dir: str | Path) -> Path:
        """Write the model directory (kind ``m3l``): ``weights.npz``, ``split.json`` and (last)
        ``model.json`` with the hyper-parameters (``get_params()``, typed) and :meth:`info_`.

        Args:
            out_dir: the model directory (created); files are written atomically.

        Returns:
            The directory, loadable as the text model ``m3l:DIR`` / ``patr:DIR``.

        Raises:
            NotFittedError: the model is not fitted.
            ModelDirError: the directory cannot be written as a model directory (a recorded
                value JSON cannot hold).
        """
        self._require_fitted()
        split = {s: [k for k, c in zip(self.data_.keys, self.data_.split.tolist()) if c == SPLIT_CODE[s]] for s in SPLITS}
        return save_model(out_dir, self.layers_(), hyper_parameters=self.get_params(), info=self.info_(), split=split)


M3LModel = M3L  # the name before the estimators shared one API


def _val_key(rec: Mapping[str, Any]) -> tuple[float, float]:
    """Model selection: validation R@10, ties broken by MRR (then the earlier epoch wins)."""
    return (rec["val_t2i@10"], rec["val_t2i_mrr"])


def _epoch_line(rec: Mapping[str, Any]) -> str:
    parts = [f"epoch {rec['epoch']:>3}"]
    if rec.get("loss") is not None:
        parts.append(f"loss {rec['loss']:.4g}")
    for k in ("val_t2i@1", "val_t2i@5", "val_t2i@10"):
        if k in rec:
            parts.append(f"{k} {rec[k]:.3f}")
    if "hinge_active" in rec:
        parts.append(f"hinge active {rec['hinge_active']:.2f}")
    return ", ".join(parts)
