"""Running commands in tests: the command in process (:func:`cli`), its one-line refusal
(:func:`assert_refused`), a subprocess that a test interrupts (:func:`default_sigint`), and grid
commands on a small generic JSONL dataset with precomputed image features, which need no model download and no image
encoding (``--image-model precomputed``)."""
from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
from click.testing import CliRunner, Result

from backretrieval.cli import main


def default_sigint() -> None:
    """``preexec_fn`` of a subprocess that a test interrupts with SIGINT: Ctrl-C's default
    disposition, as a terminal's foreground job has it, even where the tests run as a background
    job (whose shell starts it with SIGINT ignored, which children inherit)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli(args: list) -> Result:
    """``backretrieval ARGS`` in this process (each argument made a string)."""
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_refused(res: Result, *fragments: str, code: int = 2) -> str:
    """Exit code ``code`` and exactly one line of output, ``error: ...``, containing every fragment."""
    out = res.output
    assert res.exit_code == code, out
    assert "Traceback" not in out, out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    for f in fragments:
        assert f in lines[0], (f, out)
    return lines[0]


def write_feature_items(folder: Path, n: int, words: dict[str, str]) -> Path:
    """``folder/items.jsonl``: ``n`` concepts in each language of ``words`` (text ``"WORDS i"``,
    concept ``ci``, image feature row ``i``) and ``folder/feats.npy``, ``n`` seeded 16-d features."""
    rng = np.random.default_rng(0)
    np.save(folder / "feats.npy", rng.standard_normal((n, 16)).astype(np.float32))
    rows = [{"id": f"{lang}{i}", "lang": lang, "text": f"{text} {i}", "concept": f"c{i}", "image_feature_row": i}
            for lang, text in words.items() for i in range(n)]
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def grid(cmd: str, data: Path, out: Path, *extra: str) -> list[str]:
    """The command line of grid command ``cmd`` on ``data`` (random and tfidf-char, en-de, N=20,
    K=5, one seed); ``extra`` flag-value pairs replace the defaults or are added."""
    args = [cmd, "--dataset", str(data), "--dataset-option", f"image_features={data.parent / 'feats.npy'}",
            "--pairs", "en-de", "--models", "random,tfidf-char", "--image-model", "precomputed",
            "--n", "20", "--k", "5", "--seeds", "1", "--out", str(out), "--quiet"]
    for flag, value in zip(extra[::2], extra[1::2]):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


def nothing_encoded(cache: Path) -> bool:
    """Whether no file was written below the cache folder ``cache``."""
    return not any(p.is_file() for p in cache.rglob("*")) if cache.exists() else True
