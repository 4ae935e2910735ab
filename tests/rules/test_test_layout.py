"""Tests are where a newcomer looks: ``tests/<layer>/test_<module>.py``, a registered plugin's
contract test (a text or image model, a dataset, an executor or a metric: the contract tests run
every entry of the registries and tables), or a row of tests/README.md that names the file that
tests the module and says why it has none of its own."""
from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "backretrieval"
TESTS = ROOT / "tests"
ROW = re.compile(r"^\| `([^`]+\.py)` \| (.+?) \| (.+?) \|$")
CONTRACTS = {  # a kind of plugin -> the contract test that runs every registered entry of that kind
    "model": TESTS / "encoders" / "test_encoder_contract.py",
    "dataset": TESTS / "data" / "test_dataset_contract.py",
    "executor": TESTS / "analysis" / "test_executors.py",
    "metric": TESTS / "metrics" / "test_metric_table.py",
}


def modules() -> list[str]:
    """Every module of the package with code of its own (``__init__`` and ``__main__`` aside)."""
    return sorted(p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py") if p.name not in ("__init__.py", "__main__.py"))


def _module_of(obj) -> str:
    """The module (path below the package) that defines ``obj`` (a partial: its function)."""
    while isinstance(obj, functools.partial):
        obj = obj.func
    return Path(sys.modules[obj.__module__].__file__).resolve().relative_to(SRC).as_posix()


def plugins() -> dict[str, str]:
    """Module -> the kind of plugin it registers, read from the registries and tables the
    contract tests run over: the module of each model's factory, each dataset's loader, each
    executor's class and each metric's functions (the one that reports it and a per-query outcome)."""
    from backretrieval.analysis.executors import EXECUTORS
    from backretrieval.data import list_datasets
    from backretrieval.encoders import list_image_encoders, list_text_encoders
    from backretrieval.metrics.table import METRICS

    found = {_module_of(i.factory): "model" for i in [*list_text_encoders(), *list_image_encoders()]}
    found |= {_module_of(i.loader): "dataset" for i in list_datasets()}
    found |= {_module_of(e.load()): "executor" for e in EXECUTORS}
    found |= {_module_of(f): "metric" for s in METRICS for f in (s.resolve(), s.outcome) if f is not None}
    return found


def own_test_files(module: str) -> list[Path]:
    """The file names a module's own tests may have."""
    parts = module[:-3].split("/")
    names = [f"test_{parts[-1].lstrip('_')}.py"]
    if len(parts) > 2:
        names.append(f"test_{parts[-2]}_{parts[-1].lstrip('_')}.py")
    return [TESTS / parts[0] / n for n in names]


def table() -> dict[str, tuple[list[str], str]]:
    """module -> (test files, reason), from tests/README.md."""
    rows = {}
    for line in (TESTS / "README.md").read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            assert m.group(1) not in rows, f"tests/README.md lists {m.group(1)} twice"
            rows[m.group(1)] = (re.findall(r"`([^`]+)`", m.group(2)), m.group(3).strip())
    return rows


def mentions(test_text: str, module: str, sub: bool = False) -> bool:
    """Whether a test file names the module: its dotted name, its name as an imported module or a
    word, a public name it defines, a model or dataset it registers, or the command it is; with
    ``sub``, for a part of a training sub-package (``train/m3l/loop.py``), the sub-package, whose
    estimator runs the part."""
    dotted = "backretrieval." + module[:-3].replace("/", ".")
    if sub and module.startswith("train/") and module.count("/") == 2 and dotted.rsplit(".", 1)[0] in test_text:
        return True
    stem = module[:-3].split("/")[-1]
    source = (SRC / module).read_text(encoding="utf-8")
    names = {n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")}
    names |= set(re.findall(r"register_(?:text|image|dataset)\(\s*\"([^\"]+)\"", source))
    names |= set(re.findall(r"\.command\(\s*\"([^\"]+)\"", source))  # a command's name
    words = [re.escape(stem), *(re.escape(n) for n in names)]
    return dotted in test_text or re.search(r"\b(?:" + "|".join(words) + r")\b", test_text) is not None


def test_every_module_has_its_test_file_a_contract_or_a_row():
    rows, registered = table(), plugins()
    missing = [m for m in modules() if not any(f.is_file() for f in own_test_files(m)) and m not in rows and m not in registered]
    assert not missing, f"no tests/<layer>/test_<module>.py, no registered plugin and no row in tests/README.md: {missing}"


def test_the_contract_tests_exist_and_read_their_registries():
    registered = plugins()
    assert set(registered.values()) == set(CONTRACTS)
    for kind, path in CONTRACTS.items():
        text = path.read_text(encoding="utf-8")
        reads = {"model": "list_text_encoders", "dataset": "list_datasets", "executor": "EXECUTORS", "metric": "METRICS"}[kind]
        assert reads in text, f"{path.name} does not run over {reads}"
    assert registered["encoders/text/random_text.py"] == "model" and registered["data/ddtp.py"] == "dataset"
    assert registered["analysis/executors/processes.py"] == "executor" and registered["metrics/hubness.py"] == "metric"


def test_every_row_is_needed_and_true():
    mods, registered, problems = set(modules()), plugins(), []
    for module, (files, why) in table().items():
        if module not in mods:
            problems.append(f"{module} is not a module of the package")
        elif any(f.is_file() for f in own_test_files(module)):
            problems.append(f"{module} has its own test file: drop its row")
        elif module in registered:
            problems.append(f"{module} is a registered {registered[module]}, covered by {CONTRACTS[registered[module]].name}: "
                            "drop its row")
        elif not files or not why:
            problems.append(f"{module} needs a test file and a reason")
        paths = [ROOT / f for f in files]
        problems += [f"{module} is said to be tested in {f}, which does not exist" for f, p in zip(files, paths) if not p.is_file()]
        if module in mods and all(p.is_file() for p in paths) and not any(
                mentions(p.read_text(encoding="utf-8"), module, sub=True) for p in paths):
            problems.append(f"none of {', '.join(files)} mentions {module}")
    assert not problems, "tests/README.md: " + "; ".join(problems)


def test_the_rule_finds_a_module_without_tests(tmp_path):
    assert own_test_files("train/cr5/plan.py")[1] == TESTS / "train" / "test_cr5_plan.py"
    assert mentions("from backretrieval.search.blocks import map_blocks", "search/blocks.py")
    assert not mentions("nothing here", "search/blocks.py")
    assert mentions("from backretrieval.train.m3l import M3L", "train/m3l/loop.py", sub=True)
    assert not mentions("from backretrieval.train.m3l import M3L", "train/m3l/loop.py")
