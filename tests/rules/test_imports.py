"""The package's import graph: a leading underscore means private, and no circle crosses a package.

Read statically from every import statement of ``src/backretrieval`` (module level and inside
functions), each resolved to the file it loads (``from pkg import mod`` to ``pkg/mod.py``):

* No module imports another module's underscore name (``from .features import _draw``), and no
  module imports an underscore module of another package (``backretrieval.search._fused``);
  within one package a module may use the package's own private modules (``train/cr5/_cg.py``).
  Tests may reach a private helper to test it; this file checks the package only.
* No circle of imports joins files of different (sub-)packages: the strongly connected parts of
  the file graph each lie inside one folder. Imports under ``if TYPE_CHECKING:`` never run and
  draw no edge here (the package's front door names every layer there for type checkers).
  Which layer may import which is tests/rules/test_layers.py.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "backretrieval"
FILES = sorted(PKG.rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_of(path: Path) -> tuple[list[str], list[str]]:
    """(dotted module, its package) of a file, as lists of parts."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
        return parts, parts
    return parts, parts[:-1]


def _file_of(parts: list[str]) -> Path | None:
    base = SRC.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _nodes(tree: ast.AST, run_time_only: bool):
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if run_time_only and _type_checking(node):
            todo.extend(node.orelse)  # the body never runs
            continue
        todo.extend(ast.iter_child_nodes(node))


def _imports(path: Path, source: str | None = None, run_time_only: bool = False):
    """(line, target module parts, imported names or None for ``import x``) of every import of
    the package in the file ``path`` (or in ``source``, read as that file); ``run_time_only``
    leaves out the imports under ``if TYPE_CHECKING:``, which never run."""
    mod, pkg = _module_of(path)
    source = path.read_text(encoding="utf-8") if source is None else source
    for node in _nodes(ast.parse(source), run_time_only):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                target = pkg[: len(pkg) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "backretrieval":
                target = node.module.split(".")
            else:
                continue
            yield node.lineno, target, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "backretrieval":
                    yield node.lineno, alias.name.split("."), None


def _private_imports(path: Path, source: str | None = None) -> list[str]:
    mod, pkg = _module_of(path)
    bad = []
    for line, target, names in _imports(path, source):
        for i, part in enumerate(target):
            if _private(part) and target[:i] != pkg:
                bad.append(f"line {line}: the private module {'.'.join(target[: i + 1])} of another package")
                break
        for name in names or ():
            if not _private(name):
                continue
            if _file_of(target + [name]) is not None:  # `from . import _module`
                if target != pkg:
                    bad.append(f"line {line}: the private module {'.'.join(target + [name])} of another package")
            elif target != mod:
                bad.append(f"line {line}: the private name {name} of {'.'.join(target)}")
    return bad


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_private_name_or_module_is_imported_from_elsewhere(path):
    bad = _private_imports(path)
    assert not bad, f"{path.relative_to(PKG)} imports what is private elsewhere: " + "; ".join(bad)


def _graph() -> dict[Path, set[Path]]:
    graph: dict[Path, set[Path]] = {p: set() for p in FILES}
    for path in FILES:
        for _, target, names in _imports(path, run_time_only=True):
            found = _file_of(target)
            subs = [_file_of(target + [n]) for n in names or ()]
            graph[path].update(s for s in subs if s is not None)
            if found is not None and (names is None or not all(subs)):
                graph[path].add(found)
            graph[path].discard(path)
    return graph


def _strongly_connected(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """Tarjan's strongly connected components, iteratively."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    on_stack: set[Path] = set()
    stack: list[Path] = []
    out: list[list[Path]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                out.append(part)
    return out


def test_no_import_circle_crosses_a_package():
    graph = _graph()
    crossing = []
    for part in _strongly_connected(graph):
        if len({p.parent for p in part}) > 1:
            members = set(part)
            edges = sorted(
                f"{a.relative_to(PKG)} -> {b.relative_to(PKG)}" for a in part for b in graph[a] if b in members
            )
            crossing.append("; ".join(edges))
    assert not crossing, "import circles between files of different packages: " + " | ".join(crossing)


def test_the_checks_see_what_they_forbid():
    """The readers find a private import and a circle where there is one, and allow a package's
    own private module."""
    grid = PKG / "analysis" / "evaluate" / "grid.py"
    assert _private_imports(grid, "from .features import _helper\n") == [
        "line 1: the private name _helper of backretrieval.analysis.evaluate.features"
    ]
    assert _private_imports(grid, "def f():\n    from ...train.cr5 import _cg\n") == [
        "line 2: the private module backretrieval.train.cr5._cg of another package"
    ]
    assert _private_imports(grid, "import backretrieval.search._fused\n") == [
        "line 1: the private module backretrieval.search._fused of another package"
    ]
    assert _private_imports(PKG / "train" / "cr5" / "problem.py", "from . import _cg\nfrom ._cg import pcg\n") == []
    graph = {Path("a/x.py"): {Path("b/y.py")}, Path("b/y.py"): {Path("a/x.py"), Path("a/z.py")}, Path("a/z.py"): set()}
    assert sorted(sorted(str(p) for p in part) for part in _strongly_connected(graph)) == [["a/x.py", "b/y.py"], ["a/z.py"]]
