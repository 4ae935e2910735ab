"""Code, tests and docs say what is, not how it came to be.

Scanned: every text file under ``src/``, ``tests/`` and ``docs/``, and ``README.md``. A line fails
when it cites a ticket of the tracker (the word issue followed by a number, with or without ``#``,
or a bare ``#N`` in parentheses) or carries an ISO date (year-month-day): a ticket number means
nothing to a reader of the code, and a date dates the text. Measured times belong in BENCHMARKS.md,
decisions in ARCHITECTURE.md.

Exceptions are explicit in ``ALLOW`` (file, the matched text, the reason) and each must still match.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["src", "tests", "docs", "README.md"]
BINARY = {".png", ".gz", ".jpg", ".jpeg", ".npy", ".npz", ".pyc", ".so", ".onnx", ".pt", ".pth", ".zip"}

TICKET = re.compile(r"\bissues?\s*#?\s*\d+|\(\s*#\d+\s*[),]", re.I)
ISO_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")

# (path relative to the repository root, matched text) -> why it is allowed there.
# Empty today: no file needs a ticket number or a date.
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


def _findings(text: str) -> list[tuple[int, str]]:
    """(line number, matched text) of every ticket reference and ISO date in ``text``."""
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        for pattern in (TICKET, ISO_DATE):
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
        for no, match in _findings(text):
            out.setdefault((rel, match), []).append(no)
    return out


def test_files_scanned():
    files = {p.relative_to(ROOT).as_posix() for p in _files()}
    assert "README.md" in files
    assert "tests/rules/test_no_narration.py" in files
    assert any(f.startswith("src/backretrieval/") and f.endswith(".py") for f in files)
    assert any(f.startswith("docs/") and f.endswith(".md") for f in files)


def test_no_ticket_numbers_or_dates():
    found = _all_findings()
    bad = [f"{path}:{lines[0]}: {match!r}" for (path, match), lines in sorted(found.items()) if (path, match) not in ALLOW]
    assert not bad, "ticket numbers or dates (say what is instead; timings go to BENCHMARKS.md):\n" + "\n".join(bad)


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
    ],
)
def test_patterns(line, caught):
    assert bool(_findings(line)) is caught
