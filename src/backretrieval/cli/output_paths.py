"""What a command writes, held against what it reads: the files and folders of a grid command's
``--out``, the checks that no output overwrites an input (or lands in a folder the command reads)
before any work, and the removal of an earlier run's optional outputs once a run is written.

Every refusal is an :class:`~backretrieval.core.errors.OutputError` naming the option, the
output and the input (docs/bad-input.md).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from ..core import BackretrievalError


# what the grid commands write in --out: files, and folders whose whole content they own
GRID_OUTPUT_FILES = ("results.jsonl", "results.csv", "summary.md", "run.json", "compare.md", "compare.json",
                     "report.html", "report.json", "meta.md", "meta.json", "queries.parquet")
GRID_OUTPUT_DIRS = (".partial", "figures", "image-models", "datasets")


def check_output_paths(out: str | Path, files: Sequence[str] = GRID_OUTPUT_FILES, dirs: Sequence[str] = GRID_OUTPUT_DIRS) -> None:
    """Before any work: no file the command writes in ``out`` is taken by a folder, and no
    folder it writes by a file (the write would fail only after the whole run)."""
    from ..core.errors import OutputError

    o = Path(out).expanduser()
    for names, wrong, kind, other in ((files, Path.is_dir, "a folder", "a file"), (dirs, Path.is_file, "a file", "a folder")):
        for name in names:
            if wrong(o / name):
                raise OutputError(f"--out {out}: {o / name} is {kind} where the run writes {other}: "
                                  "move it away or choose another folder")


def model_paths(specs: Sequence[Any], option: str = "--models") -> list[tuple[str, str]]:
    """``(path, option)`` of every existing file or folder a model spec reads: the ``ARG`` of
    ``NAME:ARG`` (``precomputed:FILE``, ``cr5:DIR``, ``st:DIR``, ...), and for ``hf:ORG/NAME``
    the model's folder in the Hugging Face cache (its ``cache_dir`` option or the standard one),
    variants included (``precomputed:FILE@noise=0.5``). Model objects and specs without a path
    give nothing."""
    from ..analysis.models import split_label
    from ..encoders.options import split_spec
    from ..encoders.variants import split_variants

    out = []
    for spec in specs:
        if not isinstance(spec, str):
            continue
        spec = split_label(spec)[1]
        head = split_variants(spec)[0]
        name, sep, arg = head.partition("?")[0].partition(":")
        if name == "hf" and arg:
            from ..encoders.text.hf_hub import model_folder

            try:
                cache_dir = dict(split_spec(head)[1]).get("cache_dir")
            except BackretrievalError:  # a malformed spec is refused where the model is built
                continue
            arg = str(model_folder(arg, cache_dir or None))
        if sep and arg and Path(arg).expanduser().exists():
            out.append((arg, f"{option} {spec}"))
    return out


def check_not_inputs(out: str | Path, inputs: Sequence[tuple[Any, str]], files: Sequence[str] = GRID_OUTPUT_FILES,
                      dirs: Sequence[str] = GRID_OUTPUT_DIRS, folders: Sequence[tuple[Any, str]] = ()) -> None:
    """No input file (``(value, option)``; values that are not existing files are skipped) is
    one of the files the command writes in ``out`` (``files``, or anything below ``dirs``), and
    ``out`` is not inside an input folder of ``folders`` (a model directory, whose fingerprint
    the results would change), nor such a folder below one of ``dirs``."""
    from ..core.errors import OutputError

    o = Path(out).expanduser().resolve()
    for value, option in [*inputs, *folders]:
        if not isinstance(value, (str, os.PathLike)) or not str(value) or not Path(value).expanduser().exists():
            continue
        p = Path(value).expanduser().resolve()
        if (p.parent == o and p.name in files and p.is_file()) or any(p.is_relative_to(o / d) for d in dirs):
            raise OutputError(f"--out {out} would overwrite the input {value} ({option}): write the results to another folder")
    for value, option in folders:
        if isinstance(value, (str, os.PathLike)) and Path(value).expanduser().is_dir() \
                and o.is_relative_to(Path(value).expanduser().resolve()):
            raise OutputError(f"--out {out} would write into the input folder {value} ({option}): "
                              "write the results to another folder")


# what the training and model commands write in --out (model directories, image-retrieval results, case-study work)
MODEL_OUTPUT_FILES = ("model.json", "weights.npz", "history.csv", "history.json", "curves.png", "checkpoint.pt",
                      "config.json", "eval.json", "split.json", "results.json", "table.md", "projection.png", "ranks.npz",
                      "prepare.json")


def check_inputs_kept(out: str | Path, dataset: Any, options: dict[str, Any], models: Sequence[tuple[Sequence[str], str]] = (),
                      folders: Sequence[tuple[Any, str]] = (), files: Sequence[str] = MODEL_OUTPUT_FILES) -> None:
    """Before a command that writes ``files`` in ``out`` reads anything: the dataset and the paths
    among its options are not overwritten, and ``out`` is not inside a folder the command reads:
    those inside the model specs of ``models`` (``(specs, option)``) and ``folders``
    (``(path, option)``)."""
    inputs = [(dataset, "--dataset"), *((v, f"--dataset-option {k}") for k, v in options.items())]
    read = [*(p for specs, option in models for p in model_paths(specs, option)), *folders]
    check_not_inputs(out, inputs, files, dirs=(), folders=read)


def check_file_not_input(out: str | Path, inputs: Sequence[tuple[Any, str]], option: str = "--out") -> None:
    """The one file a command writes (``out``) is none of its input files (``(value, option)``;
    values that are not existing files are skipped)."""
    from ..core.errors import OutputError

    o = Path(out).expanduser().resolve()
    for value, what in inputs:
        if isinstance(value, (str, os.PathLike)) and str(value) and Path(value).expanduser().is_file() \
                and Path(value).expanduser().resolve() == o:
            raise OutputError(f"{option} {out} would overwrite the input {value} ({what}): write to another file")
