"""Code, tests and docs say what is, not how it came to be.

Scanned: every text file under ``src/``, ``tests/``, ``bench/`` and ``docs/``, and the three documents
``README.md``, ``ARCHITECTURE.md`` and ``BENCHMARKS.md``. A line fails when it cites a ticket of the
tracker (the word issue followed by a number, with or without ``#``, or a bare ``#N`` in
parentheses) or carries an ISO date (year-month-day): a ticket number means nothing to a reader of
the code, and a date dates the text. BENCHMARKS.md is the one place for dates: it records
measurements, and the date a figure was measured on is one of its conditions, beside the command
and the machine. Measured times belong in BENCHMARKS.md, decisions in ARCHITECTURE.md.

The documents (README, ARCHITECTURE, BENCHMARKS and docs/) also say what is, not how it came to
be: a line fails when it narrates history ("now", "no longer", "any more", "today's", "an earlier
kernel").

Exceptions are explicit in ``ALLOW`` (file, the matched text, the reason) and each must still match.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["src", "tests", "bench", "docs", "README.md", "ARCHITECTURE.md", "BENCHMARKS.md"]
DOCUMENTS = ("docs/", "README.md", "ARCHITECTURE.md", "BENCHMARKS.md")
DATED = {"BENCHMARKS.md"}  # the record of measurements: each is dated
BINARY = {".png", ".gz", ".jpg", ".jpeg", ".npy", ".npz", ".pyc", ".so", ".onnx", ".pt", ".pth", ".zip"}

TICKET = re.compile(r"\bissues?\s*#?\s*\d+|\(\s*#\d+\s*[),]", re.I)
ISO_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
HISTORY = re.compile(
    r"\bnow\b|\bno longer\b|\bany ?more\b|\btoday(?:'s)?\b"
    r"|\ban earlier (?:kernel|solver|version|implementation|design|code)\b",
    re.I,
)

# (path relative to the repository root, matched text) -> why it is allowed there.
# Empty: no file needs a ticket number, a date outside BENCHMARKS.md or a history phrase.
ALLOW: dict[tuple[str, str], str] = {}


def _files() -> list[Path]:
    out = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            out.append(path)
            continue
        for p in sorted(path.rglob("*")):
            if p.is_file() and p.suffix.lower() not in BINARY and not any(part == "__pycache__" or part.endswith(".egg-info") for part in p.parts):
                out.append(p)
    return out


def _patterns(rel: str | None) -> tuple[re.Pattern, ...]:
    """The patterns a file at ``rel`` (relative to the root; None: every pattern) must not match."""
    if rel is None:
        return (TICKET, ISO_DATE, HISTORY)
    patterns = [TICKET]
    if rel not in DATED:
        patterns.append(ISO_DATE)
    if rel.startswith(DOCUMENTS) and rel.endswith(".md"):
        patterns.append(HISTORY)
    return tuple(patterns)


def _findings(text: str, rel: str | None = None) -> list[tuple[int, str]]:
    """(line number, matched text) of every ticket reference, ISO date and history phrase in
    ``text`` that the file at ``rel`` may not hold (None: all of them)."""
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        for pattern in _patterns(rel):
            found.extend((no, m.group(0)) for m in pattern.finditer(line))
    return found


def _all_findings() -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a binary file with an unlisted suffix: nothing to read as prose
        rel = path.relative_to(ROOT).as_posix()
        for no, match in _findings(text, rel):
            out.setdefault((rel, match), []).append(no)
    return out


def test_files_scanned():
    files = {p.relative_to(ROOT).as_posix() for p in _files()}
    assert {"README.md", "ARCHITECTURE.md", "BENCHMARKS.md"} <= files
    assert "tests/rules/test_no_narration.py" in files
    assert any(f.startswith("src/backretrieval/") and f.endswith(".py") for f in files)
    assert any(f.startswith("docs/") and f.endswith(".md") for f in files)


def test_no_ticket_numbers_or_dates():
    found = _all_findings()
    bad = [f"{path}:{lines[0]}: {match!r}" for (path, match), lines in sorted(found.items()) if (path, match) not in ALLOW]
    assert not bad, "ticket numbers, dates or history (say what is instead; timings go to BENCHMARKS.md):\n" + "\n".join(bad)


def test_allow_list_is_needed():
    found = _all_findings()
    stale = [key for key in ALLOW if key not in found]
    assert not stale, f"allow-list entries that match nothing (remove them): {stale}"


@pytest.mark.parametrize(
    "line, caught",
    [
        ("fixed in " + "issue #" + "19", True),
        ("(" + "Issue " + "13, item 2)", True),
        ("the solver (" + "#" + "20)", True),
        ("as of " + "2026" + "-11-22", True),
        ("see issues" + " 4 and 5", True),
        ("the issue's report", False),
        ("hex colour #12ab34 and a heading ## 3", False),
        ("a Windows path 2026_11_22 or version 2026.11", False),
        ("the kernel " + "now" + " counts in one pass", True),
        ("it " + "no longer" + " copies the basis", True),
        ("(" + "An earlier" + " kernel wrote a mark)", True),
        ("known-good models and nowhere else", False),
    ],
)
def test_patterns(line, caught):
    assert bool(_findings(line)) is caught


def test_dates_only_in_benchmarks():
    """A measurement's date belongs in BENCHMARKS.md and nowhere else; a ticket belongs nowhere."""
    dated = "measured " + "2026" + "-11-26 20:31 UTC"
    assert not _findings(dated, "BENCHMARKS.md")
    assert _findings(dated, "ARCHITECTURE.md")
    assert _findings(dated, "docs/scale.md")
    assert _findings("see " + "issue " + "7", "BENCHMARKS.md")
    assert not _findings("kept " + "now" + " for the cache", "src/backretrieval/x.py")
    assert _findings("kept " + "now" + " for the cache", "docs/scale.md")
