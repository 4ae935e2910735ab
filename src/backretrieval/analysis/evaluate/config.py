"""What goes into the evaluation grid: :class:`EvalConfig` (with :func:`parse_pairs`), and the
checks of seeds, counts and grid size (what comes out of it: :mod:`.result`)."""
from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Iterable, Sequence

import numpy as np

from ...core import BackretrievalError, content_hash
from ..models import image_model_name

MAX_SEEDS = 1000  # seeds in one grid: each is one sample per pair and one record per model
MAX_SEED = 2**32 - 1  # the largest seed value (numpy's legacy seed range)
MAX_RECORDS = 100_000  # models x pairs x seeds x image models in one run
MAX_CORR_BOOT = 100_000  # CORR's bootstrap resamples per record (the CLI's --n-boot range)
SIMILARITIES = ("cosine", "csls")
COSTS = ("bytes", "speed", "price")  # what the cheapest equivalent model is cheapest in (EvalConfig.cost)


def check_seeds(seeds: Sequence[Any]) -> list[int]:
    """The seeds of a grid, checked.

    Args:
        seeds: integers (Python or numpy; not bools).

    Returns:
        The seeds as a list of Python ints, in the order given.

    Raises:
        BackretrievalError: no seed, more than :data:`MAX_SEEDS`, a seed that is not an integer,
            is negative or above :data:`MAX_SEED`, or is given twice (each named).
    """
    out: list[int] = []
    seen: set[int] = set()
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise BackretrievalError(f"seed {seed!r} is not an integer")
        seed = int(seed)
        if seed < 0:
            raise BackretrievalError(f"seed {seed} is negative; seeds are integers >= 0")
        if seed > MAX_SEED:
            raise BackretrievalError(f"seed {seed} is too large; seeds are integers from 0 to {MAX_SEED} (2**32 - 1)")
        if seed in seen:
            raise BackretrievalError(f"seed {seed} is given twice")
        seen.add(seed)
        out.append(seed)
        if len(out) > MAX_SEEDS:
            raise BackretrievalError(f"more than {MAX_SEEDS:,} seeds; one grid takes at most {MAX_SEEDS:,}")
    if not out:
        raise BackretrievalError("no seed given")
    return out


def grid_seeds(seeds: Any) -> list[int]:
    """The seeds of a grid as the CLI's ``--seeds`` spells them, checked.

    Args:
        seeds: a count ``S`` (an int, or a string such as ``"3"``: seeds 0..S-1), a list of
            seeds, or a comma list of seeds as a string (``"0,3,7"``).

    Returns:
        The seeds as a list of Python ints, in the order given.

    Raises:
        BackretrievalError: a count below 1 or above :data:`MAX_SEEDS`, anything that is neither
            a count nor a list of seeds, or a bad seed (:func:`check_seeds`), named.
    """
    if isinstance(seeds, str):
        text = seeds.strip()
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not all(re.fullmatch(r"[+-]?\d{1,40}", x) for x in items) or not items:
            raise BackretrievalError(
                f"seeds {seeds!r}: give a count (3 -> seeds 0..2) or a comma list of seeds ('0,3,7')")
        seeds = int(items[0]) if "," not in text else [int(x) for x in items]
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, (bool, np.bool_)):
        count = int(seeds)
        if count < 1:
            raise BackretrievalError(f"seeds={count}: the number of seeds must be at least 1 (one given seed: seeds=[{abs(count)}])")
        if count > MAX_SEEDS:
            raise BackretrievalError(f"seeds={count:,}: at most {MAX_SEEDS:,} seeds in one grid (one given seed: seeds=[{count}])")
        return list(range(count))
    if isinstance(seeds, (str, bytes, dict)) or not isinstance(seeds, Iterable):
        raise BackretrievalError(
            f"seeds {seeds!r} ({type(seeds).__name__}): give a count (3 -> seeds 0..2) or a list of seeds ([0, 3, 7])")
    return check_seeds(seeds)


def check_count(value: Any, name: str, low: int, high: int | None = None, zero: bool = False) -> int:
    """An integer setting of the grid, checked: ``low <= value <= high`` (or 0 with ``zero``).

    Args:
        value: the value given.
        name: the setting's name, for the message (``"n"``, ``"k"``).
        low: the smallest value allowed.
        high: the largest value allowed (None: no bound).
        zero: whether 0 is allowed besides ``low..high`` (``corr_boot=0``: no bootstrap).

    Returns:
        The value as a Python int.

    Raises:
        BackretrievalError: not an integer (a bool, a float, a string, NaN), or out of range, named.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        shown = "NaN" if isinstance(value, float) and math.isnan(value) else repr(value)
        raise BackretrievalError(f"{name}={shown} ({type(value).__name__}): {name} must be an integer")
    v = int(value)
    if (v < low or (high is not None and v > high)) and not (zero and v == 0):
        span = f"from {low:,} to {high:,}" if high is not None else f">= {low:,}"
        raise BackretrievalError(f"{name}={v:,} is out of range: {name} must be {'0 or ' if zero else ''}{span}")
    return v


def check_margin(value: Any) -> float:
    """The verdict's equivalence margin, checked: a number in (0, 1].

    Args:
        value: the margin given.

    Returns:
        The margin as a Python float.

    Raises:
        BackretrievalError: not a real number (a bool, a string, NaN), or outside (0, 1], named.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise BackretrievalError(f"margin={value!r} ({type(value).__name__}): the margin must be a number in (0, 1]")
    v = float(value)
    if not (0 < v <= 1):
        raise BackretrievalError(f"margin={v:g} is out of range: the margin (the gap between two models that matters) "
                                 "must be in (0, 1], e.g. 0.05")
    return v


def check_grid_size(n_models: int, n_pairs: int, n_seeds: int, n_image_models: int = 1) -> None:
    """A grid of at most :data:`MAX_RECORDS` records (one per model, pair, seed and image model).

    Args:
        n_models: text models.
        n_pairs: language pairs.
        n_seeds: seeds.
        n_image_models: image models (the main one and the extra ones).

    Raises:
        BackretrievalError: the grid is larger, with its size.
    """
    size = n_models * n_pairs * n_seeds * n_image_models

    def count(n: int, what: str) -> str:
        return f"{n:,} {what}{'s' * (n != 1)}"

    if size > MAX_RECORDS:
        raise BackretrievalError(
            f"the grid has {count(n_models, 'model')} x {count(n_pairs, 'pair')} x {count(n_seeds, 'seed')} x "
            f"{count(n_image_models, 'image model')} = {size:,} records; one run computes at most {MAX_RECORDS:,}: "
            "split it into several runs"
        )


@dataclasses.dataclass
class EvalConfig:
    """One evaluation grid: every model on every language pair and seed of one dataset.

    Attributes:
        dataset: the dataset name or path given to :func:`backretrieval.data.load_dataset`.
        pairs: (source, target) language codes (:func:`parse_pairs` reads ``"en-de,de-en"``).
        models: model spec strings (a list, or a comma list as on the CLI), or a dict from the
            name records carry to a spec string or a Python object (see :mod:`backretrieval.analysis.models`).
        image_model: the image model whose features BkR and CORR use (``g`` in the paper): a
            spec string (``"precomputed"`` for a dataset's feature file), or a Python object: a
            ``PythonImageModel``, a torch module, an object with ``encode(images)`` or a function
            ``f(images)``, given a list of RGB ``PIL.Image.Image`` (see
            :mod:`backretrieval.analysis.models` and :mod:`backretrieval.encoders.image.python_model`).
        n: the sample size N per pair and seed: N aligned pairs for XLR, N source and N target
            items with disjoint concepts for BkR. Must be >= 1 and no more than the data holds
            (:func:`evaluate` raises a ``DataError`` naming the pair otherwise).
        seeds: one sample (and one record per model) per seed: distinct integers from 0 to
            :data:`MAX_SEED`, at most :data:`MAX_SEEDS` of them.
        k: the K of BkR@K (``bkr_chance`` = K / N) and of hubness; must be <= ``n``.
        sim: ``"cosine"`` or ``"csls"``.
        csls_k: neighbours of the CSLS penalty (with ``sim="csls"``).
        dataset_options: keyword arguments for the dataset loader.
        extra_image_models: more image models (e.g. weaker ``g``), spec strings or objects as for
            ``image_model``; their records are in ``EvalResult.others``.
        corr_boot: bootstrap resamples of CORR per record (over source queries); 0: none.
        approx: None (exact search), ``"hnsw"`` or ``"ivf"``: XLR@K and BkR@K from
            self-calibrating FAISS top-K lists (:func:`~backretrieval.analysis.evaluate.tasks.check_approx`).
        approx_target: with ``approx``, the top-1 agreement (and top-K recall) with exact search
            the calibration must reach, in (0, 1].
        reuse_stale: reuse stored records and cached vectors computed under other versions (of
            the metrics, the libraries that compute the vectors, FAISS, ...) instead of
            recomputing them, with a warning naming the difference. Not part of :meth:`key`.
        approx_cost_check: with ``approx``, search exactly where the cost model says exact
            search is cheaper (:mod:`backretrieval.metrics.approx`); False: approximately anyway.
        measure_speed: measure a model's encoding throughput on a small fixed sample of its texts
            when this machine has none recorded (:mod:`.pricing`); False: such a model's speed is
            "not measured". Not part of :meth:`key`.
        cost: what "cheapest" means when the verdict names the cheapest model as good as the best
            (:data:`COSTS`: ``"bytes"`` per item, the default; ``"speed"``, encoding time per item;
            ``"price"`` per million items). Not part of :meth:`key`.
        margin: the gap in a metric between two models that matters, in (0, 1]: the verdict
            calls two models *equivalent* when their gap is shown to lie inside ``(-margin,
            +margin)`` (:mod:`backretrieval.analysis.decision`), and the note on power before a
            run measures the detectable gap against it. It judges the records and never changes
            them: not part of :meth:`key`.

    ``pairs`` and ``seeds`` take what the CLI takes too: ``pairs="en-de,en-ja"`` or
    ``["en-de", "en:zh-Hant"]`` (:func:`parse_pairs`), ``seeds=3`` (seeds 0, 1, 2) or a list of seeds
    (:func:`grid_seeds`); the configuration holds them as (source, target) tuples and a list of ints.

    Raises:
        BackretrievalError: when the configuration is made, each named: bad pairs (no pair, an item
            that is not SRC-TGT, the same language on both sides), bad seeds (:func:`grid_seeds`),
            ``n``, ``k``, ``csls_k`` or ``corr_boot`` not an integer or out of range (``k`` and, with
            ``sim="csls"``, ``csls_k`` at most ``n``; ``corr_boot`` 0 or 2 to :data:`MAX_CORR_BOOT`),
            an unknown ``sim``, ``margin`` not a number in (0, 1], ``dataset_options`` not a dict, no
            model, or a grid of more than
            :data:`MAX_RECORDS` records (:func:`check_grid_size`).
    """

    dataset: str
    pairs: list[tuple[str, str]]
    models: list[str] | dict[str, Any]  # spec strings, or name -> spec string or Python object (see .models)
    image_model: Any = "efficientnet-lite0"  # a spec string or a Python object (see .models)
    n: int = 1500
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    k: int = 10
    sim: str = "cosine"
    csls_k: int = 10
    dataset_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    extra_image_models: list[Any] = dataclasses.field(default_factory=list)  # e.g. weaker g's
    corr_boot: int = 0  # bootstrap resamples of CORR per record (over source queries); 0 = none
    approx: str | None = None  # "hnsw" / "ivf": XLR@K and BkR@K from self-calibrated FAISS top-K lists
    approx_target: float = 0.99  # the top-1 agreement (and top-K recall) with exact search to reach
    reuse_stale: bool = False  # reuse records / vectors of other versions, with a warning
    approx_cost_check: bool = True  # with approx: exact search where the cost model says it is cheaper
    margin: float = 0.05  # the gap that matters: equivalence margin of the verdict (not part of the key)
    measure_speed: bool = True  # measure a model's throughput on a fixed sample when none is recorded
    cost: str = "bytes"  # the cost the cheapest equivalent model is chosen by (COSTS)

    def __post_init__(self) -> None:
        self.pairs = grid_pairs(self.pairs)
        self.seeds = grid_seeds(self.seeds)
        self.n = check_count(self.n, "n", 1)
        self.k = check_count(self.k, "k", 1)
        if self.k > self.n:
            raise BackretrievalError(f"k={self.k} is larger than n={self.n}: K of BkR@K is at most N")
        if not isinstance(self.sim, str) or self.sim not in SIMILARITIES:
            raise BackretrievalError(f"sim={self.sim!r}: use one of {', '.join(SIMILARITIES)}")
        self.csls_k = check_count(self.csls_k, "csls_k", 1)
        if self.sim == "csls" and self.csls_k > self.n:
            raise BackretrievalError(f"csls_k={self.csls_k} is larger than n={self.n}: CSLS takes at most N neighbours")
        self.corr_boot = check_count(self.corr_boot, "corr_boot", 2, MAX_CORR_BOOT, zero=True)
        self.margin = check_margin(self.margin)
        if not isinstance(self.dataset_options, dict):
            raise BackretrievalError(
                f"dataset_options must be a dict of loader options, got {type(self.dataset_options).__name__}")
        if isinstance(self.models, str):  # the CLI's comma list
            self.models = [m.strip() for m in self.models.split(",") if m.strip()]
        if not isinstance(self.models, (list, tuple, dict)) or not self.models:
            raise BackretrievalError(
                f"models={self.models!r}: give model specs ('use-m,random' or ['use-m', 'random']) or a dict name -> model")
        check_grid_size(len(self.models), len(self.pairs), len(self.seeds), len(self.image_models))
        if not isinstance(self.cost, str) or self.cost not in COSTS:
            raise BackretrievalError(f"cost={self.cost!r}: use one of {', '.join(COSTS)}")
        if not isinstance(self.measure_speed, bool):
            raise BackretrievalError(f"measure_speed={self.measure_speed!r} must be True or False")

    @property
    def image_models(self) -> list[str]:
        """The names the records give the image models (``image_model``): the main one first,
        then the extra ones (duplicates dropped). A spec string is its own name; an object is
        named as :func:`~backretrieval.analysis.models.image_model_name` says."""
        return list(dict.fromkeys(image_model_name(g) for g in [self.image_model, *self.extra_image_models]))

    @property
    def image_model_name(self) -> str:
        """The name the records give the main image model (the spec string, or the object's name)."""
        return image_model_name(self.image_model)

    @property
    def approx_depth(self) -> int | None:
        """The depth the approximate route searches (the largest K its records carry, from
        :func:`~backretrieval.metrics.table.approx_ks`); None with exact search."""
        from ...metrics.table import approx_ks

        return max(approx_ks(self.n, self.k)) if self.approx else None

    def key(self) -> str:
        """Identifies the configuration for resuming (everything but the grid's extent: models,
        pairs, seeds and image models are part of each record's own key).

        ``approx`` and ``approx_target`` enter the key only when ``approx`` is set, so exact runs
        keep the keys they had before approximate search existed; ``approx_cost_check`` only
        when it is False. ``reuse_stale`` says how to treat stored records, not what they are,
        and ``margin`` how they are judged: neither enters the key, nor do ``measure_speed`` and
        ``cost`` (what the run says of the models' price, not what the records hold). The versions records are computed under are part of each
        record's own key (see :mod:`.records`).

        Returns:
            8 hex characters: a content hash of the remaining fields as sorted JSON (values
            that are not JSON, such as Python objects in ``dataset_options``, by ``str``).
        """
        grid = ("pairs", "models", "seeds", "image_model", "extra_image_models", "reuse_stale", "margin", "measure_speed",
                "cost")
        # the fields one by one, not dataclasses.asdict: that would deep-copy the models' objects
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in grid}
        if d["approx"] is None:  # exact runs keep the keys they had before --approx existed
            d.pop("approx")
            d.pop("approx_target")
        if self.approx is None or self.approx_cost_check:  # the default keeps the keys it had before the option
            d.pop("approx_cost_check")
        return content_hash(json.dumps(d, sort_keys=True, default=str), 8)


def parse_pairs(spec: str | Iterable[str]) -> list[tuple[str, str]]:
    """``"en-de,de-en"`` -> ``[("en", "de"), ("de", "en")]``. Language codes may contain
    underscores (zh_CN); use ``src:tgt`` when a code itself contains a hyphen (``en:zh-Hant``).

    Args:
        spec: comma-separated pairs, or an iterable of single pairs; blank items are skipped
            and whitespace around an item is dropped.

    Returns:
        (source, target) tuples in the order given (duplicates kept).

    Raises:
        BackretrievalError: naming the item that has no source or target, or the same language
            on both sides; or no pair at all.
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    pairs = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        sep = ":" if ":" in item else "-"
        src, _, tgt = item.partition(sep)
        if not src or not tgt:
            raise BackretrievalError(f"bad language pair {item!r}: expected SRC-TGT, e.g. en-de")
        if src == tgt:
            raise BackretrievalError(f"bad language pair {item!r}: source and target are the same language")
        pairs.append((src, tgt))
    if not pairs:
        raise BackretrievalError("no language pair given")
    return pairs


def grid_pairs(pairs: Any) -> list[tuple[str, str]]:
    """The language pairs of a grid as the CLI's ``--pairs`` spells them, or as tuples.

    Args:
        pairs: ``"en-de,en-ja"``, or a list whose items are ``"en-de"`` strings (``"en:zh-Hant"``
            for codes with hyphens) or ``(source, target)`` pairs of strings.

    Returns:
        (source, target) tuples in the order given.

    Raises:
        BackretrievalError: no pair, an item that is neither ``"SRC-TGT"`` nor a pair of language
            codes, or the same language on both sides, named.
    """
    if isinstance(pairs, str):
        return parse_pairs(pairs)
    if isinstance(pairs, (bytes, dict)) or not isinstance(pairs, Iterable):
        raise BackretrievalError(f"pairs {pairs!r}: give 'en-de,en-ja' or a list such as ['en-de'] or [('en', 'de')]")
    out: list[tuple[str, str]] = []
    for item in pairs:
        if isinstance(item, str):
            out += parse_pairs([item])
            continue
        if isinstance(item, (bytes, dict)) or not isinstance(item, Iterable):
            raise BackretrievalError(f"bad language pair {item!r}: expected 'SRC-TGT' or (source, target), e.g. ('en', 'de')")
        langs = tuple(item)
        if len(langs) != 2 or not all(isinstance(x, str) and x.strip() for x in langs):
            raise BackretrievalError(f"bad language pair {item!r}: expected two language codes, e.g. ('en', 'de')")
        src, tgt = (x.strip() for x in langs)
        if src == tgt:
            raise BackretrievalError(f"bad language pair {item!r}: source and target are the same language")
        out.append((src, tgt))
    if not out:
        raise BackretrievalError("no language pair given: pairs is empty")
    return out
