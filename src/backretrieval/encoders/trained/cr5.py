"""``cr5:DIR`` -- a trained Cr5 model (crosslingual reduced-rank ridge regression) as a text model.

Cr5 (Josifoski et al., WSDM 2019) embeds a text of language ``l`` as ``Phi_l x``: ``x`` is the
text's L2-normalised TF-IDF bag of words over the language's training vocabulary
(:mod:`.bow`) and ``Phi_l`` (rank x |V_l|) is that language's block of the embedding map,
whose rows are orthonormal across all languages. Training lives in
:mod:`backretrieval.train.cr5`; this module reads a saved model directory and embeds texts.

Model directory: the one format of :mod:`.modeldir`, kind ``"cr5"`` (no pickle anywhere;
written by :meth:`Cr5Model.save`, ``model.json`` last, so a directory with it is complete):

* ``model.json`` -- ``hyper_parameters`` (the estimator's parameters) and the info: ``tokenizer``
  (:data:`.bow.TOKENIZER_VERSION`), ``languages``, ``rank``, ``vocabulary_sizes``, ``training``
  (sizes, timings, solver statistics: whatever the trainer recorded);
* ``weights.npz`` -- ``phi__<lang>`` (float32, rank x |V_l|), ``idf__<lang>`` (float64, |V_l|),
  ``singular_values`` (of the rank-r coefficient matrix W, descending);
* ``vocab/<lang>.txt`` -- the vocabulary, one token per line, UTF-8, in column order.

Directories in the legacy layout (``cr5.json`` + ``cr5.npz`` + ``vocab/``) are read by
:mod:`.modeldir_legacy` and give the same vectors.

As an encoder (``cr5:DIR``): the languages are the model's (``zh`` finds a ``zh_CN`` block,
``pt-PT`` a ``pt`` block, via :func:`~backretrieval.encoders.text.batching.lang_key`); a language without a block raises
:class:`~backretrieval.core.EncoderError`. Bias dimension: a text with no vocabulary token has
``Phi_l x = 0``, for which cosine similarity is undefined, so -- as in ``tfidf-char`` -- every
vector is ``[Phi_l x / |Phi_l x|, BIAS]`` re-normalised (``dim = rank + 1``, ``BIAS = 1e-3``):
such texts all become the same unit vector, and for every other pair the cosine becomes
``(c + 1e-6) / (1 + 1e-6)``, a monotone map of the plain Cr5 cosine ``c`` (rankings unchanged).
``version`` is a hash of the directory's content (every file's bytes), so the embedding cache
and the evaluation's records never mix two trainings; it is computed on first use.

Maximum length: :data:`MAX_CHARS` = 100,000 characters. A bag of words has no length limit of
its own; its cost is linear in the text (tokenising and counting keep ~25 bytes per character
of a batch), so a cap only bounds memory: 100,000 characters (~15,000 words) is longer than
every DDTP description (the longest English one has 81,416) and cutting there changes at
most the term frequencies of a few very long documents.
Options: ``batch_size`` (2048), ``progress``.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...core import DataError, EncoderError, UnsupportedLanguageError, normalize_rows
from ...core.fingerprint import dir_digest
from .modeldir import RESERVED, read_model_dir, write_model_dir
from .bow import TOKENIZER_VERSION, TfidfBow
from ..text.batching import BatchedTextEncoder, lang_key
from ..base import Example
from ..registry import register_text

VOCAB_DIR = "vocab"
BIAS = 1e-3
MAX_CHARS = 100_000


class Cr5Model:
    """The learned part of a Cr5 model: per language a TF-IDF vocabulary and the block ``Phi_l``."""

    def __init__(
        self,
        vocabularies: Mapping[str, Sequence[str]],
        idf: Mapping[str, np.ndarray],
        phi: Mapping[str, np.ndarray],
        singular_values: np.ndarray | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.languages = list(phi)
        if not self.languages:
            raise DataError("cr5 model: no language")
        if set(vocabularies) != set(phi) or set(idf) != set(phi):
            raise DataError("cr5 model: vocabularies, idf and phi must cover the same languages")
        self.phi = {lang: np.ascontiguousarray(phi[lang], dtype=np.float32) for lang in self.languages}
        ranks = {p.shape[0] for p in self.phi.values()}
        if len(ranks) != 1:
            raise DataError(f"cr5 model: the Phi blocks have different numbers of rows: {sorted(ranks)}")
        self.rank = ranks.pop()
        self.bow = {lang: TfidfBow(vocabularies[lang], idf[lang]) for lang in self.languages}
        for lang in self.languages:
            if self.phi[lang].shape[1] != len(self.bow[lang]):
                raise DataError(
                    f"cr5 model: Phi of {lang!r} has {self.phi[lang].shape[1]} columns for "
                    f"{len(self.bow[lang])} vocabulary entries"
                )
        for lang in self.languages:  # a NaN would silently turn every text into the bias-only vector
            for what, arr in (("Phi", self.phi[lang]), ("the IDF weights", self.bow[lang].idf)):
                bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
                if bad:
                    raise DataError(f"cr5 model: {what} of {lang!r} holds NaN or inf ({bad:,} of {arr.size:,} values)")
        self.singular_values = None if singular_values is None else np.asarray(singular_values, dtype=np.float64)
        self.meta = dict(meta or {})
        self._keys = {lang_key(lang): lang for lang in self.languages}

    # ------------------------------------------------------------------ languages
    def resolve(self, lang: str) -> str | None:
        """The model language serving ``lang`` (exact, then normalised, then the base language)."""
        if lang in self.phi:
            return lang
        k = lang_key(lang)
        if k in self._keys:
            return self._keys[k]
        if k != "zh-tw" and k.split("-")[0] in self._keys:
            return self._keys[k.split("-")[0]]
        return None

    def _lang(self, lang: str) -> str:
        got = self.resolve(lang)
        if got is None:
            raise UnsupportedLanguageError(f"cr5: the model has no language {lang!r} (trained on: {', '.join(self.languages)})")
        return got

    # ------------------------------------------------------------------ inference
    def tfidf(self, texts: Sequence[str], lang: str):
        """CSR TF-IDF rows (L2-normalised) of ``texts`` in the model's vocabulary of ``lang``."""
        return self.bow[self._lang(lang)].transform(texts)

    def transform(self, texts: Sequence[str], lang: str) -> np.ndarray:
        """float32 (n, rank): ``Phi_l x`` for each text (all-zero for a text with no known token)."""
        lang = self._lang(lang)
        x = self.bow[lang].transform(texts).astype(np.float32)
        return np.asarray(x @ self.phi[lang].T, dtype=np.float32)

    def word_vectors(self, lang: str) -> tuple[list[str], np.ndarray]:
        """The vocabulary of ``lang`` and its word vectors: the columns of ``Phi_l``, as rows (|V|, rank)."""
        lang = self._lang(lang)
        return self.bow[lang].vocabulary, np.ascontiguousarray(self.phi[lang].T)

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike) -> Path:
        """Write the model directory (see the module docstring); ``model.json`` is written last.

        Raises:
            DataError: a language code that cannot name a file.
        """
        for lang in self.languages:
            if not lang or "/" in lang or "\\" in lang or lang.startswith("."):
                raise DataError(f"cr5 model: language code {lang!r} cannot name a file")
        files = {f"{VOCAB_DIR}/{lang}.txt": "".join(t + "\n" for t in self.bow[lang].vocabulary) for lang in self.languages}
        arrays: dict[str, np.ndarray] = {}
        for lang in self.languages:
            arrays[f"phi__{lang}"] = self.phi[lang]
            arrays[f"idf__{lang}"] = self.bow[lang].idf
        if self.singular_values is not None:
            arrays["singular_values"] = self.singular_values
        meta = dict(self.meta)
        hp = meta.pop("hyper_parameters", {})
        info = {
            **{k: v for k, v in meta.items() if k not in RESERVED},
            "tokenizer": TOKENIZER_VERSION,
            "languages": self.languages,
            "rank": self.rank,
            "vocabulary_sizes": {lang: len(self.bow[lang]) for lang in self.languages},
        }
        return write_model_dir(path, "cr5", hyper_parameters=hp, info=info, arrays=arrays, files=files)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Cr5Model":
        """Read a model directory written by :meth:`save` (or by an older version, ``cr5.json``);
        EncoderError naming what is wrong."""
        try:
            md = read_model_dir(path, "cr5")
        except EncoderError as e:
            raise EncoderError(f"cr5: {e}") from None
        p, meta = md.path, {**md.info, "hyper_parameters": md.hyper_parameters}
        if meta.get("tokenizer") != TOKENIZER_VERSION:
            raise EncoderError(
                f"cr5: {p / md.header} was trained with tokenizer {meta.get('tokenizer')!r}; this code tokenises with "
                f"{TOKENIZER_VERSION!r} (retrain the model)"
            )
        langs = meta.get("languages")
        if not isinstance(langs, list) or not langs:
            raise EncoderError(f"cr5: {p / md.header} lists no languages")
        try:
            phi = {lang: md.arrays[f"phi__{lang}"] for lang in langs}
            idf = {lang: md.arrays[f"idf__{lang}"] for lang in langs}
        except KeyError as e:
            raise EncoderError(f"cr5: the arrays of {p} lack {e}") from None
        sv = md.arrays.get("singular_values")
        vocab = {}
        for lang in langs:
            vf = p / VOCAB_DIR / f"{lang}.txt"
            try:
                vocab[lang] = vf.read_text(encoding="utf-8").split("\n")[:-1]
            except OSError as e:
                raise EncoderError(f"cr5: cannot read vocabulary {vf}: {e}") from None
        try:
            return cls(vocab, idf, phi, sv, meta)
        except DataError as e:
            raise EncoderError(f"cr5: {p}: {e}") from None


class Cr5Encoder(BatchedTextEncoder):
    """A saved Cr5 model directory as a text model (``rank + 1`` dims, see the module docstring)."""

    cacheable = True
    unit_norm = True
    default_batch_size = 2048
    max_chars = MAX_CHARS

    def __init__(self, path: str | os.PathLike, *, batch_size: int | None = None, progress: bool = False) -> None:
        self.name = f"cr5:{path}"
        p = Path(path).expanduser()
        try:
            md = read_model_dir(p, "cr5", arrays=False)  # the header only: arrays load on first use
        except EncoderError as e:
            raise EncoderError(f"{self.name}: {e}") from None
        self.path = p.resolve()
        super().__init__(batch_size=batch_size, progress=progress)
        try:
            self.languages = frozenset(md.info["languages"])
            self.dim = int(md.info["rank"]) + 1
        except (KeyError, TypeError) as e:
            raise EncoderError(f"{self.name}: cannot read {self.path / md.header}: {e}") from None
        self._version: str | None = None
        self._lang: str | None = None

    @property
    def version(self) -> str:  # type: ignore[override]
        """``cr5-dir-<content hash of the directory>/bias.../max...ch`` (hashed on first use)."""
        if self._version is None:
            self._version = f"cr5-dir-{dir_digest(self.path)[:16]}/bias{BIAS:g}/max{MAX_CHARS}ch"
        return self._version

    def _load_model(self) -> Cr5Model:
        return Cr5Model.load(self.path)

    def encode(self, texts: Sequence[str], lang: str, *, ids: Sequence[str] | None = None, **kw: Any) -> np.ndarray:
        """The vectors of ``texts`` in ``lang`` (a language the model lacks is a clear error before any
        work)."""
        model = self._get_model()
        if isinstance(lang, str) and lang.strip():
            model._lang(lang)  # unknown language: a clear error before any work
        self._lang = lang
        return super().encode(texts, lang, ids=ids, **kw)

    def _encode_batch(self, model: Cr5Model, texts: list[str]) -> np.ndarray:
        v = model.transform(texts, self._lang).astype(np.float64)
        v = normalize_rows(v)
        out = np.empty((len(texts), v.shape[1] + 1), dtype=np.float64)
        out[:, :-1] = v
        out[:, -1] = BIAS
        return normalize_rows(out).astype(np.float32)


EXAMPLE_VOCABULARY = ("face", "dog", "red", "heart", "man", "joy", "smile", "cat", "eyes", "tear")


def _example(folder: Path) -> Example:
    """Two rank-4 English models over a 10-word vocabulary, ``Phi`` drawn with seeds 0 and 1."""
    dirs = []
    for seed in (0, 1):
        phi = np.random.default_rng(seed).standard_normal((4, len(EXAMPLE_VOCABULARY)))
        model = Cr5Model({"en": EXAMPLE_VOCABULARY}, {"en": np.ones(len(EXAMPLE_VOCABULARY))}, {"en": phi})
        dirs.append(str(model.save(folder / f"cr5-seed{seed}")))
    return Example(arg=dirs[0], other=(dirs[1], {}))


register_text(
    "cr5",
    description="a trained Cr5 model directory (cr5:DIR; `backretrieval train cr5`): TF-IDF bag of words x Phi_l (+1 bias dim)",
    example=_example,
)(Cr5Encoder)
