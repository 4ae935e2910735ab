"""M3L (Eq. 1) and PATR (Eq. 2) losses and in-batch hardest-negative mining (torch tensors)."""
from __future__ import annotations


def sq_dist(a, b):
    """Row-wise squared Euclidean distance of two (B, d) tensors."""
    return ((a - b) ** 2).sum(dim=-1)


def m3l_loss(anchor, pos_img, neg_img, neg_txt, *, rho: float = 4.0, alpha1: float = 0.5, alpha2: float = 1.0, eps: float = 1e-12):
    """Mean M3L loss (Eq. 1) over the batch. Ratios are computed as ``exp(rho (log d_p - log
    d_n))`` (equal to ``(d_p / d_n)^rho``, no overflow of ``d^rho`` on its own); ``eps`` keeps
    the logarithms finite."""
    import torch

    lp = torch.log(sq_dist(anchor, pos_img) + eps)
    li = torch.log(sq_dist(anchor, neg_img) + eps)
    lt = torch.log(sq_dist(anchor, neg_txt) + eps)
    return (alpha1 * torch.exp(rho * (lp - li)) + alpha2 * torch.exp(rho * (lp - lt))).mean()


def patr_loss(anchor, pos_img, neg_img, *, eta: float):
    """Mean PATR loss (Eq. 2): ``d(a, p) + max(0, eta - d(a, n))``."""
    import torch

    return (sq_dist(anchor, pos_img) + torch.clamp(eta - sq_dist(anchor, neg_img), min=0.0)).mean()


def hardest_negatives(anchor, images, image_ids):
    """Index of the hardest negative of each anchor inside the batch.

    ``anchor`` (B, d): mapped captions; ``images`` (B, d): their positive images; ``image_ids``
    (B,): image identity (items with equal ids share an image). For anchor ``i`` the result is
    the ``j`` with ``image_ids[j] != image_ids[i]`` minimising ``|anchor[i] - images[j]|^2``
    (lowest ``j`` among equals), or -1 when every item of the batch shows the anchor's image.
    No gradient flows through the choice.
    """
    import torch

    with torch.no_grad():
        # float64 and the direct per-pair formula (not the |a|^2 + |b|^2 - 2ab shortcut): equal images
        # give exactly equal distances, so ties go to the lowest index
        d = torch.cdist(anchor.detach().double(), images.detach().double(), compute_mode="donot_use_mm_for_euclid_dist") ** 2
        same = image_ids[:, None] == image_ids[None, :]
        d = d.masked_fill(same, float("inf"))
        j = torch.argmin(d, dim=1)  # first minimal index
        j[torch.isinf(d.gather(1, j[:, None]).squeeze(1))] = -1
    return j
