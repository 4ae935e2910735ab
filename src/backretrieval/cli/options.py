"""The ``backretrieval`` click group, the ``train`` sub-group and option helpers shared by commands.

Commands live in the other modules of this package, one topic per file, and attach themselves
to :data:`main` (or :data:`train`) when imported. Modules here import the layers they call
inside the command functions, so ``backretrieval --help`` stays instant.

Bad input is refused before any computation, as one line ``error: ...`` that names the option,
file, line, id or value, with exit code 2 (see docs/bad-input.md): the option parsers below
check values, and :func:`check_outputs` checks that the output and cache folders can be
written. Errors raised later by the layers (:class:`~backretrieval.core.BackretrievalError`)
are shown the same way.
"""
from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

import click

from ..core import BackretrievalError, ServiceError
from ..core.text import one_line
from .output_paths import check_not_inputs, check_output_paths, model_paths
from .warning_format import short_warnings, warn

EXIT_BAD_INPUT = 2  # an `error:` line about the input or the configuration
EXIT_SYSTEM = 1  # an `error:` line about the system (disk full, a file that vanished mid-run, a service that fails)


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    click.secho(f"error: {one_line(message)}", fg="red", err=True)
    sys.exit(code)


def _os_message(e: OSError) -> str:
    where = f"{e.filename}: " if e.filename else ""
    return f"{where}{e.strerror or e}"


class _Group(click.Group):
    """Turns every user-facing error into one ``error:`` line (no usage block, no traceback)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta.setdefault("backretrieval.argv", list(args))  # the command line as given (report provenance)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ServiceError as e:  # the input is fine; the service may answer later
            _fail(str(e), EXIT_SYSTEM)
        except BackretrievalError as e:
            _fail(str(e))
        except click.exceptions.NoArgsIsHelpError:
            raise  # `backretrieval train` alone shows the group's help
        except click.BadParameter as e:  # the message names the option and the value
            _fail(e.format_message())
        except click.UsageError as e:  # a missing option, an unknown option or command
            hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
            _fail(e.format_message() + hint)
        except click.ClickException as e:
            _fail(e.format_message())
        except OSError as e:  # the system failed mid-run (disk full, permissions changed)
            _fail(_os_message(e), EXIT_SYSTEM)


@click.group(cls=_Group)
@click.version_option(package_name="backretrieval")
def main() -> None:
    """Evaluate cross-lingual text representations with Backretrieval (images as the pivot),
    ground-truth XLR where parallel data exists, and the CORR baseline."""
    short_warnings()


# ------------------------------------------------------------------------------ option types
class _Number(click.FloatRange):
    """A finite float, optionally within bounds (``nan`` and ``inf`` are refused)."""

    def convert(self, value, param, ctx):
        rv = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(rv, param, ctx)


POSITIVE = click.IntRange(min=1)
NON_NEGATIVE = click.IntRange(min=0)
SEED = click.IntRange(min=0)
POSITIVE_NUMBER = _Number(min=0, min_open=True)
NON_NEGATIVE_NUMBER = _Number(min=0)
OPEN_UNIT = _Number(0, 1, min_open=True, max_open=True)  # a probability or share strictly between 0 and 1
UNIT_FROM_0 = _Number(0, 1, max_open=True)  # [0, 1)
MAX_N_BOOT = 100_000  # bootstrap resamples: the intervals' Monte-Carlo error is long negligible there
N_BOOT = click.IntRange(2, MAX_N_BOOT)
PORT = click.IntRange(0, 65535)  # 0: any free port


class LibraryDefault(click.Option):
    """An option whose default is stated once, in the library: ``default`` is a function that
    reads it there, called when the command parses its options or shows its help (so the
    library is imported by that command only, and ``backretrieval --help`` stays instant)."""

    def get_default(self, ctx: click.Context, call: bool = True):
        return super().get_default(ctx, call=True)


def bad_option(option: str, message: str) -> NoReturn:
    """Refuse the value of ``option``: ``error: Invalid value for '--x': message``."""
    raise click.BadParameter(message, param_hint=f"'{option}'")


# ------------------------------------------------------------------------------ option parsers
def parse_list(spec: str | None, option: str, what: str = "value") -> list[str]:
    """A comma list without empty items and duplicates; at least one item."""
    out = list(dict.fromkeys(x.strip() for x in (spec or "").split(",") if x.strip()))
    if not out:
        bad_option(option, f"{spec!r} names no {what}; give a comma-separated list")
    return out


def parse_seeds(spec: str, option: str = "--seeds") -> list[int]:
    """``"5"`` -> seeds 0..4; ``"0,3,7"`` -> those seeds (each once, from 0 to ``MAX_SEED``; at
    most ``MAX_SEEDS`` of them, checked before any list is made)."""
    from ..analysis.evaluate.config import MAX_SEED, MAX_SEEDS, check_seeds

    text = spec.strip()
    if "," not in text:
        if not re.fullmatch(r"[+-]?\d{1,40}", text):
            bad_option(option, f"{spec!r}: give a count (5 -> seeds 0..4) or a comma list of seeds (0,3,7)")
        count = int(text)
        if count < 1:
            bad_option(option, f"{spec!r}: the number of seeds must be at least 1 (for one given seed write e.g. '{abs(count)},')")
        if count > MAX_SEEDS:
            bad_option(option, f"{spec!r}: at most {MAX_SEEDS:,} seeds in one grid (for one given seed write e.g. '{count},')"
                 if count <= MAX_SEED else f"{spec!r}: at most {MAX_SEEDS:,} seeds in one grid")
        return list(range(count))
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        bad_option(option, f"{spec!r} names no seed; give a count (5 -> seeds 0..4) or a comma list of seeds (0,3,7)")
    if len(items) > MAX_SEEDS:
        bad_option(option, f"{len(items):,} seeds given; at most {MAX_SEEDS:,} in one grid")
    for item in items:
        if not re.fullmatch(r"[+-]?\d{1,40}", item):
            bad_option(option, f"{item!r} is not an integer seed" if len(item) <= 40 else f"{item[:20]!r}...: not a seed from 0 to {MAX_SEED}")
    try:
        return check_seeds([int(item) for item in items])
    except BackretrievalError as e:
        bad_option(option, str(e))


def parse_numbers(spec: str, option: str, *, count: int | None = None, integer: bool = False,
                   low: float | None = None, high: float | None = None, high_open: bool = False) -> list[Any]:
    """A comma list of finite numbers (integers with ``integer``), ``count`` of them if given,
    each in ``[low, high]`` (``[low, high)`` with ``high_open``)."""
    out: list[Any] = []
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        try:
            v = int(item) if integer else float(item)
        except ValueError:
            bad_option(option, f"{item!r} is not {'an integer' if integer else 'a number'} (in {spec!r})")
        if not math.isfinite(v):
            bad_option(option, f"{item!r} is not a finite number")
        if (low is not None and v < low) or (high is not None and (v >= high if high_open else v > high)):
            rng = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'}{')' if high_open else ']'}"
            bad_option(option, f"{item} is not in {rng}")
        out.append(v)
    if not out:
        bad_option(option, f"{spec!r} names no number")
    if count is not None and len(out) != count:
        bad_option(option, f"expected {count} comma-separated values, got {len(out)} in {spec!r}")
    return out


def parse_options(items: tuple[str, ...], dataset: str | None = None, option: str = "--dataset-option") -> dict[str, Any]:
    """``KEY=VALUE`` loader options, checked against the loader of ``dataset`` (unknown keys and
    values of the wrong type are refused, naming the loader's options) and converted to its types.
    Without ``dataset`` only the syntax is checked and digit strings become integers (the loader
    then refuses unknown keys when the data are loaded)."""
    from ..data import parse_dataset_options

    raw: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            bad_option(option, f"{item!r}: expected KEY=VALUE")
        if key in raw:
            bad_option(option, f"{key!r} is given twice")
        raw[key] = value
    if dataset is None:
        return {k: int(v) if v.isdigit() else v for k, v in raw.items()}
    try:
        return parse_dataset_options(dataset, raw)
    except BackretrievalError as e:
        if str(e).startswith("unknown dataset"):
            raise
        bad_option(option, str(e))


# ------------------------------------------------------------------------------ checks before work
def command_line() -> str:
    """The command being run, as typed (``backretrieval ARGS``, shell-quoted); for provenance."""
    import shlex

    argv = click.get_current_context().meta.get("backretrieval.argv")
    return shlex.join(["backretrieval", *(argv if argv is not None else sys.argv[1:])])


def check_outputs(*locations: tuple[str | Path, str], files: Sequence[tuple[str | Path, str]] = (), cache: bool = True) -> None:
    """Before any work: every ``(folder, option)`` and ``(file, option)`` can be written, and so can
    the cache folder (``cache``). Nothing is created."""
    from ..core.io import CACHE_ENV, cache_root, check_writable_dir, check_writable_file

    for path, option in locations:
        check_writable_dir(path, option)
    for path, option in files:
        check_writable_file(path, option)
    if cache:
        what = f"cache folder (${CACHE_ENV})" if os.environ.get(CACHE_ENV) else "cache folder"
        check_writable_dir(cache_root(), what)


def _executor_help() -> str:
    """``--executor``'s help, from the executor table."""
    from ..analysis.executors import EXECUTORS

    return "Where the per-sample tasks run: " + "; ".join(f"{e.usage} ({e.description})" for e in EXECUTORS) + "."


def _check_executor(spec: str) -> None:
    """The executor spec is valid and can run here (its own ``check``: Ray installed, ...);
    its warnings (more workers than cores, ...) are shown."""
    from ..analysis.executors import get_executor

    try:
        ex = get_executor(spec)
        warnings = ex.check()
    except BackretrievalError as e:
        bad_option("--executor", str(e))
    for message in warnings:
        warn(f"--executor {spec}: {message}")


def check_image_models(specs: Sequence[str], option: str) -> None:
    """Every image model spec names a known, installed model ('precomputed' reads the data's features)."""
    from ..encoders.registry import get_image_encoder

    for spec in specs:
        if spec != "precomputed":
            try:
                get_image_encoder(spec)
            except BackretrievalError as e:
                bad_option(option, str(e))


def check_text_models(specs: Sequence[str], option: str) -> None:
    """Every text model spec names a known model (its files are read when it is built)."""
    from ..encoders.registry import get_text_encoder

    for spec in specs:
        try:
            get_text_encoder(spec)
        except BackretrievalError as e:
            bad_option(option, str(e))


# ------------------------------------------------------------------------------ devices
DEVICES = ("auto", "cpu", "cuda")  # as encoders.devices.DEVICES (not imported here: --help stays instant)


def _use_device(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Set ``$BACKRETRIEVAL_DEVICE`` for the command's run (restored when it ends); ``cuda``
    without a GPU is refused here, before any work."""
    if value is None:
        return
    from ..encoders.devices import use_device

    try:
        ctx.with_resource(use_device(value, "--device"))
    except BackretrievalError as e:
        raise click.BadParameter(str(e).removeprefix("--device: "), ctx=ctx, param=param) from None


def device_option(fn):
    """``--device auto|cpu|cuda`` (shared by every command that encodes with torch or ONNX Runtime):
    where those encoders run during the command, through ``$BACKRETRIEVAL_DEVICE``. The command
    function gets no parameter; the default leaves ``$BACKRETRIEVAL_DEVICE`` (else ``auto``)."""
    return click.option(
        "--device", type=click.Choice(DEVICES, case_sensitive=False), default=None, expose_value=False,
        callback=_use_device,
        help="Where the torch and ONNX Runtime encoders run: auto (a CUDA GPU where one is usable), cpu or cuda "
             "(an error without a GPU). Default: $BACKRETRIEVAL_DEVICE, else auto. Encoders whose output depends "
             "on it record it in their cache key.",
    )(fn)


# ------------------------------------------------------------------------------ the evaluation grid
def grid_options(fn=None, *, several_datasets: bool = False):
    """Options shared by evaluate, compare and meta: the grid of models x pairs x seeds
    (``several_datasets``: ``--dataset`` may be given several times, or as ``@LIST``)."""
    if fn is None:
        return lambda f: grid_options(f, several_datasets=several_datasets)
    dataset = (
        click.option("--dataset", "dataset", required=True, multiple=True,
                     help="Registered dataset or data file; give it several times (or @LIST: a file with one dataset per "
                          "line, optionally followed by its KEY=VALUE loader options) to merge pairs that live in "
                          "separate files.")
        if several_datasets
        else click.option("--dataset", required=True, multiple=True, callback=_one_dataset,
                          help="Registered dataset (see `backretrieval datasets`) or a .jsonl/.csv/.parquet file; one "
                               "(pairs in separate files: stack them into one file, docs/datasets.md).")
    )
    opts = [
        dataset,
        click.option("--pairs", required=True, help="Directed language pairs, e.g. en-de,de-en,en-ja (use en:zh-Hant for codes with hyphens)."),
        click.option("--models", required=True, help="Comma-separated text models (see `backretrieval models`); variants as BASE@trunc=64, BASE@noise=0.5, ...; "
                     "LABEL=SPEC names a model on every table and figure (e5=hf:intfloat/multilingual-e5-small), else a short label is derived "
                     "(the hub name, the options that change the vectors)."),
        click.option("--image-model", default="efficientnet-lite0", show_default=True, help="Image model g for BkR/CORR; 'precomputed' reads the dataset's feature file."),
        click.option("--n", "n", type=POSITIVE, default=1500, show_default=True, help="Sample size N per side."),
        click.option("--seeds", default="5", show_default=True, help="Number of seeds (0..S-1) or a comma list of seeds >= 0."),
        click.option("--k", "k", type=POSITIVE, default=10, show_default=True, help="K of BkR@K (and hubness); at most N."),
        click.option("--sim", type=click.Choice(["cosine", "csls"]), default="cosine", show_default=True),
        click.option("--csls-k", type=POSITIVE, default=10, show_default=True, help="Neighbours of the CSLS penalty (with --sim csls); at most N."),
        click.option("--dataset-option", "dataset_option", multiple=True, help="Loader option KEY=VALUE (e.g. text=name, source_dir=DIR)."),
        click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output directory."),
        click.option("--executor", default="local", show_default=True, help=_executor_help()),
        click.option("--quiet", is_flag=True, help="No progress bars."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _one_dataset(ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]) -> str:
    """The one ``--dataset`` of a command that evaluates one dataset (``evaluate``, ``compare``):
    a second one, or a dataset list, is refused instead of keeping the last."""
    command = ctx.info_name or "this command"
    if len(specs) > 1:
        bad_option("--dataset", f"{command} takes one dataset, got {len(specs)} ({', '.join(specs)}): run it once per "
                                "dataset, or stack the files into one (their rows, with a lang column: docs/datasets.md); "
                                "only meta merges several datasets")
    spec = specs[0]
    if spec.startswith("@") and not Path(spec).exists():
        bad_option("--dataset", f"{spec!r}: {command} takes one dataset, not a list of them (@LIST: meta only)")
    return spec


def dataset_specs(specs: Sequence[str], dataset_option: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """``--dataset`` values (several, or ``@LIST`` files) with their loader options, each checked:
    ``--dataset-option`` applies to every dataset; options on a list file's line apply to that
    dataset and replace those. Relative paths in a list file are relative to the list file.

    Raises:
        click.BadParameter: an unreadable list file, a line without a dataset, a dataset given twice,
            a bad option (named with the file and line).
    """
    import shlex

    entries: list[tuple[str, tuple[str, ...], str]] = []  # (dataset, its own options, where it was given)
    for spec in specs:
        if not spec.startswith("@"):
            entries.append((spec, (), "--dataset"))
            continue
        listing = Path(spec[1:]).expanduser()
        try:
            lines = listing.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            bad_option("--dataset", f"cannot read the dataset list {listing}: {getattr(e, 'strerror', None) or e}")
        for no, line in enumerate(lines, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                name, *opts = shlex.split(line)
            except ValueError as e:
                bad_option("--dataset", f"{listing}: line {no}: {e}")
            if "=" in name:
                bad_option("--dataset", f"{listing}: line {no}: starts with an option ({name!r}), not a dataset")
            path = listing.parent / name
            if not Path(name).is_absolute() and path.exists():
                name = str(path)
            entries.append((name, tuple(opts), f"{listing}: line {no}"))
    if not entries:
        bad_option("--dataset", "names no dataset")
    parse_options(dataset_option)  # the syntax, once
    for _, own, where in entries:
        parse_options(own, None, f"--dataset ({where})")
    out: list[tuple[str, dict[str, Any]]] = []
    for name, own, where in entries:
        if any(name == n for n, _ in out):
            bad_option("--dataset", f"dataset {name} is given twice")
        base = dict(item.partition("=")[::2] for item in dataset_option)
        base.update(dict(item.partition("=")[::2] for item in own))
        items = tuple(f"{k}={v}" for k, v in base.items())
        option = "--dataset-option" if not own else f"--dataset ({where})"
        out.append((name, parse_options(items, name, option)))
    return out


def grid_config(dataset, pairs, models, image_model, n, seeds, k, sim, csls_k, dataset_option):
    """The :class:`EvalConfig` of the grid options, every value checked (nothing is computed)."""
    from ..analysis import EvalConfig, parse_pairs

    try:
        pair_list = parse_pairs(pairs)
    except BackretrievalError as e:
        bad_option("--pairs", str(e))
    model_list = parse_list(models, "--models", "model")
    seed_list = parse_seeds(seeds)
    if k > n:
        bad_option("--k", f"K={k} is larger than N={n}")
    if sim == "csls" and csls_k > n:
        bad_option("--csls-k", f"CSLS k={csls_k} is larger than N={n}")
    return EvalConfig(
        dataset=dataset,
        pairs=pair_list,
        models=model_list,
        image_model=image_model,
        n=n,
        seeds=seed_list,
        k=k,
        sim=sim,
        csls_k=csls_k,
        dataset_options=parse_options(dataset_option, dataset) if isinstance(dataset, str) else {},
    )


def check_grid(cfg, out: str, executor: str, extra_image_models: Sequence[str] = (),
                datasets: Sequence[tuple[str, dict[str, Any]]] = ()) -> None:
    """Before a grid runs: the executor, the image models, the output and cache folders, and
    that no output file is one of the inputs (the dataset files, the paths among their options
    and inside the model specs)."""
    _check_executor(executor)
    check_image_models([cfg.image_model], "--image-model")
    check_image_models(extra_image_models, "--weak-image-models")
    from ..analysis.evaluate.config import check_grid_size

    check_grid_size(len(cfg.models), len(cfg.pairs), len(cfg.seeds), len(dict.fromkeys([*cfg.image_models, *extra_image_models])))
    check_outputs((out, "--out"))
    check_output_paths(out)
    inputs: list[tuple[Any, str]] = []
    for name, options in [(cfg.dataset, cfg.dataset_options), *datasets]:
        inputs.append((name, "--dataset"))
        inputs += [(v, f"--dataset-option {k}") for k, v in options.items()]
    models = [*model_paths(cfg.models), *model_paths([cfg.image_model], "--image-model"),
              *model_paths(extra_image_models, "--weak-image-models")]
    check_not_inputs(out, inputs, folders=models)


@main.group()
def train() -> None:
    """Train cross-lingual representations; trained models are text models (e.g. cr5:DIR)."""
