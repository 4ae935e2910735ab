"""The Triplet / TripletXL estimator: parameters and their checks, data handling, the checkpoint
resume key, inference, the saved model directory and loading it back. The training loop itself
is :mod:`.loop`.

Triplet and TripletXL (Backretrieval paper, Sec. 3.2): a better cross-lingual representation
from *monolingual* title/body pairs on top of a frozen multilingual model.

Model. A frozen base model (e.g. ``use-m``) embeds an item's title and body separately; a
siamese tower -- dense layers with ReLU (default 300 -> 300, as in the paper), the same
weights for titles and bodies -- maps them to ``x_rt`` and ``x_rb``. The representation of an
item is ``concat(x_rt, x_rb)`` (each half L2-normalised, see :mod:`backretrieval.encoders.trained.triplet`).

Losses, with ``d`` the cosine distance ``1 - cos``; a batch's loss is the mean over its items:

* Eq. 1, ``L_TRIPLET(r) = max(0, d(x_rb, x_rt) - d(x_rb, x_nt) + alpha)``; the negative title
  ``x_nt`` is a uniformly random *other* item of the same mini-batch (batches mix languages).
  Option ``negatives="language"`` (not in the paper) draws it among the batch's items of r's own
  language instead, see :func:`sample_negatives`.
* Eq. 2, ``L_XL(r) = sum_{l != l_r} | mean_{n in N_l(r)} d(x_rb, x_nt) - mean_{n in N_{l_r}(r)} d(x_rb, x_nt) |``;
  TripletXL minimises ``L_TRIPLET + beta * L_XL``.

Neighbours ``N_l(r)`` (how they are found). ``N_l(r)`` are the ``K`` training items of language
``l`` whose *title* vectors ``x_nt`` are nearest (cosine) to the *body* vector ``x_rb`` of
``r`` -- the same pairing of body and title as in the distances of Eq. 2 -- computed with the
model's own current embeddings by exact blocked search (:func:`backretrieval.search.topk`,
never an N x N matrix). Item ``r`` itself is excluded from ``N_{l_r}(r)``. The neighbour sets
are recomputed at the start of every ``refresh_every``-th epoch (default: every epoch,
including before the first one, with the untrained network) for the training *and* validation
items; the pool is always the training items only, so validation titles never receive
gradient. Between refreshes the sets are fixed, while the distances in the loss are recomputed
with the current weights at every step (gradient flows into both ``x_rb`` and the neighbours'
``x_nt``). A language with fewer than K other training items uses the items it has; a term
whose neighbour set is empty is left out. For Triplet the validation ``L_XL`` is still
computed each epoch (as a monitor, never trained on), so the two methods' curves can be compared.

No cross-lingual links. Training consumes only :class:`TitleBodyData` -- languages, titles and
bodies -- built from a corpus by :meth:`TitleBodyData.from_dataset`, which never reads the
corpus' ``concepts`` and drops ``ids`` too (for ddtp and emoji-cldr the id *is* the concept).
:func:`assert_no_links` guards every entry point of the training code path.

History: one record per epoch (train/validation loss and their Eq. 1 / Eq. 2 parts, seconds);
with a validation split, an "epoch 0" record holds the validation loss of the untrained network
for reference (it is never chosen as the best epoch).

Defaults (paper): Adam, lr 0.01, alpha 0.1, batch 128, 40 epochs, beta 0.01, K 5, a random
90/10 train/validation split. Early stopping on the validation loss is available
(``patience``); by default all epochs run and the weights of the epoch with the lowest
validation loss are kept (``restore_best``). Same seed, same numbers (CPU torch). With a
``checkpoint_dir`` every finished epoch is saved (atomically) and a rerun with the same data
and settings resumes from the last one.
"""
from __future__ import annotations

import json
import numbers
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...core import DataError, content_hash
from ...data import Dataset
from ...encoders.devices import default_threads
from ...encoders.trained.triplet import METHODS, TOWERS, head_forward, load_model, represent, save_model
from ..base import (
    MAX_WIDTH, NON_NEGATIVE_INT, POSITIVE_INT, POSITIVE_REAL, Estimator, HyperParameterError, Interval, StrOptions,
    check_widths, fit_context,
)
from .data import TitleBodyData, assert_no_links, embed_title_body
from .loop import LoopData, LoopSettings, train_tower
from .tower import params_of

NEGATIVES = ("batch", "language")
MAX_LAYERS = 16


def check_layers(layers: Sequence[Any]) -> list[int]:
    """The tower's layer widths, checked: positive integers, at most ``MAX_WIDTH`` each and
    ``MAX_LAYERS`` of them (a width of 10^9 would ask for terabytes before training starts).

    Args:
        layers: the widths.

    Returns:
        The widths as ints.

    Raises:
        HyperParameterError: naming the first width or the count that is out of bounds.
    """
    widths = list(layers)
    if not widths or any(not isinstance(w, numbers.Integral) or isinstance(w, bool) or w < 1 for w in widths):
        raise HyperParameterError(f"must be positive integer widths, got {layers!r}")
    if len(widths) > MAX_LAYERS:
        raise HyperParameterError(f"{len(widths)} layers; at most {MAX_LAYERS}")
    check_widths(widths)
    return [int(w) for w in widths]
# The parameters in the checkpoint's resume key (``epochs`` is left out so that a run with more
# epochs resumes; ``negatives`` and ``tower`` join only away from their defaults, so checkpoints
# without those options resume too). Frozen: changing it orphans checkpoints.
_RESUME_KEYS = ("method", "base", "layers", "final_relu", "lr", "alpha", "batch_size", "beta", "k",
                "refresh_every", "val_frac", "patience", "restore_best", "seed")


def resume_key(params: Mapping[str, Any], languages: Sequence[str], x_title: np.ndarray, x_body: np.ndarray,
               lang_idx: np.ndarray) -> str:
    """The checkpoint key of a run: its settings (see ``_RESUME_KEYS``) and its data.

    Args:
        params: the estimator's parameters (``get_params()``).
        languages: the sorted training languages.
        x_title: float32 (n, d) base vectors of the titles.
        x_body: float32 (n, d) base vectors of the bodies.
        lang_idx: int64 (n,) index into ``languages`` of each row.

    Returns:
        32 hex characters; a checkpoint resumes only when its key is equal.
    """
    hp = {k: params[k] for k in _RESUME_KEYS}
    hp["layers"] = [int(w) for w in params["layers"]]
    if params["negatives"] != "batch":
        hp["negatives"] = params["negatives"]
    if params["tower"] != "mlp":
        hp["tower"] = params["tower"]
    data = content_hash(x_title.tobytes() + x_body.tobytes() + lang_idx.tobytes() + "\0".join(languages).encode())
    return content_hash(json.dumps(hp, sort_keys=True) + data)


class Triplet(Estimator):
    """Triplet (``method="triplet"``) or TripletXL (``method="tripletxl"``) estimator.

    ``fit(data)`` embeds the titles and bodies of a :class:`TitleBodyData` (or of a
    :class:`~backretrieval.data.Dataset`'s ``title`` / ``body`` columns, every language, through
    :meth:`TitleBodyData.from_dataset`) with the frozen ``base`` model and trains;
    ``fit_vectors`` trains on given base vectors. ``transform(x_title, x_body)`` maps base
    vectors of titles and bodies to item representations. Learned attributes: ``params_``
    (numpy weights), ``history_`` (one dict per epoch: train/validation losses and their parts,
    seconds), ``best_epoch_``, ``languages_``, ``n_train_``, ``n_val_``, ``stopped_early_``,
    ``data_counts_`` (items per language; None after ``fit_vectors``) and, after fitting (not
    after :meth:`load`), ``tower_`` (the torch module). ``save(dir)`` writes a model directory
    that ``triplet:DIR`` / ``tripletxl:DIR`` load as a text model and :meth:`load` reads
    back as an estimator.

    Args:
        method: ``"triplet"`` (Eq. 1) or ``"tripletxl"`` (Eq. 1 + beta * Eq. 2).
        base: the frozen base text model spec.
        layers: widths of the dense ReLU layers (a sequence of positive ints).
        final_relu: a ReLU after the mlp tower's last layer.
        tower: ``"mlp"`` is the paper's tower (dense ReLU layers of widths ``layers``);
            ``"residual"`` is ``x + f(x)``, ``f`` = dense ReLU layers of widths ``layers`` and a
            zero-initialised linear layer back to the base dimension, so training starts at the
            base model's own vectors (``final_relu`` applies to the mlp tower only).
        lr: Adam's learning rate (> 0).
        alpha: Eq. 1's margin (>= 0).
        batch_size: items per batch (>= 2: the negative is another item of the batch).
        epochs: training epochs (>= 1; fewer run when early stopping triggers).
        beta: the weight of L_XL in TripletXL's loss (>= 0; unused by Triplet, whose
            validation L_XL is only monitored).
        k: neighbours per language in Eq. 2 (>= 1).
        refresh_every: epochs between neighbour refreshes (>= 1).
        negatives: ``"batch"`` (the paper) or ``"language"`` (see :func:`.losses.sample_negatives`).
        val_frac: random validation share in [0, 1) (0: no validation, the last epoch is kept).
        patience: stop after this many epochs without a lower validation loss (None: never;
            only with a validation split).
        restore_best: keep the weights of the epoch with the lowest validation loss.
        seed: seeds the split, the initialisation and the batches (>= 0).
        threads: torch threads while fitting (None: the CPU cores this process may use).
        progress: show progress bars.

    Parameters are stored as given and checked before ``fit`` / ``fit_vectors`` do anything;
    a bad one raises ``HyperParameterError`` naming it.
    """

    _parameter_constraints = {
        "method": [StrOptions(set(METHODS))],
        "base": [str],
        "layers": ["array-like"],
        "final_relu": ["boolean"],
        "tower": [StrOptions(set(TOWERS))],
        "lr": [POSITIVE_REAL],
        "alpha": [Interval(numbers.Real, 0, None, closed="left")],
        "batch_size": [Interval(numbers.Integral, 2, None, closed="left")],
        "epochs": [POSITIVE_INT],
        "beta": [Interval(numbers.Real, 0, None, closed="left")],
        "k": [POSITIVE_INT],
        "refresh_every": [POSITIVE_INT],
        "negatives": [StrOptions(set(NEGATIVES))],
        "val_frac": [Interval(numbers.Real, 0, 1, closed="left")],
        "patience": [POSITIVE_INT, None],
        "restore_best": ["boolean"],
        "seed": [NON_NEGATIVE_INT],
        "threads": [POSITIVE_INT, None],
        "progress": ["boolean"],
    }
    _fitted_attribute = "params_"

    def __init__(
        self,
        method: str = "triplet",
        *,
        base: str = "use-m",
        layers: Sequence[int] = (300, 300),
        final_relu: bool = True,
        tower: str = "mlp",
        lr: float = 0.01,
        alpha: float = 0.1,
        batch_size: int = 128,
        epochs: int = 40,
        beta: float = 0.01,
        k: int = 5,
        refresh_every: int = 1,
        negatives: str = "batch",
        val_frac: float = 0.1,
        patience: int | None = None,
        restore_best: bool = True,
        seed: int = 0,
        threads: int | None = None,
        progress: bool = False,
    ) -> None:
        self.method = method
        self.base = base
        self.layers = layers
        self.final_relu = final_relu
        self.tower = tower
        self.lr = lr
        self.alpha = alpha
        self.batch_size = batch_size
        self.epochs = epochs
        self.beta = beta
        self.k = k
        self.refresh_every = refresh_every
        self.negatives = negatives
        self.val_frac = val_frac
        self.patience = patience
        self.restore_best = restore_best
        self.seed = seed
        self.threads = threads
        self.progress = progress

    def _check_more(self) -> None:
        try:
            check_layers(self.layers)
        except HyperParameterError as e:
            raise HyperParameterError(f"The 'layers' parameter of {type(self).__name__}: {e}") from None

    # -- fitting
    @fit_context
    def fit(
        self,
        data: TitleBodyData | Dataset,
        *,
        checkpoint_dir: str | Path | None = None,
        base_options: Mapping[str, Any] | None = None,
        on_epoch: Callable[[dict[str, Any]], None] | None = None,
    ) -> "Triplet":
        """Embed the titles and bodies with the frozen base model and train.

        Args:
            data: a :class:`TitleBodyData`, or a Dataset whose corpora have ``title`` and
                ``body`` columns (every language; :meth:`TitleBodyData.from_dataset` drops ids
                and concepts). Anything else is refused: no cross-lingual link may be trained on.
            checkpoint_dir: save every epoch to ``DIR/checkpoint.pt`` and resume from it when
                the settings and data are the same.
            base_options: options of the base model.
            on_epoch: called with each epoch's history record.

        Returns:
            ``self``, fitted.

        Raises:
            HyperParameterError: a bad hyper-parameter (named).
            DataError: data that could carry links, or too little data.
        """
        if isinstance(data, Dataset):
            data = TitleBodyData.from_dataset(data)
        assert_no_links(data)
        x_t, x_b = embed_title_body(data, self.base, progress=self.progress, base_options=base_options)
        self._fit_vectors(x_t, x_b, data.langs, checkpoint_dir=checkpoint_dir, on_epoch=on_epoch)
        self.data_counts_ = data.counts()
        return self

    @fit_context
    def fit_vectors(
        self,
        x_title: np.ndarray,
        x_body: np.ndarray,
        langs: Sequence[str],
        *,
        checkpoint_dir: str | Path | None = None,
        on_epoch: Callable[[dict[str, Any]], None] | None = None,
    ) -> "Triplet":
        """Train on base-model vectors of titles and bodies (rows aligned with ``langs``).

        Args:
            x_title: (n, d) base vectors of the titles (converted to float32).
            x_body: (n, d) base vectors of the bodies, row-aligned with ``x_title``.
            langs: n language codes, one per row (the languages are only used to group
                neighbours per language, never to link items across languages).
            checkpoint_dir: save every epoch to ``DIR/checkpoint.pt`` and resume from it when
                the settings and vectors are the same (see :func:`resume_key`).
            on_epoch: called with each epoch's history record.

        Returns:
            ``self``, fitted.

        Raises:
            HyperParameterError: a bad hyper-parameter (named).
            DataError: mismatched shapes, NaN/inf, a one-item validation split or fewer than two
                training items.
        """
        self._fit_vectors(x_title, x_body, langs, checkpoint_dir=checkpoint_dir, on_epoch=on_epoch)
        self.data_counts_ = None
        return self

    def _fit_vectors(
        self,
        x_title: np.ndarray,
        x_body: np.ndarray,
        langs: Sequence[str],
        *,
        checkpoint_dir: str | Path | None,
        on_epoch: Callable[[dict[str, Any]], None] | None,
    ) -> None:
        """:meth:`fit_vectors` without the parameter check (the callers ran it)."""
        import torch

        x_title = np.ascontiguousarray(x_title, dtype=np.float32)
        x_body = np.ascontiguousarray(x_body, dtype=np.float32)
        langs_arr = np.asarray(list(langs), dtype=object)
        n = x_title.shape[0]
        if x_title.ndim != 2 or x_body.shape != x_title.shape or len(langs_arr) != n:
            raise DataError(f"training vectors: titles {x_title.shape}, bodies {x_body.shape}, {len(langs_arr)} languages")
        if not (np.isfinite(x_title).all() and np.isfinite(x_body).all()):
            raise DataError("training vectors hold NaN or inf")
        self.languages_ = sorted(set(langs_arr.tolist()))
        lang_idx = np.array([self.languages_.index(x) for x in langs_arr], dtype=np.int64)
        n_langs = len(self.languages_)

        rng = np.random.default_rng(self.seed)
        perm = rng.permutation(n)
        n_val = int(round(self.val_frac * n))
        if n_val == 1:
            raise DataError(f"training data: a validation split of {self.val_frac} gives 1 item; use more data or val_frac=0")
        val_rows, train_rows = np.sort(perm[:n_val]), np.sort(perm[n_val:])
        if train_rows.size < 2:
            raise DataError(f"training data: {train_rows.size} training item(s); need at least 2")
        self.n_train_, self.n_val_ = int(train_rows.size), int(val_rows.size)
        key = resume_key(self.get_params(), self.languages_, x_title, x_body, lang_idx)
        settings = LoopSettings(
            method=self.method, widths=tuple(int(w) for w in self.layers), final_relu=bool(self.final_relu), tower=self.tower,
            lr=self.lr, alpha=self.alpha, beta=self.beta, batch_size=self.batch_size, epochs=self.epochs, k=self.k,
            refresh_every=self.refresh_every, negatives=self.negatives, patience=self.patience,
            restore_best=bool(self.restore_best), seed=self.seed, progress=bool(self.progress),
        )
        data = LoopData(x_title, x_body, lang_idx, n_langs, train_rows, val_rows)

        prev_threads = torch.get_num_threads()
        torch.set_num_threads(self.threads or default_threads())
        try:
            tower, history, best_epoch, stopped = train_tower(settings, data, key=key, checkpoint_dir=checkpoint_dir,
                                                              on_epoch=on_epoch)
        finally:
            torch.set_num_threads(prev_threads)
        self.best_epoch_, self.stopped_early_, self.history_ = best_epoch, stopped, history
        self.params_ = params_of(tower)
        self.tower_ = tower

    # -- inference, saving and loading
    def transform(self, x_title: np.ndarray, x_body: np.ndarray) -> np.ndarray:
        """Item representations from base vectors -- the same numpy code as the saved model.

        Args:
            x_title: (n, d) base vectors of the titles.
            x_body: (n, d) base vectors of the bodies, row-aligned with ``x_title``.

        Returns:
            float32 (n, 2 * out) array ``concat(x_rt / |x_rt|, x_rb / |x_rb|)``: the tower's
            output for the title and for the body, each half L2-normalised (``out`` is the last
            layer's width, or d for the residual tower).

        Raises:
            NotFittedError: before ``fit``.
        """
        self._require_fitted()
        return represent(head_forward(self.params_, x_title, self.final_relu, self.tower),
                         head_forward(self.params_, x_body, self.final_relu, self.tower))

    def save(self, path: str | Path, *, info: Mapping[str, Any] | None = None) -> Path:
        """Write the model directory (kind ``triplet``, loadable as ``<method>:DIR`` and by
        :meth:`load`) with ``history.json`` and ``history.csv``; ``model.json`` last.

        Args:
            path: the directory (created).
            info: more info to record (dataset, timings, ...), added to the directory's info.

        Returns:
            The directory.

        Raises:
            NotFittedError: before ``fit``.
            ModelDirError: an ``info`` value JSON cannot hold, or an ``info`` key that is a
                reserved header key.
        """
        import pandas as pd

        self._require_fitted()
        hist = pd.DataFrame(self.history_)
        first = ["epoch", "train_loss", "train_triplet", "train_xl", "val_loss", "val_triplet", "val_xl"]
        hist = hist[[c for c in first if c in hist] + [c for c in hist if c not in first]]
        record = {
            "languages": self.languages_,
            "n_train": self.n_train_,
            "n_val": self.n_val_,
            "epochs_run": int(self.history_[-1]["epoch"]) if self.history_ else 0,
            "best_epoch": self.best_epoch_,
            "stopped_early": self.stopped_early_,
            "data_counts": self.data_counts_,
            "uses_cross_lingual_links": False,
            **dict(info or {}),
        }
        files = {"history.json": json.dumps(self.history_, indent=1), "history.csv": hist.to_csv(index=False)}
        return save_model(path, self.params_, hyper_parameters=self.get_params(), info=record, files=files)

    @classmethod
    def load(cls, path: str | Path) -> "Triplet":
        """A fitted estimator from a model directory written by :meth:`save` (or by the
        ``triplet`` format before the one model-directory format).

        Args:
            path: the model directory.

        Returns:
            An estimator with the saved hyper-parameters (those ``__init__`` knows) and the
            learned attributes of the directory: ``params_``, ``languages_``, ``n_train_``,
            ``n_val_``, ``best_epoch_``, ``stopped_early_``, ``data_counts_`` and ``history_``
            (from ``history.json``; empty where the directory has none). ``transform`` gives
            the vectors of the estimator that was saved.

        Raises:
            EncoderError: the directory is not a readable triplet model (naming what is wrong).
        """
        md, params = load_model(path)
        est = cls._from_saved_params(md.hyper_parameters)
        info = md.info
        est.params_ = params
        est.languages_ = list(info.get("languages", []))
        est.n_train_, est.n_val_ = info.get("n_train"), info.get("n_val")
        est.best_epoch_ = info.get("best_epoch")
        est.stopped_early_ = info.get("stopped_early")
        est.data_counts_ = info.get("data_counts")
        hist = md.path / "history.json"
        est.history_ = json.loads(hist.read_text(encoding="utf-8")) if hist.is_file() else []
        return est
