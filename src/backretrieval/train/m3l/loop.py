"""The M3L / PATR training loop: epochs of shuffled mini-batches with online hardest negatives,
validation Recall@K after every epoch, model selection and early stopping.

Kept apart from :mod:`.estimator` (parameters, data, saving, loading) so each file does one job:
the loop takes one :class:`LoopSettings` (built by the estimator from its checked parameters)
and one :class:`LoopData` (standardised caption embeddings, image ids and features), and
returns what it learned (:class:`LoopResult`)."""
from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...core import BackretrievalError
from ...metrics import retrieval_ranks
from .validation import recall_summary
from .losses import hardest_negatives, m3l_loss, patr_loss, sq_dist
from .model import build_network, init_last_block


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """What the loop does: the :class:`~.estimator.M3L` parameters it reads (the estimator states
    the defaults; this object has none).

    Attributes:
        loss: ``"m3l"`` (Eq. 1) or ``"patr"`` (Eq. 2).
        widths: the three blocks' output widths (the two hidden widths and the image dimension).
        dropout: the three blocks' dropout rates.
        init: the last block's initialisation (:func:`.model.init_last_block`).
        rho, alpha1, alpha2: M3L's exponent and weights.
        eta: PATR's margin as used (None for M3L).
        lr, beta1, beta2: Adam's learning rate and moment decays.
        batch_size, epochs, patience, select, seed: as the estimator's parameters.
        progress: show a progress bar.
    """

    loss: str
    widths: tuple[int, int, int]
    dropout: tuple[float, float, float]
    init: str
    rho: float
    alpha1: float
    alpha2: float
    eta: float | None
    lr: float
    beta1: float
    beta2: float
    batch_size: int
    epochs: int
    patience: int | None
    select: str
    seed: int
    progress: bool


@dataclasses.dataclass(frozen=True)
class LoopData:
    """What the loop trains and validates on.

    Attributes:
        x_train: float32 (n, in_dim) standardised embeddings of the training captions.
        img_train: int64 (n,) image index (into ``features``) of each training caption.
        features: float32 (n_images, image_dim) features of every image.
        x_val: float32 standardised embeddings of the validation captions (None: no validation).
        img_val: int64 image index of each validation caption (None: no validation).
        val_images: the image indices of the validation gallery.
        val_pos: int64 (n_images,) position of an image inside the validation gallery (-1: none).
    """

    x_train: np.ndarray
    img_train: np.ndarray
    features: np.ndarray
    x_val: np.ndarray | None
    img_val: np.ndarray | None
    val_images: np.ndarray
    val_pos: np.ndarray


@dataclasses.dataclass(frozen=True)
class LoopResult:
    """What the loop learned: the network (the kept epoch's weights, in eval mode), one history
    record per epoch (epoch 0 = the untrained network), the kept epoch and the last block's
    initial scale (:func:`.model.init_last_block`)."""

    net: Any
    history: list[dict[str, Any]]
    best_epoch: int
    init_scale: float


def train_mapping(settings: LoopSettings, data: LoopData, say: Callable[[str], None]) -> LoopResult:
    """Train the mapping with ``settings`` on ``data``.

    Args:
        settings: the loop's settings (:class:`LoopSettings`).
        data: the captions, images and validation gallery (:class:`LoopData`).
        say: receives one line per epoch.

    Returns:
        The :class:`LoopResult`.

    Raises:
        BackretrievalError: a loss that becomes NaN/inf.
    """
    import torch
    from tqdm.auto import tqdm

    st = settings
    x_tr, img_tr, feats = data.x_train, data.img_train, data.features
    x_va, img_va = data.x_val, data.img_val
    use_val = x_va is not None
    torch.manual_seed(int(st.seed))
    net = build_network(x_tr.shape[1], list(st.widths), tuple(st.dropout))
    init_scale = init_last_block(net, x_tr, feats[img_tr], st.init)
    opt = torch.optim.Adam(net.parameters(), lr=float(st.lr), betas=(float(st.beta1), float(st.beta2)))
    X = torch.from_numpy(x_tr)
    IMG = torch.from_numpy(feats)
    ids_tr = torch.from_numpy(img_tr)
    rng = np.random.default_rng(int(st.seed))

    def validate() -> dict[str, float]:
        if not use_val:
            return {}
        net.eval()
        with torch.no_grad():
            out = net(torch.from_numpy(x_va)).numpy()
        net.train()
        ranks = retrieval_ranks(out, feats[data.val_images], data.val_pos[img_va], sim="euclidean")
        return {f"val_{k}": v for k, v in recall_summary(ranks).items()}

    t0 = time.perf_counter()
    history = [{"epoch": 0, "loss": None, **validate(), "seconds": 0.0}]
    say(epoch_line(history[-1]))
    best_state, best_key, best_epoch, since_best = None, None, 0, 0
    if use_val:
        best_state, best_key = copy.deepcopy(net.state_dict()), val_key(history[-1])
    bs = int(st.batch_size)
    bar = tqdm(range(1, int(st.epochs) + 1), desc=f"train {st.loss}", unit="epoch", disable=not st.progress)
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
            if st.loss == "m3l":
                loss = m3l_loss(a, p, pos[jn], anchor[jn], rho=float(st.rho), alpha1=float(st.alpha1), alpha2=float(st.alpha2))
            else:
                loss = patr_loss(a, p, pos[jn], eta=st.eta)
                with torch.no_grad():
                    active += int((sq_dist(a, pos[jn]) < st.eta).sum())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if not math.isfinite(float(loss.detach())):
                raise BackretrievalError(f"{st.loss}: the loss became {float(loss)} in epoch {epoch}; lower the learning rate")
            total += float(loss.detach()) * int(keep.sum())
            n_used += int(keep.sum())
        rec = {"epoch": epoch, "loss": total / max(1, n_used), **validate(), "seconds": round(time.perf_counter() - t0, 2)}
        if st.loss == "patr":
            rec["hinge_active"] = active / max(1, n_used)
        history.append(rec)
        say(epoch_line(rec))
        if use_val:
            bar.set_postfix(val_t2i10=f"{rec['val_t2i@10']:.3f}", loss=f"{rec['loss']:.4g}")
            key = val_key(rec)
            if key > best_key:
                best_state, best_key, best_epoch, since_best = copy.deepcopy(net.state_dict()), key, epoch, 0
            else:
                since_best += 1
            if st.patience is not None and since_best >= int(st.patience):
                say(f"early stop after epoch {epoch}: no better validation R@10 for {st.patience} epochs")
                break
    bar.close()
    if st.select == "best" and best_state is not None:
        net.load_state_dict(best_state)
        kept = best_epoch
    else:
        kept = history[-1]["epoch"]
    net.eval()
    return LoopResult(net=net, history=history, best_epoch=kept, init_scale=init_scale)


def val_key(rec: Mapping[str, Any]) -> tuple[float, float]:
    """Model selection: validation R@10, ties broken by MRR (then the earlier epoch wins)."""
    return (rec["val_t2i@10"], rec["val_t2i_mrr"])


def epoch_line(rec: Mapping[str, Any]) -> str:
    """One log line of an epoch's history record."""
    parts = [f"epoch {rec['epoch']:>3}"]
    if rec.get("loss") is not None:
        parts.append(f"loss {rec['loss']:.4g}")
    for k in ("val_t2i@1", "val_t2i@5", "val_t2i@10"):
        if k in rec:
            parts.append(f"{k} {rec[k]:.3f}")
    if "hinge_active" in rec:
        parts.append(f"hinge active {rec['hinge_active']:.2f}")
    return ", ".join(parts)
