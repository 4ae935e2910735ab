"""``tfidf-char`` -- character n-gram TF-IDF, a surface-form (spelling overlap) baseline.

``TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True, lowercase=True,
max_features=4096)``, fitted with :meth:`TfidfCharEncoder.fit` on the evaluated texts of all
languages at once (one shared vocabulary, so texts of different languages are comparable);
``encode`` before ``fit`` raises. Vectors depend on the fitted corpus, so ``cacheable`` is
False; ``version`` gains a fingerprint of the fitted vocabulary and IDF weights.

Bias dimension: a text whose n-grams are all outside the vocabulary (another script, or
only rare n-grams) would get an all-zero row, for which cosine similarity is undefined. Every
row therefore gets one extra dimension with the constant :data:`BIAS` (1e-3) appended to its
L2-normalised TF-IDF part, and is re-normalised. Consequences: ``dim = len(vocabulary) + 1``;
such out-of-vocabulary texts become the same unit vector (exact ties among them, cosine
~1e-3 to every other text); for all other pairs cosine becomes ``(c + 1e-6) / (1 + 1e-6)``,
a monotone map of the plain TF-IDF cosine ``c``, so rankings are unchanged.

Maximum length: :data:`MAX_CHARS` = 100,000 characters, for fitting and encoding alike. Character
n-grams have no length limit of their own, but extracting them holds ~3 Python strings per
character of a text (~150 bytes per character), so a 5 MB text would take ~750 MB; 100,000
characters bound that to ~15 MB per text and leave every text of the bundled datasets whole.

Options: ``max_features`` (4096), ``batch_size`` (1024), ``progress``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...core import DataError, EncoderError, content_hash, normalize_rows
from ..base import Example, package_version
from ..registry import register_text
from .batching import (
    BatchedTextEncoder,
    as_texts,
    positive_int,
    require,
)

BIAS = 1e-3
NGRAM_RANGE = (2, 4)
MAX_CHARS = 100_000


@register_text(
    "tfidf-char",
    description="character 2-4-gram TF-IDF fitted on all evaluated texts (+1 bias dim; surface-form baseline)",
    requires="scikit-learn",
    example=lambda folder: Example(other=(None, {"max_features": 32})),
)
class TfidfCharEncoder(BatchedTextEncoder):
    """Character 2-4-gram TF-IDF (+1 bias dimension), fitted on all evaluated languages."""

    languages = None
    cacheable = False
    unit_norm = True
    default_batch_size = 1024
    max_chars = MAX_CHARS

    def __init__(self, *, max_features: int = 4096, batch_size: int | None = None, progress: bool = False) -> None:
        self.name = "tfidf-char"
        require("sklearn", "scikit-learn")
        super().__init__(batch_size=batch_size, progress=progress)
        self.max_features = positive_int(max_features, "max_features", self.name)
        self._base_version = (
            f"sklearn-{package_version('scikit-learn')}/char_wb{NGRAM_RANGE[0]}-{NGRAM_RANGE[1]}"
            f"/sublinear/lower/max{self.max_features}/bias{BIAS:g}/max{MAX_CHARS}ch"
        )
        self.version = f"{self._base_version}/unfitted"
        self.dim = None

    def fit(self, texts_by_lang: Mapping[str, Sequence[str]]) -> TfidfCharEncoder:
        """Fit the vocabulary and IDF on the texts of every language together; returns self."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        docs: list[str] = []
        for lang in sorted(texts_by_lang):
            docs.extend(self.truncate(as_texts(texts_by_lang[lang], None, f"{self.name}/{lang}"))[0])
        if not docs:
            raise DataError(f"{self.name}: fit needs at least one text")
        vec = TfidfVectorizer(
            analyzer="char_wb",
            ngram_range=NGRAM_RANGE,
            sublinear_tf=True,
            lowercase=True,
            max_features=self.max_features,
            dtype=np.float32,
        )
        try:
            vec.fit(docs)
        except ValueError as e:  # e.g. empty vocabulary: every text empty
            raise DataError(f"{self.name}: cannot fit on the {len(docs)} given texts ({e})") from e
        vocab = sorted(vec.vocabulary_, key=vec.vocabulary_.__getitem__)
        fingerprint = content_hash("\x00".join(vocab).encode("utf-8") + vec.idf_.astype(np.float32).tobytes(), 8)
        self._model = vec
        self.dim = len(vocab) + 1
        self.version = f"{self._base_version}/fit-{fingerprint}"
        return self

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` has built the vocabulary (the dimension is known)."""
        return self.dim is not None

    def _load_model(self) -> Any:
        raise EncoderError(
            f"{self.name} must be fitted on the evaluated texts of all languages first: call fit(texts_by_lang)"
        )

    def _encode_batch(self, model: Any, texts: list[str]) -> np.ndarray:
        x = model.transform(texts)  # sparse, rows L2-normalised (all-zero for OOV texts)
        out = np.empty((len(texts), x.shape[1] + 1), dtype=np.float32)
        out[:, :-1] = x.toarray()
        out[:, -1] = BIAS
        return normalize_rows(out)
