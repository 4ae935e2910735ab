"""Every Python example in the README and in docs/ imports only the public surface and runs.

Each ```python block runs as written, in a fresh interpreter whose working folder is a temporary
directory (relative output paths land there), with the session's data and cache variables. A page
whose examples continue a shell walk-through gets that walk-through's files first (PREPARE).
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from commands import cli

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# public: the package itself and its documented public subpackages; nothing private
PRIVATE = re.compile(r"(^|\.)_[a-z]")


def _blocks() -> list[tuple[str, int, str]]:
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for i, m in enumerate(BLOCK.finditer(text)):
            out.append((page.relative_to(REPO).as_posix(), i, m.group(1)))
    return out


BLOCKS = _blocks()


def _prepare_your_data(cwd: Path) -> None:
    """docs/your-data.md's steps 1-2: the catalogue made from the emoji data, stacked into one file."""
    import pandas as pd

    shop = cwd / "shop"
    made = cli(["make-catalogue", shop, "--langs", "en,de,fr,ja"])  # in process: the examples are what runs fresh
    assert made.exit_code == 0, made.output
    parts = [pd.read_csv(f, dtype=str).assign(lang=f.stem) for f in sorted(shop.glob("??.csv"))]
    catalogue = pd.concat(parts, ignore_index=True)
    catalogue["concept"] = catalogue["id"]
    catalogue.to_csv(shop / "catalogue.csv", index=False)


PREPARE = {"docs/your-data.md": _prepare_your_data}


def test_there_are_examples():
    pages = {page for page, _, _ in BLOCKS}
    assert "README.md" in pages and len(BLOCKS) >= 8


@pytest.mark.parametrize("page,index,code", BLOCKS, ids=[f"{p}#{i}" for p, i, _ in BLOCKS])
def test_example_imports_only_public_names(page, index, code):
    for node in ast.walk(ast.parse(code)):
        modules = []
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        for mod in modules:
            if mod.split(".")[0] == "backretrieval":
                assert not PRIVATE.search(mod), f"{page} example {index} imports a private name: {mod}"


@pytest.mark.parametrize("page,index,code", BLOCKS, ids=[f"{p}#{i}" for p, i, _ in BLOCKS])
def test_example_runs(page, index, code, shared_data, tmp_path):
    if page in PREPARE:
        PREPARE[page](tmp_path)
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"{page} example {index} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
