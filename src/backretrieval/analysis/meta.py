"""Meta-evaluation (Backretrieval paper, Section 3.1, Table 1 and Fig. 2): which candidate proxy
orders models the way the ground truth XLR does?

The candidates are metrics of the metric table marked ``candidate`` (they need no ground truth):
by default BkR@K and the CORR baseline, the paper's question; ``meta --candidates`` judges any of
them. For every language pair and seed the models are data points; Pearson and Spearman of each
candidate vs XLR are computed across models, then averaged over seeds (mean and sd). A candidate
where lower is better enters with its sign flipped, so 1 always means "orders the models as the
ground truth does". Per pair and correlation type the best candidate is named with a t interval
of its mean correlation and of its lead over the runner-up (paired over seeds), and the two are
compared with a paired Wilcoxon signed-rank test (and a paired t-test).

Also here: calibration (a monotone map from each candidate to XLR, judged on held-out pairs)
and the "how weak may g be" comparison across image models.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from ..core import BackretrievalError
from ..metrics.table import metric_name, parse_metric
from .calibration import Calibration, calibrate_leave_one_pair_out, fit_calibration  # noqa: F401 (part of the meta-evaluation)
from .evaluate import pair_labels
from .models import RUN_ONLY_NOTE
from .stats import correlations

TRUTH = "xlr@10"  # the ground truth of the meta-evaluation, whatever K the grid uses
KINDS = ("pearson", "spearman")
LEVEL = 0.95  # the intervals of the best candidate's correlation and of its lead over the runner-up


def default_candidates(k: int = 10) -> tuple[str, ...]:
    """The candidates the paper judges: BkR at the configured K and the CORR baseline.

    Args:
        k: the configured K.

    Returns:
        ``("bkr@K", "corr")`` with K filled in.
    """
    return (metric_name("bkr@K", k), "corr")


def column(kind: str, candidate: str) -> str:
    """The column of one correlation of one candidate: ``("pearson", "bkr@10")`` -> ``"pearson[bkr@10]"``.

    Args:
        kind: ``"pearson"`` or ``"spearman"``.
        candidate: the candidate's metric key.

    Returns:
        The column name of :func:`per_seed_correlations` and the key of :func:`meta_table`.
    """
    return f"{kind}[{candidate}]"


def candidates_of(frame: pd.DataFrame) -> list[str]:
    """The candidates of a frame of :func:`per_seed_correlations` (or
    :func:`image_model_degradation`), in their column order.

    Args:
        frame: a frame with ``pearson[<candidate>]`` columns.

    Returns:
        The candidates' metric keys.
    """
    head = column("pearson", "")[:-1]
    return [c[len(head):-1] for c in frame.columns if c.startswith(head) and c.endswith("]")]


def check_candidates(candidates: Sequence[str], n: int | None = None, k: int | None = None) -> tuple[str, ...]:
    """The candidate proxies, checked before any work.

    Args:
        candidates: metric keys such as ``"bkr@10"``, ``"bkr_mrr"``, ``"corr"``.
        n: the sample size N and ``k`` the configured K of the grid: when both are given, a
            candidate must be a metric the exact route records at that K (``bkr@7`` is not).
        k: see ``n``.

    Returns:
        The candidates as a tuple, in the order given.

    Raises:
        BackretrievalError: no candidate, one given twice, or one that is unknown, no
            candidate proxy (it needs the ground truth, or the metric table does not mark it
            one) or not in the records at its K (each named).
    """
    candidates = tuple(candidates)
    if not candidates:
        raise BackretrievalError("give at least one candidate metric")
    for i, name in enumerate(candidates):
        if name in candidates[:i]:
            raise BackretrievalError(f"candidate {name!r} is given twice")
        spec, kk = parse_metric(name, candidate=True)
        if n is not None and k is not None:
            have = spec.record_ks(n, k) if spec.exact else ()
            if not spec.exact or (spec.at_k and kk not in have):
                at = f" at K = {', '.join(map(str, have))} only" if have else " only with approximate search"
                raise BackretrievalError(f"candidate {name!r}: the records carry {spec.name}{at} (N={n}, --k {k})")
    return candidates


def _oriented(values: np.ndarray, candidate: str) -> np.ndarray:
    """The candidate's values with the sign flipped where lower is better."""
    spec, _ = parse_metric(candidate)
    return values if spec.higher_is_better else -values


def per_seed_correlations(
    records: Sequence[dict[str, Any]], truth: str = TRUTH, candidates: Sequence[str] = default_candidates()
) -> pd.DataFrame:
    """One row per (image_model, pair, seed): Pearson and Spearman of each candidate against
    ``truth``, computed across the models.

    Args:
        records: evaluation records, one per (model, pair, seed, image model), each with
            ``image_model``, ``src_lang``, ``tgt_lang`` (or ``pair``), ``seed`` and the metric keys.
        truth: the ground-truth metric key (default ``"xlr@10"``), a metric that can rank models.
        candidates: the metric keys judged against ``truth``: candidate proxies of the metric
            table (default BkR@10 and CORR). One where lower is better enters with its sign flipped.

    Returns:
        A frame with columns ``image_model``, ``pair``, ``seed``, ``n_models`` and
        ``pearson[<c>]``, ``spearman[<c>]`` per candidate c (see :func:`column`), in the records'
        first-seen order. A correlation is NaN when the group has fewer than 3 models or either
        metric is constant across them.

    Raises:
        BackretrievalError: ``truth`` cannot rank models, or a candidate is none (named).
    """
    parse_metric(truth, rankable=True)
    candidates = check_candidates(candidates)
    df = pd.DataFrame(records)
    df["pair"] = pair_labels(df)
    rows = []
    for (img, pair, seed), g in df.groupby(["image_model", "pair", "seed"], sort=False):
        row: dict[str, Any] = {"image_model": img, "pair": pair, "seed": seed, "n_models": len(g)}
        for name in candidates:
            r, rho = correlations(g[truth].to_numpy(float), _oriented(g[name].to_numpy(float), name))
            row[column("pearson", name)], row[column("spearman", name)] = r, rho
        rows.append(row)
    return pd.DataFrame(rows)


def _paired_p(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(Wilcoxon signed-rank p, paired t-test p) for a - b over seeds; NaN when undefined."""
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    if a.size < 2 or np.all(a == b):
        return float("nan"), float("nan")
    w = stats.wilcoxon(a, b).pvalue
    t = stats.ttest_rel(a, b).pvalue
    return float(w), float(t)


def t_interval(values: np.ndarray, level: float = LEVEL) -> dict[str, float]:
    """The mean of the finite values with its Student t interval.

    Args:
        values: one value per seed (NaN: undefined on that seed, left out).
        level: the interval's confidence level.

    Returns:
        ``{"mean", "low", "high"}``: NaN mean without a finite value; NaN ends with fewer than
        two (ends equal to the mean when the values do not vary).
    """
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"mean": float("nan"), "low": float("nan"), "high": float("nan")}
    m = float(v.mean())
    if v.size < 2:
        return {"mean": m, "low": float("nan"), "high": float("nan")}
    half = float(stats.t.ppf((1 + level) / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return {"mean": m, "low": m - half, "high": m + half}


def _best(g: pd.DataFrame, kind: str, candidates: Sequence[str], level: float) -> dict[str, Any] | None:
    """The candidate with the highest mean correlation of ``kind`` over the seeds of one group,
    its interval, and its lead over the runner-up (paired over seeds) with its interval."""
    means = {c: t_interval(g[column(kind, c)].to_numpy(float), level) for c in candidates}
    ranked = sorted((c for c in candidates if np.isfinite(means[c]["mean"])), key=lambda c: -means[c]["mean"])
    if not ranked:
        return None
    best = {"candidate": ranked[0], **means[ranked[0]], "level": level, "runner_up": None, "lead": None}
    if len(ranked) > 1:
        a, b = (g[column(kind, c)].to_numpy(float) for c in ranked[:2])
        best.update(runner_up=ranked[1], lead=t_interval(a - b, level))
    return best


def meta_table(per_seed: pd.DataFrame, level: float = LEVEL) -> dict[str, dict[str, Any]]:
    """Table 1: per pair, mean and sd over seeds of each candidate's correlations, the best
    candidate with its interval, and p-values of the best against the runner-up.

    Args:
        per_seed: the frame of :func:`per_seed_correlations` (its candidates are read from its columns).
        level: confidence level of the best candidate's intervals.

    Returns:
        Pair label (``"en->de"``; with several image models ``"en->de [g]"``) -> ``image_model``,
        ``seeds``, ``n_models``; per correlation type (``pearson``, ``spearman``): each
        candidate's ``pearson[<c>]`` as ``{"mean", "sd"}`` over seeds (NaN seeds ignored; mean
        NaN when every seed is NaN, sd 0.0 with fewer than two finite seeds) and
        ``p_pearson_wilcoxon``, ``p_pearson_ttest``: two-sided paired p-values of the best
        candidate's against the runner-up's correlation across seeds (NaN with one candidate,
        fewer than two seeds where both are defined, or the two equal on every seed); and
        ``best``: ``{"pearson": ..., "spearman": ...}``, each None when no candidate has a
        defined correlation, else ``candidate``, ``mean``, ``low``, ``high`` (its
        :func:`t_interval` at ``level``), ``level``, ``runner_up`` and ``lead`` (the :func:`t_interval` of the paired
        difference to the runner-up; both None with one candidate). A best candidate whose
        lead interval reaches 0 is not told apart from the runner-up.
    """
    candidates = candidates_of(per_seed)
    out: dict[str, dict[str, Any]] = {}
    for (img, pair), g in per_seed.groupby(["image_model", "pair"], sort=False):
        key = pair if per_seed["image_model"].nunique() == 1 else f"{pair} [{img}]"
        entry: dict[str, Any] = {"image_model": img, "seeds": int(len(g)), "n_models": int(g["n_models"].max())}
        best: dict[str, Any] = {}
        for kind in KINDS:
            for cand in candidates:
                v = g[column(kind, cand)].to_numpy(float)
                entry[column(kind, cand)] = {
                    "mean": float(np.nanmean(v)) if np.isfinite(v).any() else float("nan"),
                    "sd": float(np.nanstd(v, ddof=1)) if np.isfinite(v).sum() > 1 else 0.0,
                }
            best[kind] = _best(g, kind, candidates, level)
            w = t = float("nan")
            if best[kind] is not None and best[kind]["runner_up"] is not None:
                w, t = _paired_p(*(g[column(kind, best[kind][c])].to_numpy(float) for c in ("candidate", "runner_up")))
            entry[f"p_{kind}_wilcoxon"], entry[f"p_{kind}_ttest"] = w, t
        entry["best"] = best
        out[key] = entry
    return out


# --------------------------------------------------------------------------- weak g

def image_model_degradation(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Mean correlation with XLR per image model (averaged over pairs and seeds): how each
    candidate holds up as the image similarity g gets weaker.

    Args:
        per_seed: the frame of :func:`per_seed_correlations` (all image models).

    Returns:
        One row per image model (first-seen order): per candidate c, the mean of
        ``pearson[<c>]`` and ``spearman[<c>]`` over pairs and seeds (NaN entries skipped), then
        their standard deviations (``pearson[<c>]_sd``, ddof 1).
    """
    cols = [column(kind, c) for c in candidates_of(per_seed) for kind in KINDS]
    g = per_seed.groupby("image_model", sort=False)[cols]
    return g.mean().join(g.std(ddof=1).add_suffix("_sd")).reset_index()


# --------------------------------------------------------------------------- the whole study

@dataclasses.dataclass
class MetaResult:
    """Everything the ``meta`` command reports. ``results[image_model]`` is the evaluation grid run
    with that image model; the first image model is the main one.

    Args:
        results: image model -> its :class:`~.evaluate.EvalResult`, the main one first.
        per_seed: :func:`per_seed_correlations` over all image models.
        table: :func:`meta_table` of the main image model (Table 1).
        calibration: candidate -> :func:`calibrate_leave_one_pair_out` on the main image
            model's records; empty with fewer than 3 pairs.
        degradation: :func:`image_model_degradation` ("how weak may g be").
        datasets: the datasets merged (one: ``[cfg.dataset]``).
        candidates: the candidate proxies judged, in the order given.
        truth: the ground truth's metric key.
    """

    results: dict[str, Any]  # image model -> EvalResult
    per_seed: pd.DataFrame
    table: dict[str, dict[str, Any]]  # main image model only (Table 1)
    calibration: dict[str, Calibration]
    degradation: pd.DataFrame
    datasets: list[str] = dataclasses.field(default_factory=list)  # the datasets merged (one: [cfg.dataset])
    candidates: tuple[str, ...] = default_candidates()
    truth: str = TRUTH

    @property
    def main(self):
        """The evaluation result of the main (first) image model."""
        return next(iter(self.results.values()))

    @property
    def run(self) -> dict[str, Any]:
        """What produced the results: configuration, input fingerprints, software environment."""
        return self.main.run


def _start(cfg, candidates: Sequence[str] | None) -> tuple[str, ...]:
    """The checks before any work: at least 3 models, and the candidates (default: the paper's)."""
    if len(cfg.models) < 3:
        raise BackretrievalError(f"meta-evaluation correlates metrics across models: give at least 3 models, got {len(cfg.models)}")
    return check_candidates(default_candidates(cfg.k) if candidates is None else candidates, cfg.n, cfg.k)


def run_meta(cfg, out_dir=None, *, image_models: Sequence[Any] = (), candidates: Sequence[str] | None = None,
             progress: bool = True, log=lambda m: None, executor=None) -> MetaResult:
    """Run the evaluation grid of ``cfg`` (its ``image_model`` is the main g) together with each
    extra image model (sharing everything that does not depend on g), then the meta-evaluation.

    The ground truth is always ``xlr@10`` (``TRUTH``), whatever ``cfg.k`` is.

    Args:
        cfg: the grid (:class:`~.evaluate.EvalConfig`); needs a dataset with ground truth and images.
        out_dir: output folder of the grid (records, resumable); None writes nothing.
        image_models: extra (weaker) image models g, added to ``cfg.extra_image_models``: spec
            strings or Python objects (see :mod:`.models`).
        candidates: the candidate proxies judged (metric keys, see :func:`check_candidates`);
            None: :func:`default_candidates` (BkR at ``cfg.k`` and CORR).
        progress: show progress bars.
        log: called with each progress message.
        executor: how the grid's tasks run (see :func:`~.executors.get_executor`; None: local).

    Returns:
        The :class:`MetaResult`.

    Raises:
        BackretrievalError: fewer than 3 models, a bad candidate (before any work), or a record
            without ``xlr@10`` or a candidate (the dataset lacks ground truth or images); the
            grid's own errors pass through.
    """
    from .evaluate import run_grid

    candidates = _start(cfg, candidates)
    cfg = dataclasses.replace(cfg, extra_image_models=[*cfg.extra_image_models, *image_models])
    res = run_grid(cfg, out_dir, progress=progress, log=log, executor=executor, needs=("xlr", "bkr"),
                   purpose="the meta-evaluation")
    results = {cfg.image_model_name: res, **res.others}
    return _meta(cfg, results, [cfg.dataset], candidates)


def _meta(cfg, results: dict[str, Any], datasets: list[str], candidates: tuple[str, ...]) -> MetaResult:
    """The meta-evaluation of finished grids (``results[image_model]``, the main one first)."""
    res = results[cfg.image_model_name]
    records = [r for sub in results.values() for r in sub.records]
    for r in records:
        lacking = [key for key in (TRUTH, *candidates) if r.get(key) is None]
        if lacking:
            why = "ground truth" if lacking[0] == TRUTH else "images"
            raise BackretrievalError(
                f"meta-evaluation needs both ground truth and images: {r['model']} {r['src_lang']}->{r['tgt_lang']} has no "
                f"{lacking[0]} (a dataset without {why}, or a record resumed from a run whose metric table lacked it)"
            )
    per_seed = per_seed_correlations(records, candidates=candidates)
    main = per_seed[per_seed["image_model"] == cfg.image_model_name]
    calibration = {}
    if pair_labels(pd.DataFrame(res.records)).nunique() >= 3:
        calibration = {c: calibrate_leave_one_pair_out(res.records, x=c) for c in candidates}
    return MetaResult(results, per_seed, meta_table(main), calibration, image_model_degradation(per_seed),
                      list(datasets), candidates)


def dataset_pairs(spec: str, options: dict[str, Any], pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pairs of ``pairs`` whose two languages dataset ``spec`` has (in the order given).

    Args:
        spec: a registered dataset or a data file.
        options: its loader options.
        pairs: the directed pairs asked for.

    Returns:
        The pairs the dataset can evaluate.

    Raises:
        DataError: the dataset cannot be loaded (named by the loader).
    """
    from ..core import DataError
    from ..data import load_dataset

    langs = list(dict.fromkeys(lang for pair in pairs for lang in pair))
    try:
        available = set(load_dataset(spec, langs=langs, **options).languages)
    except DataError as e:
        if not str(e).startswith("unknown language"):
            raise
        available = set(load_dataset(spec, langs=None, **options).languages)
    return [p for p in pairs if p[0] in available and p[1] in available]


def run_meta_datasets(
    cfg, datasets: Sequence[tuple[str, dict[str, Any]]], out_dir=None, *, image_models: Sequence[Any] = (),
    candidates: Sequence[str] | None = None, progress: bool = True, log=lambda m: None, executor=None,
) -> MetaResult:
    """One meta-evaluation over pairs that live in several datasets (e.g. ``en-de.jsonl`` and
    ``en-fr.jsonl``): each dataset is evaluated on the pairs of ``cfg.pairs`` it has (its grid in
    ``OUT/datasets/<name>/``, resumable on its own), then the records are merged into one
    Table 1, one calibration and one "how weak may g be" table. A pair found in several datasets
    is kept once per dataset, labelled ``"en->de [name]"``.

    Args:
        cfg: the grid (its ``dataset`` and ``dataset_options`` are replaced per dataset).
        datasets: ``(dataset, loader options)`` for each dataset.
        out_dir: the output folder (None: nothing written).
        image_models: extra (weaker) image models (spec strings or Python objects).
        candidates: the candidate proxies judged (None: BkR at ``cfg.k`` and CORR), as for :func:`run_meta`.
        progress, log, executor: as for :func:`~.evaluate.run_grid`.

    Returns:
        The merged :class:`MetaResult` (``results[g].records`` carry ``dataset`` and ``pair``).

    Raises:
        BackretrievalError: fewer than 3 models, a bad candidate, a pair that no dataset has, a
            dataset with none of the pairs.
    """
    from pathlib import Path

    from .evaluate import EvalResult, run_grid
    from .evaluate.result import slug

    candidates = _start(cfg, candidates)
    if len(datasets) == 1:
        spec, options = datasets[0]
        return run_meta(dataclasses.replace(cfg, dataset=spec, dataset_options=dict(options)), out_dir,
                        image_models=image_models, candidates=candidates, progress=progress, log=log, executor=executor)
    # which pairs each dataset has, before anything is computed
    plans = [(spec, options, dataset_pairs(spec, options, cfg.pairs)) for spec, options in datasets]
    for s, t in cfg.pairs:
        if not any((s, t) in pairs for _, _, pairs in plans):
            raise BackretrievalError(f"pair {s}-{t} is in none of the datasets {', '.join(spec for spec, _, _ in plans)}")
    for spec, _, pairs in plans:
        if not pairs:
            raise BackretrievalError(f"dataset {spec} has none of the pairs {', '.join(f'{s}-{t}' for s, t in cfg.pairs)}")
    where = {}
    for spec, _, pairs in plans:
        for pair in pairs:
            where.setdefault(pair, []).append(spec)
    names: dict[str, str] = {}
    for spec, _, _ in plans:  # a short, unique, file-name-safe name per dataset
        name = slug(Path(spec).name)
        while name in names.values():
            name += "+"
        names[spec] = name
    merged: dict[str, list[dict[str, Any]]] = {}
    runs = []
    said: set[str] = set()

    def log_once(msg: str) -> None:  # the run-only note every dataset's grid would repeat is said once
        if RUN_ONLY_NOTE in msg:
            if msg in said:
                return
            said.add(msg)
        log(msg)

    extra = [*cfg.extra_image_models, *image_models]
    for spec, options, pairs in plans:
        sub = dataclasses.replace(cfg, dataset=spec, dataset_options=dict(options), pairs=pairs, extra_image_models=extra)
        log(f"meta: dataset {spec}: pairs {', '.join(f'{s}-{t}' for s, t in pairs)}")
        res = run_grid(sub, None if out_dir is None else Path(out_dir) / "datasets" / names[spec], progress=progress,
                       log=log_once, executor=executor, needs=("xlr", "bkr"), purpose="the meta-evaluation")
        runs.append(res.run)
        for g, r in {cfg.image_model_name: res, **res.others}.items():
            for rec in r.records:
                pair = (rec["src_lang"], rec["tgt_lang"])
                label = f"{pair[0]}->{pair[1]}" + (f" [{names[spec]}]" if len(where[pair]) > 1 else "")
                merged.setdefault(g, []).append({**rec, "pair": label})
    run = {"format": 1, "datasets": runs}
    results = {g: EvalResult(cfg, recs, {}, run=run) for g, recs in merged.items()}
    return _meta(dataclasses.replace(cfg, extra_image_models=extra), results, [spec for spec, _, _ in plans], candidates)
