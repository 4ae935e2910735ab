"""The Triplet / TripletXL losses in torch (paper Eq. 1 and Eq. 2) and the in-batch negatives."""
from __future__ import annotations

from ...core import BackretrievalError


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


