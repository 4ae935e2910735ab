"""Named, reproducible variants of any text model: a model family of graded quality, and the
forms a model is served in.

The Backretrieval paper's meta-evaluation correlates BkR with XLR across "methods and their
variations". A variant is written ``BASE@OP=VALUE`` (or ``BASE@FORM``) and can be stacked
(``use-m@trunc=64@noise=0.5``, ``use-m@trunc=256@int8``):

* ``trunc=D`` -- keep the first D dimensions (Matryoshka truncation; the cosine renormalises
  them, and a serving form normalises before it quantises).
* ``pca=D`` -- project on the first D principal components, fitted on all evaluated texts of the
  run (every language together); needs the ``fit`` hook, so it is not cached.
* ``noise=S`` -- add isotropic Gaussian noise with expected norm S times the (unit) signal norm:
  ``x/|x| + S * e / sqrt(d)``, e ~ N(0, I) drawn from a generator seeded by the text (BLAKE2b),
  so the same text always gets the same noise.
* ``mix=A`` -- ``(1 - A) x/|x| + A r`` with r the ``random`` encoder's unit vector of the text:
  A=0 is the base model, A=1 is the random baseline.
* ``seed=K`` -- changes the noise / random draws (default 0).

Serving forms (:mod:`.quantize`), the last operation of a spec, at most one:

* ``int8`` -- scalar quantisation of the unit vectors to one byte per dimension, with
  per-dimension ranges calibrated (as ``sentence_transformers``' ``quantize_embeddings`` and the
  vector stores calibrate them) on all evaluated texts of the run, every language together (the
  ``fit`` hook, like ``pca=``): the ranges depend on the run's samples, so the form is never
  cached (its base model's vectors are) and each record's key holds the fingerprint of the
  texts it was calibrated on. Scored by the integer dot product of the codes.
* ``binary`` -- the sign bits, one bit per dimension; scored by the Hamming distance (as the
  dot product of the ±1 codes, ``d - 2 * hamming``). Needs no calibration.

A form's vectors are its codes (float32 arrays of the integer values); ``scoring = "dot"`` tells
the grid to rank them by their raw dot product, as the vector store would, instead of the
cosine, and ``bytes_per_item`` is what the store holds per item (use-m: 2,048 B as float32,
512 B as int8, 64 B as bits).

The base model's vectors come through the embedding cache; the variant is computed on top.
"""
from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ..core import EncoderError, normalize_rows
from .quantize import FORMS, form_bytes, int8_codes, int8_ranges, sign_codes, unit_rows

OPS = ("trunc", "pca", "noise", "mix", "seed")
FITTED = ("pca", "int8")  # operations learnt from the evaluated texts (the fit hook)
# The rule that makes each form's codes, named in its versions (so a change of rule changes the keys).
FORM_RULES = {
    "int8": "per-dimension min/max of the evaluated unit vectors, clip(floor((x-lo)/((hi-lo)/255)),0,255)-128",
    "binary": "sign bits (x > 0) as +-1",
}
# A variant starts at an "@" followed by one of OPS and "=", or by a form and the end or the next
# "@"; any other "@" (in a path, or in an option's value such as a URL) belongs to the base spec.
_VARIANT_AT = re.compile(r"@(?=(?:%s)=|(?:%s)(?:@|$))" % ("|".join(OPS), "|".join(FORMS)))
Op = tuple[str, float | None]  # (operation, value); a form has no value
# The variants as the model catalogue lists them: (syntax, what, bytes per item, scored by).
CATALOGUE = (
    ("@trunc=D", "the first D dimensions (Matryoshka truncation)", "4 D", "cosine (renormalised)"),
    ("@pca=D", "the first D principal components, fitted on all evaluated texts of the run", "4 D", "cosine"),
    ("@noise=S", "Gaussian noise of expected norm S x the unit vector's, seeded by the text", "4 d", "cosine"),
    ("@mix=A", "(1 - A) x the unit vector + A x the random model's vector of the text", "4 d", "cosine"),
    ("@seed=K", "the seed of noise= and mix= (default 0)", "-", "-"),
    ("@int8", "serving form: int8 codes of the unit vector, per-dimension ranges calibrated on all evaluated "
              "texts of the run (sentence-transformers' quantize_embeddings)", "d", "integer dot product of the codes"),
    ("@binary", "serving form: the sign bits (x > 0), packed 8 per byte", "d / 8",
     "Hamming distance (dot product of the +-1 codes, d - 2 x Hamming)"),
)


def op_text(key: str, val: float | None) -> str:
    """How a spec writes one operation: ``trunc=64``, ``noise=0.5``, ``int8``."""
    return key if val is None else f"{key}={val:g}"


def split_variants(spec: str) -> tuple[str, list[str]]:
    """``BASE@OP=VALUE@...`` as ``(BASE, ["OP=VALUE", ...])``; a spec without variants gives ``(spec, [])``.

    Only an ``@`` followed by a variant's name and ``=`` (or by a form, ``@int8``, ``@binary``,
    at the end or before the next ``@``) starts a variant, so an ``@`` inside a path or an
    option's value (``openai:m?base_url=...``) stays in the base spec.
    """
    base, *ops = _VARIANT_AT.split(spec)
    return base, ops


def parse_variant(spec: str) -> tuple[str, list[Op]]:
    """Split ``BASE@OP=VALUE@...@FORM`` into the base spec and its ``(op, value)`` list (a form's
    value is None); a clear error for an unknown op, a bad value, or a form that is not the last
    operation."""
    base, ops = split_variants(spec)
    parsed: list[Op] = []
    for op in ops:
        if op in FORMS:
            parsed.append((op, None))
            continue
        key, sep, value = op.partition("=")
        if key not in OPS or not sep:
            known = ", ".join([*(o + "=VALUE" for o in OPS), *FORMS])
            raise EncoderError(f"bad variant {op!r} in {spec!r}: use one of {known}")
        try:
            val = float(value)
        except ValueError:
            raise EncoderError(f"bad variant value {value!r} in {spec!r}: expected a number") from None
        if key in ("trunc", "pca") and (val < 1 or val != int(val)):
            raise EncoderError(f"{key} in {spec!r} needs a positive integer number of dimensions")
        if key in ("noise",) and val < 0 or key == "mix" and not 0 <= val <= 1:
            raise EncoderError(f"{key}={value} in {spec!r} is out of range")
        parsed.append((key, val))
    forms = [i for i, (key, _) in enumerate(parsed) if key in FORMS]
    if forms and (len(forms) > 1 or forms[0] != len(parsed) - 1):
        raise EncoderError(
            f"{spec!r}: a serving form ({' or '.join('@' + f for f in FORMS)}) is what the vector store holds, so it "
            f"is the last operation and there is one: e.g. {base}@trunc=256@int8"
        )
    return base, parsed


def text_rng(text: str, seed: int, salt: str) -> np.random.Generator:
    """A random generator seeded by BLAKE2b of ``(salt, seed, text)``: the same text always draws the same
    numbers."""
    h = hashlib.blake2b(f"{salt}\x00{seed}\x00{text}".encode("utf-8"), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(h, "little"))


def _unit(x: np.ndarray) -> np.ndarray:
    return normalize_rows(x)


class VariantEncoder:
    """A base model followed by the variant operations, applied left to right; the last may be a
    serving form (``int8``, ``binary``)."""

    cacheable = False

    def __init__(self, base: Any, ops: list[Op]):
        self.base = base
        self.ops = ops
        self.seed = int(next((v for k, v in ops if k == "seed"), 0))
        self.name = base.name + "".join(f"@{op_text(k, v)}" for k, v in ops)
        self.languages = getattr(base, "languages", None)
        self.dim = None
        self.form = ops[-1][0] if ops and ops[-1][0] in FORMS else None
        self._pca: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._ranges: dict[int, np.ndarray] = {}
        self._fitted = not any(k in FITTED for k, _ in ops)

    @property
    def scoring(self) -> str:
        """How the vectors are compared: ``"dot"`` for a serving form (the integer dot product of
        its codes, as the vector store scores them), else ``"cosine"``."""
        return "dot" if self.form else "cosine"

    @property
    def bytes_per_item(self) -> int | None:
        """Bytes a vector store holds per item in this form: 4 per dimension as float32, 1 as
        ``int8``, 1/8 as ``binary`` (rounded up to whole bytes); None while the dimension is unknown."""
        dim = self.dim if self.dim is not None else getattr(self.base, "dim", None)
        for key, val in self.ops:
            if key in ("trunc", "pca") and val is not None:
                dim = int(val)
        return None if not isinstance(dim, int) else form_bytes(dim, self.form)

    @property
    def run_details(self) -> dict[str, Any] | None:
        """What the base model reports of its run (a hub model's commit and prompts, an API's
        tokens), for ``run.json``; None when it reports nothing."""
        details = getattr(self.base, "run_details", None)
        return details if isinstance(details, dict) else None

    @property
    def fitted_on_texts(self) -> bool:
        """Whether ``fit`` learns from the texts (a PCA or int8 operation, or a base model that is fitted)."""
        return any(k in FITTED for k, _ in self.ops) or callable(getattr(self.base, "fit", None))

    @property
    def version(self) -> str:
        """The base model's version and the operations."""
        return f"{self.base.version}|" + ",".join(op_text(k, v) for k, v in self.ops)

    @property
    def versions(self) -> dict[str, str]:
        """The base model's versions (libraries and settings; the operations are plain numpy), and
        for a serving form the rule that makes its codes (``int8 rule``, ``binary rule``)."""
        from .base import encoder_versions

        out = encoder_versions(self.base)
        if self.form:
            out[f"{self.form} rule"] = FORM_RULES[self.form]
        return out

    def _truncated(self, texts: Sequence[str], lang: str) -> list[str]:
        """The texts as the base model embeds them (noise and mix are seeded by those), with the
        base model's truncation warning."""
        cut = getattr(self.base, "truncate", None)
        if not callable(cut):
            return list(texts)
        out, n_cut = cut(list(texts))
        if n_cut:
            from .text.batching import warn_truncated

            warn_truncated(self.base.name, lang, n_cut, len(out), self.base.max_length)
        return out

    def fit(self, texts_by_lang: Mapping[str, Sequence[str]],
            ids_by_lang: Mapping[str, Sequence[str]] | None = None) -> "VariantEncoder":
        """Fit the base model (if it fits), the PCA of ``pca=D`` and the ranges of ``int8`` on all
        evaluated texts (every language together); ``ids_by_lang``: the texts' ids, for a base
        model that looks its vectors up by id (``precomputed:``). Returns ``self``."""
        if hasattr(self.base, "fit"):
            self.base.fit(texts_by_lang)
        if any(k in FITTED for k, _ in self.ops):
            cut = {lang: self._truncated(t, lang) for lang, t in texts_by_lang.items()}
            ids = ids_by_lang or {}
            x = np.concatenate([self.base.encode(t, lang, ids=ids.get(lang)) for lang, t in cut.items()])
            texts = [t for ts in cut.values() for t in ts]
            self._pca, self._ranges = {}, {}
            for i, (key, val) in enumerate(self.ops):
                x = self._apply(i, key, val, x, texts, fitting=True)
        self._fitted = True
        return self

    def _apply(self, i: int, key: str, val: float | None, x: np.ndarray, texts: Sequence[str],
               fitting: bool = False) -> np.ndarray:
        d = x.shape[1]
        if key == "trunc":
            if int(val) > d:
                raise EncoderError(f"{self.name}: trunc={int(val)} exceeds the base dimension {d}")
            return np.ascontiguousarray(x[:, : int(val)])
        if key == "pca":
            if fitting:
                from sklearn.decomposition import PCA

                if int(val) > min(x.shape):
                    raise EncoderError(f"{self.name}: pca={int(val)} needs at least that many texts and dimensions")
                p = PCA(n_components=int(val), random_state=self.seed).fit(x)
                self._pca[i] = (p.mean_.astype(np.float32), p.components_.T.astype(np.float32))
            mean, comp = self._pca[i]
            return (x - mean) @ comp
        if key == "int8":
            u = unit_rows(x)
            if fitting:
                self._ranges[i] = int8_ranges(u)
            return int8_codes(u, self._ranges[i])
        if key == "binary":
            return sign_codes(x)
        if key == "noise":
            e = np.stack([text_rng(t, self.seed, "noise").standard_normal(d) for t in texts]).astype(np.float32)
            return _unit(x) + np.float32(val / np.sqrt(d)) * e
        if key == "mix":
            r = np.stack([text_rng(t, self.seed, "random").standard_normal(d) for t in texts]).astype(np.float32)
            return (1 - np.float32(val)) * _unit(x) + np.float32(val) * _unit(r)
        return x  # seed

    def encode(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None, **kw: Any) -> np.ndarray:
        """The base model's vectors of ``texts`` with the variant's operations applied in order (a
        form's codes as float32 integer values)."""
        if not self._fitted:
            what = " and ".join(sorted({"the PCA" if k == "pca" else "the int8 ranges" for k, _ in self.ops if k in FITTED}))
            raise EncoderError(f"{self.name}: {what} of this variant are fitted on the evaluated texts: call "
                               "fit({language: texts}) first (an evaluation does)")
        texts = self._truncated(texts, lang)
        x = np.asarray(self.base.encode(texts, lang, ids=ids, **kw), dtype=np.float32)
        for i, (key, val) in enumerate(self.ops):
            x = self._apply(i, key, val, x, texts)
        self.dim = x.shape[1]
        return np.ascontiguousarray(x, dtype=np.float32)


class ImageVariantEncoder:
    """``IMAGE_MODEL@noise=S[@seed=K]``: image features with seeded Gaussian noise of expected
    norm S (relative to the unit signal), to make g deliberately weaker. The noise of an image
    is seeded by its file content, so the same image always gets the same noise."""

    def __init__(self, base: Any, ops: list[tuple[str, float]]):
        bad = [k for k, _ in ops if k not in ("noise", "seed")]
        if bad:
            raise EncoderError(f"image variants support noise= and seed= only, not {bad[0]}{'' if bad[0] in FORMS else '='}")
        self.base, self.ops = base, ops
        self.seed = int(next((v for k, v in ops if k == "seed"), 0))
        self.noise = float(next((v for k, v in ops if k == "noise"), 0.0))
        self.name = base.name + "".join(f"@{k}={v:g}" for k, v in ops)
        self.version = f"{base.version}|" + ",".join(f"{k}={v:g}" for k, v in ops)
        self.dim = getattr(base, "dim", None)

    @property
    def versions(self) -> dict[str, str]:
        """The base model's versions (libraries and settings)."""
        from .base import encoder_versions

        return encoder_versions(self.base)

    def encode_images(self, paths: Sequence[str], **kw: Any) -> np.ndarray:
        """The base image model's features with the variant's noise, seeded by each image's content."""
        x = np.asarray(self.base.encode_images(paths, **kw), dtype=np.float32)
        keys = [hashlib.blake2b(open(p, "rb").read(), digest_size=16).hexdigest() for p in paths]
        return self.weaken(x, keys)

    def weaken(self, x: np.ndarray, keys: Sequence[str]) -> np.ndarray:
        """The features ``x`` (one row per image) with this variant's noise, the noise of row i
        seeded by ``keys[i]`` (a digest of that image's content)."""
        x = _unit(np.asarray(x, dtype=np.float32))
        d = x.shape[1]
        e = np.stack([text_rng(k, self.seed, "image-noise").standard_normal(d) for k in keys]).astype(np.float32)
        return np.ascontiguousarray(x + np.float32(self.noise / np.sqrt(d)) * e)
