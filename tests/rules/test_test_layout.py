"""Tests are where a newcomer looks: ``tests/<layer>/test_<module>.py``, or a row of
tests/README.md that names the file that tests the module and says why it has none of its own."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "backretrieval"
TESTS = ROOT / "tests"
ROW = re.compile(r"^\| `([^`]+\.py)` \| (.+?) \| (.+?) \|$")


def modules() -> list[str]:
    """Every module of the package with code of its own (``__init__`` and ``__main__`` aside)."""
    return sorted(p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py") if p.name not in ("__init__.py", "__main__.py"))


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


def test_every_module_has_its_test_file_or_a_row():
    rows = table()
    missing = [m for m in modules() if not any(f.is_file() for f in own_test_files(m)) and m not in rows]
    assert not missing, f"no tests/<layer>/test_<module>.py and no row in tests/README.md: {missing}"


def test_every_row_is_needed_and_true():
    mods, problems = set(modules()), []
    for module, (files, why) in table().items():
        if module not in mods:
            problems.append(f"{module} is not a module of the package")
        elif any(f.is_file() for f in own_test_files(module)):
            problems.append(f"{module} has its own test file: drop its row")
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
