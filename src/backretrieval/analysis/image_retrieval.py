"""Text-to-image retrieval of several trained M3L/PATR models (Aggarwal & Kale 2020, Sec. 4).

The library half of ``backretrieval image-retrieval``: evaluate saved model directories on one
dataset (images encoded once per image model and split rule, each base text model loaded once),
group models that differ only in their training seed into one configuration, label the
configurations by what tells them apart, and compare the best configuration per language with
the runner-up by a paired sign-flip test over the same queries. Tables and files are
:mod:`backretrieval.report.image_retrieval`.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core import BackretrievalError
from ..data import Dataset
from ..encoders.base import get_text_encoder
from ..encoders.cache import CachedTextEncoder
from ..encoders.m3l import load_model
from ..train.m3l import ImageTextData, RetrievalResult, collect_images, evaluate_retrieval, model_label
from .stats import paired_permutation_test


def eta_quantile_of(loss_params: Mapping[str, Any]) -> float | None:
    """The quantile a PATR model's eta was estimated at, or None when eta was given (or for M3L).

    Args:
        loss_params: a saved config's ``loss_params``. Models saved since the typed value have
            ``eta_quantile`` (a number, or null for a given eta); older ones only carry the prose
            ``eta_rule`` ("given" or "quantile Q of squared distances ..."), which is read here.

    Returns:
        The quantile as a float, or None.

    Raises:
        BackretrievalError: an old ``eta_rule`` that is neither "given" nor "quantile Q ...".
    """
    if "eta_quantile" in loss_params:
        q = loss_params["eta_quantile"]
        return None if q is None else float(q)
    rule = loss_params.get("eta_rule", "given")
    if rule == "given":
        return None
    parts = str(rule).split()
    try:
        if parts[0] != "quantile":
            raise ValueError
        return float(parts[1])
    except (IndexError, ValueError):
        raise BackretrievalError(f"unreadable eta_rule {rule!r} in a saved PATR config (expected 'given' or 'quantile Q ...')") from None


def model_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What was chosen for a model apart from its training seed, flat.

    An eta estimated from the data is left out (it differs per run); its quantile stands in.

    Args:
        cfg: a saved model's ``config.json``.

    Returns:
        Loss parameters, widths, dropout, init, standardize, batch, epochs, select, patience,
        val_langs and the optimizer's settings, in a fixed order.
    """
    lp = {k: v for k, v in cfg["loss_params"].items() if k not in ("d", "eta_rule", "eta_quantile")}
    q = eta_quantile_of(cfg["loss_params"])
    if q is not None:
        lp.pop("eta", None)
        lp["eta_quantile"] = q
    flat = {**lp, "widths": cfg["widths"], "dropout": cfg["dropout"], "init": cfg["init"],
            "standardize": cfg["standardize"], "batch": cfg["batch_size"], "epochs": cfg["epochs"],
            "select": cfg["select"], "patience": cfg["patience"], "val_langs": cfg.get("val_langs")}
    flat.update({k: v for k, v in cfg["optimizer"].items() if k != "name"})
    return flat


def group_key(cfg: Mapping[str, Any]) -> tuple[str, str, str, str, str]:
    """``(base, loss, train langs, image model, settings JSON)``: models with equal keys differ
    only in their training seed and form one configuration (averaged)."""
    return (cfg["base"], cfg["loss"], ",".join(cfg["train_langs"]), cfg["image_model"],
            json.dumps(model_settings(cfg), sort_keys=True))


def group_labels(keys: Sequence[tuple]) -> dict[tuple, str]:
    """``base LOSS`` per group key, plus the settings that tell apart configurations sharing
    that name (e.g. ``use-m PATR (eta_quantile 0.9, lr 0.001)``)."""
    out = {}
    for gk in keys:
        same = [k for k in keys if k[:4] == gk[:4]]
        name = f"{gk[0]} {gk[1].upper()}"
        if len(same) > 1:
            mine, others = json.loads(gk[4]), [json.loads(k[4]) for k in same]
            diff = [k for k in mine if any(o.get(k) != mine[k] for o in others)]
            if diff:
                name += " (" + ", ".join(f"{k} {mine[k]}" for k in diff) + ")"
        out[gk] = name
    return out


@dataclasses.dataclass
class Group:
    """One configuration: its key, label and the results of its seeds."""

    key: tuple
    label: str
    results: list[RetrievalResult]

    @property
    def train_langs(self) -> str:
        return self.key[2]

    def recalls(self, lang: str, k: int) -> list[float]:
        """Recall@k of each seed in ``lang``."""
        return [r.per_lang[lang][f"t2i@{k}"] for r in self.results]

    def hits(self, lang: str, k: int) -> np.ndarray:
        """Per-query hit at k, averaged over the seeds (queries must align)."""
        return np.mean([(r.ranks[lang] <= k).astype(float) for r in self.results], axis=0)


@dataclasses.dataclass
class ImageRetrievalRun:
    """Everything ``image-retrieval`` reports: per-model results, configurations, comparisons."""

    dataset: str
    split: str
    sim: str
    ks: list[int]
    langs: list[str]
    results: list[RetrievalResult]
    groups: list[Group]
    same_queries: bool
    k_compare: int
    comparisons: dict[str, dict[str, Any]]
    data: dict[tuple, ImageTextData]
    bases: dict[str, Any]

    def data_of(self, result: RetrievalResult) -> ImageTextData:
        """The encoded images and split a result was evaluated on."""
        return self.data[_data_key(result.config)]


def _data_key(cfg: Mapping[str, Any]) -> tuple:
    sp = cfg["split"]
    return (cfg["image_model"], sp["seed"], sp["test_frac"], sp["val_frac"])


def compare_best(groups: Sequence[Group], langs: Sequence[str], k: int, *, n_perm: int = 10000) -> dict[str, dict[str, Any]]:
    """Best configuration vs the runner-up per language, by mean Recall@k over seeds.

    Args:
        groups: at least two configurations whose models share their queries.
        langs: query languages.
        k: the recall cut-off compared.
        n_perm: permutations of the two-sided paired sign-flip test (seed 0) over the per-query
            hits, each averaged over the configuration's seeds.

    Returns:
        Per language: ``best``, ``runner_up`` (labels with train languages), their recalls,
        ``gap`` (best minus runner-up) and ``p``.
    """
    out = {}
    for x in langs:
        scored = sorted(groups, key=lambda g: -float(np.mean(g.recalls(x, k))))
        g1, g2 = scored[0], scored[1]
        h1, h2 = g1.hits(x, k), g2.hits(x, k)
        t = paired_permutation_test(h1, h2, n_perm=n_perm, seed=0)
        out[x] = {"best": f"{g1.label} [{g1.train_langs}]", "runner_up": f"{g2.label} [{g2.train_langs}]",
                  "best_recall": float(h1.mean()), "runner_up_recall": float(h2.mean()),
                  "gap": float(t.diff), "p": float(t.p_value)}
    return out


def image_retrieval(
    model_dirs: Sequence[str],
    dataset: Dataset,
    dataset_name: str,
    langs: Sequence[str],
    *,
    split: str = "test",
    ks: Sequence[int] = (1, 5, 10),
    sim: str = "euclidean",
    n_perm: int = 10000,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> ImageRetrievalRun:
    """Evaluate saved M3L/PATR models, group their seeds and compare the best configurations.

    Args:
        model_dirs: saved model directories.
        dataset: the loaded dataset (``langs`` loaded); ``dataset_name`` is how it was named.
        langs: query languages.
        split: ``test``, ``val`` or ``all`` (images a model trained on are always left out).
        ks: recall cut-offs; the comparison uses 10 when given, else the largest.
        sim: ``euclidean`` (the training metric) or ``cosine``.
        n_perm: permutations of the paired test.
        progress: progress bars.
        log: receives one line per evaluated model.
        warn: receives a line when the models cannot be compared (different splits).

    Returns:
        An :class:`ImageRetrievalRun`.

    Raises:
        BackretrievalError: an unreadable model directory, or one whose image model does not fit
            the dataset's images.
    """
    k_list = sorted(set(int(k) for k in ks))
    langs = list(langs)
    data_cache: dict[tuple, ImageTextData] = {}
    bases: dict[str, Any] = {}  # one loaded base text model per spec
    results = []
    for m in model_dirs:
        cfg, _ = load_model(m)
        key = _data_key(cfg)
        if key not in data_cache:
            data_cache[key] = collect_images(
                dataset, langs, cfg["image_model"], split_seed=key[1], test_frac=key[2], val_frac=key[3], progress=progress,
            )
        if cfg["base"] not in bases:
            bases[cfg["base"]] = CachedTextEncoder(get_text_encoder(cfg["base"], progress=progress), progress=progress)
        res = evaluate_retrieval(m, dataset, langs, split=split, ks=k_list, sim=sim, data=data_cache[key],
                                 base_encoder=bases[cfg["base"]], progress=progress)
        results.append(res)
        if log is not None:
            log(f"{model_label(cfg)} (train {','.join(cfg['train_langs'])}, seed {cfg['seed']}) {m}: "
                + ", ".join(f"{x} {res.per_lang[x][f't2i@{k_list[-1]}']:.3f}" for x in langs))
    by_key: dict[tuple, list[RetrievalResult]] = {}
    for r in results:
        by_key.setdefault(group_key(r.config), []).append(r)
    names = group_labels(list(by_key))
    groups = [Group(gk, names[gk], rs) for gk, rs in by_key.items()]
    same_queries = all(r.query_ids[x] == results[0].query_ids[x] for r in results for x in langs)
    k_cmp = 10 if 10 in k_list else k_list[-1]
    comparisons: dict[str, dict[str, Any]] = {}
    if len(groups) > 1 and same_queries:
        comparisons = compare_best(groups, langs, k_cmp, n_perm=n_perm)
    elif len(groups) > 1 and warn is not None:
        warn("the models do not share their test queries (different splits): no paired comparison")
    return ImageRetrievalRun(dataset_name, split, sim, k_list, langs, results, groups, same_queries, k_cmp,
                             comparisons, data_cache, bases)
