"""Text encoding as Ray Data batch inference: any registered text model, in Ray actors.

:class:`RayDataTextEncoder` looks like the model it wraps (same ``name``, ``version``, ``dim``,
``languages``, so the embedding cache keys do not change) but ``encode`` sends the texts through
``ray.data.from_items(...).map_batches(_Encode, concurrency=...)``: each actor builds the model
from its spec once and embeds batches; rows come back with their position and are put in the
caller's order, with the id of the node that embedded them (:attr:`RayDataTextEncoder.node_rows`).
Models that must be fitted on the evaluated texts (``tfidf-char``, PCA variants)
are not wrapped: they run where the driver is.

Ray is imported only when this module is used; the caller starts or connects to Ray first
(``backretrieval.analysis.executors.ray.ray_init``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import check_embeddings
from .registry import get_text_encoder


class _Encode:
    """Ray Data actor: one model per actor, built from the class's ``spec`` (see :func:`_encoder_class`)."""

    spec = ""
    lang = ""

    def __init__(self):
        self.model = get_text_encoder(self.spec)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import ray

        vecs = self.model.encode([str(t) for t in batch["text"]], self.lang)
        node = np.array([ray.get_runtime_context().get_node_id()] * len(batch["pos"]), dtype=object)
        return {"pos": batch["pos"], "vec": np.asarray(vecs, dtype=np.float32), "node": node}


class RayDataTextEncoder:
    """``encode`` runs on Ray Data; everything else is the wrapped model's.

    Attributes:
        node_rows: node id -> how many texts that node embedded (over every ``encode`` call).
    """

    on_this_machine = False  # its texts are encoded on the cluster: no throughput of this machine (.prices)

    def __init__(self, spec: str, *, batch_size: int = 256, concurrency: int | None = None):
        self.local = get_text_encoder(spec)
        self.spec = spec
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.node_rows: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:  # name, version, dim, languages, cacheable, ...
        return getattr(self.local, name)

    def encode(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None) -> np.ndarray:
        """Embed ``texts`` as Ray Data batches; rows come back in the caller's order.

        Connected through Ray Client (``ray://``), where Ray Data cannot run in the driver, the
        pipeline runs in one Ray task on the cluster, which returns the vectors.
        """
        import ray

        texts = list(texts)
        if not texts:
            return self.local.encode(texts, lang, ids=ids)
        args = (self.spec, texts, lang, self.batch_size, self.concurrency)
        if ray.util.client.ray.is_connected():
            vecs, node_rows = ray.get(ray.remote(num_cpus=0, max_retries=3)(encode_pipeline).remote(*args))
        else:
            vecs, node_rows = encode_pipeline(*args)
        for nid, k in node_rows.items():
            self.node_rows[nid] = self.node_rows.get(nid, 0) + k
        return check_embeddings(vecs, len(texts), f"{self.spec}/{lang} (Ray Data)", ids)


def _encoder_class(spec: str, lang: str) -> type:
    """An :class:`_Encode` subclass holding ``spec`` and ``lang`` (shipped with the class, so
    the actors take no constructor arguments that Ray would keep in the object store)."""
    return type("_EncodeSpec", (_Encode,), {"spec": spec, "lang": lang, "__module__": __name__})


def encode_pipeline(spec: str, texts: list[str], lang: str, batch_size: int,
                    concurrency: int | None) -> tuple[np.ndarray | None, dict[str, int]]:
    """Embed ``texts`` with model ``spec`` on Ray Data (``concurrency`` actors, default one per
    cluster CPU), in a process attached to the cluster.

    Returns:
        The vectors in the order of ``texts``, and node id -> how many texts it embedded.
    """
    import ray

    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    ds = ray.data.from_items([{"pos": i, "text": t} for i, t in enumerate(texts)])
    out = ds.map_batches(
        _encoder_class(spec, lang),
        batch_size=batch_size,
        compute=ray.data.ActorPoolStrategy(size=concurrency or cpus),
        num_cpus=1,
        batch_format="numpy",
    )
    vecs: np.ndarray | None = None
    node_rows: dict[str, int] = {}
    for batch in out.iter_batches(batch_size=4096, batch_format="numpy"):
        if vecs is None:
            vecs = np.empty((len(texts), batch["vec"].shape[1]), dtype=np.float32)
        vecs[batch["pos"]] = batch["vec"]
        nodes, counts = np.unique(batch["node"].astype(str), return_counts=True)
        for nid, k in zip(nodes.tolist(), counts.tolist()):
            node_rows[nid] = node_rows.get(nid, 0) + k
    return vecs, node_rows
