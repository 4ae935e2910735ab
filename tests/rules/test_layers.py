"""The one-way house: no module imports a layer that comes after its own.

Order: core -> data -> encoders -> search -> metrics -> train -> analysis -> report -> study -> cli.
Checked statically on every import statement (module level and inside functions).
"""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "src" / "backretrieval"
LAYERS = ["core", "data", "encoders", "search", "metrics", "train", "analysis", "report", "study", "cli"]


def _layer_of(path: Path) -> str | None:
    rel = path.relative_to(PKG)
    head = rel.parts[0].removesuffix(".py")
    return head if head in LAYERS else None


def _imported_layers(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel_parts = path.relative_to(PKG).parts[:-1]  # package of the module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel_parts[: len(rel_parts) - (node.level - 1)]) if node.level > 1 else list(rel_parts)
                target = base + (node.module.split(".") if node.module else [])
                if not node.module:  # from .. import x
                    target = base + [a.name for a in node.names][:1]
            elif node.module and node.module.startswith("backretrieval."):
                target = node.module.split(".")[1:]
            else:
                continue
            if target and target[0] in LAYERS:
                yield node.lineno, target[0]
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "backretrieval" and len(parts) > 1 and parts[1] in LAYERS:
                    yield node.lineno, parts[1]


FILES = sorted(p for p in PKG.rglob("*.py") if _layer_of(p) is not None)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_upward_import(path):
    own = LAYERS.index(_layer_of(path))
    bad = [(line, layer) for line, layer in _imported_layers(path) if LAYERS.index(layer) > own]
    assert not bad, f"{path.relative_to(PKG)} imports later layers: " + ", ".join(f"{l} (line {n})" for n, l in bad)


def test_layers_exist():
    present = {p.name.removesuffix(".py") for p in PKG.iterdir()}
    for layer in ("core", "data", "encoders", "search", "metrics", "analysis", "report", "cli"):
        assert layer in present


def _imported_modules(path: Path):
    """``(line, dotted path inside the package)`` of every package import of the module at ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel_parts = list(path.relative_to(PKG).parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = rel_parts[: len(rel_parts) - (node.level - 1)]
            yield node.lineno, ".".join(base + (node.module.split(".") if node.module else [a.name for a in node.names][:1]))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("backretrieval."):
            yield node.lineno, node.module.split(".", 1)[1]


WINGS = ("text", "image")


@pytest.mark.parametrize("wing", WINGS)
def test_the_encoder_wings_do_not_import_each_other(wing):
    """A text model and an image model share what they share through the encoders' root, not
    through each other's wing."""
    other = next(w for w in WINGS if w != wing)
    files = sorted((PKG / "encoders" / wing).glob("*.py"))
    assert files
    bad = [
        f"{p.relative_to(PKG)} line {n}: {target}"
        for p in files
        for n, target in _imported_modules(p)
        if target == f"encoders.{other}" or target.startswith(f"encoders.{other}.")
    ]
    assert not bad, "imports the other wing: " + "; ".join(bad)
