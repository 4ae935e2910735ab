"""Text encoding as Ray Data batch inference: any registered text model, in Ray actors.

:class:`RayDataTextEncoder` looks like the model it wraps (same ``name``, ``version``, ``dim``,
``languages``, so the embedding cache keys do not change) but ``encode`` sends the texts through
``ray.data.from_items(...).map_batches(_Encode, concurrency=...)``: each actor builds the model
from its spec once and embeds batches; rows come back with their position and are put in the
caller's order. Models that must be fitted on the evaluated texts (``tfidf-char``, PCA variants)
are not wrapped: they run where the driver is.

Ray is imported only when this module is used; the caller starts or connects to Ray first
(``backretrieval.analysis.ray_executor.ray_init``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import check_embeddings
from .registry import get_text_encoder


class _Encode:
    """Ray Data actor: one model per actor, built from its spec."""

    def __init__(self, spec: str, lang: str):
        self.model = get_text_encoder(spec)
        self.lang = lang

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        vecs = self.model.encode([str(t) for t in batch["text"]], self.lang)
        return {"pos": batch["pos"], "vec": np.asarray(vecs, dtype=np.float32)}


class RayDataTextEncoder:
    """``encode`` runs on Ray Data; everything else is the wrapped model's."""

    def __init__(self, spec: str, *, batch_size: int = 256, concurrency: int | None = None):
        self.local = get_text_encoder(spec)
        self.spec = spec
        self.batch_size = batch_size
        self.concurrency = concurrency

    def __getattr__(self, name: str) -> Any:  # name, version, dim, languages, cacheable, ...
        return getattr(self.local, name)

    def encode(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None) -> np.ndarray:
        """Embed ``texts`` as Ray Data batches; rows come back in the caller's order."""
        import ray

        texts = list(texts)
        if not texts:
            return self.local.encode(texts, lang, ids=ids)
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        ds = ray.data.from_items([{"pos": i, "text": t} for i, t in enumerate(texts)])
        out = ds.map_batches(
            _Encode,
            fn_constructor_args=(self.spec, lang),
            batch_size=self.batch_size,
            concurrency=self.concurrency or cpus,
            num_cpus=1,
            batch_format="numpy",
        )
        vecs: np.ndarray | None = None
        for batch in out.iter_batches(batch_size=4096, batch_format="numpy"):
            if vecs is None:
                vecs = np.empty((len(texts), batch["vec"].shape[1]), dtype=np.float32)
            vecs[batch["pos"]] = batch["vec"]
        return check_embeddings(vecs, len(texts), f"{self.spec}/{lang} (Ray Data)", ids)
