"""Public API docstrings.

Every public module of the package (no path part after ``backretrieval`` starts with an
underscore) is covered at two levels:

* **present** (every public module): each public function and class defined there, and each public
  method and property such a class defines itself, has a docstring that is not empty
  (:func:`test_docstring_present`); the signature ``dataclasses`` writes as the docstring of a
  dataclass without one (``Name(field: type, ...)``) counts as none;
* **Google style** (the modules listed below): ``Args:`` and ``Returns:`` sections, as follows.

Google style covers: ``backretrieval.metrics`` (the package and every public submodule, plus the names its
``__all__`` re-exports from private submodules), every module of ``backretrieval.analysis``
(subpackages included: ``analysis.evaluate``), the estimator base module
``backretrieval.train.base``, the run writers (``report.runs``), Cr5's ``train.cr5.retrieval``, ``train.cr5.splits`` and
``train.cr5.solver``, and the estimator classes ``Triplet``, ``M3L`` and ``Cr5``.

What is collected: public (no leading underscore) functions and classes *defined* in a covered
module (not imported into it), and the public methods each such class defines itself (inherited
ones are checked where they are defined). For the estimator classes: ``fit``, the public
``transform``-like methods they define, ``save`` and ``load``.

What is checked, per object:

* ``Args:`` lists every parameter except ``self`` / ``cls`` (a parameter may share an entry with
  others, ``a, b: ...``; ``*args`` / ``**kwargs`` by their bare names) and nothing else. For a
  class the parameters are those of its own ``__init__`` and the section is in the class
  docstring; a dataclass's generated ``__init__`` takes its fields, which it may list under
  ``Attributes:`` instead.
* ``Returns:`` (or ``Yields:`` for a generator) when the function returns something: its return
  annotation is not ``None``; unannotated functions are read with ``ast`` for a ``return <value>``.
* A ``Raises:`` section, where present, names at least one exception per entry (the section is
  optional: only raise conditions a caller should know are documented).

The allow-list below is explicit and short (each entry says why a section makes no sense there)
and every entry must still be needed.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
import textwrap

import pytest

import backretrieval.analysis
import backretrieval.metrics
import backretrieval.report.runs

EXCLUDED_MODULES: set[str] = set()  # empty: every analysis module is covered

# qualified name -> sections ("Args", "Returns") not required there, each with the reason in a
# comment. Empty today: every collected object has the sections that make sense for it
# (exception classes and classes without a Python ``__init__`` have no parameters to list).
ALLOW: dict[str, set[str]] = {}

SECTION = re.compile(r"^(\s*)(Args|Arguments|Returns|Yields|Raises|Attributes|Examples?|Notes?|See Also):\s*$", re.M)


def _modules() -> list:
    mods = [backretrieval.metrics]
    for pkg in (backretrieval.metrics, backretrieval.analysis):
        # subpackages too (analysis/evaluate/ once it is one and leaves EXCLUDED_MODULES)
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            parts = info.name.split(".")
            if any(part.startswith("_") for part in parts[2:]) or any(
                info.name == ex or info.name.startswith(ex + ".") for ex in EXCLUDED_MODULES
            ):
                continue
            mods.append(importlib.import_module(info.name))
    mods.append(importlib.import_module("backretrieval.train.base"))
    # Cr5's public functions (problem.py and the compiled kernels _cg / _lanczos are not covered)
    for name in ("retrieval", "splits", "solver"):
        mods.append(importlib.import_module(f"backretrieval.train.cr5.{name}"))
    # the run writers: what every command does, given a folder (br.evaluate, br.compare, br.meta, ...)
    for info in pkgutil.walk_packages(backretrieval.report.runs.__path__, "backretrieval.report.runs."):
        mods.append(importlib.import_module(info.name))
    return mods


def _estimators() -> list[type]:
    from backretrieval.train.cr5 import Cr5
    from backretrieval.train.m3l import M3L
    from backretrieval.train.triplet import Triplet

    return [Triplet, M3L, Cr5]


def _estimator_method(name: str) -> bool:
    """``fit*``, ``transform*`` / ``predict*`` / ``encode*``, ``save``, ``load``."""
    return name in ("save", "load") or name.startswith(("fit", "transform", "predict", "encode"))


def _defined_here(obj, module) -> bool:
    return getattr(obj, "__module__", None) == module.__name__


def _collect() -> dict[str, object]:
    found: dict[str, object] = {}

    def add_class(cls, keep=lambda name: True):
        found[f"{cls.__module__}.{cls.__qualname__}"] = cls
        for name, member in vars(cls).items():
            if name.startswith("_") or not keep(name):
                continue
            func = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
            if inspect.isfunction(func):
                found[f"{cls.__module__}.{cls.__qualname__}.{name}"] = func

    for module in _modules():
        exported = set(getattr(module, "__all__", ()))
        for name in sorted({n for n in vars(module) if not n.startswith("_")} | exported):
            obj = getattr(module, name)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            own = _defined_here(obj, module) or (
                # re-exported by the package from one of its private submodules
                name in exported and obj.__module__.startswith(module.__name__ + "._")
            )
            if not own:
                continue
            if inspect.isclass(obj):
                add_class(obj)
            else:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    for cls in _estimators():
        add_class(cls, _estimator_method)
    return found


OBJECTS = _collect()


def _sections(doc: str) -> dict[str, str]:
    """Section name -> its body (dedented), for a Google-style docstring."""
    doc = inspect.cleandoc(doc)
    out: dict[str, str] = {}
    matches = list(SECTION.finditer(doc))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(doc)
        body = doc[m.end() : end]
        # the section ends at the first line indented no deeper than its header
        lines = []
        for line in body.splitlines()[1:] if body.startswith("\n") else body.splitlines():
            if line.strip() and len(line) - len(line.lstrip()) <= len(m.group(1)):
                break
            lines.append(line)
        name = {"Arguments": "Args", "Example": "Examples", "Note": "Notes"}.get(m.group(2), m.group(2))
        out[name] = textwrap.dedent("\n".join(lines))
    return out


def _entry_names(body: str) -> set[str]:
    """Names of the entries of an Args section: ``name:``, ``name (type):``, ``a, b:``."""
    names: set[str] = set()
    for line in body.splitlines():
        if not line.strip() or line[0].isspace():
            continue  # blank or a continuation line
        head = line.split(":", 1)[0]
        head = re.sub(r"\([^)]*\)", "", head)  # "name (int)" -> "name"
        for part in head.split(","):
            names.add(part.strip().lstrip("*"))
    return names


def _parameters(obj) -> list[str]:
    if inspect.isclass(obj):
        init = obj.__init__
        if not inspect.isfunction(init) or init.__module__ == "typing":
            return []  # no Python constructor: object's, an exception's *args, a Protocol's
        sig = inspect.signature(init)
    else:
        sig = inspect.signature(obj)
    return [p.name for p in sig.parameters.values() if p.name not in ("self", "cls")]


def _function_node(func):
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    return next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)


def _own_nodes(node):
    """The nodes of a function body, not descending into nested functions, lambdas or classes."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    stack = [n for n in node.body if not isinstance(n, nested)]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(child for child in ast.iter_child_nodes(n) if not isinstance(child, nested))


def _returns_kind(func) -> str | None:
    """``"Returns"``, ``"Yields"`` or None (returns nothing)."""
    node = _function_node(func)
    if node is not None and any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _own_nodes(node)):
        return "Yields"
    ann = inspect.signature(func).return_annotation
    if ann is not inspect.Signature.empty:
        return None if ann in (None, "None", "NoReturn") else "Returns"
    if node is None:
        return "Returns"
    for n in _own_nodes(node):
        if isinstance(n, ast.Return) and n.value is not None:
            if not (isinstance(n.value, ast.Constant) and n.value.value is None):
                return "Returns"
    return None


def test_something_collected():
    names = set(OBJECTS)
    for expected in (
        "backretrieval.metrics.xlr.xlr",
        "backretrieval.metrics.bkr.bkr",
        "backretrieval.metrics.csls",
        "backretrieval.metrics._inputs.rank_summary",
        "backretrieval.analysis.meta.run_meta",
        "backretrieval.analysis.stats.sign_flip_p",
        "backretrieval.train.base.Estimator",
        "backretrieval.train.triplet.estimator.Triplet.fit",
        "backretrieval.train.m3l.estimator.M3L.save",
        "backretrieval.train.m3l.estimator.M3L.transform",
        "backretrieval.train.triplet.estimator.Triplet.transform",
        "backretrieval.analysis.evaluate.config.EvalConfig.key",
        "backretrieval.analysis.evaluate.tasks.run_sample_task",
        "backretrieval.train.cr5.estimator.Cr5.fit",
        "backretrieval.train.cr5.solver.solve",
        "backretrieval.train.cr5.retrieval.select_lambda",
        "backretrieval.analysis.trained.cr5.train_evaluate",
        "backretrieval.report.runs.meta.meta",
        "backretrieval.train.cr5.splits.make_split",
        "backretrieval.metrics.retrieval.retrieval_ranks",
    ):
        assert expected in names, expected
    assert not any(n.rsplit(".", 1)[1].startswith("_") for n in names)
    assert len(names) > 60


def test_allow_list_is_needed(monkeypatch):
    stale = [name for name in ALLOW if name not in OBJECTS]
    assert not stale, f"allow-list entries that name nothing collected: {stale}"
    for name in list(ALLOW):
        monkeypatch.delitem(ALLOW, name)
        assert _problems(name, OBJECTS[name]), f"allow-list entry {name} is not needed: remove it"


def _written_doc(obj) -> str | None:
    """The docstring of ``obj`` that a person wrote: None for none, and for a dataclass whose
    ``__doc__`` is the signature ``dataclasses`` generates when there is none (``Name(field: type, ...)``)."""
    doc = obj.__doc__ if inspect.isclass(obj) else inspect.getdoc(obj)
    if doc and inspect.isclass(obj) and dataclasses.is_dataclass(obj) and doc.startswith(f"{obj.__name__}("):
        return None
    return doc


def _problems(name: str, obj) -> list[str]:
    """What is wrong with the docstring of ``obj`` (empty: nothing)."""
    doc = _written_doc(obj)
    if not doc or not doc.strip():
        return ["no docstring"]
    sections = _sections(doc)
    allowed = ALLOW.get(name, set())
    problems = []

    params = _parameters(obj)
    if params and "Args" not in allowed:
        # a dataclass may list its fields (its constructor's parameters) under Attributes:
        key = "Attributes" if "Args" not in sections and dataclasses.is_dataclass(obj) else "Args"
        if key not in sections:
            problems.append(f"no Args: section (parameters {params})")
        else:
            listed = _entry_names(sections[key])
            missing = [p for p in params if p not in listed]
            if missing:
                problems.append(f"Args: does not list {missing}")
            unknown = sorted(listed - set(params))
            if unknown and not any(p in ("args", "kwargs") for p in params):
                problems.append(f"Args: lists {unknown}, which are not parameters")

    if not inspect.isclass(obj) and "Returns" not in allowed:
        kind = _returns_kind(obj)
        # an iterator-returning function may document what it yields instead, and vice versa
        if kind and "Returns" not in sections and "Yields" not in sections:
            problems.append(f"no {kind}: section")
        for section in ("Returns", "Yields"):
            if kind and section in sections and not sections[section].strip():
                problems.append(f"empty {section}: section")

    if "Raises" in sections:
        for line in sections["Raises"].splitlines():
            if line.strip() and not line[0].isspace():
                exc = line.split(":", 1)[0].strip()
                if not re.fullmatch(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Warning|Interrupt)", exc):
                    problems.append(f"Raises: entry {exc!r} is not an exception name")
    return problems


def _public_modules() -> list:
    """Every module of the package whose dotted path has no part starting with an underscore."""
    import backretrieval

    mods = [backretrieval]
    for info in pkgutil.walk_packages(backretrieval.__path__, "backretrieval."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        mods.append(importlib.import_module(info.name))
    return mods


def _collect_present() -> dict[str, object]:
    """Public functions and classes defined in every public module, and their own public methods
    and properties (qualified name -> the object whose ``__doc__`` is checked)."""
    found: dict[str, object] = {}
    for module in _public_modules():
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if not _defined_here(obj, module):
                continue
            found[f"{module.__name__}.{name}"] = obj
            if not inspect.isclass(obj):
                continue
            for member_name, member in vars(obj).items():
                if member_name.startswith("_"):
                    continue
                if isinstance(member, (classmethod, staticmethod)):
                    member = member.__func__
                elif isinstance(member, property):
                    member = member.fget
                if inspect.isfunction(member):
                    found[f"{module.__name__}.{name}.{member_name}"] = member
    return found


PRESENT = _collect_present()


def test_every_public_module_is_covered():
    names = {m.__name__ for m in _public_modules()}
    for expected in ("backretrieval.cli.evaluate", "backretrieval.study.store", "backretrieval.encoders.base",
                     "backretrieval.data.registry", "backretrieval.train.cr5.problem", "backretrieval.report.table"):
        assert expected in names, expected
    assert not any(part.startswith("_") for n in names for part in n.split(".")[1:])
    assert "backretrieval.study.store.read_meta" in PRESENT
    assert "backretrieval.data.corpus.Corpus.subset" in PRESENT
    assert len(PRESENT) > 400


@pytest.mark.parametrize("name", sorted(PRESENT))
def test_docstring_present(name):
    doc = _written_doc(PRESENT[name])
    assert doc and doc.strip(), (
        f"{name}: no docstring (one line saying what it is or does; a dataclass also lists its fields under Attributes:)"
    )


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_docstring_sections(name):
    problems = _problems(name, OBJECTS[name])
    assert not problems, f"{name}: " + "; ".join(problems)


# --- the checker itself, on examples defined here (it must not pass everything)

def _good(a: int, b: int = 0, *rest: int, **extra: int) -> int:
    """Sum.

    Args:
        a, b: two numbers
            (a continuation line).
        rest (int): more numbers.
        extra: ignored.

    Returns:
        The sum.

    Raises:
        ValueError: never, in fact.
    """
    return a + b + sum(rest)


def _no_returns(a):
    """Half a docstring.

    Args:
        a: a number.
    """
    def inner():
        return 1  # a nested function's return is not ``_no_returns``'s

    return a if inner() else None


def _missing_arg(a, b) -> None:
    """Args only in part.

    Args:
        a: documented.
        c: not a parameter.
    """


def _bad_raises(a) -> None:
    """Raises names no exception.

    Args:
        a: a number.

    Raises:
        when a is negative.
    """


def _generator(n: int):
    """Counts.

    Args:
        n: how far.

    Yields:
        0 .. n - 1.
    """
    yield from range(n)


class _Config:
    """A class documents its constructor's parameters.

    Args:
        size: how many.
    """

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size, self.seed = size, seed


@dataclasses.dataclass
class _Undocumented:
    size: int
    seed: int = 0


@dataclasses.dataclass
class _Documented:
    """A dataclass with its own docstring.

    Attributes:
        size: how many.
    """

    size: int


def test_checker_on_examples():
    assert _problems("_good", _good) == []
    assert _problems("_generator", _generator) == []
    assert _problems("_no_returns", _no_returns) == ["no Returns: section"]
    assert _problems("_missing_arg", _missing_arg) == [
        "Args: does not list ['b']", "Args: lists ['c'], which are not parameters"
    ]
    assert _problems("_bad_raises", _bad_raises) == ["Raises: entry 'when a is negative.' is not an exception name"]
    assert _problems("_Config", _Config) == ["Args: does not list ['seed']"]
    assert _problems("_undocumented", lambda x: x) == ["no docstring"]
    # the docstring dataclasses generates ("_Undocumented(size: int, seed: int = 0)") is none
    assert _Undocumented.__doc__.startswith("_Undocumented(") and _written_doc(_Undocumented) is None
    assert _problems("_Undocumented", _Undocumented) == ["no docstring"]
    assert _problems("_Documented", _Documented) == []


def test_dataclass_fields_are_constructor_parameters():
    """The class check above reads ``__init__``; for dataclasses that is the field list."""
    for name, obj in OBJECTS.items():
        if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
            fields = [f.name for f in dataclasses.fields(obj) if f.init]
            assert _parameters(obj) == fields, name


def test_every_layer_is_named_and_mapped():
    """The package docstring names every layer, in order, and points to ARCHITECTURE.md, whose
    layer map has one entry per layer, in the import order that tests/rules/test_layers.py enforces."""
    from pathlib import Path

    import backretrieval

    layers = ["core", "data", "encoders", "search", "metrics", "train", "analysis", "report", "study", "cli"]
    doc = backretrieval.__doc__
    named = re.findall(r"``(\w+)``", doc)
    assert [n for n in named if n in layers] == layers, f"package docstring names the layers {named}"
    assert "ARCHITECTURE.md" in doc
    text = (Path(__file__).resolve().parents[2] / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = text.split("```", 2)[1]  # the first code block: the layer map
    starts = [line.split()[0] for line in block.splitlines() if line.strip() and not line[0].isspace()]
    assert starts == layers, f"ARCHITECTURE.md's layer map lists {starts}"
