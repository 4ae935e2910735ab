"""``triplet:DIR`` / ``tripletxl:DIR`` -- the inference half of the Triplet / TripletXL models.

Backretrieval paper, Sec. 3.2: a frozen multilingual encoder embeds an item's *title* and
*body* separately; a siamese network (the same stack of dense layers with ReLU, applied to
both) maps them to ``x_rt`` and ``x_rb``; the item's representation is ``concat(x_rt, x_rb)``.
The training half is :mod:`backretrieval.train.triplet`; this module owns the model-directory
format so that both halves agree on it.

Model directory (written atomically by :func:`save_model`):

* ``model.json`` -- ``{"format": 1, "method": "triplet"|"tripletxl", "base": "<encoder spec>",
  "input_dim": d, "layers": [h1, h2], "final_relu": true, "hyper": {...}, ...}``;
* ``weights.npz`` -- plain float32 arrays ``w0, b0, w1, b1, ...`` (``w`` is (out, in), as in
  ``torch.nn.Linear``); no pickled objects.
* ``"tower"`` in ``model.json``: ``"mlp"`` (the paper's tower, ``relu(... relu(x W0^T + b0) ...)``)
  or ``"residual"`` (``x + f(x)``, ``f`` the dense ReLU layers without a final ReLU, its last
  layer mapping back to the base dimension); a directory without the key (written before the
  option existed) is an ``"mlp"`` tower.

Residual tower. Trained from ``f``'s last layer set to zero, ``x + f(x)`` starts as the
identity: the untrained model's representation is exactly the base encoder's title and body
vectors (normalised and concatenated), so training starts from the base's own cross-lingual
geometry and can only move away from it as far as the losses ask (issue 18, item 3).

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
Titles and bodies go through the embedding cache of the base encoder, so re-running an
evaluation re-encodes nothing; the network itself is a few small matrix products in numpy.
The vectors depend on more than the text (the ``extra`` columns), so the encoder is not cached as a
whole (``cacheable = False``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..core import DataError, EncoderError, atomic_save_npz, atomic_write_text, content_hash, normalize_rows
from ._text import as_texts, check_options
from .base import EncoderInfo, check_embeddings, get_text_encoder, register_text

FORMAT = 1
MODEL_FILE = "model.json"
WEIGHTS_FILE = "weights.npz"
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
    """The siamese tower in numpy.

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
        h = h @ w.T + b
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
def save_model(model_dir: str | Path, config: Mapping[str, Any], params: Params) -> None:
    """Write ``model.json`` and ``weights.npz`` atomically (weights first: ``model.json`` marks a
    complete directory)."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for i, (w, b) in enumerate(params):
        arrays[f"w{i}"] = np.ascontiguousarray(w, dtype=np.float32)
        arrays[f"b{i}"] = np.ascontiguousarray(b, dtype=np.float32)
    atomic_save_npz(model_dir / WEIGHTS_FILE, **arrays)
    cfg = dict(config)
    cfg["format"] = FORMAT
    cfg["layers"] = [int(w.shape[0]) for w, _ in params]
    cfg["input_dim"] = int(params[0][0].shape[1])
    atomic_write_text(model_dir / MODEL_FILE, json.dumps(cfg, indent=1, sort_keys=True, default=str))


def load_model(model_dir: str | Path) -> tuple[dict[str, Any], Params]:
    """``(config, params)`` of a saved model directory; EncoderError naming what is wrong."""
    model_dir = Path(model_dir).expanduser()
    cfg_path, w_path = model_dir / MODEL_FILE, model_dir / WEIGHTS_FILE
    if not model_dir.is_dir():
        raise EncoderError(f"triplet model: not a folder: {model_dir}")
    for p in (cfg_path, w_path):
        if not p.is_file():
            raise EncoderError(f"triplet model: {p} is missing (train one with `backretrieval train triplet|tripletxl`)")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EncoderError(f"triplet model: cannot read {cfg_path}: {e}") from None
    if cfg.get("format") != FORMAT or cfg.get("method") not in METHODS or not cfg.get("base"):
        raise EncoderError(f"triplet model: {cfg_path} is not a format-{FORMAT} triplet/tripletxl model file")
    try:
        with np.load(w_path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise EncoderError(f"triplet model: cannot read {w_path}: {e}") from None
    n_layers = len(cfg.get("layers") or [])
    params: Params = []
    prev = int(cfg.get("input_dim", -1))
    for i in range(n_layers):
        w, b = arrays.get(f"w{i}"), arrays.get(f"b{i}")
        if w is None or b is None or w.ndim != 2 or b.shape != (w.shape[0],) or w.shape[1] != prev:
            raise EncoderError(f"triplet model: layer {i} of {w_path} is missing or has the wrong shape")
        if not (np.isfinite(w).all() and np.isfinite(b).all()):
            raise EncoderError(f"triplet model: layer {i} of {w_path} holds NaN or inf")
        params.append((w.astype(np.float32, copy=False), b.astype(np.float32, copy=False)))
        prev = w.shape[0]
    if not params:
        raise EncoderError(f"triplet model: {cfg_path} lists no layers")
    cfg.setdefault("tower", "mlp")  # directories written before the option existed
    if cfg["tower"] not in TOWERS:
        raise EncoderError(f"triplet model: {cfg_path} names an unknown tower {cfg['tower']!r} (known: {', '.join(TOWERS)})")
    if cfg["tower"] == "residual" and prev != int(cfg["input_dim"]):
        raise EncoderError(f"triplet model: residual tower of {cfg_path} ends at width {prev}, not the input width {cfg['input_dim']}")
    return cfg, params


def model_version(model_dir: str | Path) -> str:
    """Content hash of the model files: changes whenever the vectors would change."""
    model_dir = Path(model_dir)
    data = (model_dir / MODEL_FILE).read_bytes() + b"\0" + (model_dir / WEIGHTS_FILE).read_bytes()
    return content_hash(data, 8)


# ----------------------------------------------------------------------------- the encoder
class TripletEncoder:
    """A trained Triplet / TripletXL model as a text encoder (see the module docstring)."""

    wants_extra = ("title", "body")  # the evaluation grid passes these corpus columns as ``extra``
    cacheable = False

    def __init__(self, model_dir: str | Path, method: str, *, progress: bool = False, base_options: Mapping[str, Any] | None = None):
        self.model_dir = Path(model_dir).expanduser()
        self.config, self.params = load_model(self.model_dir)
        if self.config["method"] != method:
            raise EncoderError(
                f"{method}:{model_dir} holds a {self.config['method']!r} model; ask for it as "
                f"{self.config['method']}:{model_dir}"
            )
        self.name = f"{method}:{model_dir}"
        self.method = method
        self.base_spec = str(self.config["base"])
        self.final_relu = bool(self.config.get("final_relu", True))
        self.tower = str(self.config["tower"])
        self.progress = bool(progress)
        self._base_options = dict(base_options or {})
        self._base: Any = None
        self.dim = 2 * int(self.params[-1][0].shape[0])
        self._head_version = f"{method}-f{FORMAT}-{model_version(self.model_dir)}"
        base = get_text_encoder(self.base_spec, **self._base_options)
        self.languages = getattr(base, "languages", None)
        self._base_raw = base

    @property
    def version(self) -> str:
        """Content hash of the model files, plus the base encoder's version (its vectors feed the head)."""
        return f"{self._head_version}+{self._base_raw.version}"

    def base(self) -> Any:
        """The frozen base encoder, behind the embedding cache."""
        if self._base is None:
            from .cache import CachedTextEncoder

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


def _factory(method: str):
    def factory(arg: str | None = None, **options: Any) -> TripletEncoder:
        check_options(method, options, ("progress", "base_options"))
        return TripletEncoder(arg, method, **options)

    return factory


for _method, _desc in (
    ("triplet", "Triplet model (paper Sec. 3.2, Eq. 1) trained on monolingual title/body pairs on top of a frozen encoder"),
    ("tripletxl", "TripletXL model (paper Sec. 3.2, Eq. 1 + beta * Eq. 2) trained on monolingual title/body pairs"),
):
    register_text(EncoderInfo(name=_method, factory=_factory(_method), description=_desc, kind="text", takes_arg=True, requires="numpy"))
