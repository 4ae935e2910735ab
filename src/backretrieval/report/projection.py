"""Fig. 3/4 analog of Aggarwal & Kale (2020): a t-SNE of captions in several languages mapped
into the image space, over the image features they should land on."""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..core import DataError, atomic_write

if TYPE_CHECKING:
    from ..train.m3l import ImageTextData


def projection_figure(
    results: Sequence[tuple[str, Any]],
    data: "ImageTextData",
    langs: Sequence[str],
    path: str | Path,
    *,
    n_images: int = 40,
    n_clusters: int = 8,
    seed: int = 0,
    split: str = "test",
) -> Path:
    """Fig. 3/4 analog: t-SNE of mapped captions in several languages over the image features.

    ``results``: (panel title, text model with ``map``) per panel. ``n_images`` seeded test
    images are drawn once; their image features (``x``, coloured by a k-means clustering of the
    image features, as the paper colours by ResNet clusters) and the mapped captions of the
    same images in each of ``langs`` (one marker per language, same colour as their image) are
    embedded jointly by t-SNE, one panel per model.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.cluster import KMeans
    from sklearn.manifold import TSNE

    pool = data.images(None if split == "all" else split)
    have = set(pool.tolist())
    for lang in langs:
        have &= set(data.image_of[lang].tolist())
    pool = np.array(sorted(have), dtype=np.int64)
    if len(pool) < 3:
        raise DataError("too few images with captions in every plotted language")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(pool, size=min(n_images, len(pool)), replace=False))
    feats = data.features[chosen]
    k = min(n_clusters, len(chosen))
    colours = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(feats)
    cmap = plt.get_cmap("tab10" if k <= 10 else "tab20")
    markers = ["o", "^", "s", "D", "v", "P", "*", "<", ">", "h"]
    ncol = min(2, len(results))
    nrow = math.ceil(len(results) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 5.6 * nrow), squeeze=False)
    for ax, (title, enc) in zip(axes.ravel(), results):
        blocks, which = [feats], [("image", np.arange(len(chosen)))]
        for lang in langs:
            c = data.corpora[lang]
            first = {}
            for r, im in enumerate(data.image_of[lang].tolist()):
                first.setdefault(im, r)
            rows = [first[i] for i in chosen.tolist()]
            sub = c.subset(rows)
            blocks.append(enc.map(sub.texts, lang, ids=sub.ids))
            which.append((lang, np.arange(len(chosen))))
        allv = np.concatenate(blocks).astype(np.float64)
        xy = TSNE(n_components=2, perplexity=min(30.0, (len(allv) - 1) / 3), init="pca", random_state=seed).fit_transform(allv)
        start = 0
        for b, (name, idx) in zip(blocks, which):
            pts = xy[start : start + len(b)]
            start += len(b)
            col = [cmap(colours[i] % cmap.N) for i in idx]
            if name == "image":
                ax.scatter(pts[:, 0], pts[:, 1], c=col, marker="x", s=70, linewidths=2.0, label="image", zorder=3)
            else:
                m = markers[(langs.index(name)) % len(markers)]
                ax.scatter(pts[:, 0], pts[:, 1], c=col, marker=m, s=28, alpha=0.75, edgecolors="k", linewidths=0.3, label=f"text ({name})")
        ax.set_title(title, fontsize=11)
        ax.set_xticks([])
        ax.set_yticks([])
        leg = ax.legend(loc="best", fontsize=8, framealpha=0.8)
        for h in leg.legend_handles:
            h.set_color("0.3")
    for ax in axes.ravel()[len(results):]:
        ax.axis("off")
    fig.suptitle(
        f"t-SNE of {len(chosen)} held-out {split} images (x) and their captions mapped into the image space\n"
        f"(colour = k-means cluster of the image features, {k} clusters; marker = caption language)",
        fontsize=11,
    )
    fig.tight_layout()
    path = Path(path)
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)
    return path
