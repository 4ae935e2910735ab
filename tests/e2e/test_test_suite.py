"""The suite's own plan (tests/suite.py): the stated size is read from tests/README.md, every group
pattern names tests that exist, files go out longest first with each group together, and a whole
run that collects fewer tests than stated fails (a small suite in a scratch folder, in a subprocess)."""
from __future__ import annotations

import ast
import fnmatch
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import suite

REPO = Path(__file__).resolve().parents[2]


def test_the_readme_states_the_size():
    assert suite.stated_count() >= 3000


def _test_names(path: Path) -> list[str]:
    return [n.name for n in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


@pytest.mark.parametrize("group,pattern", [(g, p) for g, ps in suite.GROUPS.items() for p in ps])
def test_every_group_pattern_names_tests_that_exist(group, pattern):
    path, _, rest = pattern.partition("::")
    assert (REPO / path).is_file(), f"{group}: {path} does not exist"
    name = rest.split("[", 1)[0]
    assert any(fnmatch.fnmatchcase(t, name) for t in _test_names(REPO / path)), f"{group}: {pattern} matches no test"
    assert suite.group_of(f"{path}::{name.replace('*', 'x')}{'[ray]' if '[' in rest else ''}") == group


def test_groups_go_out_longest_first_and_stay_together():
    items = [SimpleNamespace(nodeid=n) for n in ("a.py::t1", "b.py::t1", "a.py::t2", "c.py::t1", "d.py::t1")]
    group = {"a.py": "a.py", "b.py": "b.py", "c.py": "cd", "d.py": "cd"}
    times = {"a.py": 5.0, "b.py": 20.0, "c.py": 8.0, "d.py": 9.0}
    order = suite.longest_first(items, times, lambda i: group[i.nodeid.split("::")[0]])
    assert [i.nodeid for i in order] == ["b.py::t1", "c.py::t1", "d.py::t1", "a.py::t1", "a.py::t2"]
    # a file without a time counts as the median of the others
    order = suite.longest_first(items[:2] + [SimpleNamespace(nodeid="new.py::t")], {"a.py": 1.0, "b.py": 3.0, "x.py": 2.0},
                                lambda i: i.nodeid.split("::")[0])
    assert [i.nodeid for i in order] == ["b.py::t1", "new.py::t", "a.py::t1"]


def test_a_whole_run_with_fewer_tests_than_stated_fails(pytester):
    """A scratch suite whose README states 3 tests: with 3 it passes and says so; with one file
    renamed out of ``test_*.py`` it fails and names the shortfall; a run of one file is not checked."""
    pytester.makefile(".md", README="# tests\n\nThe whole suite: at least 3 tests.\n")
    pytester.makeconftest(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(suite.__file__).parent)!r})
        import suite
        suite.README = suite.Path(__file__).parent / "README.md"
        pytest_plugins = ["suite"]
    """))
    pytester.makepyfile(test_one="def test_a(): pass\ndef test_b(): pass\n", test_two="def test_c(): pass\n")
    res = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=3)
    assert res.ret == 0
    res.stdout.fnmatch_lines(["the whole suite: 3 tests collected (tests/README.md states at least 3)"])
    (pytester.path / "test_two.py").rename(pytester.path / "check_two.py")
    res = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(["the whole suite collected 2 tests, fewer than the 3 that tests/README.md states*"])
    res = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider", "test_one.py")
    assert res.ret == 0
    assert "the whole suite" not in res.stdout.str()
