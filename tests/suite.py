"""The suite as a whole: how it is shared among workers, its stated size, and its files' times.

Workers (pytest-xdist, ``scripts/test.sh`` starts them; ``-n 0`` runs in one process). Run with
``--dist loadfile``, this plugin's scheduler hands out units of work: a file (every test of a file
goes to one worker, so its module fixtures are built once), or a group of :data:`GROUPS`, whose
tests share one worker whatever their files: every test that starts Ray runs on one worker, one Ray
at a time as in a run without workers (a Ray cluster is a tree of processes and about a GiB of
memory). Units go out longest first, by the times in ``tests/file_times.json`` (a file not listed
there counts as the median), so a long file does not start last and leave one worker running alone
at the end. (pytest-xdist's own ``--dist loadgroup`` marks a group by renaming the test's node id,
which pytest 9 ignores: here the groups are node-id patterns, which the controller reads.)

The stated size. ``tests/README.md`` states how many tests the whole suite has at least ("The whole
suite: N tests"). A run of the whole suite (no file, ``-k``, ``-m`` or ``--deselect`` given) that
collects fewer fails, so a test that silently stops being collected (a file renamed out of
``test_*.py``, a parametrization that came out empty) is noticed. Adding tests: raise the figure.

File times. ``--write-file-times PATH`` writes each file's time (setup, call and teardown of its
tests, seconds, summed over workers) as JSON: ``python -m pytest -n 0 --write-file-times
tests/file_times.json`` refreshes the table the order comes from.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
README = TESTS / "README.md"
FILE_TIMES = TESTS / "file_times.json"
STATED = re.compile(r"The whole suite: at least ([\d,]+) tests")
# tests that share one worker, by node id (fnmatch patterns; a parametrized id ends in ``[...]``)
GROUPS = {
    "ray": (
        "tests/analysis/test_ray.py::*", "tests/analysis/test_ray_cluster.py::*",
        "tests/analysis/test_executors.py::*[[]ray[]]", "tests/analysis/test_python_image_models.py::test_ray_*",
    ),
}


def stated_count() -> int:
    """The suite's size as tests/README.md states it."""
    m = STATED.search(README.read_text(encoding="utf-8"))
    if m is None:
        raise ValueError(f"{README} does not state the suite's size ('The whole suite: at least N tests')")
    return int(m.group(1).replace(",", ""))


def file_times() -> dict[str, float]:
    """Seconds per test file (paths relative to the repository), from tests/file_times.json."""
    try:
        return {k: float(v) for k, v in json.loads(FILE_TIMES.read_text(encoding="utf-8")).items()}
    except (OSError, ValueError):
        return {}


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_first(items: list, times: dict[str, float], group_of) -> list:
    """``items`` with the files of each group together, groups by their summed file times, the
    longest first (a file without a time counts as the median); within a group, collection order."""
    default = statistics.median(times.values()) if times else 1.0
    groups: dict[str, list] = defaultdict(list)
    for item in items:
        groups[group_of(item)].append(item)
    cost = {g: sum(times.get(f, default) for f in {_file_of(i.nodeid) for i in its}) for g, its in groups.items()}
    return [i for g in sorted(groups, key=lambda g: -cost[g]) for i in groups[g]]


def group_of(nodeid: str) -> str | None:
    """The group of :data:`GROUPS` a test belongs to, if any."""
    return next((g for g, pats in GROUPS.items() if any(fnmatch.fnmatchcase(nodeid, p) for p in pats)), None)


def unit_of(nodeid: str) -> str:
    """The unit of work a test goes out in: its group, else its file."""
    return group_of(nodeid) or _file_of(nodeid)


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist is not installed: the suite runs in one process
    LoadScopeScheduling = None
else:
    class UnitScheduling(LoadScopeScheduling):
        """pytest-xdist's scope scheduling with :func:`unit_of` as the scope, the units in the
        order the workers collected them (longest first: :func:`pytest_collection_modifyitems`)."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") == "loadfile":
        return UnitScheduling(config, log)
    return None


def _whole_suite(config) -> bool:
    """Whether this run selects the whole suite: no paths beyond the configured testpaths, and no
    -k, -m, --deselect or --lf."""
    o = config.option
    if getattr(o, "keyword", "") or getattr(o, "markexpr", "") or getattr(o, "deselect", None) or getattr(o, "lf", False):
        return False
    testpaths = {(config.rootpath / p).resolve() for p in config.getini("testpaths")} or {config.rootpath.resolve()}
    return all((config.invocation_params.dir / a.split("::", 1)[0]).resolve() in testpaths for a in config.args)


def pytest_addoption(parser):
    parser.addoption("--write-file-times", metavar="PATH", default=None,
                     help="write each test file's time in seconds as JSON (tests/file_times.json orders the workers' files)")


_STATE: dict = {}  # this process's config, test count and seconds per file


def pytest_configure(config):
    _STATE.update(config=config, count=None, short=None, times=defaultdict(float))


def pytest_collection_modifyitems(config, items):
    """On an xdist worker: the tests in units (:func:`unit_of`), the longest unit first; the
    controller hands the units out in this order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if _whole_suite(config):
        unused = [p for ps in GROUPS.values() for p in ps if not any(fnmatch.fnmatchcase(i.nodeid, p) for i in items)]
        if unused:
            raise pytest.UsageError(f"tests/suite.py: the GROUPS patterns {unused} match no test")
    items[:] = longest_first(items, file_times(), lambda item: unit_of(item.nodeid))


def pytest_collection_finish(session):
    if not hasattr(session.config, "workerinput"):  # the controller's own collection, or a run without xdist
        _STATE["count"] = len(session.items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    _STATE["count"] = len(ids)


def pytest_runtest_logreport(report):
    if not hasattr(_STATE["config"], "workerinput"):
        _STATE["times"][_file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):
        return
    path = config.getoption("--write-file-times")
    if path:
        times = {k: round(v, 1) for k, v in sorted(_STATE["times"].items())}
        Path(path).write_text(json.dumps(times, indent=1) + "\n", encoding="utf-8")
    count = _STATE["count"]
    if count is not None and _whole_suite(config) and exitstatus in (0, 1):
        stated = stated_count()
        if count < stated:
            _STATE["short"] = (count, stated)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    count = _STATE["count"]
    if count is None or hasattr(config, "workerinput") or not _whole_suite(config):
        return
    stated = stated_count()
    if _STATE["short"]:
        terminalreporter.write_line(
            f"the whole suite collected {count} tests, fewer than the {stated} that tests/README.md states: a test "
            "stopped being collected (where tests were merged, lower the figure and name what covers them)",
            red=True, bold=True)
    else:
        terminalreporter.write_line(f"the whole suite: {count} tests collected (tests/README.md states at least {stated})")
