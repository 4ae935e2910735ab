"""The data model: one :class:`Corpus` per language, a :class:`Dataset` of corpora.

A corpus row is an item: an ``id`` (unique within the language), a ``text``, optionally a
``concept`` (the cross-lingual link: the same concept in two languages is a ground-truth pair;
``None`` where unknown) and optionally an image, either a file path or a row of a precomputed
image-feature matrix (``.npy``).

Fingerprints: :meth:`Corpus.row_digests` hashes each row's id, text, concept and extra columns,
:meth:`Corpus.image_digests` each row's image (the file's bytes, or the values of its feature
row); :func:`fingerprint` folds a sequence of such digests into one hex string. The evaluation
keys its stored records by the fingerprints of exactly the rows a sample uses, so a changed
row, image or feature vector is recomputed and nothing else is.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..core import DataError
from ..core.fingerprint import file_digest
from ..core.text import is_blank

DIGEST_SIZE = 16


@dataclasses.dataclass
class Corpus:
    """Items of one language of one dataset. Arrays are aligned row by row."""

    dataset: str
    lang: str
    ids: list[str]
    texts: list[str]
    concepts: list[str | None] | None = None
    image_paths: list[str] | None = None
    image_features: str | None = None  # path of an (n_images, d) .npy file
    image_rows: np.ndarray | None = None  # row of image_features for each item
    extra: dict[str, list[Any]] = dataclasses.field(default_factory=dict)  # e.g. title/body

    def __post_init__(self) -> None:
        n = len(self.ids)
        self.ids = [str(i) for i in self.ids]
        if len(self.texts) != n:
            raise DataError(f"{self.dataset}/{self.lang}: {len(self.texts)} texts for {n} ids")
        for name in ("concepts", "image_paths"):
            col = getattr(self, name)
            if col is not None and len(col) != n:
                raise DataError(f"{self.dataset}/{self.lang}: {len(col)} {name} for {n} ids")
        for name, col in self.extra.items():
            if len(col) != n:
                raise DataError(f"{self.dataset}/{self.lang}: {len(col)} values of {name!r} for {n} ids")
        dup = [i for i, c in Counter(self.ids).items() if c > 1]
        if dup:
            raise DataError(
                f"{self.dataset}/{self.lang}: duplicate id {dup[0]!r}"
                + (f" (and {len(dup) - 1} more)" if len(dup) > 1 else "")
            )
        for i, t in zip(self.ids, self.texts):
            if not isinstance(t, str) or is_blank(t):
                raise DataError(f"{self.dataset}/{self.lang}: empty or whitespace-only text for id {i!r}")
        if (self.image_features is None) != (self.image_rows is None):
            raise DataError(f"{self.dataset}/{self.lang}: image_features and image_rows go together")
        if self.image_rows is not None:
            self.image_rows = np.asarray(self.image_rows, dtype=np.int64)
            if len(self.image_rows) != n:
                raise DataError(f"{self.dataset}/{self.lang}: {len(self.image_rows)} image rows for {n} ids")
        if self.image_paths is not None and self.image_features is not None:
            raise DataError(f"{self.dataset}/{self.lang}: give image paths or image features, not both")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def has_images(self) -> bool:
        """Whether the rows have images: image files or rows of a precomputed feature file."""
        return self.image_paths is not None or self.image_features is not None

    @property
    def has_concepts(self) -> bool:
        """Whether at least one row has a known concept (a cross-lingual link)."""
        return self.concepts is not None and any(c is not None for c in self.concepts)

    def concept_of(self, i: int) -> str:
        """The concept of row ``i``; an item without a known concept is its own concept."""
        c = self.concepts[i] if self.concepts is not None else None
        return c if c is not None else f"\x00{self.lang}\x00{self.ids[i]}"

    def concept_keys(self) -> list[str]:
        """The concept of every row, in row order (see :meth:`concept_of`)."""
        return [self.concept_of(i) for i in range(len(self))]

    def row_digests(self, idx: Sequence[int] | np.ndarray | None = None) -> list[bytes]:
        """A digest of each row's content: id, text, concept and the ``extra`` columns.

        Args:
            idx: row indices (default: every row).

        Returns:
            One 16-byte BLAKE2b digest per row, in the order of ``idx``.
        """
        rows = range(len(self)) if idx is None else [int(i) for i in idx]
        names = sorted(self.extra)
        out = []
        for i in rows:
            item = [self.ids[i], self.texts[i], None if self.concepts is None else self.concepts[i]]
            item += [[n, self.extra[n][i]] for n in names]
            data = json.dumps(item, ensure_ascii=False, default=str).encode("utf-8")
            out.append(hashlib.blake2b(data, digest_size=DIGEST_SIZE).digest())
        return out

    def image_digests(self, idx: Sequence[int] | np.ndarray | None = None) -> list[bytes]:
        """A digest of each row's image: of the image file's bytes, or of the values of the row's
        vector in the feature matrix (``image_features``).

        Args:
            idx: row indices (default: every row).

        Returns:
            One 16-byte digest per row, in the order of ``idx``; an empty list for a corpus
            without images.

        Raises:
            DataError: an image or the feature file cannot be read, or a feature row is out of range.
        """
        rows = np.arange(len(self)) if idx is None else np.asarray(idx, dtype=np.int64)
        if self.image_paths is not None:
            out = []
            for i in rows:
                path = self.image_paths[int(i)]
                try:
                    out.append(bytes.fromhex(file_digest(path)))
                except OSError as e:
                    raise DataError(
                        f"{self.dataset}/{self.lang}: image of id {self.ids[int(i)]!r} not found or unreadable: "
                        f"{path} ({e.strerror or e})"
                    ) from None
            return out
        if self.image_features is None:
            return []
        try:
            feats = np.load(self.image_features, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DataError(f"{self.dataset}/{self.lang}: cannot read image features {self.image_features}: {e}") from None
        if feats.ndim != 2:
            raise DataError(f"{self.dataset}/{self.lang}: {self.image_features} must hold a 2-D array, got shape {feats.shape}")
        frows = self.image_rows[rows]
        bad = (frows < 0) | (frows >= feats.shape[0])
        if bad.any():
            j = int(np.argmax(bad))
            raise DataError(
                f"{self.dataset}/{self.lang}: image row {int(frows[j])} of id {self.ids[int(rows[j])]!r} is out of "
                f"range for {self.image_features} ({feats.shape[0]} rows)"
            )
        vecs = np.ascontiguousarray(feats[frows])
        tag = vecs.dtype.str.encode()
        return [hashlib.blake2b(tag + v.tobytes(), digest_size=DIGEST_SIZE).digest() for v in vecs]

    def subset(self, idx: Sequence[int] | np.ndarray) -> "Corpus":
        """A corpus of the rows ``idx`` (in that order), with every column taken along."""
        idx = np.asarray(idx, dtype=np.int64)
        take = lambda col: None if col is None else [col[i] for i in idx]  # noqa: E731
        return Corpus(
            dataset=self.dataset,
            lang=self.lang,
            ids=take(self.ids),
            texts=take(self.texts),
            concepts=take(self.concepts),
            image_paths=take(self.image_paths),
            image_features=self.image_features,
            image_rows=None if self.image_rows is None else self.image_rows[idx],
            extra={k: take(v) for k, v in self.extra.items()},
        )


@dataclasses.dataclass
class Dataset:
    """Corpora of one dataset, keyed by language code."""

    name: str
    corpora: dict[str, Corpus]
    description: str = ""

    @property
    def languages(self) -> list[str]:
        """The language codes of the dataset, sorted."""
        return sorted(self.corpora)

    @property
    def has_images(self) -> bool:
        """Whether every language's corpus has images."""
        return all(c.has_images for c in self.corpora.values())

    def __getitem__(self, lang: str) -> Corpus:
        try:
            return self.corpora[lang]
        except KeyError:
            raise DataError(
                f"unknown language {lang!r} for dataset {self.name!r}; available: {', '.join(self.languages)}"
            ) from None


def require_languages(available: Iterable[str], wanted: Iterable[str] | None, dataset: str) -> list[str]:
    """Check that every wanted language exists; return the languages to load."""
    available = sorted(set(available))
    if wanted is None:
        return available
    wanted = list(dict.fromkeys(wanted))
    missing = [lang for lang in wanted if lang not in available]
    if missing:
        raise DataError(
            f"unknown language {missing[0]!r} for dataset {dataset!r}; available: {', '.join(available)}"
        )
    return wanted


def check_file(path: str | Path, what: str) -> Path:
    """``path`` as a :class:`~pathlib.Path` if it is a file, else a :class:`DataError` naming ``what``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what}: file not found: {path}")
    return path



def fingerprint(digests: Iterable[bytes]) -> str:
    """One hex digest (32 characters) of a sequence of row digests, order included.

    Args:
        digests: e.g. :meth:`Corpus.row_digests` of the rows of a sample, in sample order.

    Returns:
        The BLAKE2b digest of their concatenation (with the count).
    """
    h = hashlib.blake2b(digest_size=DIGEST_SIZE)
    n = 0
    for d in digests:
        h.update(d)
        n += 1
    h.update(n.to_bytes(8, "little"))
    return h.hexdigest()
