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
from typing import Any, Callable, Sequence

import numpy as np

from ..data import Dataset
from ..encoders.registry import get_text_encoder
from ..encoders.cache import CachedTextEncoder
from ..encoders.trained.modeldir import ModelDir
from ..encoders.trained.m3l import load_model
from ..train.m3l import ImageTextData, RetrievalResult, collect_images, evaluate_image_retrieval, m3l_model_label
from .stats import paired_permutation_test


def model_settings(model: ModelDir) -> dict[str, Any]:
    """What was chosen for a model apart from its training seed, flat.

    An eta estimated from the data is left out (it differs per run); its quantile (the typed
    ``eta_quantile`` hyper-parameter) stands in. Directories in a legacy layout are
    converted by their reader (:mod:`backretrieval.encoders.trained.modeldir_legacy`), so they group
    exactly as new ones.

    Args:
        model: a saved model directory (kind ``m3l``).

    Returns:
        Loss parameters (M3L: rho, alpha1, alpha2; PATR: the given eta or its quantile), widths
        (with the image dimension), dropout, init, standardize, batch, epochs, select, patience,
        val_langs and the optimizer's settings.
    """
    hp = model.hyper_parameters
    if hp["loss"] == "m3l":
        flat: dict[str, Any] = {k: float(hp[k]) for k in ("rho", "alpha1", "alpha2")}
    elif hp.get("eta") is not None:
        flat = {"eta": float(hp["eta"])}
    else:
        flat = {"eta_quantile": float(hp["eta_quantile"])}
    val_langs = hp.get("val_langs")
    flat.update({
        "widths": [*map(int, hp["widths"]), int(model.info["image_dim"])], "dropout": [float(p) for p in hp["dropout"]],
        "init": hp["init"], "standardize": bool(hp["standardize"]), "batch": int(hp["batch_size"]),
        "epochs": int(hp["epochs"]), "select": hp["select"], "patience": hp["patience"],
        "val_langs": list(val_langs if val_langs is not None else hp["train_langs"]),
        "lr": float(hp["lr"]), "beta1": float(hp["beta1"]), "beta2": float(hp["beta2"]),
    })
    return flat


def group_key(model: ModelDir) -> tuple[str, str, str, str, str]:
    """``(base, loss, train langs, image model, settings JSON)``: models with equal keys differ
    only in their training seed and form one configuration (averaged).

    Args:
        model: a saved model directory (kind ``m3l``).

    Returns:
        The base text model spec, the loss, the comma-joined training languages, the image model
        spec and :func:`model_settings` as JSON with sorted keys.
    """
    hp = model.hyper_parameters
    return (hp["base"], hp["loss"], ",".join(hp["train_langs"]), hp["image_model"],
            json.dumps(model_settings(model), sort_keys=True))


def group_labels(keys: Sequence[tuple]) -> dict[tuple, str]:
    """``base LOSS`` per group key, plus the settings that tell apart configurations sharing
    that name (e.g. ``use-m PATR (eta_quantile 0.9, lr 0.001)``).

    Args:
        keys: group keys of :func:`group_key`.

    Returns:
        Key -> label. Configurations sharing base, loss, training languages and image model are
        told apart by the settings in which they differ (in the key's settings order); the
        training languages themselves are not in the label (reports add them).
    """
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
    """One configuration: its key, label and the results of its seeds.

    Args:
        key: its :func:`group_key`.
        label: its :func:`group_labels` label.
        results: one retrieval result per training seed.
    """

    key: tuple
    label: str
    results: list[RetrievalResult]

    @property
    def train_langs(self) -> str:
        """The comma-joined training languages of the configuration."""
        return self.key[2]

    def recalls(self, lang: str, k: int) -> list[float]:
        """Recall@k of each seed in ``lang``.

        Args:
            lang: a query language the results were evaluated in.
            k: a cut-off the results were evaluated at.

        Returns:
            The ``t2i@k`` of each result (one per seed), in the order of ``results``.

        Raises:
            KeyError: ``lang`` or ``k`` was not evaluated.
        """
        return [r.per_lang[lang][f"t2i@{k}"] for r in self.results]

    def hits(self, lang: str, k: int) -> np.ndarray:
        """Per-query hit at k, averaged over the seeds (queries must align).

        Args:
            lang: a query language the results were evaluated in.
            k: the cut-off (a pessimistic rank <= k is a hit).

        Returns:
            float64 (queries,) array: the share of seeds whose rank of the query's image is <= k.
        """
        return np.mean([(r.ranks[lang] <= k).astype(float) for r in self.results], axis=0)


@dataclasses.dataclass
class ImageRetrievalRun:
    """Everything ``image-retrieval`` reports: per-model results, configurations, comparisons.

    Args:
        dataset: the dataset's name as given.
        split: the images ranked (``test``, ``val`` or ``all``).
        sim: ``euclidean`` or ``cosine``.
        ks: the recall cut-offs, ascending.
        langs: the query languages.
        results: one retrieval result per model directory, in the given order.
        groups: the configurations (models differing only in their training seed).
        same_queries: whether every model was evaluated on the same queries per language.
        k_compare: the cut-off of the comparisons (10 when evaluated, else the largest).
        comparisons: :func:`compare_best` per language (empty with one configuration or when
            the queries differ).
        data: the encoded images and splits, per (image model, split seed, test_frac, val_frac).
        bases: the loaded base text encoders, per spec.
    """

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
        """The encoded images and split a result was evaluated on.

        Args:
            result: one of :attr:`results`.

        Returns:
            The :class:`~backretrieval.train.m3l.ImageTextData` of its image model and split rule.
        """
        return self.data[_data_key(result.model)]


def _data_key(model: ModelDir) -> tuple:
    hp = model.hyper_parameters
    return (hp["image_model"], hp["split_seed"], hp["test_frac"], hp["val_frac"])


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
        dataset: the loaded dataset (``langs`` loaded).
        dataset_name: how the dataset was named (recorded in the run).
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
        model, _ = load_model(m)
        hp = model.hyper_parameters
        key = _data_key(model)
        if key not in data_cache:
            data_cache[key] = collect_images(
                dataset, langs, hp["image_model"], split_seed=key[1], test_frac=key[2], val_frac=key[3], progress=progress,
            )
        if hp["base"] not in bases:
            bases[hp["base"]] = CachedTextEncoder(get_text_encoder(hp["base"], progress=progress), progress=progress)
        res = evaluate_image_retrieval(m, dataset, langs, split=split, ks=k_list, sim=sim, data=data_cache[key],
                                 base_encoder=bases[hp["base"]], progress=progress)
        results.append(res)
        if log is not None:
            log(f"{m3l_model_label(model)} (train {','.join(hp['train_langs'])}, seed {hp['seed']}) {m}: "
                + ", ".join(f"{x} {res.per_lang[x][f't2i@{k_list[-1]}']:.3f}" for x in langs))
    by_key: dict[tuple, list[RetrievalResult]] = {}
    for r in results:
        by_key.setdefault(group_key(r.model), []).append(r)
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
