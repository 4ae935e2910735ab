"""Every ``from X import Y`` in the package names a module that exists -- also the imports inside
functions, which only run on some paths (a package split once left ``from ..metrics`` pointing
into ``analysis/`` where only the approximate route would have found it)."""
import ast
import importlib.util
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "src" / "backretrieval"
FILES = sorted(PKG.rglob("*.py"))


def _package_of(path: Path) -> list[str]:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    return parts if path.name == "__init__.py" and parts.pop() else parts[:-1]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_every_import_names_an_existing_module(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = _package_of(path)
    missing = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = pkg[: len(pkg) - (node.level - 1)]
            name = ".".join(base + ([node.module] if node.module else []))
        elif node.module and node.module.split(".")[0] == "backretrieval":
            name = node.module
        else:
            continue
        if importlib.util.find_spec(name) is None:
            missing.append(f"line {node.lineno}: {name}")
            continue
        if node.module is None or node.level:  # `from . import x`: x may be a submodule or a name
            for alias in node.names:
                sub = f"{name}.{alias.name}"
                mod = importlib.import_module(name)
                if not hasattr(mod, alias.name) and importlib.util.find_spec(sub) is None:
                    missing.append(f"line {node.lineno}: {sub}")
    assert not missing, f"{path.relative_to(PKG)} imports modules that do not exist: {missing}"
