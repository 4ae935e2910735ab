"""A probe of hostile use, run on every CI run: each case is an input a user (or a wrong
script) can give, and the test checks the promise docs/bad-input.md makes about it -- one
``error:`` line naming the offending item before any work, no input overwritten, no
half-written or stale output, no unbounded allocation.

Cases that could allocate or wait without bound run in a subprocess under ``resource`` limits
(address space and CPU time) and a wall-clock timeout, so a regression fails the test instead of
taking the machine's memory or hanging the suite. Everything runs on tiny generic data files
(precomputed 16-d image features, or 8 x 8 PNGs with ``color-hist``): no model is downloaded and
nothing but the two small models random and tfidf-char is encoded. The probe's cases on the
embedding API and the embedding server are in ``test_probe_api.py``, those on the hub in
``test_probe_hub.py``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import backretrieval
from commands import assert_refused, cli, grid, nothing_encoded, write_feature_items

SRC = Path(backretrieval.__file__).resolve().parents[1]


def limited_run(code: str, *, memory_gb: float = 2.0, cpu_s: int = 120, timeout: float = 180) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python under an address-space limit of ``memory_gb`` and ``cpu_s``
    seconds of CPU time: an allocation without bound fails there, not on the machine."""
    limits = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({int(memory_gb * 2**30)}, {int(memory_gb * 2**30)}))
        resource.setrlimit(resource.RLIMIT_CPU, ({cpu_s}, {cpu_s}))
    """)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", limits + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A generic JSONL file: 40 concepts in en and de with precomputed 16-d image features."""
    return write_feature_items(tmp_path_factory.mktemp("probe-data"), 40, {"en": "red cat number", "de": "rote Katze Nummer"})


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch) -> Path:
    """A fresh cache folder per test: whatever a run encodes lands here."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(cache))
    return cache


def flags(*names: str) -> list[str]:
    """Boolean flags appended to a grid command line (``grid`` pairs its extras)."""
    return list(names)


# ------------------------------------------------------------------- outputs never overwrite inputs
def test_no_output_overwrites_an_input_of_any_kind(tmp_path, data, empty_cache):
    """Every file a grid command writes, against every input path: the dataset, its options and the
    paths inside model specs (``precomputed:``, ``cr5:``, ``st:``); refused before any work."""
    d = tmp_path / "D"
    d.mkdir()
    shutil.copy(data.parent / "feats.npy", d / "feats.npy")
    queries = d / "queries.parquet"
    pd.read_json(data, lines=True).to_parquet(queries)
    before = queries.read_bytes()
    res = cli(grid("evaluate", queries, d) + flags("--save-queries"))
    assert_refused(res, f"--out {d} would overwrite the input {queries} (--dataset): write the results to another folder")
    assert queries.read_bytes() == before

    emb = d / "results.jsonl"  # precomputed text vectors under the name of the run's records
    emb.write_text("".join(json.dumps({"lang": lang, "id": f"{lang}{i}", "embedding": [float(i), 1.0]}) + "\n"
                           for lang in ("en", "de") for i in range(40)), encoding="utf-8")
    before = emb.read_bytes()
    for cmd in ("evaluate", "compare"):
        assert_refused(cli(grid(cmd, data, d, "--models", f"random,precomputed:{emb}")),
                       f"--out {d} would overwrite the input {emb} (--models precomputed:{emb})")
    assert_refused(cli(grid("evaluate", data, d, "--models", f"precomputed:{emb}@noise=0.5")),
                   f"the input {emb} (--models precomputed:{emb}@noise=0.5)")
    assert emb.read_bytes() == before

    model = d / "model"  # a model folder: the results would land inside it and change its fingerprint
    model.mkdir()
    (model / "model.json").write_text("{}", encoding="utf-8")
    for spec in (f"cr5:{model}", f"st:{model}"):
        assert_refused(cli(grid("evaluate", data, model / "out", "--models", f"random,{spec}")),
                       f"--out {model / 'out'} would write into the input folder {model} (--models {spec})")
    report_fig = d / "figures" / "emb.jsonl"  # an input below a folder the run owns
    report_fig.parent.mkdir()
    shutil.copy(emb, report_fig)
    assert_refused(cli(grid("compare", data, d, "--models", f"random,precomputed:{report_fig}") + flags("--report")),
                   f"the input {report_fig} (--models precomputed:{report_fig})")
    assert nothing_encoded(empty_cache)
    assert not (d / "summary.md").exists()


def test_an_output_path_taken_by_a_folder_is_refused_first_naming_it(tmp_path, data, empty_cache):
    """A folder where the run writes a file (or a file where it writes a folder) is found before the
    run, and the error names that path, not a temporary file."""
    out = tmp_path / "out"
    (out / "summary.md").mkdir(parents=True)
    assert_refused(cli(grid("evaluate", data, out)),
                   f"--out {out}: {out / 'summary.md'} is a folder where the run writes a file: move it away or choose another folder")
    assert nothing_encoded(empty_cache) and not (out / "results.jsonl").exists()
    (out / "summary.md").rmdir()
    (out / "figures").write_text("x", encoding="utf-8")
    assert_refused(cli(grid("compare", data, out) + flags("--report")),
                   f"--out {out}: {out / 'figures'} is a file where the run writes a folder: move it away or choose another folder")


def test_atomic_write_onto_a_folder_names_the_folder(tmp_path):
    from backretrieval.core.io import atomic_write_text

    (tmp_path / "report.html").mkdir()
    with pytest.raises(IsADirectoryError) as e:
        atomic_write_text(tmp_path / "report.html", "x")
    assert e.value.filename == str(tmp_path / "report.html")
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary file left


def test_a_killed_writers_temporary_file_is_swept_by_the_next_run(tmp_path):
    """``kill -9`` during a large write leaves ``.NAME.tmp-*``; the next run that holds the folder
    removes the temporary files of writers that are gone, and keeps those of live ones."""
    from backretrieval.core.io import folder_lock

    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from backretrieval.core.io import atomic_write
        with atomic_write({str(out / 'figures' / 'big.bin')!r}) as fh:
            fh.write(b"x" * 1_000_000); fh.flush(); print("writing", flush=True); time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert writer.stdout.readline().strip() == "writing"
    writer.kill()
    writer.wait()
    left = list((out / "figures").glob(".big.bin.tmp-*"))
    assert len(left) == 1
    live = out / f".results.jsonl.tmp-{os.getpid()}-abc"  # a live writer's file stays
    live.write_text("", encoding="utf-8")
    with folder_lock(out):
        pass
    assert not left[0].exists() and live.exists()


def test_a_rerun_leaves_no_earlier_runs_queries_or_report(tmp_path, data):
    """A rerun into OUT that does not write queries.parquet or report.html removes those of the
    earlier run, and its figures/ (once its own results are written) and says so: what is shared
    is this run's."""
    out = tmp_path / "out"
    res = cli(grid("compare", data, out) + flags("--save-queries", "--report"))
    assert res.exit_code == 0, res.output
    assert (out / "queries.parquet").is_file() and (out / "report.html").is_file()
    res = cli(grid("evaluate", data, out, "--models", "random"))
    assert res.exit_code == 0, res.output
    assert not (out / "queries.parquet").exists() and not (out / "report.html").exists() and not (out / "report.json").exists()
    assert not (out / "figures").exists()
    assert f"removed {out / 'queries.parquet'}, an earlier run's (this run wrote no queries.parquet: --save-queries)" in res.output
    assert f"removed {out / 'report.html'}, an earlier run's (this run wrote no report.html: --report)" in res.output
    assert f"removed {out / 'figures'}, an earlier run's (this run wrote no figures: --report)" in res.output


def test_a_newline_in_the_dataset_path_keeps_summary_headings_one_line(tmp_path, data):
    odd = tmp_path / "two\nlines"
    odd.mkdir()
    shutil.copy(data, odd / "items.jsonl")
    out = tmp_path / "out"
    res = cli(grid("evaluate", odd / "items.jsonl", out, "--dataset-option", f"image_features={data.parent / 'feats.npy'}"))
    assert res.exit_code == 0, res.output
    heading = (out / "summary.md").read_text(encoding="utf-8").splitlines()[0]
    assert heading.startswith(f"# {tmp_path}/two\\nlines/items.jsonl: N=20"), heading


def _limited_cli(args: list, **limits) -> subprocess.CompletedProcess:
    """``backretrieval ARGS`` in a subprocess under :func:`limited_run`'s limits."""
    return limited_run(f"""
        import sys
        from backretrieval.cli import main
        sys.argv = ["backretrieval", *{[str(a) for a in args]!r}]
        main()
    """, **limits)


def assert_refused_run(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """A subprocess that ended with exit code 2 and one ``error:`` line containing ``fragments``."""
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (proc.returncode, proc.stdout, proc.stderr)
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def test_train_triplet_layers_are_bounded(tmp_path, data):
    """``--layers 1000000000`` asked for 2 TB and ``100000,100000`` for 40 GB: refused before any
    data is read (the first under a memory limit, as a regression would allocate)."""
    args = ["train", "triplet", "--dataset", data, "--langs", "en,de", "--base", "random", "--out", tmp_path / "model", "--quiet"]
    proc = _limited_cli([*args, "--layers", "1000000000"], memory_gb=3)
    assert_refused_run(proc, "Invalid value for '--layers': a layer of 1,000,000,000 units; at most 16,384 per layer")
    assert_refused(cli([*args, "--layers", "100000,100000"]), "Invalid value for '--layers': a layer of 100,000 units; at most 16,384 per layer")
    assert_refused(cli([*args, "--layers", ",".join(["300"] * 40)]), "Invalid value for '--layers': 40 layers; at most 16")
    assert not (tmp_path / "model").exists()


def test_triplet_layers_are_bounded_in_python():
    from backretrieval import Triplet
    from backretrieval.train.base import HyperParameterError

    with pytest.raises(HyperParameterError, match="at most 16,384 per layer"):
        Triplet(layers=[10**9]).check_params()


@pytest.fixture(scope="module")
def image_data(tmp_path_factory) -> Path:
    """A generic JSONL file: 48 concepts in en and de, each with its own small PNG."""
    from PIL import Image

    d = tmp_path_factory.mktemp("probe-images")
    rows = []
    for i in range(48):
        Image.new("RGB", (8, 8), (5 * i, 255 - 5 * i, (37 * i) % 256)).save(d / f"img{i}.png")
        rows += [{"id": f"{lang}{i}", "lang": lang, "text": f"{word} {i}", "concept": f"c{i}", "image": f"img{i}.png"}
                 for lang, word in (("en", "cat number"), ("de", "Katze Nummer"))]
    (d / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return d / "items.jsonl"


def test_compare_report_reads_the_gallery_images_before_writing_anything(tmp_path, image_data):
    """A changed (here: removed) image fails the report before any figure is written; an existing
    file as the report folder is one clear error."""
    import backretrieval as br
    from backretrieval.core import DataError
    from backretrieval.core.errors import OutputError

    images = tmp_path / "data"
    shutil.copytree(image_data.parent, images)
    cfg = br.EvalConfig(dataset=str(images / "items.jsonl"), pairs=[("en", "de")], models=["random", "tfidf-char"],
                        image_model="color-hist", n=20, k=5, seeds=[0])
    result = br.evaluate(cfg, tmp_path / "run", progress=False)
    (tmp_path / "taken").write_text("x", encoding="utf-8")
    with pytest.raises(OutputError, match=f"compare_report: {tmp_path / 'taken'} is a file, not a folder"):
        br.compare_report(result, tmp_path / "taken")
    for png in images.glob("img*.png"):
        png.unlink()
    with pytest.raises(DataError, match="not found or unreadable"):
        br.compare_report(result, tmp_path / "report")
    assert not (tmp_path / "report").exists() or not any((tmp_path / "report").rglob("*"))


@pytest.fixture(scope="module")
def queries_run(data, tmp_path_factory) -> Path:
    """OUT of ``evaluate --save-queries`` on the probe data (random vs tfidf-char)."""
    out = tmp_path_factory.mktemp("queries-run")
    res = cli(grid("evaluate", data, out, "--seeds", "0,1") + flags("--save-queries"))
    assert res.exit_code == 0, res.output
    return out


def test_study_from_queries_checks_texts_and_column_types(tmp_path, data, queries_run):
    """Per-query results of an edited dataset are refused (texts are compared, not ids alone), and
    a column of the wrong type is named instead of reading as 'every query agrees'."""
    q = pd.read_parquet(queries_run / "queries.parquet")
    study = ["study", "create", "--src", "en", "--tgt", "de", "--models", "random,tfidf-char", "--images", "none",
             "--dataset-option", f"image_features={data.parent / 'feats.npy'}", "--quiet"]
    res = cli([*study, "--dataset", data, "--from-queries", queries_run / "queries.parquet", "--out", tmp_path / "ok.db"])
    assert res.exit_code == 0, res.output
    edited = tmp_path / "items.jsonl"
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        r["text"] = r["text"].replace("red cat", "blue dog")
    edited.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert_refused(cli([*study, "--dataset", edited, "--from-queries", queries_run / "queries.parquet", "--out", tmp_path / "a.db"]),
                   "items/en: query id 'en10': its text 'blue dog number 10' differs from the per-query results' "
                   "('red cat number 10'); were they computed on this version of the dataset?")
    bad = tmp_path / "queries.parquet"
    q.assign(query_id=1.5).to_parquet(bad)
    assert_refused(cli([*study, "--dataset", data, "--from-queries", bad, "--out", tmp_path / "b.db"]),
                   f"{bad}: column 'query_id' must hold item ids (strings or integers); row 1 holds float 1.5")
    q.assign(retrieved_ids=q["query_id"]).to_parquet(bad)
    assert_refused(cli([*study, "--dataset", data, "--from-queries", bad, "--out", tmp_path / "c.db"]),
                   f"{bad}: column 'retrieved_ids' must hold lists of item ids; row 1 holds str")
    assert not any((tmp_path / f"{x}.db").exists() for x in "abc")


def test_feature_files_that_are_not_one_npy_array_are_named(tmp_path, data, empty_cache):
    """An ``.npz`` archive or a 0-byte ``.npy`` as ``image_features``: one error line naming the file."""
    npz = tmp_path / "feats.npz"
    np.savez(npz, feats=np.load(data.parent / "feats.npy"))
    assert_refused(cli(grid("evaluate", data, tmp_path / "a", "--dataset-option", f"image_features={npz}")),
                   f"image_features: {npz} is an .npz archive (arrays: feats); give a .npy file holding one "
                   "(n_images, d) array (numpy.save)")
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    line = assert_refused(cli(grid("evaluate", data, tmp_path / "b", "--dataset-option", f"image_features={empty}")))
    assert line == f"error: image_features: cannot read {empty}: the file is empty (0 bytes)"  # the prefix once
    from backretrieval.core import DataError
    from backretrieval.encoders.image.precomputed_image import load_feature_rows

    for path, says in ((npz, "is an .npz archive"), (empty, "the file is empty")):
        with pytest.raises(DataError, match=says):
            load_feature_rows(path, [0], "precomputed")
    assert nothing_encoded(empty_cache)


def test_a_ray_address_where_nothing_listens_fails_at_once(tmp_path, data):
    """``--executor ray:127.0.0.1:1``: one ``error:`` line within seconds, before any work (Ray's own
    client would retry for minutes)."""
    import time

    t0 = time.monotonic()
    proc = _limited_cli(grid("evaluate", data, tmp_path / "out", "--executor", "ray:127.0.0.1:1"), memory_gb=8, cpu_s=60, timeout=90)
    assert_refused_run(proc, "Invalid value for '--executor': cannot reach Ray at 127.0.0.1:1 within 10 s")
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "out").exists()


def test_training_never_overwrites_its_data_or_base(tmp_path, data, empty_cache):
    """The model commands write model.json, history.csv, ... in --out: a dataset of such a name
    there is refused, and so is an --out inside the base model's folder."""
    d = tmp_path / "D"
    d.mkdir()
    history = d / "history.csv"
    pd.read_json(data, lines=True).to_csv(history, index=False)
    before = history.read_bytes()
    assert_refused(cli(["train", "cr5", "--dataset", history, "--langs", "en,de", "--out", d, "--quiet"]),
                   f"--out {d} would overwrite the input {history} (--dataset): write the results to another folder")
    assert_refused(cli(["train", "triplet", "--dataset", history, "--langs", "en,de", "--base", "random", "--out", d, "--quiet"]),
                   f"--out {d} would overwrite the input {history} (--dataset)")
    from backretrieval.encoders.trained.cr5 import Cr5Model

    vocab = {"en": ["cat", "red"], "de": ["katze", "rot"]}
    rng = np.random.default_rng(0)
    Cr5Model(vocab, {lang: np.ones(2) for lang in vocab}, {lang: rng.standard_normal((2, 2)).astype(np.float32) for lang in vocab}).save(d)
    assert_refused(cli(["train", "triplet", "--dataset", data, "--langs", "en,de", "--base", f"cr5:{d}", "--out", d, "--quiet"]),
                   f"--out {d} would write into the input folder {d} (--base cr5:{d})")
    assert history.read_bytes() == before and nothing_encoded(empty_cache)


def test_study_create_never_overwrites_its_inputs(tmp_path, data, queries_run):
    """``study create --force --out`` naming its own per-query results or dataset is refused."""
    q = tmp_path / "queries.parquet"
    shutil.copy(queries_run / "queries.parquet", q)
    before = q.read_bytes()
    study = ["study", "create", "--src", "en", "--tgt", "de", "--models", "random,tfidf-char", "--images", "none",
             "--dataset-option", f"image_features={data.parent / 'feats.npy'}", "--quiet", "--force"]
    assert_refused(cli([*study, "--dataset", data, "--from-queries", q, "--out", q]),
                   f"--out {q} would overwrite the input {q} (--from-queries): write to another file")
    assert q.read_bytes() == before


# ------------------------------------------------------------------ memory of tied approximate BkR
def test_approximate_bkr_on_tied_text_vectors_needs_no_more_memory_than_exact(tmp_path):
    """Constant text vectors tie every query with every target (N^2 pairs on any route): the
    approximate route lists them as the exact route does, never K + 1 times over (its peak of
    traced allocations is at most the exact route's), with the exact route's outcome."""
    import tracemalloc

    from backretrieval.metrics import bkr_ranks
    from backretrieval.metrics.approx import bkr_approx

    n, k = 400, 10
    rng = np.random.default_rng(0)
    text = np.ones((n, 8), dtype=np.float32)
    src_img, tgt_img = (rng.standard_normal((n, 16)).astype(np.float32) for _ in range(2))

    def peak(run):
        tracemalloc.start()
        try:
            out = run()
            return out, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    (exact, _), exact_peak = peak(lambda: bkr_ranks(text, text, src_img, tgt_img))
    approx, approx_peak = peak(lambda: bkr_approx(text, text, src_img, tgt_img, (1, k), method="hnsw",
                                                  target_agreement=None, found_at=True))
    assert approx["approximate"]
    assert approx_peak <= exact_peak, (approx_peak, exact_peak)
    np.testing.assert_array_equal(approx["found_at"], np.where(exact <= k, exact, 0))


# ---------------------------------------------------------------------------- trained models' size
def test_train_m3l_widths_are_bounded_as_triplet_layers_are(tmp_path, data):
    """``--widths 1000000000,1000`` asked for 2 TB and ``100000,100000`` for 40 GB: refused before
    any data is read, with the bound and message of ``--layers`` (the first under a memory limit,
    as a regression would allocate); ``M3L(widths=...)`` likewise."""
    from backretrieval.train.base import HyperParameterError
    from backretrieval.train.m3l import M3L

    args = ["train", "m3l", "--dataset", data, "--dataset-option", f"image_features={data.parent / 'feats.npy'}",
            "--base", "random", "--image-model", "precomputed", "--epochs", "1", "--out", tmp_path / "model", "--quiet"]
    proc = _limited_cli([*args, "--widths", "1000000000,1000"], memory_gb=3)
    assert_refused_run(proc, "Invalid value for '--widths': a layer of 1,000,000,000 units; at most 16,384 per layer")
    assert_refused(cli([*args, "--widths", "100000,100000"]), "Invalid value for '--widths': a layer of 100,000 units; at most 16,384 per layer")
    assert not (tmp_path / "model").exists()
    with pytest.raises(HyperParameterError, match="The 'widths' parameter of M3L: a layer of 100,000 units; at most 16,384"):
        M3L(widths=[100_000, 100]).check_params()


# ------------------------------------------------------------------------------ one dataset or many
def test_a_second_dataset_is_refused_by_the_commands_that_take_one(tmp_path, data, empty_cache):
    """``evaluate`` and ``compare`` evaluate one dataset: a second ``--dataset`` (which kept only the
    last, exit 0) or a list ``@LIST`` (read by ``meta`` only) is one error line before any work."""
    other = tmp_path / "other.jsonl"
    shutil.copy(data, other)
    for cmd in ("evaluate", "compare"):
        out = tmp_path / cmd
        assert_refused(cli([*grid(cmd, data, out), "--dataset", other]),
                       f"Invalid value for '--dataset': {cmd} takes one dataset, got 2 ({data}, {other}): run it once "
                       "per dataset, or stack the files into one (their rows, with a lang column: docs/datasets.md); "
                       "only meta merges several datasets")
        listing = tmp_path / "list.txt"
        listing.write_text(f"{data}\n{other}\n", encoding="utf-8")
        assert_refused(cli(grid(cmd, data, out, "--dataset", f"@{listing}")),
                       f"Invalid value for '--dataset': '@{listing}': {cmd} takes one dataset, not a list of them (@LIST: meta only)")
        assert not out.exists()
    assert nothing_encoded(empty_cache)


# ------------------------------------------------------------------------------- files a run writes
def _python_grid(data: Path, models) -> "object":
    import backretrieval as br

    return br.EvalConfig(dataset=str(data), dataset_options={"image_features": str(data.parent / "feats.npy")},
                         pairs=[("en", "de")], models=models, image_model="precomputed", n=20, k=5, seeds=[0])


def test_model_names_are_escaped_in_summary_and_compare_markdown(tmp_path, data):
    """A model name that would split a table (a newline, ``|``) is refused before any work, naming
    it; one with ``<script>`` and ``&`` is written as text: every table row of summary.md and
    compare.md keeps its columns and no tag is written raw."""
    import re

    import backretrieval as br
    from backretrieval.core import BackretrievalError

    for evil in ("ev|il", "ev\nil"):
        with pytest.raises(BackretrievalError, match="control character or '\\|'"):
            br.evaluate(_python_grid(data, {evil: "random", "tfidf-char": "tfidf-char"}), tmp_path / "refused", progress=False)
    assert not (tmp_path / "refused" / "results.jsonl").exists()
    evil = "a&b<script>alert(1)</script>"
    cfg = _python_grid(data, {evil: "random", "tfidf-char": "tfidf-char"})
    result = br.evaluate(cfg, tmp_path / "run", progress=False)
    br.compare(result, out_dir=tmp_path / "cmp")
    shown = "a&amp;b&lt;script>alert(1)&lt;/script>"
    for path in (tmp_path / "run" / "summary.md", tmp_path / "cmp" / "compare.md"):
        text = path.read_text(encoding="utf-8")
        assert "<script" not in text, path
        assert shown in text, (path, text)
        for table in re.findall(r"(?:^\|.*\|$\n?)+", text, flags=re.M):
            rows = table.splitlines()
            widths = {len(re.split(r"(?<!\\)\|", row)) for row in rows}
            assert len(widths) == 1, (path, rows)  # every row as many columns as the header


def test_python_evaluate_says_when_it_removes_an_earlier_report(tmp_path, data):
    """``br.evaluate`` into a folder that holds an earlier run's report.html and figures/ removes
    them (this run wrote none), with a warning each, as the command says it in its log."""
    import warnings

    import backretrieval as br

    out = tmp_path / "run"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "compare_bkr_5_heatmap.png").write_bytes(b"png")
    (out / "report.html").write_text("<html>", encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        br.evaluate(_python_grid(data, ["random"]), out, progress=False)
    said = [w for w in caught if type(w.message).__name__ == "RemovedOutputWarning"]
    assert sorted(str(w.message) for w in said) == [
        f"removed {out / 'figures'}, an earlier run's (this run wrote no figures: report=True)",
        f"removed {out / 'report.html'}, an earlier run's (this run wrote no report.html: report=True)",
    ]
    assert not (out / "report.html").exists() and not (out / "figures").exists()


# ------------------------------------------------------------------------ the fine-tuning evaluator
def test_evaluator_settings_are_checked_not_rounded(data):
    """``n=30.7`` (was silently 30), ``n="30"`` (accepted) and ``pairs="ende"`` (a raw ValueError)
    are one clear error each, before the data are read; ``n`` equal to a K reported (``n=1``:
    BkR@1 = XLR@1 = 1.0 for every model, chance 1) is said in a warning."""
    import backretrieval as br
    from backretrieval.core import BackretrievalError

    kw = {"image_model": "precomputed"}
    for n, says in ((30.7, "n=30.7 (float): n must be an integer"), ("30", "n='30' (str): n must be an integer"),
                    (0, "n=0 is out of range: n must be >= 1")):
        with pytest.raises(BackretrievalError, match=f"^BackretrievalEvaluator: {re.escape(says)}$"):
            br.BackretrievalEvaluator("no-such-file.jsonl", "en-de", n=n, **kw)
    with pytest.raises(BackretrievalError, match="^BackretrievalEvaluator: a pair is SRC-TGT with two different languages, got 'ende'$"):
        br.BackretrievalEvaluator("no-such-file.jsonl", "ende", **kw)
    with pytest.warns(UserWarning, match=re.escape("BackretrievalEvaluator: n=1: bkr@1 (and XLR at that K) is 1.0 for "
                                                   "every model (chance K/n = 1): choose n above 1 (300 by default)")):
        br.BackretrievalEvaluator(_feature_dataset(data), "en-de", n=1, k=1, ks=(1,), **kw)


def _feature_dataset(data: Path):
    from backretrieval.data import load_dataset

    return load_dataset(str(data), langs=["en", "de"], image_features=str(data.parent / "feats.npy"))


def test_two_evaluators_of_one_name_never_mix_rows_in_one_csv(tmp_path, data):
    """A CSV holding the rows of one evaluator (14 columns: en-de with XLR) meets a second evaluator
    of the same name with other columns (20: en-de and de-en): refused before it computes or
    appends anything, where rows of 14 and 22 fields were appended to one file."""
    import backretrieval as br
    from backretrieval.core import BackretrievalError

    ds = _feature_dataset(data)
    first = br.BackretrievalEvaluator(ds, "en-de", image_model="precomputed", n=11, name="x")
    second = br.BackretrievalEvaluator(ds, "en-de,de-en", image_model="precomputed", n=11, name="x")
    path = tmp_path / first.csv_file
    path.write_text(",".join(first.csv_headers) + "\n" + ",".join(["0", "1", *["0.5"] * 12]) + "\n", encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(BackretrievalError, match=re.escape(f"BackretrievalEvaluator: {path} holds the rows of another "
                                                           "evaluator (14 columns; this one writes 20")):
        second(None, output_path=str(tmp_path))  # refused before the model is asked for anything
    assert path.read_bytes() == before


# ------------------------------------------------------------------------------------ make-catalogue
def test_make_catalogue_never_writes_over_a_users_files(tmp_path, monkeypatch, shared_data, _session_cache):
    """A user's own ``OUT/en.csv`` (silently replaced) and a file ``OUT/images`` ("File exists")
    are refused, naming the path, before anything is written; a rerun of the same catalogue finds
    its own files and succeeds."""
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(_session_cache))  # the emoji data extracted once per session
    make = ["make-catalogue", "--langs", "en", "--categories", "Food & Drink"]
    shop = tmp_path / "shop"
    shop.mkdir()
    (shop / "images").write_text("not a folder", encoding="utf-8")
    assert_refused(cli([*make, shop]), f"error: {shop}: {shop / 'images'} is a file where make-catalogue writes a folder: "
                                       "move it away or choose another folder")
    (shop / "images").unlink()
    mine = "id,text,image\nsku-1,my own product,photos/1.png\n"
    (shop / "en.csv").write_text(mine, encoding="utf-8")
    assert_refused(cli([*make, shop]), f"error: {shop / 'en.csv'} exists and is not the en table make-catalogue writes "
                                       "for these categories: it is never written over; move it away or choose another folder")
    assert (shop / "en.csv").read_text(encoding="utf-8") == mine and not (shop / "images").exists()
    (shop / "en.csv").unlink()
    (shop / "images").mkdir()
    (shop / "images" / "1f34e.png").write_bytes(b"my own photo of an apple")
    assert_refused(cli([*make, shop]), f"error: {shop / 'images' / '1f34e.png'} exists and is not the image make-catalogue "
                                       "writes for product 1f34e: it is never written over; move it away or choose another folder")
    assert not (shop / "en.csv").exists()
    (shop / "images" / "1f34e.png").unlink()
    for _ in range(2):  # the first run writes, the rerun finds the same files
        res = cli([*make, shop])
        assert res.exit_code == 0, res.output


def test_make_catalogue_names_a_truncated_emoji_tarball(tmp_path, monkeypatch):
    """A truncated emoji-datasource tarball gave only "Aborted!" (click's answer to an EOFError):
    it is named, with what to do."""
    import io
    import tarfile

    folder = tmp_path / "npm"
    folder.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        body = json.dumps([{"image": f"{i:05x}.png", "category": "Objects"} for i in range(2000)]).encode()
        info = tarfile.TarInfo("package/emoji.json")
        info.size = len(body)
        tf.addfile(info, io.BytesIO(body))
    tgz = folder / "emoji-datasource-google-16.0.0-img64.tgz"
    tgz.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    for name in ("cldr-annotations-full-48.2.0.tgz", "cldr-annotations-derived-full-48.2.0.tgz"):
        (folder / name).write_bytes(b"")
    monkeypatch.setenv("BACKRETRIEVAL_EMOJI_DIR", str(folder))
    assert_refused(cli(["make-catalogue", tmp_path / "shop"]),
                   f"error: emoji-cldr: {tgz} is damaged or truncated (Compressed file ended before the end-of-stream "
                   "marker was reached): delete it and run again to fetch it anew")
    assert not (tmp_path / "shop").exists()


def test_study_from_queries_checks_the_target_texts_too(tmp_path, data, queries_run):
    """Per-query results computed on a dataset whose every target text changed (the query texts
    kept) were accepted silently: the retrieved targets' texts are compared with the dataset's."""
    edited = tmp_path / "items.jsonl"
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        if r["lang"] == "de":
            r["text"] = r["text"].replace("rote Katze", "blauer Hund")
    edited.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    study = ["study", "create", "--src", "en", "--tgt", "de", "--models", "random,tfidf-char", "--images", "none",
             "--dataset-option", f"image_features={data.parent / 'feats.npy'}", "--quiet", "--dataset", edited,
             "--from-queries", queries_run / "queries.parquet", "--out", tmp_path / "s.db"]
    line = assert_refused(cli(study), "items/de: target id 'de", "its text 'blauer Hund Nummer",
                          "differs from the per-query results' ('rote Katze Nummer")
    assert line.endswith("; were they computed on this version of the dataset?")
    assert not (tmp_path / "s.db").exists()


def test_a_ray_address_where_another_program_listens_is_refused(tmp_path, data):
    """``--executor ray:HOST:PORT`` where a program that is not a Ray head listens (here one that
    answers as an HTTP/1.1 server) passed the connect check, and Ray's client then retried for
    ever: the head must answer as a gRPC (HTTP/2) server, so this is one error line at once."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(64)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    try:
        proc = _limited_cli(grid("evaluate", data, tmp_path / "out", "--executor", f"ray:127.0.0.1:{port}"),
                            memory_gb=8, cpu_s=60, timeout=90)
    finally:
        server.close()
    assert_refused_run(proc, f"Invalid value for '--executor': 127.0.0.1:{port} is not a Ray cluster's head: the program "
                             "listening there answers b'HTTP/1.1 ', not gRPC (HTTP/2); give the head's address")
    assert not (tmp_path / "out").exists()
