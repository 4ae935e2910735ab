"""One word for f and g: the user's documents call the text and image representations
*models* (``br.text_model``, ``br.image_model``, ``--models``, ``--image-model``), never encoders.

Scanned: README.md and docs/*.md, prose only (code spans and fenced blocks name the package
``backretrieval.encoders`` and its functions, which keep their names), and the docstrings of every
name ``import backretrieval`` offers. ``encoders`` as the name of the package layer stays in
ARCHITECTURE.md, which describes the code.
"""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import backretrieval as br

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
ENCODER = re.compile(r"\bencoders?\b", re.I)
PROPER = re.compile(r"Universal Sentence Encoder|[\w-]*sentence-encoder[\w-]*", re.I)  # a model's published name, its package


def offending(text: str) -> list[str]:
    """The prose lines of ``text`` (code removed) that call a model an encoder."""
    prose = PROPER.sub("", CODE.sub("", text))
    return [line.strip() for line in prose.splitlines() if ENCODER.search(line)]


def test_the_rule_sees_prose_and_skips_code():
    assert offending("a text encoder here") == ["a text encoder here"]
    assert offending("see `backretrieval.encoders` and\n```\nencoder = 1\n```\n") == []
    assert offending("multilingual Universal Sentence Encoder v3") == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_documents_say_model(path):
    assert offending(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("name", sorted(set(br.__all__) - {"__version__"}))
def test_front_door_docstrings_say_model(name):
    assert offending(inspect.getdoc(getattr(br, name)) or "") == []
