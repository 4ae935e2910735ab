"""Timing rows a reader can trust: every variant runs at least :data:`MIN_RUNS` times, the variants
alternating within each round (baseline and candidate see the same machine load), and a row reports
the median with its spread (min-max); ratios are the median of the per-round ratios.

    runs = interleaved({"ours": timed(lambda: f(x)), "bare": timed(lambda: g(x))}, runs=3)
    spread(runs["ours"]).fmt()                 # '0.555 (0.550-0.561)'
    ratio_spread(runs["ours"], runs["bare"])   # per-round ratios, median and range

A variant is any callable; what it returns is collected per round (seconds from :func:`timed`, or a
child process's JSON row).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: The fewest runs per variant a timing row may rest on.
MIN_RUNS = 3


def check_runs(runs: int) -> int:
    """``runs`` if it is at least :data:`MIN_RUNS`, else a ``SystemExit`` naming the minimum."""
    if runs < MIN_RUNS:
        raise SystemExit(f"timing rows need at least {MIN_RUNS} interleaved runs per variant, got {runs}")
    return runs


def timed(fn: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> Callable[[], float]:
    """A variant that runs ``fn`` and returns its seconds by ``clock`` (wall by default)."""

    def run() -> float:
        t = clock()
        fn()
        return clock() - t

    return run


def interleaved(variants: dict[str, Callable[[], Any]], runs: int = MIN_RUNS,
                on_result: Callable[[str, int, Any], None] | None = None, warmup: bool = False) -> dict[str, list[Any]]:
    """Run every variant ``runs`` times (at least :data:`MIN_RUNS`), one of each per round, the order
    rotated by one each round (no variant always runs first); returns each variant's results in
    round order. ``on_result(name, round, result)`` is called after each run (progress logs).
    ``warmup``: one untimed run of each variant first (compilation, caches, first-touch pages)."""
    check_runs(runs)
    names = list(variants)
    if warmup:
        for name in names:
            variants[name]()
    out: dict[str, list[Any]] = {name: [] for name in names}
    for k in range(runs):
        s = k % len(names)
        for name in names[s:] + names[:s]:
            r = variants[name]()
            out[name].append(r)
            if on_result is not None:
                on_result(name, k, r)
    return out


@dataclass(frozen=True)
class Spread:
    """Median and range of a set of runs."""

    median: float
    lo: float
    hi: float
    n: int

    def fmt(self, spec: str = ".3f") -> str:
        """``median (min-max)``; the median alone when all runs agree at this precision."""
        m, lo, hi = (format(x, spec) for x in (self.median, self.lo, self.hi))
        return m if lo == hi else f"{m} ({lo}-{hi})"


def spread(values: Sequence[float]) -> Spread:
    """The :class:`Spread` of ``values`` (at least one)."""
    v = [float(x) for x in values]
    if not v:
        raise ValueError("spread: no values")
    return Spread(statistics.median(v), min(v), max(v), len(v))


def ratio_spread(num: Sequence[float], den: Sequence[float]) -> Spread:
    """The :class:`Spread` of the per-round ratios ``num[k] / den[k]`` (runs of the same round)."""
    if len(num) != len(den):
        raise ValueError(f"ratio_spread: {len(num)} and {len(den)} runs")
    return spread([a / b for a, b in zip(num, den)])


def describe(runs: int) -> str:
    """The sentence a BENCHMARKS section states about how its times were taken."""
    return (f"Times: median of {runs} interleaved runs per variant (the variants alternate within each round, the "
            "order rotated each round), spread (min-max) in brackets; ratios are the median (min-max) of the "
            "per-round ratios.")
