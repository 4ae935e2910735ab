"""``triplet:DIR`` / ``tripletxl:DIR`` -- the inference half of the Triplet / TripletXL models.

Backretrieval paper, Sec. 3.2: a frozen multilingual encoder embeds an item's *title* and
*body* separately; a siamese network (the same stack of dense layers with ReLU, applied to
both) maps them to ``x_rt`` and ``x_rb``; the item's representation is ``concat(x_rt, x_rb)``.
The training half is :mod:`backretrieval.train.triplet`.

Model directory: the one format of :mod:`.modeldir`, kind ``"triplet"`` (written by
:func:`save_model`, read by :func:`load_model`):

* ``model.json`` -- ``hyper_parameters`` (the estimator's parameters: ``method``
  ``"triplet"|"tripletxl"``, ``base`` (the encoder spec), ``layers``, ``final_relu``, ``tower``,
  ``lr``, ...) and the info (``input_dim``, ``languages``, sizes, ``"uses_cross_lingual_links":
  false``, ...);
* ``weights.npz`` -- plain float32 arrays ``w0, b0, w1, b1, ...`` (``w`` is (out, in), as in
  ``torch.nn.Linear``); no pickled objects.
* ``tower``: ``"mlp"`` (the paper's tower, ``relu(... relu(x W0^T + b0) ...)``) or
  ``"residual"`` (``x + f(x)``, ``f`` the dense ReLU layers without a final ReLU, its last
  layer mapping back to the base dimension).

Directories in the legacy layout (``model.json`` with ``"format": 1``; one without
``"tower"`` is an ``"mlp"`` tower) are read by :mod:`.modeldir_legacy` and give the same vectors.

Residual tower. Trained from ``f``'s last layer set to zero, ``x + f(x)`` starts as the
identity: the untrained model's representation is exactly the base model's title and body
vectors (normalised and concatenated), so training starts from the base's own cross-lingual
geometry and can only move away from it as far as the losses ask.

Representation. Each half is L2-normalised before the concatenation, so the cosine of two
items is the mean of their title-title and body-body cosines (each half counts equally; the
paper leaves the weighting open). A half that is all zero (every ReLU unit off) stays zero.

Where titles and bodies come from, in order:

1. ``encode(texts, lang, extra={"title": [...], "body": [...]})`` -- the evaluation grid passes
   the corpus' ``extra["title"]`` / ``extra["body"]`` columns because this encoder declares
   ``wants_extra = ("title", "body")`` (ddtp: synopsis / long description; emoji-cldr: CLDR
   name / keywords; generic files: the ``title`` / ``body`` columns);
2. otherwise each text is split by :func:`split_text`: the first line is the title, the rest
   the body (ddtp's ``text`` is exactly ``synopsis + "\\n" + body``); a one-line text is both.

An empty body is replaced by the title and an empty title by the body (emoji-cldr items whose
only keyword is the name have an empty body); an item with neither is an error naming it.
Titles and bodies go through the embedding cache of the base model, so re-running an
evaluation re-encodes nothing; the network itself is a few small matrix products in numpy.
The vectors depend on more than the text (the ``extra`` columns), so the encoder is not cached as a
whole (``cacheable = False``).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...core import DataError, EncoderError, normalize_rows
from ...core.canonical import matmul
from .modeldir import WEIGHTS_FILE, ModelDir, read_model_dir, write_model_dir
from ..text.batching import as_texts
from ..base import Example, check_embeddings
from ..registry import get_text_encoder, register_text

METHODS = ("triplet", "tripletxl")
TOWERS = ("mlp", "residual")


# ----------------------------------------------------------------------------- titles and bodies
def split_text(text: str) -> tuple[str, str]:
    """``"title\\nbody..."`` -> ``("title", "body...")``; a one-line text is title and body."""
    head, sep, rest = text.strip().partition("\n")
    head, rest = head.strip(), rest.strip()
    if not sep or not rest:
        return head, head
    return head, rest


def titles_and_bodies(
    texts: Sequence[str],
    extra: Mapping[str, Sequence[str]] | None,
    what: str,
    ids: Sequence[str] | None = None,
) -> tuple[list[str], list[str]]:
    """Titles and bodies of ``texts`` (see the module docstring for the rules)."""
    n = len(texts)
    if extra is not None and "title" in extra and "body" in extra:
        titles, bodies = list(extra["title"]), list(extra["body"])
        if len(titles) != n or len(bodies) != n:
            raise DataError(f"{what}: {n} texts but {len(titles)} titles and {len(bodies)} bodies")
    else:
        pairs = [split_text(t) for t in texts]
        titles, bodies = [p[0] for p in pairs], [p[1] for p in pairs]
    out_t, out_b = [], []
    for i, (t, b) in enumerate(zip(titles, bodies)):
        t = "" if t is None else str(t).strip()
        b = "" if b is None else str(b).strip()
        if not t and not b:
            label = f"id {ids[i]!r}" if ids is not None else f"row {i}"
            raise DataError(f"{what}: {label} has neither a title nor a body")
        out_t.append(t or b)
        out_b.append(b or t)
    return out_t, out_b


# ----------------------------------------------------------------------------- the network
Params = list[tuple[np.ndarray, np.ndarray]]  # [(W (out, in), b (out,)), ...]


def head_forward(params: Params, x: np.ndarray, final_relu: bool = True, tower: str = "mlp") -> np.ndarray:
    """The siamese tower in numpy, with canonical products (:func:`backretrieval.core.canonical.matmul`:
    the same bits on every BLAS kernel).

    Args:
        params: ``[(W (out, in), b (out,)), ...]`` of the dense layers, input first.
        x: (n, d) base-encoder vectors.
        final_relu: whether the ``"mlp"`` tower's last layer has a ReLU (ignored by ``"residual"``).
        tower: ``"mlp"`` -- ``relu(... relu(x W0^T + b0) ... W_last^T + b_last)``; ``"residual"`` --
            ``x + f(x)`` with ``f`` the same stack without a final ReLU (its output has x's width).

    Returns:
        (n, out) float32 outputs.

    Raises:
        EncoderError: an unknown tower, or a residual tower whose output width is not d.
    """
    if tower not in TOWERS:
        raise EncoderError(f"unknown tower {tower!r}; use one of {', '.join(TOWERS)}")
    x = np.asarray(x, dtype=np.float32)
    h = x
    for i, (w, b) in enumerate(params):
        h = matmul(h, w.T) + b  # canonical: the same bits on every BLAS kernel
        if i < len(params) - 1 or (final_relu and tower == "mlp"):
            np.maximum(h, 0, out=h)
    if tower == "residual":
        if h.shape != x.shape:
            raise EncoderError(f"residual tower: output width {h.shape[1]} differs from the input width {x.shape[1]}")
        h = x + h
    return h.astype(np.float32, copy=False)


def _unit_halves(h: np.ndarray) -> np.ndarray:
    return normalize_rows(h)


def represent(x_rt: np.ndarray, x_rb: np.ndarray) -> np.ndarray:
    """The item representation: ``concat(x_rt / |x_rt|, x_rb / |x_rb|)``, float32."""
    return np.ascontiguousarray(np.concatenate([_unit_halves(x_rt), _unit_halves(x_rb)], axis=1), dtype=np.float32)


# ----------------------------------------------------------------------------- model directory
def save_model(
    model_dir: str | Path, params: Params, *, hyper_parameters: Mapping[str, Any], info: Mapping[str, Any] | None = None,
    files: Mapping[str, str | bytes] | None = None,
) -> Path:
    """Write a ``triplet`` model directory (:func:`.modeldir.write_model_dir`; ``model.json`` last).

    Args:
        model_dir: the directory (created).
        params: ``[(W (out, in), b (out,)), ...]``, stored as ``w0, b0, w1, b1, ...`` (float32).
        hyper_parameters: at least ``method`` and ``base``; ``final_relu`` (default True) and
            ``tower`` (default ``"mlp"``) shape the network.
        info: what training recorded; ``input_dim`` is added.
        files: extra files (e.g. the training history), written before ``model.json``.

    Returns:
        The directory.
    """
    arrays = {}
    for i, (w, b) in enumerate(params):
        arrays[f"w{i}"] = np.ascontiguousarray(w, dtype=np.float32)
        arrays[f"b{i}"] = np.ascontiguousarray(b, dtype=np.float32)
    hp = {"final_relu": True, "tower": "mlp", **dict(hyper_parameters)}
    return write_model_dir(model_dir, "triplet", hyper_parameters=hp,
                           info={**dict(info or {}), "input_dim": int(params[0][0].shape[1])}, arrays=arrays, files=files)


def load_model(model_dir: str | Path) -> tuple[ModelDir, Params]:
    """``(model directory, params)`` of a saved Triplet/TripletXL model (either format).

    Raises:
        EncoderError: the directory is missing, incomplete or not a triplet model; a layer is
            missing, misshapen or not finite; an unknown tower; a residual tower that does not
            end at the input width.
    """
    md = read_model_dir(model_dir, "triplet")
    hp, where = md.hyper_parameters, md.path / md.header
    if hp.get("method") not in METHODS or not hp.get("base"):
        raise EncoderError(f"triplet model: {where} is not a triplet/tripletxl model (method {hp.get('method')!r})")
    w_path = md.path / WEIGHTS_FILE
    params: Params = []
    prev = int(md.info.get("input_dim", -1))
    n_layers = sum(1 for k in md.arrays if k.startswith("w"))
    for i in range(n_layers):
        w, b = md.arrays.get(f"w{i}"), md.arrays.get(f"b{i}")
        if w is None or b is None or w.ndim != 2 or b.shape != (w.shape[0],) or w.shape[1] != prev:
            raise EncoderError(f"triplet model: layer {i} of {w_path} is missing or has the wrong shape")
        if not (np.isfinite(w).all() and np.isfinite(b).all()):
            raise EncoderError(f"triplet model: layer {i} of {w_path} holds NaN or inf")
        params.append((w.astype(np.float32, copy=False), b.astype(np.float32, copy=False)))
        prev = w.shape[0]
    if not params:
        raise EncoderError(f"triplet model: {where} lists no layers")
    tower = hp.get("tower", "mlp")
    if tower not in TOWERS:
        raise EncoderError(f"triplet model: {where} names an unknown tower {tower!r} (known: {', '.join(TOWERS)})")
    if tower == "residual" and prev != int(md.info["input_dim"]):
        raise EncoderError(f"triplet model: residual tower of {where} ends at width {prev}, not the input width {md.info['input_dim']}")
    return md, params


# ----------------------------------------------------------------------------- the encoder
_building = threading.local()  # the model folders whose base encoders are being built, outermost first
MAX_BASE_DEPTH = 8  # a trained model on a trained model on ... : more levels than any real stack


def _build_base(model_dir: Path, name: str, spec: str, options: Mapping[str, Any]) -> Any:
    """The base model ``spec`` of the model in ``model_dir``; a base that names the model
    itself, or a cycle of models that are each other's bases, is an error naming the chain."""
    chain: list[tuple[Path, str]] = getattr(_building, "chain", [])
    here = model_dir.resolve()
    if any(d == here for d, _ in chain) or len(chain) >= MAX_BASE_DEPTH:
        names = " -> ".join(n for _, n in chain) + f" -> {name}"
        why = "is its own base" if any(d == here for d, _ in chain) else f"stacks more than {MAX_BASE_DEPTH} trained models"
        raise EncoderError(f"{chain[0][1]}: the model {why} ({names}); its base must be another text model")
    _building.chain = [*chain, (here, name)]
    try:
        return get_text_encoder(spec, **options)
    finally:
        _building.chain = chain


class TripletEncoder:
    """A trained Triplet / TripletXL model as a text model (see the module docstring)."""

    wants_extra = ("title", "body")  # the evaluation grid passes these corpus columns as ``extra``
    cacheable = False

    def __init__(self, model_dir: str | Path, method: str, *, progress: bool = False, base_options: Mapping[str, Any] | None = None):
        self.model_dir = Path(model_dir).expanduser()
        self.model, self.params = load_model(self.model_dir)
        hp = self.model.hyper_parameters
        if hp["method"] != method:
            raise EncoderError(f"{method}:{model_dir} holds a {hp['method']!r} model; ask for it as {hp['method']}:{model_dir}")
        self.name = f"{method}:{model_dir}"
        self.method = method
        self.base_spec = str(hp["base"])
        self.final_relu = bool(hp.get("final_relu", True))
        self.tower = str(hp.get("tower", "mlp"))
        self.progress = bool(progress)
        self._base_options = dict(base_options or {})
        self._base: Any = None
        self.dim = 2 * int(self.params[-1][0].shape[0])
        self._head_version = f"{method}-f2-{self.model.files_hash()}"
        base = _build_base(self.model_dir, self.name, self.base_spec, self._base_options)
        if self.progress and not getattr(base, "cacheable", True):  # the cache shows no bar for it: its own does
            base = _build_base(self.model_dir, self.name, self.base_spec, {"progress": True, **self._base_options})
        self.languages = getattr(base, "languages", None)
        self._base_raw = base

    @property
    def version(self) -> str:
        """Content hash of the model files, plus the base model's version (its vectors feed the head)."""
        return f"{self._head_version}+{self._base_raw.version}"

    @property
    def versions(self) -> dict[str, str]:
        """The base model's versions (libraries and settings) and numpy's (the head's products)."""
        from ...core import env
        from ..base import encoder_versions

        return {**encoder_versions(self._base_raw), **env.versions_of(("numpy",))}

    def base(self) -> Any:
        """The frozen base model, behind the embedding cache."""
        if self._base is None:
            from ..cache import CachedTextEncoder

            self._base = CachedTextEncoder(self._base_raw, progress=self.progress)
        return self._base

    def embed_vectors(self, x_title: np.ndarray, x_body: np.ndarray) -> np.ndarray:
        """Representations from base-encoder vectors of titles and bodies."""
        return represent(head_forward(self.params, x_title, self.final_relu, self.tower),
                         head_forward(self.params, x_body, self.final_relu, self.tower))

    def encode(
        self,
        texts: Sequence[str],
        lang: str,
        *,
        ids: Sequence[str] | None = None,
        extra: Mapping[str, Sequence[str]] | None = None,
        **kw: Any,
    ) -> np.ndarray:
        """Representations of ``texts``; titles and bodies from ``extra`` when given, else split
        from the texts (see the module docstring)."""
        what = f"{self.name}/{lang}"
        texts = as_texts(texts, ids, what)
        titles, bodies = titles_and_bodies(texts, extra, what, ids)
        base = self.base()
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        x_t = base.encode(titles, lang)
        x_b = base.encode(bodies, lang)
        out = self.embed_vectors(x_t, x_b)
        dead = ~out.any(axis=1)
        if dead.any():
            i = int(np.argmax(dead))
            label = f"id {ids[i]!r}" if ids is not None else f"row {i}"
            raise EncoderError(f"{what}: the network maps both the title and the body of {label} to zero (all ReLU units off)")
        return check_embeddings(out, len(texts), what, ids)

    def __repr__(self) -> str:
        return f"<TripletEncoder {self.name} {self.version}>"


def _example(method: str):
    def example(folder: Path) -> Example:
        """Two one-layer heads (512 -> 8, no final ReLU, seeds 0 and 1) on the ``random`` base."""
        dirs = []
        for seed in (0, 1):
            rng = np.random.default_rng(seed)
            params = [(rng.standard_normal((8, 512)) / np.sqrt(512), rng.standard_normal(8))]
            hp = {"method": method, "base": "random", "final_relu": False}
            dirs.append(str(save_model(folder / f"{method}-seed{seed}", params, hyper_parameters=hp)))
        return Example(arg=dirs[0], other=(dirs[1], {}))

    return example


def _factory(method: str) -> Callable[..., TripletEncoder]:
    def factory(path: str, *, progress: bool = False, base_options: Mapping[str, Any] | None = None) -> TripletEncoder:
        """The saved model at ``path``; ``base_options`` go to its base text model."""
        return TripletEncoder(path, method, progress=progress, base_options=base_options)

    return factory


for _method, _desc in (
    ("triplet", "Triplet model (paper Sec. 3.2, Eq. 1) trained on monolingual title/body pairs on top of a frozen model"),
    ("tripletxl", "TripletXL model (paper Sec. 3.2, Eq. 1 + beta * Eq. 2) trained on monolingual title/body pairs"),
):
    register_text(_method, description=_desc, requires="numpy", example=_example(_method))(_factory(_method))
