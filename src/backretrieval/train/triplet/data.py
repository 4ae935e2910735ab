"""Triplet training data: monolingual title/body pairs without any cross-lingual link, the guard
that refuses anything else, and the base model's vectors of titles and bodies."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from ...core import DataError, content_hash
from ...encoders.trained.triplet import titles_and_bodies


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class TitleBodyData:
    """Monolingual training pairs: per item a language, a title and a body -- nothing else.

    There is deliberately no place for an id or a concept (``slots``: no attribute can be added).
    """

    langs: tuple[str, ...]
    titles: tuple[str, ...]
    bodies: tuple[str, ...]

    def __post_init__(self) -> None:
        n = len(self.langs)
        if len(self.titles) != n or len(self.bodies) != n:
            raise DataError(f"training data: {n} languages, {len(self.titles)} titles, {len(self.bodies)} bodies")
        for i, (lang, t, b) in enumerate(zip(self.langs, self.titles, self.bodies)):
            if not isinstance(lang, str) or not lang:
                raise DataError(f"training data: item {i} has no language")
            if not isinstance(t, str) or not isinstance(b, str):
                raise DataError(f"training data: item {i} ({lang}): title and body must be strings")
            if not t.strip() and not b.strip():
                raise DataError(f"training data: item {i} ({lang}) has neither a title nor a body")

    def __len__(self) -> int:
        return len(self.langs)

    @property
    def languages(self) -> list[str]:
        """The languages of the items, sorted."""
        return sorted(set(self.langs))

    def counts(self) -> dict[str, int]:
        """Number of items per language, sorted by language."""
        out: dict[str, int] = {}
        for lang in self.langs:
            out[lang] = out.get(lang, 0) + 1
        return dict(sorted(out.items()))

    @classmethod
    def from_dataset(
        cls,
        dataset: Any,
        langs: Sequence[str] | None = None,
        *,
        max_per_lang: int | None = None,
        seed: int = 0,
    ) -> "TitleBodyData":
        """Titles and bodies (``extra["title"]`` / ``extra["body"]``) of the corpora of ``dataset``.

        Reads nothing but the language and those two columns: concepts (the cross-lingual
        links) and ids are dropped. ``max_per_lang`` keeps a seeded random subset of that many
        items per language (chosen by row position only).
        """
        langs = list(dataset.languages if langs is None else langs)
        out_l: list[str] = []
        out_t: list[str] = []
        out_b: list[str] = []
        for lang in langs:
            c = dataset[lang]
            missing = [f for f in ("title", "body") if f not in c.extra]
            if missing:
                raise DataError(
                    f"{c.dataset}/{lang}: no {' and '.join(missing)} column; Triplet training needs "
                    "title/body pairs (ddtp, emoji-cldr, or a generic file with title and body columns)"
                )
            titles, bodies = list(c.extra["title"]), list(c.extra["body"])
            rows = np.arange(len(titles))
            if max_per_lang is not None and len(rows) > max_per_lang:
                rng = np.random.default_rng([seed, int(content_hash(lang, 4), 16)])  # per language, order-free
                rows = np.sort(rng.choice(len(rows), size=int(max_per_lang), replace=False))
            for i in rows:
                t = "" if titles[i] is None else str(titles[i])
                b = "" if bodies[i] is None else str(bodies[i])
                if not t.strip() and not b.strip():
                    continue  # nothing to learn from
                out_l.append(lang)
                out_t.append(t)
                out_b.append(b)
        if not out_l:
            raise DataError("training data: no item with a title or a body")
        return cls(tuple(out_l), tuple(out_t), tuple(out_b))


def assert_no_links(data: Any) -> None:
    """Refuse training input that could carry cross-lingual links (concepts, or ids that are
    concepts): only :class:`TitleBodyData` is accepted."""
    if not isinstance(data, TitleBodyData):
        raise DataError(
            f"Triplet/TripletXL train on TitleBodyData only (languages, titles, bodies), got "
            f"{type(data).__name__}; build it with TitleBodyData.from_dataset(), which drops ids and "
            "concepts -- no cross-lingual link may be used in training"
        )
    for forbidden in ("concepts", "concept", "ids"):
        if hasattr(data, forbidden):  # cannot happen with slots; kept as the explicit guard
            raise DataError(f"training data carries {forbidden!r}: cross-lingual links are not allowed in training")


def embed_title_body(
    data: TitleBodyData, base: str, *, progress: bool = False, base_options: Mapping[str, Any] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Base-encoder vectors of every title and body (through the embedding cache), in data order.

    The same empty-title / empty-body rule as at inference (the other field is used)."""
    from ...encoders.registry import get_cached_text_encoder

    assert_no_links(data)
    enc = get_cached_text_encoder(base, base_options, progress=progress)
    langs = np.asarray(data.langs)
    x_t = x_b = None
    for lang in data.languages:
        rows = np.flatnonzero(langs == lang)
        titles, bodies = titles_and_bodies(
            [""] * len(rows),
            {"title": [data.titles[i] for i in rows], "body": [data.bodies[i] for i in rows]},
            f"{base}/{lang} training data",
        )
        vt, vb = enc.encode(titles, lang), enc.encode(bodies, lang)
        if x_t is None:
            x_t = np.empty((len(data), vt.shape[1]), np.float32)
            x_b = np.empty((len(data), vt.shape[1]), np.float32)
        x_t[rows], x_b[rows] = vt, vb
    return x_t, x_b


