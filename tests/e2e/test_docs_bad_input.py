"""docs/bad-input.md says what the code says.

Every row of the page's tables whose message is a refusal (an ``error:`` line, or a Python
exception ``XxxError: ...``) is either triggered here -- the input the row describes is given to
the command or the function, and what the code prints must match one of the row's messages -- or
listed in :data:`EXEMPT` with the reason it is not. A refusal row that is neither fails
:func:`test_every_refusal_row_is_triggered_or_exempted`, so a new row comes with its trigger (or
its reason), and a key that names no row (a row reworded) fails too.

Matching: each code span of the row's message cell is a pattern; ``FILE``, ``OUT``, ``DIR``,
``D``, ``PATH``, ``CACHE``, ``Q``, ``HOST``, ``PORT``, ``MODEL``, ``MESSAGE``, ``PID`` stand for
the run's paths, names and numbers, ``L`` and ``C`` for line and column numbers, ``...`` for the rest of a message;
everything else is literal. A command's exit code must be the row's: 1 where the row says "exit
code 1", else 2. An exception matches under its class's name or a base class's (the page may name
``BackretrievalError`` for a ``DataError``).

The triggers run in this process on tiny files (precomputed 16-d image features; nothing is
encoded but random and tfidf-char, nothing downloaded): the refusals happen in the checks before
any work, so the whole page takes seconds.
"""
from __future__ import annotations

import contextlib
import json
import re
import struct
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import backretrieval
from commands import cli, grid, write_feature_items

PAGE = Path(__file__).resolve().parents[2] / "docs" / "bad-input.md"
SRC = Path(backretrieval.__file__).resolve().parents[1]
PLACEHOLDERS = ("FILE", "OUT", "DIR", "D", "PATH", "CACHE", "Q", "HOST", "PORT", "MODEL", "MESSAGE", "PID")


# ------------------------------------------------------------------------------------ the page
@dataclass(frozen=True)
class Row:
    """One table row of the page: its section, its case cell, its message cell."""

    section: str
    case: str
    message: str

    @property
    def spans(self) -> list[str]:
        """The code spans of the message cell (single or double backticks)."""
        return [m.group(2).strip() for m in re.finditer(r"(`+)(.+?)\1", self.message)]

    @property
    def refusal(self) -> bool:
        """Whether the row lists a refusal: an ``error:`` line or an exception."""
        return any(re.match(r"(error:|\w+Error:)", s) for s in self.spans)

    @property
    def exit_code(self) -> int:
        return 1 if "exit code 1" in self.case + self.message else 2


def _cells(line: str) -> list[str]:
    """A table line's cells: split at ``|`` outside code spans."""
    cells, cur, tick, i = [], "", 0, 0
    while i < len(line):
        if line[i] == "`":
            j = i
            while j < len(line) and line[j] == "`":
                j += 1
            tick = 0 if tick == j - i else (j - i if tick == 0 else tick)
            cur, i = cur + line[i:j], j
            continue
        if line[i] == "|" and tick == 0:
            cells.append(cur.strip())
            cur = ""
        else:
            cur += line[i]
        i += 1
    return cells[1:]


def page_rows() -> list[Row]:
    """Every data row of every table of the page."""
    rows, section, header = [], "", False
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        if not line.startswith("|"):
            header = True
            continue
        if header:  # the header line; the separator line follows
            header = False
            continue
        if line.startswith("|---"):
            continue
        cells = _cells(line)
        rows.append(Row(section, cells[0], cells[-1]))
    return rows


def _pattern(span: str) -> re.Pattern:
    parts = re.split(r"(\.\.\.|\b(?:%s)\b|\b[LC]\b)" % "|".join(PLACEHOLDERS), span)
    out = []
    for p in parts:
        if p == "...":
            out.append(".*?")
        elif p in ("L", "C"):
            out.append(r"\d+")
        elif p in PLACEHOLDERS:
            out.append(".+?")
        else:
            out.append(re.escape(p))
    return re.compile("".join(out), re.S)


# ---------------------------------------------------------------------------------- what was said
@dataclass
class Said:
    """What the code said: a command's one ``error:`` line and exit code, or an exception's (or a
    warning's) message with the names of its class and base classes."""

    text: str
    code: int | None = None
    names: tuple[str, ...] = ()

    def candidates(self) -> list[str]:
        """The forms a row's message may take: a command's line; an exception's message under its
        class's or a base class's name, or bare (a row's second message often drops the name)."""
        return [self.text] if self.code is not None else [*(f"{n}: {self.text}" for n in self.names), self.text]


def said_by(args: list) -> Said:
    """``backretrieval ARGS`` in this process: its one ``error:`` line (the last line; notes
    said before the refusal, such as the low-power warning, may precede it) and exit code."""
    from click.testing import CliRunner

    from backretrieval.cli import main

    res = CliRunner().invoke(main, [str(a) for a in args], prog_name="backretrieval")
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert "Traceback" not in res.output and len(errors) == 1 and lines[-1] == errors[0], res.output
    return Said(errors[0], res.exit_code)


def _names(cls: type) -> tuple[str, ...]:
    return tuple(c.__name__ for c in cls.__mro__ if c not in (object, BaseException, Exception))


def raised(fn: Callable[[], object]) -> Said:
    """The exception ``fn()`` raises."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any exception is what the page documents
        return Said(str(e), names=_names(type(e)))
    raise AssertionError("nothing was raised")


def warned(fn: Callable[[], object]) -> Said:
    """The first warning ``fn()`` issues."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    assert caught, "nothing was said"
    return Said(str(caught[0].message), names=_names(caught[0].category))


# ------------------------------------------------------------------------------------- inputs
class Inputs:
    """Fresh paths in one temporary folder, and the small grid data set."""

    def __init__(self, tmp: Path, data: Path):
        self.tmp, self.data, self._n = tmp, data, 0

    def path(self, name: str) -> Path:
        self._n += 1
        folder = self.tmp / f"t{self._n}"
        folder.mkdir()
        return folder / name

    def grid(self, cmd: str = "evaluate", *extra: str) -> list[str]:
        return grid(cmd, self.data, self.path("out"), *extra)

    def jsonl(self, rows: list, name: str = "items.jsonl") -> Path:
        p = self.path(name)
        p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
        return p

    def on(self, dataset: Path, *extra: str) -> list[str]:
        """``evaluate`` on a data file without image features (the data are refused first)."""
        return ["evaluate", "--dataset", dataset, "--pairs", "en-de", "--models", "random", "--image-model", "color-hist",
                "--n", "1", "--k", "1", "--seeds", "1", "--out", self.path("out"), "--quiet", *extra]


def _png_claiming(path: Path, width: int, height: int) -> Path:
    """A valid 1 x 1 PNG whose header claims ``width`` x ``height`` (read from the header only)."""
    from PIL import Image

    Image.new("L", (1, 1)).save(path)
    data = bytearray(path.read_bytes())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    path.write_bytes(bytes(data))
    return path


def _image_data(x: Inputs, image: Path) -> Path:
    return x.jsonl([{"id": f"{lang}1", "lang": lang, "text": "a cat", "image": str(image)} for lang in ("en", "de")])


def _tiff(x: Inputs, array: np.ndarray, mode: str) -> Path:
    from PIL import Image

    p = x.path("img.tiff")
    Image.fromarray(array, mode).save(p)
    return p


def _python_model(output) -> Said:
    from backretrieval.encoders.text.python_model import PythonTextModel

    return raised(lambda: PythonTextModel("mine", output).encode(["a", "b"], "en"))


def _eval_config(**kw):
    from backretrieval import EvalConfig

    base = {"dataset": "x.jsonl", "pairs": [("en", "de")], "models": ["random"], "n": 20, "k": 5, "seeds": [0]}
    return EvalConfig(**{**base, **kw})


def _latin1(x: Inputs) -> Path:
    p = x.path("latin1.jsonl")
    p.write_bytes(b'{"id": "a", "lang": "en", "text": "tea"}\n{"id": "b", "lang": "en", "text": "caf\xe9"}\n')
    return p


def _text(x: Inputs, name: str, text: str) -> Path:
    p = x.path(name)
    p.write_text(text, encoding="utf-8")
    return p


def _second_row(x: Inputs, row: dict | str) -> Path:
    """A data file whose second line is ``row`` (the first is a good one)."""
    return x.jsonl([{"id": "a", "lang": "en", "text": "a cat"}, row])


def _missing_images(x: Inputs) -> Path:
    from PIL import Image

    data = x.path("data")
    (data / "images").mkdir(parents=True)
    Image.new("RGB", (2, 2)).save(data / "images" / "a.png")
    rows = [{"id": str(i), "lang": "en", "text": f"t{i}", "image": img}
            for i, img in enumerate(["images/a.png", "photos/b.png", "photos/c.png", "photos/d.png"])]
    p = data / "items.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


def _npz(x: Inputs) -> Path:
    p = x.path("feats.npz")
    np.savez(p, feats=np.ones((40, 16), dtype=np.float32))
    return p


def _file_at(x: Inputs, name: str) -> Path:
    p = x.path(name)
    p.write_text("not a folder", encoding="utf-8")
    return p


def _own_input(x: Inputs, name: str) -> list:
    """A grid whose dataset is ``D/name`` and whose --out is D."""
    import pandas as pd

    d = x.path("D")
    d.mkdir()
    frame = pd.read_json(x.data, lines=True)
    p = d / name
    frame.to_csv(p, index=False) if name.endswith(".csv") else frame.to_parquet(p)
    return grid("evaluate", p, d)


def _precomputed_input(x: Inputs) -> list:
    d = x.path("D")
    d.mkdir()
    emb = d / "results.jsonl"
    emb.write_text("".join(json.dumps({"lang": lang, "id": f"{lang}{i}", "embedding": [float(i), 1.0]}) + "\n"
                           for lang in ("en", "de") for i in range(40)), encoding="utf-8")
    return grid("evaluate", x.data, d, "--models", f"random,precomputed:{emb}")


def _cr5_dir(x: Inputs, phi_nan: bool = False) -> Path:
    from backretrieval.encoders.trained.cr5 import Cr5Model

    d = x.path("model")
    vocab = {"en": ["cat", "red", "dog"], "de": ["katze", "rot", "hund"]}
    phi = {lang: np.ones((2, 3), dtype=np.float32) for lang in vocab}
    Cr5Model(vocab, {lang: np.ones(3) for lang in vocab}, phi).save(d)
    if phi_nan:  # written after the model's own checks, as a damaged file would be
        with np.load(d / "weights.npz") as z:
            arrays = dict(z)
        key = next(k for k in arrays if "de" in k and arrays[k].shape == (2, 3))
        arrays[key][0, 0] = np.nan
        np.savez(d / "weights.npz", **arrays)
    return d


def _taken(x: Inputs, name: str, folder: bool) -> list:
    out = x.path("out")
    out.mkdir()
    (out / name).mkdir() if folder else (out / name).write_text("x", encoding="utf-8")
    return grid("compare", x.data, out) + (["--report"] if not folder else [])


def _atomic_onto_folder(x: Inputs) -> None:
    from backretrieval.core.io import atomic_write_text

    out = x.path("out")
    (out / "report.html").mkdir(parents=True)
    atomic_write_text(out / "report.html", "x")


def _grid_config(x: Inputs, **kw):
    import backretrieval as br

    return br.EvalConfig(**{"dataset": str(x.data), "dataset_options": {"image_features": str(x.data.parent / "feats.npy")},
                            "pairs": [("en", "de")], "models": ["random", "tfidf-char"], "image_model": "precomputed",
                            "n": 20, "k": 5, "seeds": [0], **kw})


def _report_into_file(x: Inputs) -> None:
    import backretrieval as br

    br.compare_report(br.evaluate(_grid_config(x), progress=False), _file_at(x, "taken"))


def _held(x: Inputs, run: Callable[[Path], Said]) -> Said:
    """What ``run(OUT)`` says while another process holds OUT's lock (as a run writing OUT does)."""
    import os
    import subprocess
    import sys

    out = x.path("out")
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time\nfrom backretrieval.core.io import folder_lock\n"
                               f"with folder_lock({str(out)!r}):\n    print('held', flush=True)\n    time.sleep(60)\n"],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        assert holder.stdout.readline().strip() == "held"
        return run(out)
    finally:
        holder.kill()
        holder.wait()


def _truncated_emoji(x: Inputs, monkeypatch) -> Said:
    import io
    import tarfile

    folder = x.path("npm")
    folder.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        body = json.dumps([{"image": f"{i:05x}.png", "category": "Objects"} for i in range(2000)]).encode()
        info = tarfile.TarInfo("package/emoji.json")
        info.size = len(body)
        tf.addfile(info, io.BytesIO(body))
    (folder / "emoji-datasource-google-16.0.0-img64.tgz").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    for name in ("cldr-annotations-full-48.2.0.tgz", "cldr-annotations-derived-full-48.2.0.tgz"):
        (folder / name).write_bytes(b"")
    monkeypatch.setenv("BACKRETRIEVAL_EMOJI_DIR", str(folder))
    return said_by(["make-catalogue", x.path("shop")])


def _cache_taken(x: Inputs, monkeypatch) -> list[Said]:
    blocker = _file_at(x, "cachefile")
    said = []
    for cache in (blocker, blocker / "sub"):
        monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(cache))
        said.append(said_by(x.grid("evaluate")))
    return said


def _evaluator(x: Inputs, **kw):
    import backretrieval as br
    from backretrieval.data import load_dataset

    ds = load_dataset(str(x.data), langs=["en", "de"], image_features=str(x.data.parent / "feats.npy"))
    return br.BackretrievalEvaluator(ds, **{"pairs": "en-de", "image_model": "precomputed", "n": 11, **kw})


def _evaluator_csv(x: Inputs) -> Said:
    """A second evaluator of one name meets the first one's CSV (written as the first writes it)."""
    first, second = _evaluator(x, name="x"), _evaluator(x, pairs="en-de,de-en", name="x")
    out = x.path("eval")
    out.mkdir()
    row = ["0", "1", *["0.5"] * (len(first.csv_headers) - 2)]
    (out / first.csv_file).write_text(",".join(first.csv_headers) + "\n" + ",".join(row) + "\n", encoding="utf-8")
    return raised(lambda: second(None, output_path=str(out)))


def _no_images(x: Inputs) -> Said:
    import backretrieval as br

    plain = x.jsonl([{"id": f"{lang}{i}", "lang": lang, "text": f"t {i}"} for lang in ("en", "de") for i in range(5)], "plain.jsonl")
    return raised(lambda: br.BackretrievalEvaluator(str(plain), "en-de", n=5, k=1, ks=(1,), image_model="color-hist"))


def _ray_answering(x: Inputs, reply: bytes) -> Said:
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            with conn:
                conn.recv(64)
                conn.sendall(reply)

    threading.Thread(target=answer, daemon=True).start()
    try:
        return said_by(x.grid("evaluate", "--executor", f"ray:127.0.0.1:{server.getsockname()[1]}"))
    finally:
        server.close()


def _three_langs(x: Inputs) -> Path:
    folder = x.path("shop")
    folder.mkdir()
    return write_feature_items(folder, 60, {"en": "red cat", "de": "rote Katze", "es": "gato rojo"})


def _train(x: Inputs, method: str, *extra: str) -> list:
    return ["train", method, "--dataset", x.data, "--dataset-option", f"image_features={x.data.parent / 'feats.npy'}",
            *(["--base", "random"] if method != "cr5" else []), *(["--image-model", "precomputed"] if method in ("m3l", "patr") else []),
            "--out", x.path("model"), "--quiet", *extra]


def _cr5(x: Inputs, *extra: str) -> list:
    return ["train", "cr5", "--dataset", x.data, "--dataset-option", f"image_features={x.data.parent / 'feats.npy'}",
            "--langs", "en,de", "--out", x.path("model"), *extra]


def _case_study(x: Inputs, *extra: str) -> list:
    return ["case-study", "report", "--langs", "en,de", "--models", "random,tfidf-char", "--out", x.path("out"), "--quiet", *extra]


def _image_retrieval(x: Inputs, model: Path | None = None, *extra: str) -> list:
    if model is None:
        model = x.path("m3l")
        model.mkdir()
    return ["image-retrieval", "--model", model, "--dataset", x.data, "--out", x.path("out"), "--quiet", *extra]


def _deep_model(x: Inputs) -> list:
    model = x.path("model")
    model.mkdir()
    deep = "[" * 100_000 + "]" * 100_000
    (model / "model.json").write_text('{"format": "backretrieval.model", "x": ' + deep + "}", encoding="utf-8")
    return x.grid("evaluate", "--models", f"cr5:{model}")


@pytest.fixture(scope="module")
def queries_run(data, tmp_path_factory) -> Path:
    """OUT of ``evaluate --save-queries`` on the grid data (random vs tfidf-char, seeds 0 and 1)."""
    out = tmp_path_factory.mktemp("queries-run")
    res = cli([*grid("evaluate", data, out, "--seeds", "0,1"), "--save-queries"])
    assert res.exit_code == 0, res.output
    return out / "queries.parquet"


def _study(x: Inputs, dataset: Path, queries: Path) -> list:
    return ["study", "create", "--src", "en", "--tgt", "de", "--models", "random,tfidf-char", "--images", "none",
            "--dataset-option", f"image_features={x.data.parent / 'feats.npy'}", "--quiet", "--dataset", dataset,
            "--from-queries", queries, "--out", x.path("s.db")]


def _edited(x: Inputs, lang: str, old: str, new: str) -> Path:
    rows = [json.loads(line) for line in x.data.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        if r["lang"] == lang:
            r["text"] = r["text"].replace(old, new)
    return x.jsonl(rows)


def _bad_query_column(x: Inputs, queries: Path) -> Path:
    import pandas as pd

    p = x.path("queries.parquet")
    pd.read_parquet(queries).assign(query_id=1.5).to_parquet(p)
    return p


# A key is a piece of one row's case cell (it must name exactly one row). A trigger takes the
# Inputs (and monkeypatch, or the per-query results, where it names them) and returns what the
# code says to the row's input: one Said, or several (each must match one of the row's messages).
TRIGGERS: dict[str, Callable[..., Said | list[Said]]] = {
    # data files
    "a file that is not UTF-8": lambda x: said_by(x.on(_latin1(x))),
    "an `id` that is not a string or an integer": lambda x: said_by(x.on(_second_row(x, {"id": True, "lang": "en", "text": "a dog"}))),
    "a `concept` that is not a string or an integer": lambda x: said_by(x.on(_second_row(
        x, {"id": "b", "lang": "en", "text": "a dog", "concept": {"k": 1}}))),
    "a `lang`, `text`, `title`, `body` or `image` that is not a string": lambda x: said_by(x.on(_second_row(
        x, {"id": "b", "lang": 7, "text": "a dog"}))),
    "a JSON line (or JSON array file) nested thousands of levels deep": lambda x: said_by(x.on(_second_row(
        x, "[" * 100_000 + "]" * 100_000))),
    "a text made only of white space": lambda x: said_by(x.on(_second_row(x, {"id": "b", "lang": "en", "text": "\u200b\u200d"}))),
    "a required column missing": lambda x: said_by(x.on(_text(x, "items.csv", "id,language,text\n1,en,x\n"))),
    "a CSV whose header is separated by another delimiter": lambda x: said_by(x.on(_text(x, "items.csv", "ID;Language;text\n1;en;x\n"))),
    "an `image` path that is not a file": lambda x: said_by(x.on(_missing_images(x))),
    "the same id twice in one language": lambda x: said_by(x.on(x.jsonl(
        [{"id": "a1", "lang": "en", "text": "t"}, {"id": "a2", "lang": "en", "text": "u"}, {"id": "b1", "lang": "de", "text": "v"},
         {"id": "a1", "lang": "en", "text": "w"}]))),
    "a misspelled registered dataset": lambda x: said_by(x.grid("evaluate", "--dataset", "emoji-cdlr")),
    # image files
    "an image of more than 25,000,000 pixels": lambda x: said_by(x.on(_image_data(x, _png_claiming(x.path("big.png"), 13_300, 13_300)))),
    "an image beyond Pillow's own decompression-bomb limit": lambda x: said_by(x.on(_image_data(
        x, _png_claiming(x.path("bomb.png"), 20_000, 20_000)))),
    "a floating-point image with values outside [0, 1]": lambda x: said_by(x.on(_image_data(
        x, _tiff(x, np.tile(np.arange(256, dtype=np.float32), (4, 1)), "F")))),
    "a 32-bit integer image (mode `I`) with values outside 0..65535": lambda x: said_by(x.on(_image_data(
        x, _tiff(x, np.full((4, 4), -5, dtype=np.int32), "I")))),
    # feature files
    "an `.npz` archive instead of a `.npy` file": lambda x: said_by(x.grid("evaluate", "--dataset-option", f"image_features={_npz(x)}")),
    "an empty (0-byte) `.npy` file": lambda x: said_by(x.grid("evaluate", "--dataset-option", f"image_features={_text(x, 'e.npy', '')}")),
    # Python models
    "strings (even strings of digits)": lambda x: _python_model(lambda t: [str(i) for i in range(len(t))]),
    "a dict": lambda x: _python_model(lambda t: {"embeddings": np.ones((len(t), 3))}),
    "a generator (or another iterator)": lambda x: _python_model(lambda t: (np.ones(3) for _ in t)),
    "a ragged list (rows of different lengths)": lambda x: _python_model(lambda t: [np.ones(3), np.ones(2)][: len(t)]),
    "objects (a list of dicts, ...)": lambda x: _python_model(lambda t: [{"v": 1}] * len(t)),
    "complex numbers (whose imaginary part a conversion would drop)": lambda x: _python_model(lambda t: np.ones((len(t), 3)) * (1 + 2j)),
    # downloaded data
    "a truncated or damaged emoji-cldr tarball": _truncated_emoji,
    # the example catalogue
    "`OUT/images` is a file": lambda x: said_by(["make-catalogue", _file_at(x, "images").parent]),
    "`OUT` below a file": lambda x: said_by(["make-catalogue", _file_at(x, "shop") / "deeper"]),
    # dataset options
    "a key the loader does not take": lambda x: said_by(x.grid("evaluate", "--dataset", "emoji-cldr", "--dataset-option", "colour=red")),
    "the same, for a data file": lambda x: said_by(x.grid("evaluate", "--dataset-option", "colour=red")),
    "a value of the wrong type (the loader's own types": lambda x: said_by(x.grid(
        "evaluate", "--dataset", "emoji-cldr", "--dataset-option", "min_names=many")),
    "a key given twice": lambda x: said_by(x.grid("evaluate", "--dataset", "emoji-cldr", "--dataset-option", "text=name")
                                           + ["--dataset-option", "text=keywords"]),
    "no `=` or no key": lambda x: said_by(x.grid("evaluate", "--dataset-option", "=x")),
    "`load_dataset(name, unknown=...)` in Python": lambda x: raised(
        lambda: __import__("backretrieval").load_dataset("emoji-cldr", langs=["en"], colour="red")),
    # output and cache folders
    "`--out` below an existing file": lambda x: said_by(grid("evaluate", x.data, _file_at(x, "results") / "run1")),
    "`--out` is a file": lambda x: said_by(grid("evaluate", x.data, _file_at(x, "results"))),
    "`--dataset D/results.csv --out D`": lambda x: said_by(_own_input(x, "results.csv")),
    "`evaluate --save-queries --dataset D/queries.parquet --out D`": lambda x: said_by(_own_input(x, "queries.parquet") + ["--save-queries"]),
    "`--models precomputed:D/results.jsonl --out D`": lambda x: said_by(_precomputed_input(x)),
    "`--out` inside a model folder": lambda x: said_by(grid("evaluate", x.data, (m := _cr5_dir(x)) / "out", "--models", f"random,cr5:{m}")),
    "a file the run writes taken by a folder": lambda x: [said_by(_taken(x, "summary.md", True)), said_by(_taken(x, "figures", False))],
    "the same for a file written from Python (`atomic_write`)": lambda x: raised(lambda: _atomic_onto_folder(x)),
    "`br.compare_report(result, out)` with `out` an existing file": lambda x: raised(lambda: _report_into_file(x)),
    "the cache folder is a file / below a file / not writable": _cache_taken,
    "`case-study report --figure` is a folder": lambda x: said_by(_case_study(x, "--figure", x.tmp)),
    "a run into an `--out` another run is writing": lambda x: _held(x, lambda out: said_by(grid("evaluate", x.data, out))),
    "the same in Python": lambda x: _held(x, lambda out: raised(
        lambda: __import__("backretrieval").evaluate(_grid_config(x), out, progress=False))),
    # the evaluation grid
    "`evaluate` / `compare` with `--dataset` given twice": lambda x: said_by(
        x.grid("evaluate", "--dataset", "en-de.jsonl") + ["--dataset", "en-fr.jsonl"]),
    "`evaluate` / `compare --dataset @list.txt`": lambda x: said_by(x.grid("compare", "--dataset", "@list.txt")),
    "`--seeds -1,2`": lambda x: said_by(x.grid("evaluate", "--seeds", "-1,2")),
    "`--seeds ,` (no seed)": lambda x: said_by(x.grid("evaluate", "--seeds", ",")),
    "`--seeds 0`": lambda x: said_by(x.grid("evaluate", "--seeds", "0")),
    "`--seeds 2,2`": lambda x: said_by(x.grid("evaluate", "--seeds", "2,2")),
    "`--seeds a,b`": lambda x: said_by(x.grid("evaluate", "--seeds", "a,b")),
    "`--seeds 20261126`": lambda x: said_by(x.grid("evaluate", "--seeds", "20261126")),
    "`--seeds 100000000000000000000,`": lambda x: said_by(x.grid("evaluate", "--seeds", "100000000000000000000,")),
    "`--seeds 0,1,...,1000`": lambda x: said_by(x.grid("evaluate", "--seeds", ",".join(map(str, range(1001))))),
    "a grid of more than 100,000 records": lambda x: said_by(x.grid(
        "evaluate", "--models", ",".join(f"random?seed={i}" for i in range(201)), "--pairs", "en-de,de-en,en-ja", "--seeds", "200")),
    "the same in Python: `EvalConfig(seeds=...)`": lambda x: [raised(lambda: _eval_config(seeds=list(range(1001)))),
                                                             raised(lambda: _eval_config(seeds=[-1])),
                                                             raised(lambda: _eval_config(seeds=[1, 1])),
                                                             raised(lambda: _eval_config(seeds=[1.5]))],
    "`EvalConfig(seeds=0)` / `seeds=\"three\"`": lambda x: [raised(lambda: _eval_config(seeds=0)),
                                                           raised(lambda: _eval_config(seeds="three"))],
    "`EvalConfig(pairs=[])`": lambda x: [raised(lambda: _eval_config(pairs=[])), raised(lambda: _eval_config(pairs=[("en", "en")])),
                                         raised(lambda: _eval_config(pairs=["ende"]))],
    "`EvalConfig(n=\"30\")`": lambda x: [raised(lambda: _eval_config(n="30")), raised(lambda: _eval_config(k=float("nan"))),
                                        raised(lambda: _eval_config(n=0)), raised(lambda: _eval_config(k=21, n=20))],
    "`EvalConfig(corr_boot=-1)`": lambda x: [raised(lambda: _eval_config(corr_boot=-1)), raised(lambda: _eval_config(corr_boot=10**9))],
    "`EvalConfig(sim=\"dot\")`": lambda x: [raised(lambda: _eval_config(sim="dot")), raised(lambda: _eval_config(models=[])),
                                           raised(lambda: _eval_config(dataset_options=["a=1"]))],
    "`--models ,` (no model)": lambda x: said_by(x.grid("evaluate", "--models", ",")),
    "a model option the model does not take": lambda x: said_by(x.grid("evaluate", "--models", "random?colour=1")),
    "a model option value of the wrong type": lambda x: said_by(x.grid("evaluate", "--models", "random?seed=x")),
    "an option written without a value": lambda x: said_by(x.grid("evaluate", "--models", "random?seed")),
    "the same option in the spec and as a Python keyword": lambda x: raised(
        lambda: __import__("backretrieval.encoders", fromlist=["x"]).get_text_encoder("random?seed=1", seed=2)),
    "a secret as an option": lambda x: said_by(x.grid("evaluate", "--models", "random?api_key=abc")),
    "`--pairs en-en` / `--pairs ,`": lambda x: [said_by(x.grid("evaluate", "--pairs", "en-en")), said_by(x.grid("evaluate", "--pairs", ","))],
    "`--n 0`, `--k 0`, `--csls-k 0`": lambda x: said_by(x.grid("evaluate", "--n", "0")),
    "`--k` above `--n`": lambda x: said_by(x.grid("evaluate", "--k", "30")),
    "`--n` larger than the data allows": lambda x: said_by(grid("compare", _three_langs(x), x.path("out"), "--pairs", "en-de,en-es",
                                                                "--n", "50", "--k", "10")),
    "`--sim csls` with `--csls-k` above `--n`": lambda x: said_by(x.grid("evaluate", "--sim", "csls", "--csls-k", "30")),
    "`--executor threads`": lambda x: said_by(x.grid("evaluate", "--executor", "threads")),
    "`--executor local:3` / `processes:0`": lambda x: [said_by(x.grid("evaluate", "--executor", "local:3")),
                                                       said_by(x.grid("evaluate", "--executor", "processes:0"))],
    "`--executor ray:HOST:PORT` where nothing accepts": lambda x: said_by(x.grid("evaluate", "--executor", "ray:127.0.0.1:1")),
    "`--executor ray:HOST:PORT` where another program listens": lambda x: _ray_answering(x, b"HTTP/1.1 400 Bad Request\r\n\r\n"),
    "unknown `--image-model` / `meta --weak-image-models` (a close": lambda x: said_by(x.grid("meta", "--models", "random,tfidf-char,random?seed=3",
                                                                                            "--weak-image-models", "colour-hist")),
    "`compare --level 1.5`": lambda x: said_by(x.grid("compare", "--level", "1.5")),
    "`compare --level nan`": lambda x: said_by(x.grid("compare", "--level", "nan")),
    "`compare --n-boot 1000000000`": lambda x: said_by(x.grid("compare", "--n-boot", "1000000000")),
    "`compare --alpha 0`": lambda x: said_by(x.grid("compare", "--alpha", "0")),
    "`compare --n-boot 0`": lambda x: said_by(x.grid("compare", "--n-boot", "0")),
    "`compare --metric foo@3`": lambda x: said_by(x.grid("compare", "--metric", "foo@3")),
    "`compare --metric bkr@0` / `xlr@50` with N=20": lambda x: [said_by(x.grid("compare", "--metric", "bkr@0")),
                                                              said_by(x.grid("compare", "--metric", "xlr@50"))],
    "`meta` with fewer than 3 models": lambda x: said_by(x.grid("meta")),
    "`br.compare(cfg, report=True)`": lambda x: raised(lambda: __import__("backretrieval").compare(_grid_config(x), report=True)),
    "`br.evaluate(cfg, out, save_queries=True)`": lambda x: raised(lambda: __import__("backretrieval").evaluate(
        _grid_config(x, approx="hnsw"), x.path("out"), save_queries=True)),
    "`write_compare_report([c1, c2], result, out)`": lambda x: raised(
        lambda: __import__("backretrieval.report.compare_report", fromlist=["x"]).write_compare_report([1, 2], None, x.path("out"))),
    "`meta --candidates bkr@10,xlr@1`": lambda x: said_by(_meta(x, "--candidates", "bkr@10,xlr@1", "--k", "10")),
    "`meta --candidates hub_max@5`": lambda x: said_by(_meta(x, "--candidates", "hub_max@5")),
    "`meta --candidates corr,bkr_mrr,corr`": lambda x: said_by(_meta(x, "--candidates", "corr,bkr_mrr,corr")),
    "`meta --candidates bkr@10` with `--k 5`": lambda x: said_by(_meta(x, "--candidates", "bkr@10")),
    "`meta --candidates ,`": lambda x: said_by(_meta(x, "--candidates", ",")),
    "`metrics.approx.bkr_approx(..., retrieved=(offsets, rows))`": lambda x: [
        raised(lambda: _bkr_retrieved((np.array([0, 1, 1]), np.array([0, 1])))),
        raised(lambda: _bkr_retrieved((np.array([0, 1]), np.array([0])))),
        raised(lambda: _bkr_retrieved((np.array([0, 1, 2]), np.array([0, 7]))))],
    # the fine-tuning evaluator
    "`BackretrievalEvaluator(..., pairs=\"en-en\")`": lambda x: raised(lambda: _evaluator(x, pairs="en-en")),
    "`BackretrievalEvaluator` with a K above `n`": lambda x: raised(lambda: _evaluator(x, n=5)),
    "`BackretrievalEvaluator` on a pair without images": _no_images,
    "`BackretrievalEvaluator(..., n=30.7)`": lambda x: [raised(lambda: _evaluator(x, n=30.7)), raised(lambda: _evaluator(x, n="30")),
                                                       raised(lambda: _evaluator(x, n=0))],
    "`BackretrievalEvaluator(..., pairs=\"ende\")`": lambda x: raised(lambda: _evaluator(x, pairs="ende")),
    "`BackretrievalEvaluator` with a K equal to `n`": lambda x: warned(lambda: _evaluator(x, n=1, k=1, ks=(1,))),
    "two evaluators of one `name`": _evaluator_csv,
    # trained models
    "`train m3l --seed -1`": lambda x: said_by(_train(x, "m3l", "--seed", "-1")),
    "`train m3l --widths 1024,2.5`": lambda x: said_by(_train(x, "m3l", "--widths", "1024,2.5")),
    "`train m3l --dropout 0.2,0.1,1`": lambda x: said_by(_train(x, "m3l", "--dropout", "0.2,0.1,1")),
    "`train m3l --val-frac 0` with `--select best`": lambda x: said_by(_train(x, "m3l", "--val-frac", "0", "--select", "best")),
    "`train m3l --test-frac 0.6 --val-frac 0.5`": lambda x: said_by(_train(x, "m3l", "--test-frac", "0.6", "--val-frac", "0.5")),
    "`train m3l --widths 1000000000,1000`": lambda x: [said_by(_train(x, "m3l", "--widths", "1000000000,1000")),
                                                       raised(lambda: __import__("backretrieval.train.m3l", fromlist=["x"]).M3L(
                                                           widths=[10**9, 1000]).check_params())],
    "`train patr --eta-quantile 1`": lambda x: said_by(_train(x, "patr", "--eta-quantile", "1")),
    "`train triplet --layers 300,abc`": lambda x: said_by(_train(x, "triplet", "--langs", "en,de", "--layers", "300,abc")),
    "`train triplet --layers 1000000000`": lambda x: [said_by(_train(x, "triplet", "--langs", "en,de", "--layers", "1000000000")),
                                                      raised(lambda: __import__("backretrieval").Triplet(layers=[10**9]).check_params())],
    "`train triplet --layers` with more than 16 layers": lambda x: said_by(_train(x, "triplet", "--langs", "en,de", "--layers", ",".join(["300"] * 40))),
    "`train tripletxl --base bert-huge`": lambda x: said_by(_train(x, "tripletxl", "--langs", "en,de") + ["--base", "bert-huge"]),
    "`train cr5 --langs ,`": lambda x: said_by(_cr5(x, "--langs", ",")),
    "`train cr5 --lam 1,0`": lambda x: said_by(_cr5(x, "--lam", "1,0")),
    "`train cr5 --regime pairwise --pair en-de,de-fr`": lambda x: said_by(_cr5(x, "--regime", "pairwise", "--pair", "en-de,de-fr")),
    "`train cr5 --no-holdout --lam 1,3`": lambda x: said_by(_cr5(x, "--no-holdout", "--lam", "1,3")),
    "`train cr5 --regime transitive --pair de-ja`": lambda x: [said_by(_cr5(x, "--regime", "transitive", "--pair", "de-ja")),
                                                              said_by(_cr5(x, "--regime", "pairwise") + ["--langs", "en,de,ja"])],
    "`train cr5 --min-words 10 --max-words 5`": lambda x: said_by(_cr5(x, "--min-words", "10", "--max-words", "5")),
    "the same rules in Python, `analysis.trained.cr5.train_evaluate(...)`": lambda x: raised(
        lambda: __import__("backretrieval.train.cr5", fromlist=["x"]).plan_training(holdout=False, lams=(1.0, 3.0))),
    "`train ... --out` below a file": lambda x: said_by(["train", "cr5", "--dataset", x.data, "--langs", "en,de", "--out",
                                                         _file_at(x, "results") / "model"]),
    "`train cr5 | triplet | tripletxl | m3l | patr`, `image-retrieval`, `case-study prepare` with a dataset": lambda x: said_by(
        ["train", "cr5", "--dataset", (h := _own_input(x, "history.csv")[2]), "--langs", "en,de", "--out", Path(h).parent]),
    "`--out` inside the folder of the base model": lambda x: said_by(_train(x, "triplet", "--langs", "en,de")
                                                                     + ["--base", f"cr5:{(m := _cr5_dir(x))}", "--out", m]),
    "`image-retrieval --ks 0,5`": lambda x: said_by(_image_retrieval(x, None, "--ks", "0,5")),
    "`image-retrieval --model DIR` that is not a trained model": lambda x: said_by(_image_retrieval(x)),
    "`image-retrieval --plot-langs en,ru --langs en,de`": lambda x: said_by(_image_retrieval(x, None, "--plot-langs", "en,ru", "--langs", "en,de")),
    "`case-study report --langs en`": lambda x: said_by(_case_study(x) + ["--langs", "en"]),
    "`case-study report --labels a,a`": lambda x: said_by(_case_study(x, "--labels", "a,a")),
    "`case-study report --k 20 --bkr-n 10`": lambda x: said_by(_case_study(x, "--k", "20", "--bkr-n", "10")),
    "a `cr5:DIR` model whose `weights.npz` holds NaN or inf": lambda x: said_by(x.grid("evaluate", "--models", f"cr5:{_cr5_dir(x, phi_nan=True)}")),
    "a model directory whose `model.json` is nested thousands of levels deep": lambda x: said_by(_deep_model(x)),
    "`case-study prepare --holdout 1`": lambda x: said_by(["case-study", "prepare", "--langs", "en,de", "--holdout", "1", "--out", x.path("w")]),
    # the human study
    "`study analyze --n-boot 0` / `--n-boot -5`": lambda x: said_by(["study", "analyze", x.path("s.db"), "--n-boot", "0"]),
    "`study analyze --bkr-seeds 0`": lambda x: said_by(["study", "analyze", x.path("s.db"), "--bkr-seeds", "0"]),
    "`study analyze --bkr-n 0`": lambda x: said_by(["study", "analyze", x.path("s.db"), "--bkr-n", "0"]),
    "`study analyze --image-model nope`": lambda x: said_by(["study", "analyze", x.path("s.db"), "--image-model", "nope"]),
    "the same in Python, `study.analyze.analyze(path, n_boot=0)`": lambda x: [
        raised(lambda: __import__("backretrieval.study.analyze", fromlist=["x"]).analyze(x.path("s.db"), n_boot=0)),
        raised(lambda: __import__("backretrieval.study.analyze", fromlist=["x"]).analyze(x.path("s.db"), image_model="nope"))],
    "`study create --from-queries Q --dataset D` where Q was computed on another version": lambda x, queries_run: said_by(
        _study(x, _edited(x, "en", "red cat", "blue dog"), queries_run)),
    "`study create --from-queries Q --dataset D` where a target's text differs": lambda x, queries_run: said_by(
        _study(x, _edited(x, "de", "rote Katze", "blauer Hund"), queries_run)),
    "`study create --from-queries Q` with a column of the wrong type": lambda x, queries_run: said_by(_study(x, x.data, _bad_query_column(x, queries_run))),
    "`study create --seed -1`": lambda x: said_by(_study_options(x, "--seed", "-1")),
    "`study create --raters -1`": lambda x: said_by(_study_options(x, "--raters", "-1")),
    "`study create --queries 0`": lambda x: said_by(_study_options(x, "--queries", "0")),
    "`study serve --port -1` / `--port 70000`": lambda x: said_by(["study", "serve", x.path("s.db"), "--port", "70000"]),
    # command-line syntax
    "a missing option": lambda x: said_by(["evaluate", "--dataset", x.data, "--models", "random", "--out", x.path("out")]),
    "an unknown option": lambda x: said_by(x.grid("evaluate") + ["--bogus"]),
    "an unknown command": lambda x: said_by(["evalute"]),
}


def _meta(x: Inputs, *extra: str) -> list:
    return x.grid("meta", "--models", "random,tfidf-char,random?seed=3", *extra)


def _bkr_retrieved(retrieved) -> None:
    from backretrieval.metrics.approx import bkr_approx

    a = np.eye(2, dtype=np.float32)
    bkr_approx(a, a, a, a, (1,), method="flat", retrieved=retrieved)


def _study_options(x: Inputs, *extra: str) -> list:
    return ["study", "create", "--dataset", x.data, "--src", "en", "--tgt", "de", "--models", "random,tfidf-char",
            "--out", x.path("s.db"), *extra]


def _self_based_triplet(x: Inputs) -> Said:
    from backretrieval.encoders.trained.triplet import save_model

    params = [(np.eye(4, dtype=np.float32), np.zeros(4, np.float32))]
    a, b = x.path("a"), x.path("b")
    save_model(a, params, hyper_parameters={"method": "triplet", "base": f"tripletxl:{b}"})
    save_model(b, params, hyper_parameters={"method": "tripletxl", "base": f"triplet:{a}"})
    return said_by(x.grid("evaluate", "--models", f"triplet:{a}"))


@pytest.fixture(scope="module")
def study_db(tmp_path_factory) -> Path:
    """A study file on 60 concepts in en and de (precomputed features, no images shown)."""
    folder = tmp_path_factory.mktemp("study")
    data = write_feature_items(folder, 60, {"en": "red cat number", "de": "rote Katze Nummer"})
    db = folder / "s.db"
    res = cli(["study", "create", "--dataset", data, "--dataset-option", f"image_features={folder / 'feats.npy'}", "--src", "en",
               "--tgt", "de", "--models", "random,tfidf-char", "--queries", "2", "--per-model", "2", "--images", "none",
               "--out", db, "--quiet"])
    assert res.exit_code == 0, res.output
    return db


def _busy_port(study: Path) -> Said:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        return said_by(["study", "serve", study, "--port", busy.getsockname()[1]])


def _encoder(spec: str, **options) -> Callable[[], object]:
    return lambda: __import__("backretrieval.encoders", fromlist=["x"]).get_text_encoder(spec, **options)


TRIGGERS.update({
    "a serving form that is not the last": lambda x: said_by(x.grid("evaluate", "--models", "use-m@int8@trunc=64")),
    "a serving form with `--sim csls`": lambda x: said_by(x.grid("evaluate", "--models", "use-m@int8", "--sim", "csls")),
    "a serving form with `--approx`": lambda x: said_by(x.grid("evaluate", "--models", "use-m@binary", "--approx", "hnsw")),
    "of an `@int8` (or `@pca=D`) variant before `fit`": lambda x: raised(lambda: _encoder("use-m@int8")().encode(["a"], "en")),
    "`runtime` other than": lambda x: said_by(x.grid("evaluate", "--models", "minilm-en?runtime=tensorrt")),
    "an ONNX runtime on a GPU": lambda x: raised(_encoder("minilm-en?runtime=onnx", device="cuda")),
    "`compare --margin 0`": lambda x: [said_by(x.grid("compare", "--margin", "0")), raised(lambda: _eval_config(margin=1.5))],
    "a `triplet:DIR` / `tripletxl:DIR` model whose base names the model itself": _self_based_triplet,
    "`study analyze --bkr-n 1000000000`": lambda x, study_db: said_by(["study", "analyze", study_db, "--bkr-n", "1000000000",
                                                                        "--image-model", "precomputed", "--out", x.path("a")]),
    "`study serve` on a port another program listens on": lambda x, study_db: _busy_port(study_db),
})


# Rows not triggered here, each with the reason.
EXEMPT: dict[str, str] = {
    "a command that needs an extra that is not installed": "every extra is installed where the suite runs; "
                                                          "tests/cli/test_extras.py hides each package to trigger these",
    "`--out` cannot be created (no permission)": "needs a process that file permissions bind (as root, setpriv drops a "
                                                 "capability): tests/cli/test_bad_input.py::test_unwritable_out_and_cache_folders_are_refused",
    "`--out` exists and is not writable": "as above: permissions do not bind root in this process",
    "`br.compare_report` when an image of the galleries changed or vanished": "needs real image files and a whole "
                                                                              "evaluation: tests/e2e/test_probe.py::test_compare_report_reads_the_gallery_images_before_writing_anything",
    "`OUT/en.csv` (any `OUT/<lang>.csv` of `--langs`)": "reads the emoji data (shared_data): "
                                                      "tests/e2e/test_probe.py::test_make_catalogue_never_writes_over_a_users_files",
    "`OUT/images/<id>.png` already there": "reads the emoji data (shared_data): "
                                           "tests/e2e/test_probe.py::test_make_catalogue_never_writes_over_a_users_files",
}


def _api_or_hub(row: Row) -> bool:
    """The rows of the embedding-API and hub paths (``openai:``, ``hf:``): held to the code by
    their own tests (tests/encoders/test_openai_api.py, tests/encoders/test_hf_hub.py, with the
    fault server of tests/openai_server.py), which own those messages."""
    api_section = any(s in row.section for s in ("`openai:", "`hf:", "hub", "API"))
    return api_section and "BackretrievalEvaluator" not in row.case


def _rows_named(key: str, rows: list[Row]) -> list[Row]:
    """The row whose case cell is ``key``, else those whose case cell holds it."""
    return [r for r in rows if key == r.case] or [r for r in rows if key in r.case]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The grid data: 40 concepts in en and de with precomputed 16-d image features."""
    return write_feature_items(tmp_path_factory.mktemp("page-data"), 40, {"en": "red cat number", "de": "rote Katze Nummer"})


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(cache))
    return cache


def test_every_refusal_row_is_triggered_or_exempted():
    rows = page_rows()
    refusals = [r for r in rows if r.refusal and not _api_or_hub(r)]
    assert len(refusals) > 100, len(refusals)  # the page was read
    for key in [*TRIGGERS, *EXEMPT]:
        assert len(_rows_named(key, rows)) == 1, f"{key!r} names {len(_rows_named(key, rows))} rows of {PAGE.name}, not one"
    assert not set(TRIGGERS) & set(EXEMPT)
    keys = [*TRIGGERS, *EXEMPT]
    named = {id(r) for k in keys for r in _rows_named(k, rows)}
    missing = [f"{r.section}: {r.case}" for r in refusals if id(r) not in named]
    assert not missing, "rows neither triggered nor exempted (add a trigger, or a reason to EXEMPT):\n" + "\n".join(missing)


@pytest.mark.parametrize("key", list(TRIGGERS))
def test_the_code_says_what_the_row_says(key, data, tmp_path, monkeypatch, request):
    (row,) = _rows_named(key, page_rows())
    x = Inputs(tmp_path, data)
    trigger = TRIGGERS[key]
    extra = trigger.__code__.co_varnames[1:trigger.__code__.co_argcount]
    got = trigger(x, *(monkeypatch if name == "monkeypatch" else request.getfixturevalue(name) for name in extra))
    patterns = [_pattern(s) for s in row.spans]
    for said in got if isinstance(got, list) else [got]:
        assert any(p.fullmatch(c) for p in patterns for c in said.candidates()), (
            f"{PAGE.name}, {row.section}: {row.case}\n  the page says: {row.spans}\n  the code says: {said.candidates()}")
        if said.code is not None:
            assert said.code == row.exit_code, (said.code, row.exit_code, said.text)
