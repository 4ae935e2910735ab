"""The unit of work of the grid: one (pair, seed) sample as plain arrays (:class:`SampleTask`)
and :func:`run_sample_task`, a pure function of it that every executor runs (exact search, or
with ``EvalConfig.approx`` self-calibrating FAISS top-K lists)."""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Mapping

import numpy as np

from ...core import BackretrievalError
from ...metrics import bkr_ranks, bootstrap_row_weights, corr_bootstrap, corr_from_sides, image_side, text_side, xlr_ranks
from ...metrics.table import BY_NAME, approx_ks, known_metrics
from ...metrics.values import rank_values, text_values
from .config import EvalConfig

_BKR = BY_NAME["bkr@K"]  # its chance level is the record's bkr_chance


@dataclasses.dataclass
class SampleTask:
    """Everything one (pair, seed) sample needs, as plain arrays: the unit of work an executor
    runs (in this process, a worker process or a Ray task). ``xlr[model]`` = aligned source and
    target rows of the matching sample; ``bkr[model]`` = source and target rows of the
    non-matching sample; ``images[g]`` = the non-matching sample's image features per image model.

    Attributes:
        src, tgt: the source and target language codes.
        seed: the sample's seed; also seeds CORR's pair subsample and bootstrap.
        n: the sample size N (``bkr_chance`` = K / N; Recall@K for K > N is not reported).
        k: the K of BkR@K and hubness.
        sim: ``"cosine"``, ``"csls"`` or ``"dot"``.
        csls_k: neighbours of the CSLS penalty.
        models: the names of the models to evaluate (keys of ``xlr`` / ``bkr``), in record order.
        xlr: model -> (source, target) embeddings of the matching sample, row i of one the
            translation of row i of the other; None: the pair has no cross-lingual links.
        bkr: model -> (source, target) embeddings of the non-matching sample; None: no images.
        images: image model -> (source, target) image features of the non-matching sample.
        corr_boot: bootstrap resamples of CORR (0: none); all models share the resampling weights.
        approx: None, ``"hnsw"`` or ``"ivf"`` (see ``EvalConfig.approx``).
        approx_target: the calibration target with ``approx``.
        approx_cost_check: with ``approx``, exact search where the cost model says it is cheaper.
        model_sims: model -> the similarity its records are computed with where it is not
            ``sim`` (a serving form: ``"dot"``, see :func:`model_similarities`).
    """

    src: str
    tgt: str
    seed: int
    n: int
    k: int
    sim: str
    csls_k: int
    models: list[str]
    xlr: dict[str, tuple[np.ndarray, np.ndarray]] | None
    bkr: dict[str, tuple[np.ndarray, np.ndarray]] | None
    images: dict[str, tuple[np.ndarray, np.ndarray]]
    corr_boot: int = 0
    approx: str | None = None  # "hnsw" / "ivf": XLR@K and BkR@K from calibrated FAISS top-K lists
    approx_target: float = 0.99
    approx_cost_check: bool = True
    model_sims: dict[str, str] = dataclasses.field(default_factory=dict)

    def sim_of(self, model: str) -> str:
        """The similarity ``model``'s records are computed with.

        Args:
            model: one of :attr:`models`.

        Returns:
            Its entry of :attr:`model_sims`, else :attr:`sim`.
        """
        return self.model_sims.get(model, self.sim)

    @property
    def label(self) -> str:
        """How errors name the task: ``"en->de seed 0"``."""
        return f"{self.src}->{self.tgt} seed {self.seed}"


Run = tuple[str, str | None, dict[str, Any], dict[str, np.ndarray]]  # (model, g, values, ranks)
TaskResult = tuple[tuple[str, str, int], list[Run]]  # ((src, tgt, seed), runs)


def run_sample_task(task: SampleTask) -> TaskResult:
    """Metrics of every model of one sample, for every image model. Image-independent parts
    (XLR, hubness, the text half of CORR) are computed once per model; the image half of CORR
    once per image model. A pure function of its input.

    Args:
        task: the sample and what to compute.

    Returns:
        ``((src, tgt, seed), runs)``: one run ``(model, g, values, ranks)`` per model and image
        model ``g`` (``g`` None and one run per model when there are no images). ``values`` holds
        the record's metrics, those the metric table (:mod:`backretrieval.metrics.table`) lists
        for the route: exact search gives ``xlr@K`` / ``xlr_t2s@K`` for K in 1, 5, 10 up to N
        and ``bkr@K`` for K in 1, 5 and ``k``, each with its MRR and median rank, CORR (with
        ``corr_pairs``, ``corr_subsampled``), hubness at ``k``, ``bkr_chance`` (K / N) and
        ``seconds`` (the model's whole share of the task); with ``approx`` Recall@K for K in
        :func:`~backretrieval.metrics.table.approx_ks` and the MRR truncated at the largest, the
        calibration fields ``approx_*`` and ``approximate``, and no hubness or median ranks.
        ``ranks`` holds the per-query ranks behind them (``"xlr"``, ``"xlr_t2s"``, ``"bkr"``:
        1-based pessimistic int64 ranks; with ``approx`` float64, inf for a query not found in
        the top K) and, with ``corr_boot``, CORR's bootstrap replicates (``"corr_boot"``).
        Exact search also keeps what each query retrieved, as CSR arrays of target positions
        in its sample (every target tied for the query's best canonical score, ascending):
        ``"bkr_retrieved_offsets"`` / ``"bkr_retrieved_flat"`` (BkR's first step on the
        non-matching sample: query ``i`` retrieved ``flat[offsets[i]:offsets[i+1]]``) and
        ``"xlr_retrieved_offsets"`` / ``"xlr_retrieved_flat"`` (the nearest targets on the
        matching sample).
    """
    if task.approx is not None:
        return _run_approx_task(task)
    boot = task.corr_boot if task.bkr is not None else 0
    image_sides = (
        {g: image_side(si, ti, seed=task.seed, keep_order=boot > 0) for g, (si, ti) in task.images.items()}
        if task.bkr is not None
        else {}
    )
    # the CORR bootstrap resamples every model with the same weights, so all text halves are needed at once
    text_sides = {m: text_side(*task.bkr[m], seed=task.seed, keep_order=True, sim=_corr_sim(task.sim_of(m)))
                  for m in task.models} if boot else {}
    out: list[Run] = []
    for model in task.models:
        t0 = time.perf_counter()
        opts = {"sim": task.sim_of(model), "csls_k": task.csls_k}
        shared: dict[str, Any] = {}
        shared_ranks: dict[str, np.ndarray] = {}
        if task.xlr is not None:
            fwd, bwd, offsets, flat = xlr_ranks(*task.xlr[model], **opts, return_nearest=True)
            shared_ranks["xlr"], shared_ranks["xlr_t2s"] = fwd, bwd
            shared_ranks["xlr_retrieved_offsets"], shared_ranks["xlr_retrieved_flat"] = offsets, flat
            for source in ("xlr", "xlr_t2s"):
                shared.update(rank_values(source, shared_ranks[source], task.n, task.k))
        if task.bkr is None:
            shared["seconds"] = round(time.perf_counter() - t0, 4)
            out.append((model, None, shared, shared_ranks))
            continue
        st, tt = task.bkr[model]
        shared.update(text_values(st, tt, task.k, **opts))
        text_corr = text_sides[model] if boot else text_side(st, tt, seed=task.seed, sim=_corr_sim(opts["sim"]))
        for g, (si, ti) in task.images.items():
            values, ranks = dict(shared), dict(shared_ranks)
            ranks["bkr"], ranks["bkr_retrieved_offsets"], ranks["bkr_retrieved_flat"] = bkr_ranks(
                st, tt, si, ti, **opts, return_ties=True)
            values.update(rank_values("bkr", ranks["bkr"], task.n, task.k))
            values.update(corr_from_sides(text_corr, image_sides[g]))
            values["bkr_chance"] = _BKR.chance(task.k, task.n)
            out.append((model, g, values, ranks))
        seconds = round(time.perf_counter() - t0, 4)  # the model's whole share of the task
        for _, _, values, _ in out[len(out) - len(task.images):]:
            values["seconds"] = seconds
    if boot:
        weights = bootstrap_row_weights(task.n, boot, task.seed)
        n_src, n_tgt = len(task.bkr[task.models[0]][0]), len(task.bkr[task.models[0]][1])
        reps = {g: corr_bootstrap(text_sides, image_sides[g], n_src, n_tgt, weights) for g in task.images}
        for model, g, _, ranks in out:
            ranks["corr_boot"] = reps[g][model]
    return (task.src, task.tgt, task.seed), out


def _corr_sim(sim: str) -> str:
    """CORR's text distances for a record of similarity ``sim``: cosine (also under CSLS), or the
    raw dot product of a serving form's codes."""
    return "dot" if sim == "dot" else "cosine"


def model_similarities(cfg: EvalConfig, encoders: Mapping[str, Any]) -> dict[str, str]:
    """The similarity of each model whose records are not computed with ``cfg.sim``: a serving
    form (a model with ``scoring = "dot"``: ``use-m@int8``, ``use-m@binary``) is ranked by the
    raw dot product of its codes, as a vector store ranks it (the integer dot product of int8
    codes; for ±1 sign bits ``d - 2 * hamming``, the Hamming order). Checked before any work.

    Args:
        cfg: the configuration (its ``sim`` and ``approx``).
        encoders: model name -> its text model.

    Returns:
        model name -> ``"dot"``, for the serving forms.

    Raises:
        BackretrievalError: a serving form with ``sim="csls"`` or with ``approx`` (naming it).
    """
    out = {}
    for name, enc in encoders.items():
        if getattr(enc, "scoring", "cosine") != "dot":
            continue
        form = getattr(enc, "form", None) or "quantised"
        why = (f"{name} is a serving form ({form} codes), ranked by the dot product of its codes as a vector store "
               "ranks them")
        if cfg.approx is not None:
            raise BackretrievalError(f"{why}; approximate search (--approx) ranks float vectors by cosine: "
                                     f"evaluate {name} with exact search (no --approx)")
        if cfg.sim == "csls":
            raise BackretrievalError(f"{why}; CSLS (--sim csls) rescales cosine similarities, which a vector store "
                                     f"of {form} codes does not compute: evaluate {name} with --sim cosine")
        out[name] = "dot"
    return out


APPROX_METHODS = ("hnsw", "ivf")
APPROX_CHECK_SAMPLE = 1000  # queries of each search's self-check (seeded by the sample's seed)
# the metrics the approximate route does not compute (exact search only), by the metric table
APPROX_NOT_COMPUTED = known_metrics(approx=False)


def check_approx(cfg: EvalConfig) -> None:
    """``cfg.approx`` is a known method, its target in (0, 1], the similarity cosine, and FAISS installed.

    Args:
        cfg: a configuration with ``approx`` set.

    Raises:
        BackretrievalError: naming the value that is wrong.
    """
    if cfg.approx not in APPROX_METHODS:
        raise BackretrievalError(f"approximate search {cfg.approx!r}: use one of {', '.join(APPROX_METHODS)}")
    if not (isinstance(cfg.approx_target, (int, float)) and 0 < cfg.approx_target <= 1):
        raise BackretrievalError(f"approximate search target agreement {cfg.approx_target!r} must be in (0, 1]")
    if cfg.sim != "cosine":
        raise BackretrievalError(f"approximate search ranks by cosine only; similarity {cfg.sim!r} needs exact search")
    import importlib.util

    if importlib.util.find_spec("faiss") is None:
        raise BackretrievalError("approximate search needs FAISS: pip install 'backretrieval[search]' (or: pip install faiss-cpu)")


def _approx_options(seed: int) -> Any:
    from ...search.faiss_backend import FaissOptions

    return FaissOptions(seed=seed, threads=1)


def approx_versions() -> dict[str, str]:
    """What an approximate record was computed under besides its inputs: the installed FAISS,
    the index options (:class:`~backretrieval.search.faiss_backend.FaissOptions` as the tasks
    build them; the seed is the sample's) and the self-check's sample. Part of the record keys
    with ``EvalConfig.approx``.

    Returns:
        ``{"faiss-cpu": version, "approx index": "m=32,...", "approx check": "tuning sample=1000,held-out sample=1000,..."}``.
    """
    from ...core import env

    opts = dataclasses.asdict(_approx_options(0))
    opts.pop("seed")
    return {
        **env.versions_of(("faiss-cpu",)),
        "approx index": ",".join(f"{k}={v}" for k, v in sorted(opts.items())),
        "approx check": f"tuning sample={APPROX_CHECK_SAMPLE},held-out sample={APPROX_CHECK_SAMPLE},seed=sample,cost model=counted distances",
    }


def _found_ranks(found_at: np.ndarray) -> np.ndarray:
    """Per-query ranks from positions within the top K found (0: not found -> rank inf), so that
    ``hits(ranks, K')`` is exact for every K' <= K and ``1 / rank`` is the MRR truncated at K."""
    r = np.asarray(found_at, dtype=np.float64)
    r[r == 0] = np.inf
    return r


def _calibration_fields(result: dict[str, Any], renames: dict[str, str]) -> dict[str, Any]:
    """The self-check fields of an approximate result, their search prefixes renamed for a record."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        if key.endswith("found_at"):
            continue
        for old, new in renames.items():
            if key.startswith(old):
                v = [list(t) for t in value] if key.endswith("calibration_tried") else value
                out[new + key[len(old):]] = v
    return out


def _run_approx_task(task: SampleTask) -> TaskResult:
    """:func:`run_sample_task` with ``--approx``: XLR@K and BkR@K (and MRR truncated at K) from
    the positions found in self-calibrated FAISS top-K lists (:mod:`backretrieval.metrics.approx`),
    CORR exact (all pairs up to its 4M-pair subsample); no hubness, no median ranks. FAISS runs single-threaded (a
    parallel HNSW build depends on thread timing), so the records do not depend on the thread
    count; FAISS's thread count is restored afterwards."""
    import faiss

    before = faiss.omp_get_max_threads()
    try:
        return _approx_runs(task)
    finally:
        faiss.omp_set_num_threads(before)


def _approx_runs(task: SampleTask) -> TaskResult:
    from ...metrics.approx import bkr_approx, xlr_approx

    ks = approx_ks(task.n, task.k)
    depth = max(ks)
    common = {"method": task.approx, "target_agreement": task.approx_target, "seed": task.seed,
              "options": _approx_options(task.seed), "check_sample": APPROX_CHECK_SAMPLE, "found_at": True,
              "cost_check": task.approx_cost_check}
    image_sides = {g: image_side(si, ti, seed=task.seed) for g, (si, ti) in task.images.items()} if task.bkr else {}
    out: list[Run] = []
    for model in task.models:
        t0 = time.perf_counter()
        shared: dict[str, Any] = {"approx": task.approx, "approx_target": task.approx_target,
                                  "approx_cost_check": task.approx_cost_check}
        shared_ranks: dict[str, np.ndarray] = {}
        flags = []
        if task.xlr is not None:
            x = xlr_approx(*task.xlr[model], ks, both_directions=True, **common)
            shared_ranks["xlr"], shared_ranks["xlr_t2s"] = _found_ranks(x["found_at"]), _found_ranks(x["t2s_found_at"])
            for source in ("xlr", "xlr_t2s"):
                shared.update(rank_values(source, shared_ranks[source], task.n, task.k, depth))
            shared.update(_calibration_fields(x, {"text_": "approx_xlr_", "t2s_": "approx_xlr_t2s_"}))
            flags.append(bool(x["approximate"]))
        if task.bkr is None:
            shared["approximate"] = any(flags)
            shared["seconds"] = round(time.perf_counter() - t0, 4)
            out.append((model, None, shared, shared_ranks))
            continue
        st, tt = task.bkr[model]
        text_corr = text_side(st, tt, seed=task.seed)
        for g, (si, ti) in task.images.items():
            values, ranks = dict(shared), dict(shared_ranks)
            b = bkr_approx(st, tt, si, ti, ks, **common)
            ranks["bkr"] = _found_ranks(b["found_at"])
            values.update(rank_values("bkr", ranks["bkr"], task.n, task.k, depth))
            values.update(_calibration_fields(b, {"text_": "approx_bkr_text_", "image_": "approx_bkr_image_"}))
            values["approximate"] = any(flags) or bool(b["approximate"])
            values.update(corr_from_sides(text_corr, image_sides[g]))
            values["bkr_chance"] = task.k / task.n
            out.append((model, g, values, ranks))
        seconds = round(time.perf_counter() - t0, 4)
        for _, _, values, _ in out[len(out) - len(task.images):]:
            values["seconds"] = seconds
    return (task.src, task.tgt, task.seed), out
