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


def _batches(order: np.ndarray, batch_size: int):
    """Consecutive batches of ``order``; a final batch of one item joins the previous batch."""
    cuts = list(range(0, len(order), batch_size))
    if len(cuts) > 1 and len(order) - cuts[-1] < 2:
        cuts.pop()
    for j, s in enumerate(cuts):
        e = cuts[j + 1] if j + 1 < len(cuts) else len(order)
        yield order[s:e]


class _Run:
    """One training run's state: the split's tensors, the tower, its optimizer and generator, and
    the current neighbour sets; its methods are the loop's steps."""

    def __init__(self, settings: LoopSettings, data: LoopData):
        import torch

        self.torch, self.settings, self.xl = torch, settings, settings.xl
        x_title, x_body, lang_idx = data.x_title, data.x_body, data.lang_idx
        train_rows, val_rows = data.train_rows, data.val_rows
        self.n_langs = data.n_langs
        self.Xt_tr = torch.from_numpy(x_title[train_rows])
        self.Xb_tr = torch.from_numpy(x_body[train_rows])
        self.L_tr = torch.from_numpy(lang_idx[train_rows])
        self.Xt_va = torch.from_numpy(x_title[val_rows])
        self.Xb_va = torch.from_numpy(x_body[val_rows])
        self.L_va = torch.from_numpy(lang_idx[val_rows])
        self.n_tr, self.n_va = len(train_rows), len(val_rows)
        self.pool_lang = lang_idx[train_rows]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(settings.seed)
            self.tower = build_tower(x_title.shape[1], list(settings.widths), settings.final_relu, settings.tower)
        self.opt = torch.optim.Adam(self.tower.parameters(), lr=settings.lr)
        self.gen = torch.Generator().manual_seed(settings.seed + 1)
        self.nbr_tr = self.nbr_va = None

    def resume(self, ckpt: Path | None, key: str) -> tuple[list[dict[str, Any]], tuple, int]:
        """Load the checkpoint when its key is ``key``: ``(history, best, first epoch)``."""
        history: list[dict[str, Any]] = []
        best = (float("inf"), -1, None)  # (val loss, epoch, state)
        if ckpt is None or not ckpt.is_file():
            return history, best, 0
        state = self.torch.load(ckpt, weights_only=True)
        if state.get("key") != key:
            return history, best, 0
        self.tower.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optim"])
        self.gen.set_state(state["gen"])
        self.nbr_tr = state["nbr_tr"].numpy() if "nbr_tr" in state else None
        self.nbr_va = state["nbr_va"].numpy() if "nbr_va" in state else None
        best = (float(state["best_loss"]), int(state["best_epoch"]), state["best_model"])
        return json.loads(state["history"]), best, int(state["epoch"]) + 1

    def forward_np(self, X) -> np.ndarray:
        with self.torch.no_grad():
            return self.tower(X).numpy()

    def refresh(self) -> None:
        """New neighbour sets (train: TripletXL only; validation: both methods)."""
        t_pool = self.forward_np(self.Xt_tr)
        out_tr = out_va = None
        k = self.settings.k
        if self.xl:
            out_tr = find_neighbours(self.forward_np(self.Xb_tr), t_pool, self.pool_lang, np.arange(self.n_tr), self.n_langs, k)
        if self.n_va:
            out_va = find_neighbours(self.forward_np(self.Xb_va), t_pool, self.pool_lang, np.full(self.n_va, -1), self.n_langs, k)
        self.nbr_tr, self.nbr_va = out_tr, out_va

    def batch_loss(self, xt, xb, lb, neg, nbr):
        """Mean losses of one batch: (total, triplet, xl)."""
        ht, hb = self.tower(xt), self.tower(xb)
        lt = triplet_loss(hb, ht, neg, self.settings.alpha).mean()
        if nbr is None:
            return lt, lt, self.torch.zeros(())
        nb = self.torch.from_numpy(nbr)
        mask = nb >= 0
        flat = nb.clamp_min(0).reshape(-1)
        x_nt = self.tower(self.Xt_tr[flat]).reshape(*nb.shape, -1)
        lx = xl_loss(hb, lb, x_nt, mask).mean()
        return (lt + self.settings.beta * lx if self.xl else lt), lt, lx

    def validate(self) -> dict[str, float]:
        n_va = self.n_va
        if not n_va:
            return {}
        g = self.torch.Generator().manual_seed(self.settings.seed + 2)  # the same negatives every epoch
        tot = trip = xll = 0.0
        with self.torch.no_grad():
            for rows in _batches(np.arange(n_va), self.settings.batch_size):
                if len(rows) < 2:
                    continue
                idx = self.torch.from_numpy(rows)
                nbr = self.nbr_va[rows] if self.nbr_va is not None else None
                # Triplet's validation loss is Eq. 1 only; its L_XL is a monitor
                neg = sample_negatives(self.L_va[idx], g, self.settings.negatives)
                total, lt, lx = self.batch_loss(self.Xt_va[idx], self.Xb_va[idx], self.L_va[idx], neg, nbr)
                tot += float(total) * len(rows)
                trip += float(lt) * len(rows)
                xll += float(lx) * len(rows)
        return {"val_loss": tot / n_va, "val_triplet": trip / n_va, "val_xl": xll / n_va}

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        """One epoch of shuffled mini-batches: its record's training losses."""
        from tqdm.auto import tqdm

        s, n_tr = self.settings, self.n_tr
        order = self.torch.randperm(n_tr, generator=self.gen).numpy()
        tot = trip = xll = 0.0
        self.tower.train()
        n_batches = (n_tr + s.batch_size - 1) // s.batch_size
        bar = tqdm(total=n_batches, desc=f"epoch {epoch + 1}/{s.epochs}", unit="batch", leave=False, disable=not s.progress)
        for rows in _batches(order, s.batch_size):
            idx = self.torch.from_numpy(rows)
            neg = sample_negatives(self.L_tr[idx], self.gen, s.negatives)
            total, lt, lx = self.batch_loss(self.Xt_tr[idx], self.Xb_tr[idx], self.L_tr[idx], neg,
                                            self.nbr_tr[rows] if self.xl else None)
            self.opt.zero_grad(set_to_none=True)
            total.backward()
            self.opt.step()
            tot += total.item() * len(rows)
            trip += lt.item() * len(rows)
            xll += lx.item() * len(rows)
            bar.update(1)
        bar.close()
        self.tower.eval()
        return {"epoch": epoch + 1, "train_loss": tot / n_tr, "train_triplet": trip / n_tr,
                **({"train_xl": xll / n_tr} if self.xl else {})}


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
    from tqdm.auto import tqdm

    run = _Run(settings, data)
    tower, n_va = run.tower, run.n_va
    ckpt = Path(checkpoint_dir) / CHECKPOINT_FILE if checkpoint_dir is not None else None
    history, best, start = run.resume(ckpt, key)
    fresh = False
    if start == 0 and n_va:  # epoch 0: the untrained network, for reference (never "best")
        r0 = time.perf_counter()
        tower.eval()
        run.refresh()
        fresh = True
        history.append({"epoch": 0, **run.validate(), "refresh_seconds": round(time.perf_counter() - r0, 3)})
    epochs_bar = tqdm(total=settings.epochs, initial=start, desc=f"train {settings.method}", unit="epoch", disable=not settings.progress)
    stopped_early = False
    for epoch in range(start, settings.epochs):
        t0 = time.perf_counter()
        refresh_s = 0.0
        stale = (run.xl and run.nbr_tr is None) or (n_va and run.nbr_va is None)
        if fresh:
            fresh = False  # the epoch-0 refresh serves the first epoch
        elif epoch % settings.refresh_every == 0 or stale:
            r0 = time.perf_counter()
            run.refresh()
            refresh_s = time.perf_counter() - r0
        rec = run.train_epoch(epoch)
        rec.update(run.validate())
        rec["refresh_seconds"] = round(refresh_s, 3)
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        history.append(rec)
        if n_va and rec["val_loss"] < best[0]:
            best = (rec["val_loss"], epoch + 1, {k: v.detach().clone() for k, v in tower.state_dict().items()})
        if ckpt is not None:
            save_checkpoint(ckpt, key=key, epoch=epoch, tower=tower, opt=run.opt, gen=run.gen, history=history, best=best,
                            nbr_tr=run.nbr_tr, nbr_va=run.nbr_va)
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
