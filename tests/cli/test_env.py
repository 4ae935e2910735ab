"""`backretrieval env` (the versions that can change a number) and how the CLI shows warnings."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path

from click.testing import CliRunner
from threadpoolctl import threadpool_info

from backretrieval.cli import main
from backretrieval.cli.warning_format import format_warning, short_warnings
from backretrieval.core.env import PACKAGES

SRC = Path(__file__).resolve().parents[2] / "src"


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_env_json_is_what_results_record():
    r = CliRunner().invoke(main, ["env", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["python"] == platform.python_version() and info["machine"] == platform.machine()
    for name in ("numpy", "scipy", "torch", "faiss-cpu"):  # every install of the test suite has these
        assert info["packages"][name] == _installed(name)
    assert set(info["packages"]) == {p for p in PACKAGES if _installed(p) is not None}
    apis = {(lib["user_api"], lib["internal_api"]) for lib in info["blas"]}
    assert ("blas", next(i["internal_api"] for i in threadpool_info() if i["user_api"] == "blas")) in apis
    assert all(isinstance(lib["num_threads"], int) and lib["num_threads"] >= 1 for lib in info["blas"])


def test_env_human_lists_every_package_and_the_blas():
    r = CliRunner().invoke(main, ["env"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rows = {}
    for line in r.output.splitlines():
        key, _, value = line.partition("  ")
        rows.setdefault(key.strip(), value.strip())
    assert rows["python"] == platform.python_version()
    for name in PACKAGES:
        assert rows[name] == (_installed(name) or "not installed"), name
    listed = [line.partition("  ")[2].strip() for line in r.output.splitlines() if line.partition("  ")[0].strip() == "blas"]
    for blas in (i for i in threadpool_info() if i["user_api"] == "blas"):  # each one loaded, in any order
        assert any(x.startswith(f"{blas['internal_api']} {blas['version']} ({blas['num_threads']} threads") for x in listed), listed


def test_format_warning_is_one_short_line():
    line = format_warning(UserWarning("first line\n   second   line"), UserWarning,
                          "/x/lib/python3.11/site-packages/transformers/models/auto.py", 12, "  source = echo()")
    assert line == "warning: first line second line (UserWarning, transformers)\n"
    long = format_warning("x" * 1000, FutureWarning, "/src/backretrieval/encoders/text/batching.py", 1)
    assert long.count("\n") == 1 and len(long) < 350 and long.endswith("… (FutureWarning, backretrieval)\n")


def test_short_warnings_outside_a_command_changes_only_the_format():
    before = warnings.formatwarning
    try:
        short_warnings()
        short_warnings()  # idempotent
        assert warnings.formatwarning is format_warning
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            warnings.warn("still recorded", UserWarning)
        assert [str(w.message) for w in got] == ["still recorded"]
    finally:
        warnings.formatwarning = before


def test_cli_restores_the_format_when_the_command_ends():
    before = warnings.formatwarning
    assert CliRunner().invoke(main, ["env", "--json"]).exit_code == 0
    assert warnings.formatwarning is before


def test_cli_warnings_are_one_line_each(tmp_path):
    """A real command that warns (an English-only model asked for German), in a subprocess as a
    user runs it: the warning is one line, no path, no echoed source line."""
    rows = []
    for i, (en, de) in enumerate([
        ("a red apple", "ein roter Apfel"), ("a fast car", "ein schnelles Auto"), ("a small dog", "ein kleiner Hund"),
        ("an old house", "ein altes Haus"), ("a green tree", "ein grüner Baum"), ("a cold lake", "ein kalter See"),
        ("a loud bell", "eine laute Glocke"), ("a long road", "eine lange Straße"), ("a blue bird", "ein blauer Vogel"),
        ("a warm coat", "ein warmer Mantel"),
    ]):
        rows += [{"id": f"e{i}", "lang": "en", "text": en, "concept": f"c{i}"},
                 {"id": f"d{i}", "lang": "de", "text": de, "concept": f"c{i}"}]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "BACKRETRIEVAL_CACHE": str(tmp_path / "cache")}  # a fresh cache: the model really encodes (and warns)
    proc = subprocess.run(
        [sys.executable, "-m", "backretrieval.cli", "evaluate", "--dataset", str(data), "--pairs", "en-de",
         "--models", "minilm-en", "--n", "10", "--k", "5", "--seeds", "1", "--out", str(tmp_path / "out"), "--quiet"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    ours = [ln for ln in lines if "not trained on language 'de'" in ln]
    assert ours == ["warning: minilm-en: the model was not trained on language 'de' (trained on: en); "
                    "its embeddings for it may be poor (UserWarning, backretrieval)"], proc.stderr
    for ln in lines:  # any other library warning is one such line too
        assert "Warning:" not in ln and not ln.startswith(" "), proc.stderr
    assert (tmp_path / "out" / "results.jsonl").is_file()
