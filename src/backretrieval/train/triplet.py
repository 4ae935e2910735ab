"""Triplet and TripletXL (Backretrieval paper, Sec. 3.2): a better cross-lingual representation
from *monolingual* title/body pairs on top of a frozen multilingual encoder.

Model. A frozen base encoder (e.g. ``use-m``) embeds an item's title and body separately; a
siamese tower -- dense layers with ReLU (default 300 -> 300, as in the paper), the same
weights for titles and bodies -- maps them to ``x_rt`` and ``x_rb``. The representation of an
item is ``concat(x_rt, x_rb)`` (each half L2-normalised, see :mod:`backretrieval.encoders.triplet`).

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

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core import BackretrievalError, DataError, atomic_write, content_hash
from ..encoders._text import default_threads
from ..encoders.triplet import METHODS, TOWERS, Params, head_forward, represent, save_model, titles_and_bodies
from ..search import l2_normalize, topk

CHECKPOINT_FILE = "checkpoint.pt"


# ----------------------------------------------------------------------------- training data
@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class TitleBodyData:
    """Monolingual training pairs: per item a language, a title and a body -- nothing else.

    There is deliberately no place for an id or a concept (``slots``: no attribute can be added).
    """

    langs: tuple[str, ...]
    titles: tuple[str, ...]
    bodies: tuple[str, ...]

    def __post_init__(self) -> None:
        n = len(self.langs)
        if len(self.titles) != n or len(self.bodies) != n:
            raise DataError(f"training data: {n} languages, {len(self.titles)} titles, {len(self.bodies)} bodies")
        for i, (lang, t, b) in enumerate(zip(self.langs, self.titles, self.bodies)):
            if not isinstance(lang, str) or not lang:
                raise DataError(f"training data: item {i} has no language")
            if not isinstance(t, str) or not isinstance(b, str):
                raise DataError(f"training data: item {i} ({lang}): title and body must be strings")
            if not t.strip() and not b.strip():
                raise DataError(f"training data: item {i} ({lang}) has neither a title nor a body")

    def __len__(self) -> int:
        return len(self.langs)

    @property
    def languages(self) -> list[str]:
        return sorted(set(self.langs))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for lang in self.langs:
            out[lang] = out.get(lang, 0) + 1
        return dict(sorted(out.items()))

    @classmethod
    def from_dataset(
        cls,
        dataset: Any,
        langs: Sequence[str] | None = None,
        *,
        max_per_lang: int | None = None,
        seed: int = 0,
    ) -> "TitleBodyData":
        """Titles and bodies (``extra["title"]`` / ``extra["body"]``) of the corpora of ``dataset``.

        Reads nothing but the language and those two columns: concepts (the cross-lingual
        links) and ids are dropped. ``max_per_lang`` keeps a seeded random subset of that many
        items per language (chosen by row position only).
        """
        langs = list(dataset.languages if langs is None else langs)
        out_l: list[str] = []
        out_t: list[str] = []
        out_b: list[str] = []
        for lang in langs:
            c = dataset[lang]
            missing = [f for f in ("title", "body") if f not in c.extra]
            if missing:
                raise DataError(
                    f"{c.dataset}/{lang}: no {' and '.join(missing)} column; Triplet training needs "
                    "title/body pairs (ddtp, emoji-cldr, or a generic file with title and body columns)"
                )
            titles, bodies = list(c.extra["title"]), list(c.extra["body"])
            rows = np.arange(len(titles))
            if max_per_lang is not None and len(rows) > max_per_lang:
                rng = np.random.default_rng([seed, int(content_hash(lang, 4), 16)])  # per language, order-free
                rows = np.sort(rng.choice(len(rows), size=int(max_per_lang), replace=False))
            for i in rows:
                t = "" if titles[i] is None else str(titles[i])
                b = "" if bodies[i] is None else str(bodies[i])
                if not t.strip() and not b.strip():
                    continue  # nothing to learn from
                out_l.append(lang)
                out_t.append(t)
                out_b.append(b)
        if not out_l:
            raise DataError("training data: no item with a title or a body")
        return cls(tuple(out_l), tuple(out_t), tuple(out_b))


def assert_no_links(data: Any) -> None:
    """Refuse training input that could carry cross-lingual links (concepts, or ids that are
    concepts): only :class:`TitleBodyData` is accepted."""
    if not isinstance(data, TitleBodyData):
        raise DataError(
            f"Triplet/TripletXL train on TitleBodyData only (languages, titles, bodies), got "
            f"{type(data).__name__}; build it with TitleBodyData.from_dataset(), which drops ids and "
            "concepts -- no cross-lingual link may be used in training"
        )
    for forbidden in ("concepts", "concept", "ids"):
        if hasattr(data, forbidden):  # cannot happen with slots; kept as the explicit guard
            raise DataError(f"training data carries {forbidden!r}: cross-lingual links are not allowed in training")


def embed_title_body(
    data: TitleBodyData, base: str, *, progress: bool = False, base_options: Mapping[str, Any] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Base-encoder vectors of every title and body (through the embedding cache), in data order.

    The same empty-title / empty-body rule as at inference (the other field is used)."""
    from ..encoders.base import get_text_encoder
    from ..encoders.cache import CachedTextEncoder

    assert_no_links(data)
    enc = CachedTextEncoder(get_text_encoder(base, **dict(base_options or {})), progress=progress)
    langs = np.asarray(data.langs)
    x_t = x_b = None
    for lang in data.languages:
        rows = np.flatnonzero(langs == lang)
        titles, bodies = titles_and_bodies(
            [""] * len(rows),
            {"title": [data.titles[i] for i in rows], "body": [data.bodies[i] for i in rows]},
            f"{base}/{lang} training data",
        )
        vt, vb = enc.encode(titles, lang), enc.encode(bodies, lang)
        if x_t is None:
            x_t = np.empty((len(data), vt.shape[1]), np.float32)
            x_b = np.empty((len(data), vt.shape[1]), np.float32)
        x_t[rows], x_b[rows] = vt, vb
    return x_t, x_b


# ----------------------------------------------------------------------------- losses (torch)
def cosine_distance(a, b):
    """``1 - cos(a, b)`` along the last axis (broadcasting; a zero vector has cosine 0)."""
    import torch.nn.functional as F

    return 1.0 - F.cosine_similarity(a, b, dim=-1, eps=1e-8)


def triplet_loss(x_rb, x_rt, neg, alpha: float):
    """Eq. 1 per item: ``max(0, d(x_rb, x_rt) - d(x_rb, x_rt[neg]) + alpha)``, shape (B,)."""
    import torch

    return torch.relu(cosine_distance(x_rb, x_rt) - cosine_distance(x_rb, x_rt[neg]) + alpha)


def xl_loss(x_rb, lang, x_nt, mask):
    """Eq. 2 per item, shape (B,).

    ``x_rb`` (B, D) body vectors; ``lang`` (B,) language index of each item; ``x_nt`` (B, L, K, D)
    title vectors of the neighbours of each item in each of the L languages; ``mask`` (B, L, K)
    which neighbour slots are filled. Terms whose neighbour set (own language or ``l``) is empty
    are left out.
    """
    import torch

    d = cosine_distance(x_rb[:, None, None, :], x_nt)  # (B, L, K)
    m = mask.to(d.dtype)
    cnt = m.sum(-1)  # (B, L)
    mean_d = (d * m).sum(-1) / cnt.clamp_min(1.0)
    own = mean_d.gather(1, lang[:, None])  # (B, 1)
    own_cnt = cnt.gather(1, lang[:, None])
    other = torch.ones_like(mean_d, dtype=torch.bool)
    other.scatter_(1, lang[:, None], False)
    valid = other & (cnt > 0) & (own_cnt > 0)
    return ((mean_d - own).abs() * valid.to(d.dtype)).sum(-1)


def sample_negatives(lang, generator, mode: str = "batch"):
    """Index of the negative of every item of a batch: a uniformly random *other* item.

    ``mode="batch"`` (the paper): any other item of the mini-batch, whatever its language.
    ``mode="language"``: another item of the same language in the batch (any other item when
    the batch holds no second item of that language). In mixed-language batches most "batch"
    negatives are in another language, so Eq. 1 can be lowered by pulling languages apart;
    same-language negatives remove that shortcut."""
    import torch

    b = lang.shape[0]
    if mode == "batch":
        return (torch.arange(b) + torch.randint(1, b, (b,), generator=generator)) % b
    if mode != "language":
        raise BackretrievalError(f"negatives must be 'batch' or 'language', got {mode!r}")
    score = torch.rand((b, b), generator=generator)
    other = ~torch.eye(b, dtype=torch.bool)
    same = (lang[:, None] == lang[None, :]) & other
    ok = torch.where(same.any(1, keepdim=True), same, other)
    return torch.where(ok, score, torch.full_like(score, -1.0)).argmax(1)


# ----------------------------------------------------------------------------- neighbours
def _topk_torch(q: np.ndarray, p: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest inner products per row, best first, in row blocks whose
    score matrix fits 64 MiB (torch's multi-threaded matmul and top-k)."""
    import torch

    from ..search import block_rows

    qt, pt = torch.from_numpy(q), torch.from_numpy(p)
    out = np.empty((q.shape[0], k), dtype=np.int64)
    step = block_rows(p.shape[0])
    with torch.no_grad():
        for s in range(0, q.shape[0], step):
            out[s : s + step] = torch.topk(qt[s : s + step] @ pt.T, k, dim=1, sorted=True).indices.numpy()
    return out


def find_neighbours(
    bodies: np.ndarray,
    pool_titles: np.ndarray,
    pool_lang: np.ndarray,
    query_self: np.ndarray,
    n_langs: int,
    k: int,
    *,
    backend: str = "torch",
) -> np.ndarray:
    """``(Q, L, K)`` pool indices of the K titles nearest (cosine) to each query body, per
    language; -1 where a language has too few items. A query's own pool row (``query_self``,
    -1 for none) is never its neighbour.

    ``backend="numpy"`` uses :func:`backretrieval.search.topk` (ties: lower pool index first);
    ``"torch"`` (the default, several times faster) breaks exact ties in torch's order. Exact
    ties between different titles mean equal title vectors (duplicate titles), which give the
    same loss and the same gradient whichever of them is chosen, so the choice cannot matter."""
    q = l2_normalize(bodies)
    p = l2_normalize(pool_titles)
    out = np.full((q.shape[0], n_langs, k), -1, dtype=np.int64)
    for lang in range(n_langs):
        pool_idx = np.flatnonzero(pool_lang == lang)
        if pool_idx.size == 0:
            continue
        kk = min(k + 1, pool_idx.size)
        pl = np.ascontiguousarray(p[pool_idx])
        top = topk(q, pl, kk)[1] if backend == "numpy" else _topk_torch(q, pl, kk)
        cand = pool_idx[top]  # (Q, kk)
        is_self = cand == query_self[:, None]
        take = np.argsort(is_self, axis=1, kind="stable")[:, :k]  # non-self first, in rank order
        chosen = np.take_along_axis(cand, take, axis=1)
        chosen[np.take_along_axis(is_self, take, axis=1)] = -1
        out[:, lang, : chosen.shape[1]] = chosen
    return out


# ----------------------------------------------------------------------------- the estimator
def _tower(d_in: int, layers: Sequence[int], final_relu: bool, kind: str = "mlp"):
    """The siamese tower (torch). ``"mlp"``: dense ReLU layers of the given widths (the paper's).
    ``"residual"``: ``x + f(x)``, ``f`` = the dense ReLU layers of the given widths followed by a
    linear layer back to ``d_in`` whose weights and bias start at zero -- the identity at
    initialisation (see :mod:`backretrieval.encoders.triplet`)."""
    import torch.nn as nn

    mods: list[Any] = []
    prev = d_in
    for i, width in enumerate(layers):
        mods.append(nn.Linear(prev, int(width)))
        if i < len(layers) - 1 or final_relu or kind == "residual":
            mods.append(nn.ReLU())
        prev = int(width)
    if kind == "mlp":
        return nn.Sequential(*mods)
    last = nn.Linear(prev, d_in)
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)

    class Residual(nn.Module):
        """``x + f(x)``."""

        def __init__(self, f):
            super().__init__()
            self.f = f

        def forward(self, x):
            return x + self.f(x)

    return Residual(nn.Sequential(*mods, last))


def _params_of(tower) -> Params:
    """The dense layers' weights as numpy arrays, input layer first (both tower kinds)."""
    import torch.nn as nn

    return [
        (m.weight.detach().cpu().numpy().astype(np.float32, copy=True), m.bias.detach().cpu().numpy().astype(np.float32, copy=True))
        for m in tower.modules()
        if isinstance(m, nn.Linear)
    ]


class TripletModel:
    """Triplet (``method="triplet"``) or TripletXL (``method="tripletxl"``) estimator.

    ``fit(data)`` embeds the titles and bodies of a :class:`TitleBodyData` with the frozen
    ``base`` encoder and trains; ``fit_vectors`` trains on given base vectors. Learned
    attributes: ``params_`` (numpy weights), ``history_`` (one dict per epoch: train/validation
    losses and their parts, seconds), ``best_epoch_``, ``languages_``, ``n_train_``, ``n_val_``,
    ``stopped_early_``. ``save(dir)`` writes a model directory that ``triplet:DIR`` /
    ``tripletxl:DIR`` load as a text encoder.

    ``tower="mlp"`` is the paper's tower (dense ReLU layers of widths ``layers``);
    ``tower="residual"`` is ``x + f(x)``, ``f`` = dense ReLU layers of widths ``layers`` and a
    zero-initialised linear layer back to the base dimension, so training starts at the base
    encoder's own vectors (``final_relu`` applies to the mlp tower only).
    """

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
        self.layers = tuple(int(w) for w in layers)
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

    # -- helpers
    def hyper_params(self) -> dict[str, Any]:
        keys = ("method", "base", "layers", "final_relu", "lr", "alpha", "batch_size", "epochs", "beta", "k",
                "refresh_every", "val_frac", "patience", "restore_best", "seed")
        out = {key: getattr(self, key) for key in keys}
        if self.negatives != "batch":  # not part of the key of runs made before the option existed
            out["negatives"] = self.negatives
        if self.tower != "mlp":  # likewise
            out["tower"] = self.tower
        out["layers"] = list(self.layers)
        return out

    def _check(self) -> None:
        if self.method not in METHODS:
            raise BackretrievalError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        for name in ("batch_size", "epochs", "k", "refresh_every"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise BackretrievalError(f"{name} must be a positive integer, got {v!r}")
        if self.batch_size < 2:
            raise BackretrievalError("batch_size must be at least 2 (the negative is another item of the batch)")
        if not self.layers or any(w < 1 for w in self.layers):
            raise BackretrievalError(f"layers must be positive widths, got {self.layers!r}")
        if not (self.lr > 0 and self.alpha >= 0 and self.beta >= 0):
            raise BackretrievalError("lr must be > 0, alpha and beta >= 0")
        if not 0 <= self.val_frac < 1:
            raise BackretrievalError(f"val_frac must be in [0, 1), got {self.val_frac!r}")
        if self.tower not in TOWERS:
            raise BackretrievalError(f"tower must be one of {', '.join(TOWERS)}, got {self.tower!r}")
        if self.negatives not in ("batch", "language"):
            raise BackretrievalError(f"negatives must be 'batch' or 'language', got {self.negatives!r}")
        if self.patience is not None and self.patience < 1:
            raise BackretrievalError(f"patience must be a positive integer or None, got {self.patience!r}")

    # -- fitting
    def fit(
        self,
        data: TitleBodyData,
        *,
        checkpoint_dir: str | Path | None = None,
        base_options: Mapping[str, Any] | None = None,
        on_epoch: Callable[[dict[str, Any]], None] | None = None,
    ) -> "TripletModel":
        assert_no_links(data)
        self._check()
        x_t, x_b = embed_title_body(data, self.base, progress=self.progress, base_options=base_options)
        self.data_counts_ = data.counts()
        return self.fit_vectors(x_t, x_b, data.langs, checkpoint_dir=checkpoint_dir, on_epoch=on_epoch)

    def fit_vectors(
        self,
        x_title: np.ndarray,
        x_body: np.ndarray,
        langs: Sequence[str],
        *,
        checkpoint_dir: str | Path | None = None,
        on_epoch: Callable[[dict[str, Any]], None] | None = None,
    ) -> "TripletModel":
        """Train on base-encoder vectors of titles and bodies (rows aligned with ``langs``)."""
        import torch

        self._check()
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
        xl = self.method == "tripletxl"

        prev_threads = torch.get_num_threads()
        torch.set_num_threads(self.threads or default_threads())
        try:
            return self._train(torch, x_title, x_body, lang_idx, n_langs, train_rows, val_rows, xl, checkpoint_dir, on_epoch)
        finally:
            torch.set_num_threads(prev_threads)

    def _train(self, torch, x_title, x_body, lang_idx, n_langs, train_rows, val_rows, xl, checkpoint_dir, on_epoch):
        from tqdm.auto import tqdm

        Xt_tr = torch.from_numpy(x_title[train_rows])
        Xb_tr = torch.from_numpy(x_body[train_rows])
        L_tr = torch.from_numpy(lang_idx[train_rows])
        Xt_va = torch.from_numpy(x_title[val_rows])
        Xb_va = torch.from_numpy(x_body[val_rows])
        L_va = torch.from_numpy(lang_idx[val_rows])
        n_tr, n_va = len(train_rows), len(val_rows)
        pool_lang = lang_idx[train_rows]

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            tower = _tower(x_title.shape[1], self.layers, self.final_relu, self.tower)
        opt = torch.optim.Adam(tower.parameters(), lr=self.lr)
        gen = torch.Generator().manual_seed(self.seed + 1)

        key = self._run_key(x_title, x_body, lang_idx)
        ckpt = Path(checkpoint_dir) / CHECKPOINT_FILE if checkpoint_dir is not None else None
        history: list[dict[str, Any]] = []
        best = (float("inf"), -1, None)  # (val loss, epoch, state)
        nbr_tr = nbr_va = None
        start = 0
        if ckpt is not None and ckpt.is_file():
            state = torch.load(ckpt, weights_only=True)
            if state.get("key") == key:
                tower.load_state_dict(state["model"])
                opt.load_state_dict(state["optim"])
                gen.set_state(state["gen"])
                history = json.loads(state["history"])
                best = (float(state["best_loss"]), int(state["best_epoch"]), state["best_model"])
                nbr_tr = state["nbr_tr"].numpy() if "nbr_tr" in state else None
                nbr_va = state["nbr_va"].numpy() if "nbr_va" in state else None
                start = int(state["epoch"]) + 1

        def forward_np(X) -> np.ndarray:
            with torch.no_grad():
                return tower(X).numpy()

        def refresh():
            """New neighbour sets (train: TripletXL only; validation: both methods)."""
            t_pool = forward_np(Xt_tr)
            out_tr = out_va = None
            if xl:
                out_tr = find_neighbours(forward_np(Xb_tr), t_pool, pool_lang, np.arange(n_tr), n_langs, self.k)
            if n_va:
                out_va = find_neighbours(forward_np(Xb_va), t_pool, pool_lang, np.full(n_va, -1), n_langs, self.k)
            return out_tr, out_va

        def batch_loss(xt, xb, lb, neg, nbr):
            """Mean losses of one batch: (total, triplet, xl)."""
            ht, hb = tower(xt), tower(xb)
            lt = triplet_loss(hb, ht, neg, self.alpha).mean()
            if nbr is None:
                return lt, lt, torch.zeros(())
            nb = torch.from_numpy(nbr)
            mask = nb >= 0
            flat = nb.clamp_min(0).reshape(-1)
            x_nt = tower(Xt_tr[flat]).reshape(*nb.shape, -1)
            lx = xl_loss(hb, lb, x_nt, mask).mean()
            return (lt + self.beta * lx if xl else lt), lt, lx

        def batches(order: np.ndarray):
            bs = self.batch_size
            cuts = list(range(0, len(order), bs))
            if len(cuts) > 1 and len(order) - cuts[-1] < 2:
                cuts.pop()  # a final batch of one item joins the previous batch
            for j, s in enumerate(cuts):
                e = cuts[j + 1] if j + 1 < len(cuts) else len(order)
                yield order[s:e]

        def negatives(lb, g):
            return sample_negatives(lb, g, self.negatives)

        def validate() -> dict[str, float]:
            if not n_va:
                return {}
            g = torch.Generator().manual_seed(self.seed + 2)  # the same negatives every epoch
            tot = trip = xll = 0.0
            with torch.no_grad():
                for rows in batches(np.arange(n_va)):
                    if len(rows) < 2:
                        continue
                    idx = torch.from_numpy(rows)
                    nbr = nbr_va[rows] if nbr_va is not None else None
                    # Triplet's validation loss is Eq. 1 only; its L_XL is a monitor
                    total, lt, lx = batch_loss(Xt_va[idx], Xb_va[idx], L_va[idx], negatives(L_va[idx], g), nbr)
                    tot += float(total) * len(rows)
                    trip += float(lt) * len(rows)
                    xll += float(lx) * len(rows)
            return {"val_loss": tot / n_va, "val_triplet": trip / n_va, "val_xl": xll / n_va}

        fresh = False
        if start == 0 and n_va:  # epoch 0: the untrained network, for reference (never "best")
            r0 = time.perf_counter()
            tower.eval()
            nbr_tr, nbr_va = refresh()
            fresh = True
            history.append({"epoch": 0, **validate(), "refresh_seconds": round(time.perf_counter() - r0, 3)})
        epochs_bar = tqdm(total=self.epochs, initial=start, desc=f"train {self.method}", unit="epoch", disable=not self.progress)
        self.stopped_early_ = False
        for epoch in range(start, self.epochs):
            t0 = time.perf_counter()
            refresh_s = 0.0
            stale = (xl and nbr_tr is None) or (n_va and nbr_va is None)
            if fresh:
                fresh = False  # the epoch-0 refresh serves the first epoch
            elif epoch % self.refresh_every == 0 or stale:
                r0 = time.perf_counter()
                nbr_tr, nbr_va = refresh()
                refresh_s = time.perf_counter() - r0
            order = torch.randperm(n_tr, generator=gen).numpy()
            tot = trip = xll = 0.0
            tower.train()
            n_batches = (n_tr + self.batch_size - 1) // self.batch_size
            bar = tqdm(total=n_batches, desc=f"epoch {epoch + 1}/{self.epochs}", unit="batch", leave=False, disable=not self.progress)
            for rows in batches(order):
                idx = torch.from_numpy(rows)
                neg = negatives(L_tr[idx], gen)
                total, lt, lx = batch_loss(Xt_tr[idx], Xb_tr[idx], L_tr[idx], neg, nbr_tr[rows] if xl else None)
                opt.zero_grad(set_to_none=True)
                total.backward()
                opt.step()
                tot += total.item() * len(rows)
                trip += lt.item() * len(rows)
                xll += lx.item() * len(rows)
                bar.update(1)
            bar.close()
            tower.eval()
            rec: dict[str, Any] = {
                "epoch": epoch + 1,
                "train_loss": tot / n_tr,
                "train_triplet": trip / n_tr,
                **({"train_xl": xll / n_tr} if xl else {}),
            }
            rec.update(validate())
            rec["refresh_seconds"] = round(refresh_s, 3)
            rec["seconds"] = round(time.perf_counter() - t0, 3)
            history.append(rec)
            improved = n_va and rec["val_loss"] < best[0]
            if improved:
                best = (rec["val_loss"], epoch + 1, {k: v.detach().clone() for k, v in tower.state_dict().items()})
            if ckpt is not None:
                self._save_checkpoint(torch, ckpt, key, epoch, tower, opt, gen, history, best, nbr_tr, nbr_va)
            epochs_bar.set_postfix({k: f"{rec[k]:.4f}" for k in ("train_loss", "val_loss") if k in rec})
            epochs_bar.update(1)
            if on_epoch is not None:
                on_epoch(rec)
            if self.patience is not None and n_va and epoch + 1 - best[1] >= self.patience:
                self.stopped_early_ = True
                break
        epochs_bar.close()
        if self.restore_best and n_va and best[2] is not None:
            tower.load_state_dict(best[2])
            self.best_epoch_ = best[1]
        else:
            self.best_epoch_ = int(history[-1]["epoch"])
        self.history_ = history
        self.params_ = _params_of(tower)
        self._tower = tower
        return self

    def _run_key(self, x_title: np.ndarray, x_body: np.ndarray, lang_idx: np.ndarray) -> str:
        hp = {k: v for k, v in self.hyper_params().items() if k != "epochs"}  # more epochs may resume
        data = content_hash(x_title.tobytes() + x_body.tobytes() + lang_idx.tobytes() + "\0".join(self.languages_).encode())
        return content_hash(json.dumps(hp, sort_keys=True) + data)

    @staticmethod
    def _save_checkpoint(torch, path, key, epoch, tower, opt, gen, history, best, nbr_tr, nbr_va) -> None:
        state = {
            "key": key,
            "epoch": epoch,
            "model": tower.state_dict(),
            "optim": opt.state_dict(),
            "gen": gen.get_state(),
            "history": json.dumps(history),
            "best_loss": float(best[0]),
            "best_epoch": int(best[1]),
            "best_model": best[2] if best[2] is not None else tower.state_dict(),
        }
        if nbr_tr is not None:
            state["nbr_tr"] = torch.from_numpy(nbr_tr)
        if nbr_va is not None:
            state["nbr_va"] = torch.from_numpy(nbr_va)
        with atomic_write(path, "wb") as fh:
            torch.save(state, fh)

    # -- inference and saving
    def transform_vectors(self, x_title: np.ndarray, x_body: np.ndarray) -> np.ndarray:
        """Item representations from base vectors -- the same numpy code as the saved encoder."""
        self._require_fitted()
        return represent(head_forward(self.params_, x_title, self.final_relu, self.tower),
                         head_forward(self.params_, x_body, self.final_relu, self.tower))

    def _require_fitted(self) -> None:
        if not hasattr(self, "params_"):
            raise BackretrievalError("the model is not fitted yet: call fit() first")

    def save(self, model_dir: str | Path, *, meta: Mapping[str, Any] | None = None) -> Path:
        """Write ``model.json`` + ``weights.npz`` (loadable as ``<method>:DIR``), ``history.json``
        and ``history.csv``."""
        import pandas as pd

        from ..core import atomic_write_text

        self._require_fitted()
        model_dir = Path(model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(model_dir / "history.json", json.dumps(self.history_, indent=1))
        hist = pd.DataFrame(self.history_)
        first = ["epoch", "train_loss", "train_triplet", "train_xl", "val_loss", "val_triplet", "val_xl"]
        hist = hist[[c for c in first if c in hist] + [c for c in hist if c not in first]]
        atomic_write_text(model_dir / "history.csv", hist.to_csv(index=False))
        cfg = {
            "method": self.method,
            "base": self.base,
            "final_relu": self.final_relu,
            "tower": self.tower,
            "hyper": {**self.hyper_params(), "negatives": self.negatives},
            "languages": self.languages_,
            "n_train": self.n_train_,
            "n_val": self.n_val_,
            "epochs_run": int(self.history_[-1]["epoch"]) if self.history_ else 0,
            "best_epoch": self.best_epoch_,
            "stopped_early": self.stopped_early_,
            "data_counts": getattr(self, "data_counts_", None),
            "uses_cross_lingual_links": False,
            **dict(meta or {}),
        }
        save_model(model_dir, cfg, self.params_)  # model.json last: marks a complete directory
        return model_dir
