"""Text-to-image retrieval of several trained M3L/PATR models (Aggarwal & Kale 2020, Sec. 4).

The one home for evaluating saved M3L/PATR model directories, and the library half of
``backretrieval image-retrieval``: evaluate one directory (:func:`evaluate_image_retrieval`), or
several on one dataset (images encoded once per image model and split rule, each base text model loaded once),
group models that differ only in their training seed into one configuration, label the
configurations by what tells them apart, and compare the best configuration per language with
the runner-up by a paired sign-flip test over the same queries. Tables and files are
:mod:`backretrieval.report.image_retrieval`.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ...core import BackretrievalError, DataError
from ...data import Dataset
from ...encoders.registry import get_cached_text_encoder
from ...encoders.trained.modeldir import ModelDir
from ...encoders.trained.m3l import M3LTextEncoder, load_model
from ...metrics import retrieval_ranks
from ...train.m3l import RETRIEVAL_SIMS, VAL_KS, ImageTextData, collect_images, recall_summary
from ..stats import paired_permutation_test


@dataclasses.dataclass
class RetrievalResult:
    """Text-to-image retrieval of one saved model on one split, per language.

    Attributes:
        model_dir: the model directory as given.
        model: the directory as read (:class:`~backretrieval.encoders.trained.modeldir.ModelDir`).
        split: ``"test"``, ``"val"`` or ``"all"``.
        sim: ``"euclidean"`` or ``"cosine"``.
        n_images: gallery size (the split's images the model was not trained on).
        per_lang: per language ``n_queries`` and the :func:`recall_summary` values.
        ranks: per language the 1-based rank of each query's true image.
        query_ids: per language the ids of the queries, in the order of ``ranks``.
    """

    model_dir: str
    model: ModelDir
    split: str
    sim: str
    n_images: int
    per_lang: dict[str, dict[str, float]]
    ranks: dict[str, np.ndarray]
    query_ids: dict[str, list[str]]

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON-ready dict.

        Returns:
            The model's directory, label and settings, the split and similarity, the gallery
            size, and Recall@K per language.
        """
        hp = self.model.hyper_parameters
        return {
            "model_dir": self.model_dir,
            "label": m3l_model_label(self.model),
            "loss": hp["loss"],
            "base": hp["base"],
            "image_model": hp["image_model"],
            "train_langs": list(hp["train_langs"]),
            "seed": hp["seed"],
            "best_epoch": self.model.info["best_epoch"],
            "split": self.split,
            "sim": self.sim,
            "n_images": self.n_images,
            "per_lang": self.per_lang,
        }


def m3l_model_label(model: ModelDir) -> str:
    """The short label of a saved M3L/PATR model.

    Args:
        model: the model directory as read.

    Returns:
        ``base LOSS``, e.g. ``use-m PATR``.
    """
    return f"{model.hyper_parameters['base']} {model.hyper_parameters['loss'].upper()}"


def evaluate_image_retrieval(
    model_dir: str | Path,
    dataset: Dataset,
    langs: Sequence[str],
    *,
    split: str = "test",
    ks: Sequence[int] = VAL_KS,
    sim: str = "euclidean",
    data: ImageTextData | None = None,
    base_encoder: Any = None,
    progress: bool = False,
) -> RetrievalResult:
    """Text->image Recall@K per language of a saved model on ``split`` of ``dataset``.

    The gallery is every distinct image of ``split`` (``"test"``, ``"val"``, or ``"all"``)
    among the loaded languages, split by the model's own split rule, minus any image the model
    was trained on (none, when the dataset is the training dataset); the queries of a language
    are its captions of gallery images. ``data`` may be passed to reuse encoded images across
    models that share an image model and split, and ``base_encoder`` (a cached text model of
    the model's base) to load the base model once for several models.

    Args:
        model_dir: a saved M3L/PATR model directory.
        dataset: the dataset, with ``langs`` loaded.
        langs: the query languages.
        split: ``"test"``, ``"val"`` or ``"all"``.
        ks: recall cut-offs.
        sim: ``"euclidean"`` or ``"cosine"`` (see
            :func:`backretrieval.metrics.retrieval_ranks`).
        data: encoded images to reuse across models (see above).
        base_encoder: a cached text model of the model's base, to reuse across models.
        progress: show progress bars.

    Returns:
        A :class:`RetrievalResult` (per language ``n_queries`` and :func:`recall_summary`).

    Raises:
        BackretrievalError: a bad ``split`` or ``sim``, or a model whose image model or dimension
            does not fit the data.
        DataError: no gallery images left in ``split``.
    """
    if split not in ("test", "val", "all"):
        raise BackretrievalError(f"split must be test, val or all, got {split!r}")
    if sim not in RETRIEVAL_SIMS:
        raise BackretrievalError(f"unknown retrieval similarity {sim!r}; choose one of {', '.join(RETRIEVAL_SIMS)}")
    model, _ = load_model(model_dir)
    hp, image_dim = model.hyper_parameters, model.info["image_dim"]
    if data is None:
        data = collect_images(
            dataset, langs, hp["image_model"],
            split_seed=hp["split_seed"], test_frac=hp["test_frac"], val_frac=hp["val_frac"], progress=progress,
        )
    elif data.image_model != hp["image_model"]:
        raise BackretrievalError(f"{model_dir}: trained for image model {hp['image_model']!r}, data encoded with {data.image_model!r}")
    if data.features.shape[1] != image_dim:
        raise BackretrievalError(
            f"{model_dir}: maps into {image_dim}-d image features, the dataset's images are {data.features.shape[1]}-d"
        )
    with open(Path(model_dir) / "split.json", encoding="utf-8") as fh:
        trained_on = set(json.load(fh)["train"])
    gal = data.images(None if split == "all" else split)
    gal = np.array([g for g in gal if data.keys[g] not in trained_on], dtype=np.int64)
    if len(gal) == 0:
        raise DataError(f"{dataset.name}: no {split} images left to retrieve from")
    pos = np.full(len(data.keys), -1, dtype=np.int64)
    pos[gal] = np.arange(len(gal))
    enc = M3LTextEncoder(model_dir, progress=progress, base_encoder=base_encoder)
    gallery = data.features[gal]
    per_lang, ranks, qids = {}, {}, {}
    for lang in langs:
        img = data.image_of[lang]
        rows = np.flatnonzero(pos[img] >= 0)
        c = data.corpora[lang].subset(rows)
        if len(rows) == 0:
            per_lang[lang] = {"n_queries": 0, **recall_summary(np.zeros(0), ks)}
            ranks[lang], qids[lang] = np.zeros(0, np.int64), []
            continue
        q = enc.map(c.texts, lang, ids=c.ids)
        r = retrieval_ranks(q, gallery, pos[img[rows]], sim=sim)
        per_lang[lang] = {"n_queries": int(len(rows)), **recall_summary(r, ks)}
        ranks[lang], qids[lang] = r, list(c.ids)
    return RetrievalResult(str(model_dir), model, split, sim, int(len(gal)), per_lang, ranks, qids)


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
        bases: the loaded base text models, per spec.
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
            bases[hp["base"]] = get_cached_text_encoder(hp["base"], {"progress": progress}, progress=progress)
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
