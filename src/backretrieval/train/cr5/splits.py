"""Concept-level splits and training regimes of Cr5 (Sec. 4.2, Fig. 1): :class:`Split` and
:func:`make_split` hold out test/validation query concepts per pair (plus distractors),
:func:`training_corpora` gives a regime's training documents, :func:`candidate_rows` a
language's retrieval pool, and :func:`write_heldout` the held-out documents as a dataset file."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...core import DataError, atomic_write_text
from ...data import Corpus, Dataset


def _corpora(corpus: Dataset | Mapping[str, Corpus]) -> dict[str, Corpus]:
    """The corpora per language of a Dataset or of a mapping language -> Corpus (checked)."""
    if isinstance(corpus, Dataset):
        return dict(corpus.corpora)
    if isinstance(corpus, Mapping):
        for lang, c in corpus.items():
            if not isinstance(c, Corpus):
                raise DataError(f"Cr5.fit: the value for language {lang!r} is {type(c).__name__}, not a Corpus")
        return dict(corpus)
    raise DataError(f"Cr5.fit: expected a Dataset or a mapping language -> Corpus, got {type(corpus).__name__}")


def _pair_key(a: str, b: str) -> str:
    return f"{a}-{b}"


@dataclasses.dataclass
class Split:
    """A concept-level split (Sec. 4.2): per evaluated pair ``test`` and ``val`` query concepts,
    plus ``distractors`` held out only to enlarge the candidate pools. Every other concept may
    be trained on. Unordered pairs are keyed ``"a-b"`` in the order given.

    Attributes:
        languages: every language of the dataset the split was made on, sorted.
        pairs: the evaluated pairs, each unordered pair once, in the order first given.
        test, val: ``"a-b"`` -> the pair's test / validation query concepts (sorted). A concept
            has one role for all pairs.
        distractors: concepts held out only to enlarge the candidate pools (sorted).
        seed: the seed the split was drawn with.
        options: the sizes and fractions :func:`make_split` was called with.
    """

    languages: list[str]
    pairs: list[tuple[str, str]]
    test: dict[str, list[str]]
    val: dict[str, list[str]]
    distractors: list[str]
    seed: int
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def heldout(self) -> set[str]:
        """Every concept held out of training: test, validation and distractor concepts."""
        out = set(self.distractors)
        for d in (self.test, self.val):
            for v in d.values():
                out.update(v)
        return out

    def to_json(self) -> dict[str, Any]:
        """The split as JSON data (pairs as two-item lists); :meth:`from_json` reads it back.

        Returns:
            A dict with every field.
        """
        return dataclasses.asdict(self) | {"pairs": [list(p) for p in self.pairs]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Split":
        """The split :meth:`to_json` wrote.

        Args:
            d: the JSON data (``options`` may be missing: empty).

        Returns:
            The :class:`Split`.

        Raises:
            KeyError: a field other than ``options`` is missing.
        """
        return cls(
            languages=list(d["languages"]),
            pairs=[tuple(p) for p in d["pairs"]],
            test={k: list(v) for k, v in d["test"].items()},
            val={k: list(v) for k, v in d["val"].items()},
            distractors=list(d["distractors"]),
            seed=int(d["seed"]),
            options=dict(d.get("options", {})),
        )

    def save(self, path: str | Path) -> None:
        """Write the split as JSON, atomically.

        Args:
            path: the file.
        """
        atomic_write_text(path, json.dumps(self.to_json()))

    @classmethod
    def load(cls, path: str | Path) -> "Split":
        """Read a split :meth:`save` wrote.

        Args:
            path: the file.

        Returns:
            The :class:`Split`.
        """
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def _concepts(c: Corpus) -> set[str]:
    return {x for x in (c.concepts or []) if x is not None}


def make_split(
    ds: Dataset | Mapping[str, Corpus],
    pairs: Sequence[tuple[str, str]],
    *,
    test_size: int = 1000,
    val_size: int = 500,
    max_test_frac: float = 0.2,
    max_val_frac: float = 0.1,
    distractor_frac: float = 0.05,
    seed: int = 0,
) -> Split:
    """Hold out, per unordered pair, ``min(test_size, max_test_frac * I)`` test and
    ``min(val_size, max_val_frac * I)`` validation concepts among the I concepts the two
    languages share, then ``distractor_frac`` of all other concepts as extra retrieval
    candidates. Every held-out concept is out of all training sets and has one role (test or
    validation) for all pairs. Pairs go in order of increasing I; a pair first reuses concepts
    smaller pairs already hold out in the same role, then draws new ones uniformly, so many
    overlapping languages do not strip the low-resource ones of their training data (the
    price: a large pair's queries over-represent concepts that small languages also have).
    Deterministic in ``seed``.

    Args:
        ds: the dataset, or corpora per language, whose items carry concepts.
        pairs: the pairs to hold queries out for; order within a pair and repeats (``a-b`` after
            ``b-a``) do not matter.
        test_size, val_size: the most test / validation concepts per pair.
        max_test_frac, max_val_frac: the most test / validation concepts as a share of the
            pair's shared concepts I (rounded down).
        distractor_frac: the share of the concepts left after the queries held out as
            distractors (rounded).
        seed: seeds the draws.

    Returns:
        The :class:`Split`; ``options`` holds the sizes and fractions.

    Raises:
        DataError: a language that is not loaded, a pair of one language, a pair whose share
            of shared concepts gives no test query, or too few fresh shared concepts left.
    """
    corpora = _corpora(ds)
    langs = sorted(corpora)
    rng = np.random.default_rng(seed)
    test: dict[str, list[str]] = {}
    val: dict[str, list[str]] = {}
    norm_pairs: list[tuple[str, str]] = []
    inters: dict[tuple[str, str], list[str]] = {}
    for a, b in pairs:
        for lang in (a, b):
            if lang not in corpora:
                raise DataError(f"make_split: pair {a}-{b}: language {lang!r} not loaded (have {', '.join(langs)})")
        if a == b:
            raise DataError(f"make_split: pair {a}-{b} has the same language twice")
        if (a, b) in inters or (b, a) in inters:
            continue
        norm_pairs.append((a, b))
        inters[(a, b)] = sorted(_concepts(corpora[a]) & _concepts(corpora[b]))
    # Smallest intersections first. A pair's queries are drawn first from the concepts that
    # smaller pairs already hold out in the same role (they are out of training anyway), then
    # uniformly from the rest: with many languages whose concepts overlap (DDTP), per-pair
    # sampling would otherwise strip most training data from the low-resource languages.
    role: dict[str, str] = {}
    for a, b in sorted(norm_pairs, key=lambda p: (len(inters[p]), p)):
        inter = inters[(a, b)]
        n_test = min(test_size, int(max_test_frac * len(inter)))
        n_val = min(val_size, int(max_val_frac * len(inter)))
        if n_test < 1:
            raise DataError(f"make_split: {a} and {b} share {len(inter)} concepts: too few to hold out test queries")
        key = _pair_key(a, b)
        for name, n, store in (("test", n_test, test), ("val", n_val, val)):
            reuse = [c for c in inter if role.get(c) == name]
            if len(reuse) >= n:
                chosen = [reuse[i] for i in rng.permutation(len(reuse))[:n]]
            else:
                fresh = [c for c in inter if c not in role]
                if len(fresh) < n - len(reuse):
                    raise DataError(f"make_split: {a}-{b}: not enough shared concepts left for {n} {name} queries")
                chosen = reuse + [fresh[i] for i in rng.permutation(len(fresh))[: n - len(reuse)]]
            for c in chosen:
                role[c] = name
            store[key] = sorted(chosen)
    taken = set(role)
    rest = sorted(set().union(*(_concepts(c) for c in corpora.values())) - taken)
    n_d = int(round(distractor_frac * len(rest)))
    distractors = sorted(rest[i] for i in rng.permutation(len(rest))[:n_d])
    return Split(
        langs,
        norm_pairs,
        test,
        val,
        distractors,
        seed,
        {
            "test_size": test_size, "val_size": val_size, "max_test_frac": max_test_frac,
            "max_val_frac": max_val_frac, "distractor_frac": distractor_frac,
        },
    )


REGIMES = ("joint", "pairwise", "transitive")


def training_corpora(
    ds: Dataset | Mapping[str, Corpus],
    split: Split,
    regime: str = "joint",
    *,
    pair: tuple[str, str] | None = None,
    pivot: str | None = None,
    languages: Sequence[str] | None = None,
) -> dict[str, Corpus]:
    """The training documents of a regime (Fig. 1), as corpora per language.

    * ``joint`` -- all ``languages`` (default: the split's); every non-held-out concept in at
      least two of them (the union of the pairwise intersections).
    * ``pairwise`` -- the two languages of ``pair``; their shared non-held-out concepts.
    * ``transitive`` -- ``pair`` and ``pivot``: concepts shared by a pair language and the pivot,
      minus every concept the two pair languages share, so they have no training concept in
      common and are linked only through the pivot.

    Held-out concepts (:attr:`Split.heldout`) are never trained on.

    Args:
        ds: the dataset, or corpora per language, the split was made on.
        split: the split.
        regime: ``"joint"``, ``"pairwise"`` or ``"transitive"``.
        pair: the two languages (pairwise, transitive).
        pivot: the third language (transitive).
        languages: the languages of ``joint`` (default: all of the split's).

    Returns:
        Language -> the subset of its corpus whose concept is allowed, in corpus order.

    Raises:
        DataError: an unknown regime, a language that is not loaded, a missing or degenerate
            ``pair`` / ``pivot``, or a language left with no training document (all named).
    """
    corpora = _corpora(ds)
    held = split.heldout
    if regime not in REGIMES:
        raise DataError(f"unknown training regime {regime!r}; use one of {', '.join(REGIMES)}")
    if regime == "joint":
        langs = list(languages or split.languages)
        for lang in langs:
            if lang not in corpora:
                raise DataError(f"joint training: language {lang!r} not loaded")
        count: dict[str, int] = {}
        for lang in langs:
            for c in _concepts(corpora[lang]) - held:
                count[c] = count.get(c, 0) + 1
        allowed = {lang: {c for c in _concepts(corpora[lang]) - held if count[c] >= 2} for lang in langs}
    else:
        if pair is None or len(pair) != 2 or pair[0] == pair[1]:
            raise DataError(f"{regime} training needs a pair of two different languages, got {pair!r}")
        a, b = pair
        for lang in (a, b):
            if lang not in corpora:
                raise DataError(f"{regime} training: language {lang!r} not loaded")
        ca, cb = _concepts(corpora[a]) - held, _concepts(corpora[b]) - held
        if regime == "pairwise":
            both = ca & cb
            allowed = {a: both, b: both}
        else:
            if pivot is None or pivot in (a, b) or pivot not in corpora:
                raise DataError(f"transitive training of {a}-{b} needs a third, loaded pivot language, got {pivot!r}")
            cp = _concepts(corpora[pivot]) - held
            shared_ab = ca & cb
            a_p, b_p = (ca & cp) - shared_ab, (cb & cp) - shared_ab
            allowed = {a: a_p, b: b_p, pivot: a_p | b_p}
    out = {}
    for lang, keep in allowed.items():
        c = corpora[lang]
        idx = [i for i, k in enumerate(c.concepts) if k in keep]
        if not idx:
            raise DataError(f"{regime} training: no training document for {lang!r}")
        out[lang] = c.subset(idx)
    return out


def candidate_rows(ds: Dataset | Mapping[str, Corpus], split: Split, lang: str, phase: str = "test") -> np.ndarray:
    """Rows of ``lang`` in the retrieval pool of ``phase``: documents whose concept is not used for
    joint training -- the held-out concepts (minus the other phase's queries) and concepts that
    no other language of the split has.

    Args:
        ds: the dataset, or corpora per language, the split was made on.
        split: the split.
        lang: the language.
        phase: ``"test"`` (the validation queries are left out) or anything else for
            validation (the test queries are left out).

    Returns:
        int64 row indices into ``lang``'s corpus, ascending; documents without a concept are
        never in the pool.
    """
    corpora = _corpora(ds)
    c = corpora[lang]
    other = split.val if phase == "test" else split.test
    excluded = set().union(*other.values()) if other else set()
    held = split.heldout - excluded
    count: dict[str, int] = {}
    for lg in split.languages:
        for k in _concepts(corpora[lg]):
            count[k] = count.get(k, 0) + 1
    return np.array(
        [i for i, k in enumerate(c.concepts) if k is not None and (k in held or count.get(k, 0) < 2)], dtype=np.int64
    )


def write_heldout(ds: Dataset | Mapping[str, Corpus], split: Split, path: str | Path, phase: str = "test") -> int:
    """Write the documents of the ``phase`` candidate pools (:func:`candidate_rows`: concepts no
    joint model trains on) of every language of the split as a ``generic`` dataset file (JSON
    lines: id, lang, text, concept), so that ``backretrieval evaluate --dataset PATH --models
    cr5:DIR,...`` compares models on concepts the Cr5 model never saw.

    Args:
        ds: the dataset, or corpora per language, the split was made on.
        split: the split.
        path: the file (written atomically, UTF-8, one JSON object a line, languages in the
            split's order).
        phase: ``"test"`` or ``"val"`` (see :func:`candidate_rows`).

    Returns:
        The number of rows written.
    """
    corpora = _corpora(ds)
    lines = []
    for lang in split.languages:
        c = corpora[lang]
        for i in candidate_rows(corpora, split, lang, phase):
            lines.append(json.dumps({"id": c.ids[i], "lang": lang, "text": c.texts[i], "concept": c.concepts[i]}, ensure_ascii=False))
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)

