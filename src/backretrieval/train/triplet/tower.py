"""The siamese tower in torch (``"mlp"``: the paper's; ``"residual"``: ``x + f(x)``) and its
weights as the numpy arrays that the saved model and :func:`~backretrieval.encoders.triplet.head_forward` use."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...encoders.triplet import Params


def build_tower(d_in: int, layers: Sequence[int], final_relu: bool, kind: str = "mlp"):
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


def params_of(tower) -> Params:
    """The dense layers' weights as numpy arrays, input layer first (both tower kinds)."""
    import torch.nn as nn

    return [
        (m.weight.detach().cpu().numpy().astype(np.float32, copy=True), m.bias.detach().cpu().numpy().astype(np.float32, copy=True))
        for m in tower.modules()
        if isinstance(m, nn.Linear)
    ]

