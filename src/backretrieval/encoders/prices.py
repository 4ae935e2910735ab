"""A model's price, kept with its vectors: its measured encoding throughput on this machine.

What a team pays for a model besides its quality is the storage of its vectors, the time (or the
API's bill) to make them, and that is a fact about the model and the machine, not about one run.
So it is kept beside the embedding cache (``<cache>/embeddings/prices/``), one small JSON file per
model identity (its ``version``; for a model fitted on the evaluated texts, without what it is
fitted on, which changes its vectors but not its speed), machine and length class:

* the *machine* (:func:`machine`): the CPU model, the cores this process may use, the device the
  model runs on, the versions of the libraries that compute its vectors (and settings such as
  ``torch threads``), and the model's speed settings (``batch_size``, ``threads``,
  ``concurrency``); a change of any of them is another machine;
* the *length class* (:func:`length_class`): the texts' mean length in characters, in powers of
  two (``"16-31 chars"``): emoji names and product descriptions are not encoded at one speed.

A record (:class:`Measurement`) holds items per second and per CPU-second, the seconds the
first batch took beyond that rate (loading the model: ``warmup_seconds``), the batch size, the
texts' mean length, the date and how it was measured (``"run"``: the texts a run encoded;
``"sample"``: :func:`measure_sample`'s fixed sample), the vector size and bytes per item, and
the tokens per item where they are known (an API's reported usage, a tokenizer's count).

:class:`EncodeTimer` times each call to a model (the embedding cache calls it once per batch);
the first call, which loads the model, is left out of the rate where there are others. A
measurement replaces the record of its key only when it covers more texts (:meth:`PriceBook.write`,
under a lock, written atomically): repeated runs of one experiment read the same record, so the
price they show is the same, and two runs that write at once leave one whole file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import platform
import time
from datetime import date
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..core import atomic_write_text, cache_dir, content_hash
from ..core.locks import held_lock
from .base import encoder_versions

FORMAT = 1
FLOAT32_BYTES = 4
MIN_ITEMS = 32  # texts a run must have encoded for its measurement to be recorded
SAMPLE_ITEMS = 128  # texts of the fixed sample measured when nothing is known
WARMUP_ITEMS = 4  # texts encoded once before the sample is timed (loads the model)
SPEED_SETTINGS = ("batch_size", "threads", "concurrency")  # a model's options that change its speed


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what :mod:`platform` says)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def machine(enc: Any) -> dict[str, Any]:
    """What the speed of ``enc`` on this machine depends on besides the model itself.

    Args:
        enc: a text model.

    Returns:
        ``{"cpu", "cores", "device", "versions", "settings"}``: the CPU model, the cores this
        process may use, the model's ``device`` (``"cpu"`` when it has none), the libraries and
        settings of :func:`~.base.encoder_versions`, and the model's :data:`SPEED_SETTINGS`.
    """
    from .devices import default_threads

    settings = {}
    for name in SPEED_SETTINGS:
        value = getattr(enc, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            settings[name] = value
    return {"cpu": cpu_model(), "cores": default_threads(), "device": str(getattr(enc, "device", None) or "cpu"),
            "versions": encoder_versions(enc), "settings": settings}


def length_class(mean_chars: float) -> str:
    """The length class of texts of ``mean_chars`` characters on average: ``"16-31 chars"``
    (powers of two; ``"0-1 chars"`` below 2)."""
    if not mean_chars >= 2:
        return "0-1 chars"
    k = int(math.floor(math.log2(mean_chars)))
    return f"{2 ** k}-{2 ** (k + 1) - 1} chars"


def _class_low(cls: str) -> int:
    return int(cls.split("-", 1)[0])


def bytes_per_item(enc: Any, dim: int | None) -> int | None:
    """The bytes one vector of ``enc`` takes as it is served: the model's own ``bytes_per_item``
    (a quantised serving form), else float32 (4 bytes per dimension); None without a dimension."""
    own = getattr(enc, "bytes_per_item", None)
    if isinstance(own, int) and not isinstance(own, bool) and own > 0:
        return own
    return None if dim is None else int(dim) * FLOAT32_BYTES


@dataclasses.dataclass
class Measurement:
    """One measured encoding throughput (see the module docstring)."""

    items: int
    seconds: float  # wall time of the items counted in the rate
    cpu_seconds: float
    items_per_second: float
    items_per_cpu_second: float | None
    warmup_seconds: float  # the first batch's time beyond the rate (loading the model)
    batch_size: int | None
    mean_chars: float
    how: str  # "run" or "sample"
    measured: str = dataclasses.field(default_factory=lambda: date.today().isoformat())
    dim: int | None = None
    bytes_per_item: int | None = None
    tokens_per_item: float | None = None
    tokens_counted_by: str | None = None
    warmup_cpu_seconds: float = 0.0  # the first batch's CPU time beyond the CPU rate

    @property
    def length_class(self) -> str:
        """The :func:`length_class` of the measured texts."""
        return length_class(self.mean_chars)

    def to_json(self) -> dict[str, Any]:
        """The measurement as a JSON object (what the record file holds)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Measurement":
        """A measurement read back from :meth:`to_json`'s form (unknown keys ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


class EncodeTimer:
    """The wall and CPU time of each call to a model, with the texts and characters it encoded."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, float, float, int]] = []  # (items, wall s, cpu s, chars)

    def call(self, fn: Callable[[Any], Any], rows: Sequence[Any], chars: int = 0) -> Any:
        """``fn(rows)``, timed as one step of ``len(rows)`` texts of ``chars`` characters."""
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(rows)
        self.steps.append((len(rows), time.perf_counter() - t0, time.process_time() - c0, chars))
        return out

    def stream(self, batches: Iterable[tuple[Sequence[Any], Any]], chars: Callable[[Sequence[Any]], int]
               ) -> Iterator[tuple[Sequence[Any], Any]]:
        """Each ``(rows, vectors)`` of ``batches``, timed as one step from the end of the previous
        one (what the caller does with a batch in between is not counted)."""
        t0, c0 = time.perf_counter(), time.process_time()
        for rows, vecs in batches:
            self.steps.append((len(rows), time.perf_counter() - t0, time.process_time() - c0, chars(rows)))
            yield rows, vecs
            t0, c0 = time.perf_counter(), time.process_time()

    @property
    def items(self) -> int:
        """The texts timed so far."""
        return sum(s[0] for s in self.steps)

    def measurement(self, how: str = "run", batch_size: int | None = None, min_items: int = MIN_ITEMS,
                    warm: bool = False) -> Measurement | None:
        """The throughput of the steps timed so far; None below ``min_items`` texts or no time.

        The first step (which loads the model) is left out of the rate when the others hold at
        least ``min_items`` texts, unless the model was ``warm`` already; its time beyond the
        rate is ``warmup_seconds``.
        """
        steps = [s for s in self.steps if s[0] > 0]
        if sum(s[0] for s in steps) < max(1, min_items):
            return None
        rest = steps[1:] if not warm and sum(s[0] for s in steps[1:]) >= max(1, min_items) else steps
        items = sum(s[0] for s in rest)
        wall, cpu = sum(s[1] for s in rest), sum(s[2] for s in rest)
        if not wall > 0:
            return None
        rate = items / wall
        first = steps[0]
        warmup = max(0.0, first[1] - first[0] / rate) if rest is not steps else 0.0
        warm_cpu = max(0.0, first[2] - first[0] * cpu / items) if rest is not steps else 0.0
        chars = sum(s[3] for s in steps) / sum(s[0] for s in steps)
        return Measurement(items=items, seconds=round(wall, 4), cpu_seconds=round(cpu, 4),
                           items_per_second=_sig(rate), items_per_cpu_second=_sig(items / cpu) if cpu > 0 else None,
                           warmup_seconds=round(warmup, 3), batch_size=batch_size, mean_chars=round(chars, 2), how=how,
                           warmup_cpu_seconds=round(warm_cpu, 3))


def _sig(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits (a measured rate has no more)."""
    return float(f"{x:.{digits}g}")


def measure_sample(enc: Any, texts_by_lang: dict[str, Sequence[str]], items: int = SAMPLE_ITEMS) -> Measurement | None:
    """Time ``enc`` on a small fixed sample of the texts: per language, the distinct texts with
    the smallest content hashes (the same texts on every machine and run), ``items`` in all,
    after :data:`WARMUP_ITEMS` texts encoded once to load the model. Nothing is cached.

    Args:
        enc: the model that encodes (not its cache).
        texts_by_lang: language -> texts.
        items: the sample's size (fewer where the texts are fewer).

    Returns:
        The measurement (``how="sample"``), or None when there is no text.
    """
    langs = [lang for lang in sorted(texts_by_lang) if len(texts_by_lang[lang])]
    if not langs:
        return None
    per = max(1, -(-items // len(langs)))
    sample = {lang: sorted(set(texts_by_lang[lang]), key=content_hash)[:per] for lang in langs}
    first = langs[0]
    enc.encode(sample[first][:WARMUP_ITEMS], first)
    timer = EncodeTimer()
    for lang in langs:
        timer.call(lambda rows, lang=lang: enc.encode(list(rows), lang), sample[lang], sum(map(len, sample[lang])))
    return timer.measurement("sample", getattr(enc, "batch_size", None), min_items=1, warm=True)


class PriceBook:
    """The price records of one cache folder (see the module docstring).

    Args:
        root: the embedding cache's folder (default: the user cache's ``embeddings``).
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else cache_dir("embeddings")

    def folder(self, identity: str, mach: dict[str, Any]) -> Path:
        """The folder of the records of model ``identity`` on machine ``mach``."""
        key = json.dumps(mach, sort_keys=True)
        return self.root / "prices" / content_hash(identity, 10) / content_hash(key, 8)

    def read(self, identity: str, mach: dict[str, Any], cls: str | None = None) -> Measurement | None:
        """The record of ``identity`` on ``mach`` in length class ``cls``; with ``cls`` None or
        absent, the one of the nearest class (the same distance: the longer texts); None when
        there is none."""
        found = {}
        for f in sorted(self.folder(identity, mach).glob("*.json")):
            m = self._load(f)
            if m is not None:
                found[m.length_class] = m
        if not found:
            return None
        if cls in found:
            return found[cls]
        if cls is None:
            return max(found.values(), key=lambda m: m.items)
        low = _class_low(cls)
        best = min(found, key=lambda c: (abs(math.log2(max(1, _class_low(c))) - math.log2(max(1, low))), -_class_low(c)))
        return found[best]

    def write(self, identity: str, mach: dict[str, Any], m: Measurement, model: str) -> Measurement:
        """Record ``m`` unless the record of its class covers as many texts or more.

        Args:
            identity: the model's identity (its version, with what it is fitted on).
            mach: :func:`machine` of the model.
            m: the measurement.
            model: how the model is called (kept in the file for a reader).

        Returns:
            The record of the class after the write (``m`` or the one kept).
        """
        folder = self.folder(identity, mach)
        path = folder / f"{m.length_class.replace(' ', '-')}.json"
        with held_lock(folder / ".lock"):
            old = self._load(path)
            if old is not None and old.items >= m.items:
                return old
            doc = {"format": FORMAT, "model": model, "identity": identity, "machine": mach, **m.to_json()}
            atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True))
        return m

    def shape(self, identity: str, dim: int | None, size: int | None) -> tuple[int | None, int | None] | None:
        """The vector size of model ``identity``: with ``dim`` known, ``(dim, size)``, recorded;
        else what was recorded when it was known (None: nothing), so a run that encodes nothing
        still knows it.

        Args:
            identity: the model's identity.
            dim: its dimension, None where the run does not know it.
            size: its bytes per item.

        Returns:
            ``(dim, bytes per item)`` or None.
        """
        path = self.root / "prices" / content_hash(identity, 10) / "shape.json"
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = None
        if dim is None:
            ok = isinstance(old, dict) and isinstance(old.get("dim"), int)
            return (old["dim"], old.get("bytes_per_item")) if ok else None
        doc = {"format": FORMAT, "identity": identity, "dim": dim, "bytes_per_item": size}
        if old != doc:
            atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True))
        return dim, size

    @staticmethod
    def _load(path: Path) -> Measurement | None:
        """A record file's measurement; None when it is missing or cannot be read (it is measured again)."""
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            return Measurement.from_json(d) if d.get("format") == FORMAT else None
        except (OSError, ValueError, TypeError, AttributeError):
            return None
