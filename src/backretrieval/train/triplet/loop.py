"""The Triplet / TripletXL training loop: epochs of shuffled mini-batches, neighbour refreshes,
validation, best-epoch tracking, early stopping and the per-epoch checkpoint (resumable).

Kept apart from :mod:`.estimator` (parameters, data, saving) so each file does one job: the
loop takes one :class:`LoopSettings` (built by the estimator from its checked parameters) and one
:class:`LoopData` (the vectors and the split), and returns what it learned."""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...core import atomic_write
from .losses import sample_negatives, triplet_loss, xl_loss
from .neighbours import find_neighbours
from .tower import build_tower

CHECKPOINT_FILE = "checkpoint.pt"


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """What the loop does: the :class:`~.estimator.Triplet` parameters it reads, checked and
    converted (the estimator states the defaults; this object has none).

    Attributes:
        method: ``"triplet"`` or ``"tripletxl"`` (Eq. 1 + beta * Eq. 2).
        widths: the tower's layer widths.
        final_relu, tower: the tower's shape (see :func:`.tower.build_tower`).
        lr: Adam's learning rate; alpha: Eq. 1's margin; beta: the weight of Eq. 2.
        batch_size, epochs, k, refresh_every, negatives, patience, restore_best, seed: as the
            estimator's parameters of the same names.
        progress: show progress bars.
    """

    method: str
    widths: tuple[int, ...]
    final_relu: bool
    tower: str
    lr: float
    alpha: float
    beta: float
    batch_size: int
    epochs: int
    k: int
    refresh_every: int
    negatives: str
    patience: int | None
    restore_best: bool
    seed: int
    progress: bool

    @property
    def xl(self) -> bool:
        """Train TripletXL (Eq. 1 + beta * Eq. 2)."""
        return self.method == "tripletxl"


@dataclasses.dataclass(frozen=True)
class LoopData:
    """The vectors the loop trains on and their split.

    Attributes:
        x_title, x_body: float32 (n, d) base vectors of the titles and the bodies.
        lang_idx: int64 (n,) language index of each row; n_langs: the number of languages.
        train_rows, val_rows: the row indices of the training and the validation split.
    """

    x_title: np.ndarray
    x_body: np.ndarray
    lang_idx: np.ndarray
    n_langs: int
    train_rows: np.ndarray
    val_rows: np.ndarray


def train_tower(
    settings: LoopSettings,
    data: LoopData,
    *,
    key: str,
    checkpoint_dir: str | Path | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
):
    """Train a tower with ``settings`` on ``data``.

    Args:
        settings: the loop's settings (:class:`LoopSettings`).
        data: the vectors and the split (:class:`LoopData`).
        key: the resume key (:func:`~.estimator.resume_key`); a checkpoint resumes only when
            its key is equal.
        checkpoint_dir: where ``checkpoint.pt`` is saved each epoch and resumed from (None: no
            checkpoint).
        on_epoch: called with each epoch's record.

    Returns:
        ``(tower, history, best_epoch, stopped_early)``; the tower holds the kept weights.
    """
    import torch
    from tqdm.auto import tqdm

    xl = settings.xl
    x_title, x_body, lang_idx, n_langs = data.x_title, data.x_body, data.lang_idx, data.n_langs
    train_rows, val_rows = data.train_rows, data.val_rows

    Xt_tr = torch.from_numpy(x_title[train_rows])
    Xb_tr = torch.from_numpy(x_body[train_rows])
    L_tr = torch.from_numpy(lang_idx[train_rows])
    Xt_va = torch.from_numpy(x_title[val_rows])
    Xb_va = torch.from_numpy(x_body[val_rows])
    L_va = torch.from_numpy(lang_idx[val_rows])
    n_tr, n_va = len(train_rows), len(val_rows)
    pool_lang = lang_idx[train_rows]

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        tower = build_tower(x_title.shape[1], list(settings.widths), settings.final_relu, settings.tower)
    opt = torch.optim.Adam(tower.parameters(), lr=settings.lr)
    gen = torch.Generator().manual_seed(settings.seed + 1)

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
            out_tr = find_neighbours(forward_np(Xb_tr), t_pool, pool_lang, np.arange(n_tr), n_langs, settings.k)
        if n_va:
            out_va = find_neighbours(forward_np(Xb_va), t_pool, pool_lang, np.full(n_va, -1), n_langs, settings.k)
        return out_tr, out_va

    def batch_loss(xt, xb, lb, neg, nbr):
        """Mean losses of one batch: (total, triplet, xl)."""
        ht, hb = tower(xt), tower(xb)
        lt = triplet_loss(hb, ht, neg, settings.alpha).mean()
        if nbr is None:
            return lt, lt, torch.zeros(())
        nb = torch.from_numpy(nbr)
        mask = nb >= 0
        flat = nb.clamp_min(0).reshape(-1)
        x_nt = tower(Xt_tr[flat]).reshape(*nb.shape, -1)
        lx = xl_loss(hb, lb, x_nt, mask).mean()
        return (lt + settings.beta * lx if xl else lt), lt, lx

    def batches(order: np.ndarray):
        bs = settings.batch_size
        cuts = list(range(0, len(order), bs))
        if len(cuts) > 1 and len(order) - cuts[-1] < 2:
            cuts.pop()  # a final batch of one item joins the previous batch
        for j, s in enumerate(cuts):
            e = cuts[j + 1] if j + 1 < len(cuts) else len(order)
            yield order[s:e]

    def negatives(lb, g):
        return sample_negatives(lb, g, settings.negatives)

    def validate() -> dict[str, float]:
        if not n_va:
            return {}
        g = torch.Generator().manual_seed(settings.seed + 2)  # the same negatives every epoch
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
    epochs_bar = tqdm(total=settings.epochs, initial=start, desc=f"train {settings.method}", unit="epoch", disable=not settings.progress)
    stopped_early = False
    for epoch in range(start, settings.epochs):
        t0 = time.perf_counter()
        refresh_s = 0.0
        stale = (xl and nbr_tr is None) or (n_va and nbr_va is None)
        if fresh:
            fresh = False  # the epoch-0 refresh serves the first epoch
        elif epoch % settings.refresh_every == 0 or stale:
            r0 = time.perf_counter()
            nbr_tr, nbr_va = refresh()
            refresh_s = time.perf_counter() - r0
        order = torch.randperm(n_tr, generator=gen).numpy()
        tot = trip = xll = 0.0
        tower.train()
        n_batches = (n_tr + settings.batch_size - 1) // settings.batch_size
        bar = tqdm(total=n_batches, desc=f"epoch {epoch + 1}/{settings.epochs}", unit="batch", leave=False, disable=not settings.progress)
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
            save_checkpoint(ckpt, key=key, epoch=epoch, tower=tower, opt=opt, gen=gen, history=history, best=best, nbr_tr=nbr_tr,
                            nbr_va=nbr_va)
        epochs_bar.set_postfix({k: f"{rec[k]:.4f}" for k in ("train_loss", "val_loss") if k in rec})
        epochs_bar.update(1)
        if on_epoch is not None:
            on_epoch(rec)
        if settings.patience is not None and n_va and epoch + 1 - best[1] >= settings.patience:
            stopped_early = True
            break
    epochs_bar.close()
    if settings.restore_best and n_va and best[2] is not None:
        tower.load_state_dict(best[2])
        best_epoch = best[1]
    else:
        best_epoch = int(history[-1]["epoch"])
    return tower, history, best_epoch, stopped_early


def save_checkpoint(path: Path, *, key: str, epoch: int, tower, opt, gen, history: list[dict[str, Any]], best: tuple,
                    nbr_tr: np.ndarray | None, nbr_va: np.ndarray | None) -> None:
    """Write everything a resumed run needs after ``epoch`` (atomically): weights, optimizer and
    generator states, history, the best epoch so far and the current neighbour sets."""
    import torch

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
