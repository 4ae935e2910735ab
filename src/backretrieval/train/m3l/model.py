"""The M3L/PATR text-to-image network, the input standardisation and the last block's initialisation."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ...core import BackretrievalError, DataError


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
