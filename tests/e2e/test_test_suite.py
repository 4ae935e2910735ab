"""The suite's own plan (tests/suite.py): the stated size is read from tests/README.md, every group
pattern names tests that exist, files go out longest first with each group together, on xdist
workers each file and each group runs on one worker, and a whole run that collects fewer tests than
stated fails (small suites in scratch folders, run in a subprocess)."""
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


def _scratch_suite(pytester, readme: str = "The whole suite: at least 1 tests.", groups: str = "{}") -> None:
    pytester.makefile(".md", README=f"# tests\n\n{readme}\n")
    pytester.makeconftest(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(suite.__file__).parent)!r})
        import suite
        suite.README = suite.Path(__file__).parent / "README.md"
        suite.GROUPS = {groups}
        pytest_plugins = ["suite"]
    """))


def test_on_workers_a_file_and_a_group_each_run_on_one_worker(pytester):
    """Two workers, four files: each test records its worker; the tests of one file share a worker,
    and so do the tests of the two files of one group."""
    _scratch_suite(pytester, groups='{"pair": ("test_g1.py::*", "test_g2.py::*")}')
    body = ("import os, pathlib\n"
            + "".join(f"def test_{i}():\n    pathlib.Path('{{name}}-{i}').write_text(os.environ['PYTEST_XDIST_WORKER'])\n"
                      for i in range(4)))
    for name in ("test_f1", "test_f2", "test_g1", "test_g2"):
        pytester.makepyfile(**{name: body.replace("{name}", name)})
    res = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=16)
    worker = {p.name: p.read_text() for p in pytester.path.glob("test_*-*")}
    assert len(worker) == 16 and set(worker.values()) == {"gw0", "gw1"}
    for name in ("test_f1", "test_f2"):
        assert len({worker[f"{name}-{i}"] for i in range(4)}) == 1, worker
    assert len({worker[f"{name}-{i}"] for name in ("test_g1", "test_g2") for i in range(4)}) == 1, worker


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
    _scratch_suite(pytester, readme="The whole suite: at least 3 tests.")
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
