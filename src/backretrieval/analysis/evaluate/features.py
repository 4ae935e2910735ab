"""The samples of the grid and the embeddings of the rows they use.

:func:`draw_samples` draws a (pair, seed)'s matching sample (XLR) and non-matching sample (BkR);
:func:`check_needs` and :func:`same_sample_note` check and describe them right after
sampling; :class:`Features` embeds every needed row once per language through the cache and
keeps the rows' digests the records' keys are made of."""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ...core import BackretrievalError, DataError, UnsupportedLanguageError
from ...core.env import StaleVersionsWarning
from ...data import Dataset, matching, non_matching
from ...data.corpus import fingerprint
from ...encoders.text.batching import TruncationWarning
from ...encoders.base import encoder_versions
from ...encoders.registry import get_image_encoder
from ...encoders.cache import CachedImageEncoder
from ...encoders.image.precomputed_image import load_feature_rows, uses_precomputed_features, weaken_features
from .config import EvalConfig

@dataclasses.dataclass
class Samples:
    """The rows one seed draws for one language pair.

    Attributes:
        xlr: (source rows, target rows) of the matching sample, None without cross-lingual links.
        bkr: (source rows, target rows) of the non-matching sample, None without images.
    """

    xlr: tuple[np.ndarray, np.ndarray] | None
    bkr: tuple[np.ndarray, np.ndarray] | None


def draw_samples(ds: Dataset, src: str, tgt: str, n: int, seed: int, fitting: bool = False) -> Samples:
    """The samples of one pair and seed: matching rows for XLR, non-matching rows for BkR.

    Args:
        ds: the dataset.
        src, tgt: the two languages.
        n: the sample size.
        seed: the sampling seed.
        fitting: a sample that cannot be drawn at ``n`` is None instead of an error (the grid
            decides per metric family, :func:`~.power.plan_samples`).

    Returns:
        The samples; a part is None when the pair lacks what it needs (links, images), or with
        ``fitting`` when N is more than it allows.

    Raises:
        DataError: the pair has neither cross-lingual links nor images; without ``fitting``, a
            sample that cannot be drawn at ``n``.
    """
    s, t = ds[src], ds[tgt]
    has_links = s.has_concepts and t.has_concepts
    has_images = s.has_images and t.has_images
    if not has_links and not has_images:
        raise DataError(
            f"{ds.name} {src}-{tgt}: nothing to evaluate: no cross-lingual links (for XLR) and no images (for BkR)"
        )
    def draw(sampler, has: bool):
        if not has:
            return None
        try:
            return sampler(s, t, n, seed)
        except DataError:
            if not fitting:
                raise
            return None

    return Samples(draw(matching, has_links), draw(non_matching, has_images))


def check_image_model(spec: Any, corpora: Iterable[Any], dataset: str | None = None) -> None:
    """Whether image model ``spec`` can give the image features of ``corpora``: a model that
    encodes image files (every Python object does) needs image files, ``precomputed`` (and its
    variants) a feature file.

    Args:
        spec: the image model, e.g. ``"efficientnet-lite0"``, ``"precomputed@noise=4"``, or a
            ``PythonImageModel`` (named by its ``name``).
        corpora: the corpora (one per language) whose images are needed.
        dataset: how the error names the dataset (default: the corpora's dataset name).

    Raises:
        DataError: naming the model, the dataset and the language that do not fit together.
    """
    precomputed = isinstance(spec, str) and uses_precomputed_features(spec)
    spec = spec if isinstance(spec, str) else spec.name
    for c in corpora:
        if not c.has_images:
            continue
        name = dataset or c.dataset
        if precomputed and c.image_features is None:
            raise DataError(
                f"image model {spec!r} reads a precomputed image-feature file, but dataset {name} ({c.lang}) "
                "has image files and no feature file: choose an image model that encodes images, e.g. efficientnet-lite0"
            )
        if not precomputed and c.image_paths is None:
            raise DataError(
                f"image model {spec!r} needs image files, but dataset {name} ({c.lang}) has only precomputed "
                f"image features ({c.image_features}): use image model 'precomputed' (or 'precomputed@noise=S' for a "
                "weaker g)"
            )


def _takes_ids(fit: Callable[..., Any]) -> bool:
    """Whether a model's ``fit`` takes ``ids_by_lang`` (language -> the ids of its texts)."""
    import inspect

    try:
        return "ids_by_lang" in inspect.signature(fit).parameters
    except (TypeError, ValueError):
        return False


class Features:
    """Embeddings of the needed rows of each language, computed once through the cache.

    Args:
        ds: the dataset.
        needed: language -> the dataset rows any sample uses.
        image_models: the image models whose features are computed up front.
        progress: show progress bars.
        log: where notes go.
        dataset_label: how errors name the dataset.
        reuse_stale: reuse cached image features whose library versions differ (with a warning).
        notes: said through ``log`` once every image model has passed its check, before anything
            is encoded (the low-power note of the grid).
    """

    def __init__(
        self, ds: Dataset, needed: dict[str, np.ndarray], image_models: Sequence[str] | Mapping[str, Any], progress: bool,
        log: Callable[[str], None] = lambda msg: None, dataset_label: str | None = None, reuse_stale: bool = False,
        notes: Sequence[str] = (),
    ):
        self.ds, self.needed, self.progress, self.log = ds, needed, progress, log
        self.reuse_stale = reuse_stale
        self.pos = {lang: {int(r): i for i, r in enumerate(rows)} for lang, rows in needed.items()}
        self.corpora = {lang: ds[lang].subset(rows) for lang, rows in needed.items()}
        # name -> spec string or PythonImageModel (a list of specs names each by itself)
        models = dict(image_models) if isinstance(image_models, Mapping) else {g: g for g in image_models}
        for g in models.values():  # every image model fits the data before anything is encoded
            check_image_model(g, self.corpora.values(), dataset_label)
        for note in notes:  # what the run should know, said once its inputs passed their checks
            log(note)
        self.unsupported: dict[str, dict[str, str]] = {}  # model -> language -> why it cannot embed it
        # per needed row: digests of its content and of its image (for the records' keys)
        self.row_digests = {lang: c.row_digests() for lang, c in self.corpora.items()}
        self.image_digests = {lang: c.image_digests() for lang, c in self.corpora.items()}
        self.image_versions: dict[str, str] = {}  # image model name -> its version (cache namespace)
        self.image_lib_versions: dict[str, dict[str, str]] = {}  # image model name -> its versions (libraries)
        self.images: dict[str, dict[str, np.ndarray]] = {g: self._encode_images(g, m) for g, m in models.items()}

    def _encode_images(self, name: str, model: Any) -> dict[str, np.ndarray]:
        """The image features of image model ``model`` (a spec string or a ``PythonImageModel``,
        called ``name`` by the records) for every language with images: encoded from the image
        files through the cache (a Python object here, in this process), or
        (``precomputed[@noise=S]``) read from the dataset's feature file and weakened as the spec says."""
        enc = get_image_encoder(model) if isinstance(model, str) else model
        self.image_versions[name] = str(enc.version)
        self.image_lib_versions[name] = encoder_versions(enc)
        precomputed = isinstance(model, str) and uses_precomputed_features(model)
        if not precomputed:
            enc = CachedImageEncoder(enc, progress=self.progress, reuse_stale=self.reuse_stale)
        out = {}
        for lang, c in self.corpora.items():
            if not c.has_images:
                continue
            if precomputed:
                x = load_feature_rows(c.image_features, c.image_rows, f"{c.dataset}/{lang} images")
                out[lang] = weaken_features(enc, x, self.image_digests[lang])
            else:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", StaleVersionsWarning)
                    out[lang] = enc.encode_images(c.image_paths)
                self._pass_on(caught)
        return out

    def _pass_on(self, caught: list[warnings.WarningMessage]) -> None:
        """Truncation and stale-version notes go to the log; other warnings stay warnings."""
        for w in caught:
            if issubclass(w.category, (TruncationWarning, StaleVersionsWarning)):
                self.log(str(w.message))
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    def text(self, model: Any, name: str) -> dict[str, np.ndarray]:
        """Every needed text of every language, embedded with ``model`` (fitted first if it has a
        ``fit``). A model that declares ``wants_extra = ("title", "body")`` also gets those
        columns of the corpus as ``extra={name: [...]}``. ``name`` is what the records call the
        model (the user's name in ``EvalConfig.models``, not the encoder's spec): errors and
        :attr:`unsupported` use it. A language the model declines (``UnsupportedLanguageError``)
        is left out of the result and noted in ``unsupported[name]``.

        Args:
            model: a text model.
            name: the model's name in the records.

        Returns:
            language -> embeddings of the needed rows, in the order of ``needed``.
        """
        corpora = self.corpora
        if hasattr(model, "fit") and callable(model.fit):
            # a fit that reads the vectors of a model looked up by id (a variant of precomputed:) gets the ids too
            by_id = {"ids_by_lang": {lang: c.ids for lang, c in corpora.items()}} if _takes_ids(model.fit) else {}
            model.fit({lang: c.texts for lang, c in corpora.items()}, **by_id)
        wanted = tuple(getattr(model, "wants_extra", ()) or ())
        out = {}
        for lang, c in corpora.items():
            kw: dict[str, Any] = {}
            if wanted:
                missing = [w for w in wanted if w not in c.extra]
                if missing:
                    raise DataError(
                        f"{c.dataset}/{lang}: text model {name!r} needs the column(s) "
                        f"{', '.join(missing)}, which this dataset does not have"
                    )
                kw["extra"] = {w: c.extra[w] for w in wanted}
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", TruncationWarning)
                    warnings.simplefilter("always", StaleVersionsWarning)
                    out[lang] = model.encode(c.texts, lang, ids=c.ids, **kw)
            except UnsupportedLanguageError as e:  # the grid skips the model's pairs with this language
                self.unsupported.setdefault(name, {})[lang] = str(e)
            self._pass_on(caught)
        return out

    def fit_fingerprint(self) -> str:
        """Fingerprint of what a model with a ``fit`` hook is fitted on: every needed row.

        Returns:
            The fingerprint.
        """
        return fingerprint(d for lang in self.corpora for d in (lang.encode(), *self.row_digests[lang]))

    def sample_fingerprint(self, lang: str, parts: Sequence[np.ndarray | None], images: bool) -> str:
        """Fingerprint of the rows of ``lang`` a sample uses (its XLR part, then its BkR part): of
        their content, or (``images=True``) of their images.

        Args:
            lang: the language.
            parts: the sample's rows of ``lang`` (XLR part, BkR part; None for a missing part).
            images: fingerprint the images instead of the content.

        Returns:
            The fingerprint.
        """
        table = self.image_digests[lang] if images else self.row_digests[lang]
        out: list[bytes] = []
        for tag, part in zip((b"xlr", b"bkr"), parts):
            if part is not None:
                out.append(tag)
                out.extend(table[i] for i in self.rows(lang, part))
        return fingerprint(out)

    def rows(self, lang: str, idx: np.ndarray) -> np.ndarray:
        """Positions in the embeddings of ``lang`` of the dataset rows ``idx``.

        Args:
            lang: the language.
            idx: dataset rows (all among the needed rows).

        Returns:
            int64 positions, one per row.
        """
        p = self.pos[lang]
        return np.fromiter((p[int(i)] for i in idx), dtype=np.int64, count=len(idx))



NEEDS = {
    "xlr": "cross-lingual links (rows of two languages sharing a concept) for the ground truth XLR",
    "bkr": "images (image files or an image-feature file) for BkR and CORR",
}


def check_needs(dataset: str, samples: dict[tuple[str, str, int], Samples], needs: Sequence[str], purpose: str) -> None:
    """Right after sampling, before any encoding: every pair has what ``purpose`` needs.

    Args:
        dataset: the dataset's name, for the message.
        samples: (src, tgt, seed) -> its samples.
        needs: what is needed: ``"xlr"`` (cross-lingual links), ``"bkr"`` (images).
        purpose: what needs it, for the message.

    Raises:
        BackretrievalError: an unknown requirement.
        DataError: a pair lacks what is needed.
    """
    unknown = set(needs) - set(NEEDS)
    if unknown:
        raise BackretrievalError(f"unknown requirement(s) {', '.join(sorted(unknown))}: use {', '.join(NEEDS)}")
    for (s, t, _), sm in samples.items():
        for need in needs:
            if getattr(sm, need) is None:
                raise DataError(f"{purpose} needs {NEEDS[need]}, but dataset {dataset} ({s}-{t}) has none")


def same_sample_note(samples: dict[tuple[str, str, int], Samples], cfg: EvalConfig) -> str | None:
    """One sentence when every seed draws the same sample of a pair (N is all there is).

    Args:
        samples: (src, tgt, seed) -> its samples.
        cfg: the configuration (its pairs and seeds).

    Returns:
        The sentence, or None when the seeds draw different samples (or there is one seed).
    """
    if len(cfg.seeds) < 2:
        return None

    def rows(part):
        return None if part is None else (frozenset(part[0].tolist()), frozenset(part[1].tolist()))

    found = []
    for s, t in cfg.pairs:
        sms = [samples[(s, t, seed)] for seed in cfg.seeds]
        same = []
        for name, what in (("xlr", f"all the concepts {s} and {t} share (XLR)"),
                           ("bkr", f"all the {s} and {t} items a non-matching sample can hold (BkR)")):
            first = rows(getattr(sms[0], name))
            if first is not None and all(rows(getattr(sm, name)) == first for sm in sms[1:]):
                same.append(what)
        if same:
            found.append(f"{s}->{t} ({' and '.join(same)})")
    if not found:
        return None
    return (
        f"every seed draws the same sample: N={cfg.n} is all the data has for {'; '.join(found)}, so the "
        f"{len(cfg.seeds)} seeds differ only in the order of the items and their spread (sd 0) measures nothing; "
        "give a smaller N for a spread over samples"
    )


def same_text_notes(ds: Dataset, samples: dict[tuple[str, str, int], Samples],
                    log: Callable[[str], None] = lambda msg: None) -> list[str]:
    """One sentence (said through ``log``) per language whose sampled texts are all the same
    text: every text model gives them the same vector, so every model ties, ranks every item
    last (ties count against the model) and scores at or below chance.

    Args:
        ds: the dataset.
        samples: (src, tgt, seed) -> its samples.
        log: receives each sentence.

    Returns:
        The sentences, one per such language.
    """
    rows: dict[str, set[int]] = {}
    for (s, t, _), sm in samples.items():
        for part in (sm.xlr, sm.bkr):
            if part is not None:
                rows.setdefault(s, set()).update(part[0].tolist())
                rows.setdefault(t, set()).update(part[1].tolist())
    out = []
    for lang, used in rows.items():
        texts = {ds[lang].texts[i] for i in used}
        if len(used) > 1 and len(texts) == 1:
            text = next(iter(texts))
            shown = text if len(text) <= 40 else text[:37] + "..."
            out.append(f"every sampled {lang} text is the same text ({shown!r}, {len(used)} items): no text model can "
                       f"tell these items apart, so every model ties and scores at or below chance")
            log(out[-1])
    return out
