"""Bag-of-words preprocessing shared by Cr5 training (``train/cr5/``) and inference
(``encoders/trained/cr5.py``): tokenisation, the TF-IDF vocabulary and the transform (Cr5 paper, Sec. 4.1).

Tokenisation (:func:`tokenize`, version :data:`TOKENIZER_VERSION`):

1. Unicode NFKC normalisation (full-width Latin letters and digits, common in Japanese and
   Chinese text, become ASCII; compatibility ligatures are split), then lower-casing.
2. Runs of word characters (``\\w+``) are cut into script segments:

   * CJK segments -- Han ideographs, Hiragana and Katakana (including the prolonged-sound mark and
     half-width Katakana) -- have no spaces between words. Each such run becomes its overlapping
     character **bigrams** (a run of one character becomes that character). This is the
     standard dictionary-free indexing unit for Chinese and Japanese retrieval (Lucene's
     ``CJKAnalyzer``; bigrams match or beat dictionary segmenters in the NTCIR CLIR
     evaluations) and needs no dictionary, no extra dependency and no network.
   * Every other segment (Latin, Cyrillic, Greek, Hangul -- Korean separates words by
     spaces --, digits) is a word if it is at least two characters long.

So ``"2048 难题是基于数学的"`` gives ``["2048", "难题", "题是", "是基", "基于", "于数", "数学", "学的"]``.

TF-IDF (:class:`TfidfBow`): counts of the vocabulary's tokens (raw term frequency) times the IDF
``log((1 + n) / (1 + df)) + 1`` computed on the training documents only (scikit-learn's smoothed
IDF), rows L2-normalised. A text with no vocabulary token gives an all-zero row.
:func:`fit_tfidf` builds the vocabulary: tokens in fewer than ``min_df`` training documents are
dropped, then the ``max_features`` most frequent (by total count, ties broken alphabetically)
are kept.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

import numpy as np

from ...core import DataError

TOKENIZER_VERSION = "nfkc-lower-w2-cjkbigram-1"

_CJK = (
    "\u3041-\u309f"  # Hiragana (+ iteration marks)
    "\u30a0-\u30ff"  # Katakana (+ prolonged sound mark U+30FC)
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3005\u3006\u3007"  # 々 〆 〇
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # half-width Katakana (NFKC maps most of them to full width)
    "\U00020000-\U0002ebef"  # CJK extensions B-F
)
_WORD_RE = re.compile(r"\w+")
_CJK_SPLIT_RE = re.compile(f"([{_CJK}]+)")


def tokenize(text: str) -> list[str]:
    """Tokens of ``text`` (see the module docstring)."""
    out: list[str] = []
    text = unicodedata.normalize("NFKC", text).lower()
    for word in _WORD_RE.findall(text):
        if word.isascii():  # fast path: no CJK possible
            if len(word) >= 2:
                out.append(word)
            continue
        for i, seg in enumerate(_CJK_SPLIT_RE.split(word)):
            if not seg:
                continue
            if i % 2:  # a CJK run (odd positions of a split with one capturing group)
                if len(seg) == 1:
                    out.append(seg)
                else:
                    out.extend(seg[j : j + 2] for j in range(len(seg) - 1))
            elif len(seg) >= 2:
                out.append(seg)
    return out


def count_matrix(texts: Sequence[str], vocabulary: dict[str, int]):
    """CSR (n, len(vocabulary)) float64 token counts of ``texts`` over a fixed vocabulary."""
    import scipy.sparse as sp

    indptr = [0]
    indices: list[int] = []
    data: list[int] = []
    for t in texts:
        counts: dict[int, int] = {}
        for tok in tokenize(t):
            j = vocabulary.get(tok)
            if j is not None:
                counts[j] = counts.get(j, 0) + 1
        cols = sorted(counts)
        indices.extend(cols)
        data.extend(counts[c] for c in cols)
        indptr.append(len(indices))
    return sp.csr_matrix(
        (np.asarray(data, dtype=np.float64), np.asarray(indices, dtype=np.int64), np.asarray(indptr, dtype=np.int64)),
        shape=(len(texts), len(vocabulary)),
    )


def fit_tfidf(texts: Sequence[str], *, min_df: int = 3, max_features: int | None = 200_000) -> tuple[list[str], np.ndarray]:
    """Vocabulary (tokens in at least ``min_df`` documents, the ``max_features`` most frequent)
    and float64 IDF weights of the training ``texts``."""
    if not texts:
        raise DataError("cannot build a vocabulary from zero documents")
    df: dict[str, int] = {}
    tf: dict[str, int] = {}
    for t in texts:
        toks = tokenize(t)
        for tok in toks:
            tf[tok] = tf.get(tok, 0) + 1
        for tok in set(toks):
            df[tok] = df.get(tok, 0) + 1
    kept = [tok for tok, d in df.items() if d >= min_df]
    kept.sort(key=lambda tok: (-tf[tok], tok))
    if max_features is not None:
        kept = kept[:max_features]
    kept.sort()
    if not kept:
        raise DataError(f"empty vocabulary: no token occurs in {min_df} or more of the {len(texts)} documents")
    n = len(texts)
    dfs = np.fromiter((df[tok] for tok in kept), dtype=np.float64, count=len(kept))
    idf = np.log((1.0 + n) / (1.0 + dfs)) + 1.0
    return kept, idf


class TfidfBow:
    """A fitted TF-IDF bag of words of one language: ``transform(texts)`` -> CSR, rows unit length."""

    def __init__(self, vocabulary: Sequence[str], idf: np.ndarray) -> None:
        self.vocabulary = list(vocabulary)
        self.idf = np.asarray(idf, dtype=np.float64)
        if self.idf.shape != (len(self.vocabulary),):
            raise DataError(f"TF-IDF: {len(self.vocabulary)} vocabulary entries but {self.idf.shape} IDF weights")
        self.index = {tok: j for j, tok in enumerate(self.vocabulary)}
        if len(self.index) != len(self.vocabulary):
            raise DataError("TF-IDF: the vocabulary has duplicate tokens")

    def __len__(self) -> int:
        return len(self.vocabulary)

    def transform(self, texts: Sequence[str]):
        """CSR (n, |V|) float64: TF-IDF rows, L2-normalised (all-zero for a text without a known token)."""
        x = count_matrix(texts, self.index)
        x.data *= self.idf[x.indices]
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        x.data /= np.repeat(norms, np.diff(x.indptr))
        return x


def n_unique_tokens(texts: Sequence[str]) -> np.ndarray:
    """Number of distinct tokens of each text (the document-length filter's measure)."""
    return np.fromiter((len(set(tokenize(t))) for t in texts), dtype=np.int64, count=len(texts))
