"""Analysis of a finished (or partly finished) study: per model score distributions, the ratio
of "very relevant" suggestions, significance tests, inter-rater agreement, and the models'
BkR on the same language pair for comparison.

Credit. A suggestion retrieved by several models for the same query was shown once; its
ratings count for every model that retrieved it.

Tests (two-sided; one family per pair of models, Holm-adjusted when there are more than two
models):

* **primary -- exact paired sign-flip test over queries** of the per-query share of "very
  relevant" (score 1) ratings. The query is the sampled unit: suggestions of one query, and
  ratings by one rater, are not independent, and queries differ in difficulty, so the test
  pairs the two models query by query (for each query and model: the share of that model's
  rated suggestions scored 1, averaged over the raters who rated them). Under the null the
  sign of each query's difference is a fair coin; with up to 20 non-zero differences all
  2^n sign patterns are enumerated (exact p), above that 200,000 random patterns are drawn.
  Shared suggestions count for both models and cancel in the difference.
* Wilcoxon signed-rank test of the same per-query differences (scipy; zeros dropped).
* The same sign-flip test on the per-query **mean score** (1-4, lower is better): the whole
  ordinal scale, averaged as if it were interval.
* Chi-square test of the 2 x 4 table (model x score) of the ratings of suggestions that only
  one of the two models retrieved (a shared suggestion cannot sit in one row), and Fisher's
  exact test of the 2 x 2 table "very relevant or not". Both treat ratings as independent and
  ignore the clustering by query and rater, so their p-values are optimistic; they are
  reported for comparison with analyses that do this.

The ratio of "very relevant" is ``share_A / share_B`` with ``share = (#ratings of 1) /
(#ratings)`` over all the model's rated suggestions and raters (with complete ratings each
model has the same number of rated suggestions, so this is also the ratio of counts, the
paper's "2.3x more very relevant items"); its 95% interval is a percentile bootstrap that
resamples queries.

Agreement (two or more raters): Krippendorff's alpha over suggestions, ordinal on the 1-4
scores and nominal on "very relevant or not" (:mod:`.agreement`).
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..analysis.evaluate.power import SampleSizeError
from ..analysis.stats import holm, sign_flip_p
from ..core import BackretrievalError
from . import store
from .agreement import krippendorff_alpha

EXACT_MAX = 20
N_RANDOM_SIGNS = 200_000


def sign_flip_test(d: np.ndarray, *, seed: int = 0) -> dict[str, Any]:
    """Two-sided paired sign-flip test of mean(d) = 0 (:func:`backretrieval.analysis.stats.sign_flip_p`
    on the sum): exact when at most :data:`EXACT_MAX` differences are non-zero, else Monte Carlo
    with :data:`N_RANDOM_SIGNS` draws (p counts the observed pattern). Ties: patterns whose |sum|
    equals the observed one (within 1e-9) count as extreme."""
    d = np.asarray(d, dtype=np.float64)
    p, how, nonzero = sign_flip_p(d, statistic="sum", n_random=N_RANDOM_SIGNS, seed=seed, exact_max=EXACT_MAX,
                                  chunk=4000, tol=1e-9)
    method = "exact sign-flip" if how == "exact" else f"sign-flip, {N_RANDOM_SIGNS} random patterns"
    return {"p": float(p), "n": int(d.size), "nonzero": nonzero, "mean_diff": float(d.mean()) if nonzero else 0.0,
            "method": method}


def queries_needed(comparisons: int, alpha: float = 0.05) -> int:
    """The fewest queries (rated for both models, each with a difference) on which the primary
    test can reach ``p < alpha`` after Holm over ``comparisons``: the exact two-sided sign-flip
    test of n queries can go no lower than ``2 / 2^n``.

    Args:
        comparisons: the comparisons Holm corrects for (pairs of models).
        alpha: the significance level.

    Returns:
        The smallest n with ``2 / 2^n * comparisons < alpha``.
    """
    n = 1
    while 2.0 ** (1 - n) * max(comparisons, 1) >= alpha:
        n += 1
    return n


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return float("inf") if a > 0 else float("nan")
    return a / b


def rated_credits(tables: dict[str, Any]) -> pd.DataFrame:
    """One row per (rating, crediting model): rater, query, suggestion, model, score."""
    r = tables["ratings"].merge(tables["suggestions"][["sugg_id", "query_id"]], on="sugg_id")
    return r.merge(tables["credits"][["sugg_id", "model_id"]], on="sugg_id")


def per_query(rc: pd.DataFrame, model_id: int, value: str) -> pd.Series:
    """Per query: the model's share of score-1 ratings (``value="vr"``) or mean score
    (``"mean"``), first per rater, then averaged over raters."""
    m = rc[rc.model_id == model_id].assign(vr=lambda x: (x.score == 1).astype(float), mean=lambda x: x.score.astype(float))
    return m.groupby(["query_id", "rater_id"])[value].mean().groupby("query_id").mean()


def _bootstrap_ratio(rc: pd.DataFrame, a: int, b: int, query_ids: np.ndarray, n_boot: int, seed: int) -> list[float]:
    """Percentile 95% interval of share_a / share_b, resampling queries with replacement."""
    def sums(model_id: int) -> tuple[np.ndarray, np.ndarray]:
        m = rc[rc.model_id == model_id]
        g = m.groupby("query_id").score
        vr = g.apply(lambda s: int((s == 1).sum())).reindex(query_ids, fill_value=0).to_numpy(float)
        n = g.size().reindex(query_ids, fill_value=0).to_numpy(float)
        return vr, n

    (va, na), (vb, nb) = sums(a), sums(b)
    rng = np.random.default_rng(seed)
    out = np.empty(n_boot)
    for i in range(n_boot):
        pick = rng.integers(0, len(query_ids), size=len(query_ids))
        sa = va[pick].sum() / max(na[pick].sum(), 1)
        sb = vb[pick].sum() / max(nb[pick].sum(), 1)
        out[i] = _ratio(sa, sb)
    out = np.where(np.isnan(out), np.inf, out)  # 0/0 in a resample: no evidence either way; counted high
    # order statistics (no interpolation, which would give inf - inf = nan between infinite ratios)
    return [float(np.percentile(out, 2.5, method="lower")), float(np.percentile(out, 97.5, method="higher"))]


def _distribution(scores: pd.Series) -> dict[str, Any]:
    counts = {str(s): int((scores == s).sum()) for s in store.SCORES}
    n = int(scores.size)
    return {
        "ratings": n,
        "counts": counts,
        "shares": {k: (v / n if n else float("nan")) for k, v in counts.items()},
        "very_relevant": counts["1"],
        "very_relevant_share": counts["1"] / n if n else float("nan"),
        "mean_score": float(scores.mean()) if n else float("nan"),
    }


def compare_pair(rc: pd.DataFrame, a: int, b: int, *, n_boot: int, seed: int) -> dict[str, Any]:
    """Every test of model ``a`` against model ``b`` (see the module docstring)."""
    qa, qb = per_query(rc, a, "vr"), per_query(rc, b, "vr")
    common = qa.index.intersection(qb.index)
    d_vr = (qa[common] - qb[common]).to_numpy()
    ma, mb = per_query(rc, a, "mean"), per_query(rc, b, "mean")
    d_mean = (ma[common] - mb[common]).to_numpy()
    sa = rc[rc.model_id == a].score
    sb = rc[rc.model_id == b].score
    share_a = float((sa == 1).mean()) if sa.size else float("nan")
    share_b = float((sb == 1).mean()) if sb.size else float("nan")
    out: dict[str, Any] = {
        "queries": int(common.size),
        "very_relevant": [int((sa == 1).sum()), int((sb == 1).sum())],
        "ratio_very_relevant": _ratio(share_a, share_b),
        "ratio_count": _ratio(float((sa == 1).sum()), float((sb == 1).sum())),
        "ratio_ci95": _bootstrap_ratio(rc, a, b, np.asarray(common), n_boot, seed) if common.size else None,
        "primary": sign_flip_test(d_vr, seed=seed),
        "mean_score": sign_flip_test(d_mean, seed=seed),
        "queries_a_better": int(np.sum(d_vr > 0)),
        "queries_b_better": int(np.sum(d_vr < 0)),
        "queries_tied": int(np.sum(d_vr == 0)),
    }
    nz = d_vr[d_vr != 0]
    if nz.size:
        w = sps.wilcoxon(nz, zero_method="wilcox")
        out["wilcoxon"] = {"statistic": float(w.statistic), "p": float(w.pvalue), "nonzero": int(nz.size)}
    else:
        out["wilcoxon"] = {"statistic": float("nan"), "p": 1.0, "nonzero": 0}
    # independence tests on suggestions that only one of the two models retrieved
    credit_sets = rc.groupby("sugg_id").model_id.agg(lambda s: frozenset(s))
    only = {m: set(credit_sets[credit_sets.apply(lambda s, m=m: m in s and len(s & {a, b}) == 1)].index) for m in (a, b)}
    rows = []
    for m in (a, b):
        sc = rc[(rc.model_id == m) & rc.sugg_id.isin(only[m])].score
        rows.append([int((sc == s).sum()) for s in store.SCORES])
    table = np.array(rows)
    cols = table.sum(axis=0) > 0
    chi: dict[str, Any] = {"table": table.tolist(), "note": "ratings treated as independent (optimistic)"}
    if table.sum(axis=1).min() > 0 and cols.sum() >= 2:
        res = sps.chi2_contingency(table[:, cols])
        chi.update(statistic=float(res.statistic), dof=int(res.dof), p=float(res.pvalue), min_expected=float(res.expected_freq.min()))
    else:
        chi.update(statistic=float("nan"), dof=0, p=float("nan"))
    two = np.array([[t[0], t[1:].sum()] for t in table])
    chi["fisher_very_relevant_p"] = float(sps.fisher_exact(two).pvalue) if two.sum(axis=1).min() > 0 else float("nan")
    out["chi2"] = chi
    return out


def agreement(tables: dict[str, Any]) -> dict[str, Any] | None:
    """Krippendorff's alpha over suggestions when two or more raters rated something."""
    r = tables["ratings"]
    raters = sorted(r.rater_id.unique())
    if len(raters) < 2:
        return None
    units = sorted(r.sugg_id.unique())
    mat = np.full((len(raters), len(units)), np.nan)
    ri = {x: i for i, x in enumerate(raters)}
    ui = {x: i for i, x in enumerate(units)}
    for rid, sid, sc in r[["rater_id", "sugg_id", "score"]].itertuples(index=False):
        mat[ri[rid], ui[sid]] = sc
    pairable = int(np.sum(np.sum(~np.isnan(mat), axis=0) >= 2))
    binary = np.where(np.isnan(mat), np.nan, (mat == 1).astype(float))
    return {
        "raters": len(raters),
        "pairable_suggestions": pairable,
        "alpha_ordinal": krippendorff_alpha(mat, "ordinal", store.SCORES),
        "alpha_nominal": krippendorff_alpha(mat, "nominal", store.SCORES),
        "alpha_very_relevant": krippendorff_alpha(binary, "nominal", (0.0, 1.0)),
    }


DEFAULT_BKR_N = 1000  # N per side of the BkR comparison when none is asked for and the pair allows it


def bkr_sample_size(meta: dict[str, Any], n: int | None, seeds: int) -> tuple[int, str | None]:
    """The N of the BkR comparison on the study's pair: ``n`` checked against what the pair
    allows, or (``n`` None) :data:`DEFAULT_BKR_N` fitted to the data, with a note saying so.
    Raises :class:`BackretrievalError` naming the largest N when ``n`` is too large, and when the
    dataset cannot be loaded."""
    from ..analysis.evaluate.power import fit_n
    from ..data import load_dataset

    pair = (meta["src"], meta["tgt"])
    ds = load_dataset(meta["dataset"], langs=list(pair), **dict(meta.get("dataset_options") or {}))
    return fit_n(ds, [pair], n, DEFAULT_BKR_N, list(range(seeds)), option=("--bkr-n", "bkr_n"), needs=("bkr",))


def bkr_comparison(
    meta: dict[str, Any], *, n: int, seeds: int, image_model: Any, k: int = 10, progress: bool = True
) -> dict[str, Any]:
    """The models' BkR@k (and XLR@k where the dataset links languages) on the study's pair,
    from :func:`backretrieval.analysis.run_grid` with ``n`` items per side and ``seeds`` seeds.
    ``image_model`` is a spec string or a Python object (:mod:`backretrieval.analysis.models`);
    the result names it as the records do."""
    from ..analysis import EvalConfig, run_grid
    from ..analysis.models import model_names

    cfg = EvalConfig(
        dataset=meta["dataset"],
        pairs=[(meta["src"], meta["tgt"])],
        models=list(meta["models"]),
        image_model=image_model,
        n=n,
        seeds=list(range(seeds)),
        k=k,
        dataset_options=dict(meta.get("dataset_options") or {}),
    )
    res = run_grid(cfg, None, progress=progress)
    df = pd.DataFrame(res.records)
    out: dict[str, Any] = {"n": n, "seeds": seeds, "k": k, "image_model": cfg.image_model_name, "models": {}}
    for spec, label in zip(meta["models"], model_names(list(meta["models"]))):  # the records call each by its label
        rows = df[df.model == label]
        entry = {}
        for col in (f"bkr@{k}", "bkr_mrr", f"xlr@{k}"):
            if col in rows and rows[col].notna().any():
                entry[col] = float(rows[col].mean())
                entry[f"{col}_sd"] = float(rows[col].std(ddof=1)) if len(rows) > 1 else 0.0
        out["models"][spec] = entry
    if len(df) and f"bkr@{k}" in df:
        out["chance"] = k / n
    return out


def analyze(
    path: str | Path,
    *,
    bkr: bool = True,
    bkr_n: int | None = None,
    bkr_seeds: int = 3,
    image_model: Any = "efficientnet-lite0",
    n_boot: int = 2000,
    seed: int = 0,
    progress: bool = True,
    log: Callable[[str], None] = lambda msg: None,
) -> dict[str, Any]:
    """The full analysis as a JSON-ready dict (see :func:`backretrieval.report.study_analysis.format_study_analysis`).

    Bad parameters (``n_boot`` below 2, ``bkr_n`` or ``bkr_seeds`` below 1, an unknown
    ``image_model``) raise :class:`BackretrievalError` before the study is read; a ``bkr_n``
    larger than the study's pair allows raises one naming the largest N, before any computing.
    ``bkr_n`` None: :data:`DEFAULT_BKR_N`, or the largest N the pair allows when that is
    smaller (the result's ``bkr`` says so in ``n_note``, and the log). A BkR comparison that
    fails otherwise (a dataset that cannot be loaded, ...) is skipped with a log line."""
    _check_settings(n_boot, bkr_n, bkr_seeds, image_model if bkr else None)
    with store.opened(path, check=True) as con:
        tables = store.load_tables(con)
        raters = store.list_raters(con)
    meta = tables["meta"]
    sized = _bkr_size(meta, bkr_n, bkr_seeds, log) if bkr else None
    models = tables["models"]
    credits = tables["credits"]
    n_sugg = len(tables["suggestions"])
    shared = int((credits.groupby("sugg_id").size() > 1).sum())
    rc = rated_credits(tables)
    result: dict[str, Any] = {
        "study": {
            key: meta.get(key)
            for key in ("dataset", "dataset_options", "src", "tgt", "models", "queries", "per_model", "seed", "pool", "pool_n", "created_at")
        },
        "suggestions": n_sugg,
        "shared_suggestions": shared,
        "raters": [{"name": r["name"], "rated": r["rated"], "total": r["total"]} for r in raters],
        "ratings": int(len(tables["ratings"])),
        "events": int(tables["n_events"]),
        "complete": bool(raters) and all(r["rated"] == r["total"] for r in raters),
        "models": {},
        "comparisons": [],
    }
    for model_id, spec, label in models.itertuples(index=False):
        d = _distribution(rc[rc.model_id == model_id].score)
        d.update(label=label, suggestions=int((credits.model_id == model_id).sum()))
        result["models"][spec] = d
    names = dict(zip(tables["raters"].rater_id, tables["raters"].name))
    result["per_rater"] = {
        names[rid]: {
            spec: {"rated": int((g.model_id == mid).sum()), "very_relevant": int(((g.model_id == mid) & (g.score == 1)).sum())}
            for mid, spec in zip(models.model_id, models.spec)
        }
        for rid, g in rc.groupby("rater_id")
    }
    _compare_models(result, rc, models, rated=len(tables["ratings"]), n_sugg=n_sugg, n_boot=n_boot, seed=seed)
    result["agreement"] = agreement(tables)
    if bkr:
        try:
            if isinstance(sized, BackretrievalError):
                raise sized
            result["bkr"] = bkr_comparison(meta, n=sized[0], seeds=bkr_seeds, image_model=image_model, progress=progress)
            if sized[1]:
                result["bkr"]["n_note"] = sized[1]
        except BackretrievalError as e:  # the human results stand on their own
            log(f"BkR comparison skipped: {e}")
            result["bkr"] = {"error": str(e)}
    else:
        result["bkr"] = None
    return result


def _check_settings(n_boot: Any, bkr_n: Any, bkr_seeds: Any, image_model: Any) -> None:
    """:func:`analyze`'s settings, before the study is read: ``n_boot`` at least 2, ``bkr_n``
    (None: the default) and ``bkr_seeds`` at least 1, each an integer; ``image_model`` (None: no
    BkR comparison) a known image model or ``"precomputed"``."""
    for name, value, low in (("n_boot", n_boot, 2), ("bkr_n", bkr_n, 1), ("bkr_seeds", bkr_seeds, 1)):
        if name == "bkr_n" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise BackretrievalError(f"{name} must be an integer >= {low}, got {value!r}")
    if image_model is not None and image_model != "precomputed":
        from ..encoders.registry import get_image_encoder

        get_image_encoder(image_model)  # an unknown image model is an error, not a skipped comparison


def _bkr_size(meta: dict[str, Any], bkr_n: int | None, bkr_seeds: int,
              log: Callable[[str], None]) -> tuple[int, str | None] | BackretrievalError:
    """The BkR comparison's N and its note (:func:`bkr_sample_size`, the note logged), or the
    error that skips the comparison; a ``bkr_n`` the pair cannot have is raised, before any
    computing."""
    try:
        sized: tuple[int, str | None] | BackretrievalError = bkr_sample_size(meta, bkr_n, bkr_seeds)
    except SampleSizeError as e:
        if bkr_n is not None:
            raise
        sized = e
    except BackretrievalError as e:
        sized = e
    if isinstance(sized, tuple) and sized[1]:
        log(f"BkR comparison: {sized[1]}")
    return sized


def _compare_models(result: dict[str, Any], rc: pd.DataFrame, models: pd.DataFrame, *, rated: int, n_sugg: int,
                    n_boot: int, seed: int) -> None:
    """Every pair of models on the queries rated for both (:func:`compare_pair`), Holm over the
    pairs, into ``result["comparisons"]``; with no ratings, or too few for any pair, the
    ``ratings_note`` says so."""
    ids = dict(zip(models.spec, models.model_id))
    pairs = list(itertools.combinations(models.spec, 2))
    need = queries_needed(len(pairs))
    if not rated:  # nothing to compare: no test, no order
        result["ratings_note"] = (f"no ratings yet: nothing is compared ({n_sugg} suggestions wait for a rating; the "
                                  f"paired test needs at least {need} queries rated for both models of a pair)")
        pairs = []
    for a, b in pairs:
        c = compare_pair(rc, ids[a], ids[b], n_boot=n_boot, seed=seed)
        c.update(a=a, b=b)
        if c["queries"] < need:
            c["too_few"] = (f"{c['queries']} quer{'y is' if c['queries'] == 1 else 'ies are'} rated for both {a} and {b}; "
                            f"the paired test needs at least {need} (each with a difference) before p can fall below "
                            f"0.05 after Holm over {len(pairs)} comparison{'s' * (len(pairs) != 1)}")
        result["comparisons"].append(c)
    if result["comparisons"]:
        adj = holm([c["primary"]["p"] for c in result["comparisons"]])
        for c, p in zip(result["comparisons"], adj):
            c["primary"]["p_holm"] = p
        if all("too_few" in c for c in result["comparisons"]):
            result["ratings_note"] = (f"too few ratings to tell the models apart: the paired test needs at least {need} "
                                      "queries rated for both models of a pair")
