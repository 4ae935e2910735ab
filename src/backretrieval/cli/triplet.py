"""Triplet / TripletXL commands: ``train triplet``, ``train tripletxl`` and the ``case-study``
group (``prepare`` a held-out ddtp split, ``report`` the Fig. 3 analog).

The case study (Backretrieval paper, Sec. 3.2, Table 2 / Fig. 3): a base model vs Triplet vs
TripletXL, per directed language pair, with BkR on emoji-cldr (images as the pivot, no ground
truth used) and ground-truth XLR on emoji-cldr and on held-out ddtp documents to check that BkR
told the truth. The commands only parse and check their options and call the layers: training
in ``train/triplet/``, the held-out split in ``data/splits.py``, the case study's run writer in
``report/runs/case_study.py`` (evaluation and statistics in ``analysis/trained/case_study.py``,
tables and figures in ``report/case_study.py``). Heavy libraries are imported inside the commands.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

from .options import (
    NON_NEGATIVE_NUMBER, OPEN_UNIT, POSITIVE, POSITIVE_NUMBER, SEED, UNIT_FROM_0, bad_option, check_image_models, check_outputs,
    N_BOOT, check_text_models, parse_list, parse_numbers, parse_options, parse_seeds, warn, main, train,
)
from .output_paths import check_inputs_kept


# ----------------------------------------------------------------------------- training
def _langs(spec: str | None, option: str = "--langs") -> list[str] | None:
    return None if spec is None else parse_list(spec, option, "language")


def _train_options(fn):
    opts = [
        click.option("--dataset", required=True, help="ddtp, emoji-cldr, or a .jsonl/.csv/.parquet file with title, body and lang columns."),
        click.option("--langs", default=None, help="Comma-separated languages to train on (default: all of the dataset)."),
        click.option("--base", default="use-m", show_default=True, help="Frozen base text model (any text model spec)."),
        click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Model directory to write."),
        click.option("--dataset-option", "dataset_option", multiple=True, help="Loader option KEY=VALUE (e.g. source_dir=DIR)."),
        click.option("--max-per-lang", type=POSITIVE, default=None, help="Keep a seeded random subset of this many items per language."),
        click.option("--epochs", type=POSITIVE, default=40, show_default=True),
        click.option("--lr", type=POSITIVE_NUMBER, default=0.01, show_default=True),
        click.option("--alpha", type=NON_NEGATIVE_NUMBER, default=0.1, show_default=True, help="Margin of Eq. 1."),
        click.option("--batch-size", type=click.IntRange(min=2), default=128, show_default=True, help="Items per batch, at least 2 (the negative is another item of the batch)."),
        click.option("--layers", default="300,300", show_default=True, help="Widths of the dense ReLU layers of the siamese tower."),
        click.option("--tower", type=click.Choice(["mlp", "residual"]), default="mlp", show_default=True,
                     help="mlp: the paper's tower; residual: x + f(x), f's last layer zero-initialised, so training starts at the base's own vectors."),
        click.option("--negatives", type=click.Choice(["batch", "language"]), default="batch", show_default=True,
                     help="Eq. 1's negative title: any other item of the mini-batch (paper) or one of the same language."),
        click.option("--val-frac", type=UNIT_FROM_0, default=0.1, show_default=True, help="Random validation share, in [0, 1)."),
        click.option("--patience", type=POSITIVE, default=None, help="Early stopping: stop after this many epochs without a better validation loss."),
        click.option("--seed", type=SEED, default=0, show_default=True),
        click.option("--threads", type=POSITIVE, default=None, help="torch CPU threads (default: all cores this process may use)."),
        click.option("--resume/--no-resume", default=True, show_default=True, help="Continue from OUT/checkpoint.pt when it matches."),
        click.option("--quiet", is_flag=True, help="No progress bars."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _run_train(method: str, *, dataset, langs, base, out, dataset_option, max_per_lang, epochs, lr, alpha, batch_size,
               layers, tower, negatives, val_frac, patience, seed, threads, resume, quiet, beta=0.01, k=5, refresh_every=1) -> None:
    from ..data import load_dataset
    from ..report.case_study import plot_curves
    from ..train.base import HyperParameterError
    from ..train.triplet import CHECKPOINT_FILE, TitleBodyData, Triplet, check_layers

    options = parse_options(dataset_option, dataset)
    wanted = _langs(langs)
    try:
        widths = check_layers(parse_numbers(layers, "--layers", integer=True, low=1))
    except HyperParameterError as e:
        bad_option("--layers", str(e))
    est = Triplet(
        method, base=base, layers=widths, tower=tower, lr=lr, alpha=alpha, batch_size=batch_size, epochs=epochs, beta=beta, k=k,
        refresh_every=refresh_every, negatives=negatives, val_frac=val_frac, patience=patience, seed=seed, threads=threads, progress=not quiet,
    )
    est.check_params()  # every setting, before any data is read
    check_text_models([base], "--base")
    check_outputs((out, "--out"))
    check_inputs_kept(out, dataset, options, [([base], "--base")])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not resume and (out / CHECKPOINT_FILE).exists():
        (out / CHECKPOINT_FILE).unlink()
    ds = load_dataset(dataset, langs=wanted, **options)
    data = TitleBodyData.from_dataset(ds, wanted, max_per_lang=max_per_lang, seed=seed)
    click.echo(f"{method}: {len(data)} monolingual title/body pairs ({', '.join(f'{l} {n}' for l, n in data.counts().items())}); base {base}", err=True)
    t0 = time.perf_counter()
    est.fit(data, checkpoint_dir=out)
    seconds = time.perf_counter() - t0
    meta = {"dataset": dataset, "dataset_options": options, "max_per_lang": max_per_lang, "fit_seconds": round(seconds, 1)}
    est.save(out, info=meta)
    plot_curves(est.history_, out / "curves.png", f"{method} on {Path(dataset).name} ({len(data)} items), base {base}", est.best_epoch_)
    last = est.history_[-1]
    click.echo(
        f"trained {len(est.history_)} epochs in {seconds:.0f}s; kept epoch {est.best_epoch_}; last train loss "
        f"{last['train_loss']:.4f}" + (f", validation loss {last['val_loss']:.4f}" if "val_loss" in last else "")
    )
    click.echo(f"wrote {out}/model.json, weights.npz, history.csv, curves.png; use it as --models {method}:{out}")


@train.command("triplet", short_help="Train Triplet (paper Eq. 1) on monolingual title/body pairs.")
@_train_options
def train_triplet(**kw) -> None:
    """Triplet (paper Eq. 1) on monolingual title/body pairs over a frozen base model.

    Example: backretrieval train triplet --dataset ddtp --langs en,de,fr,it,ja,ru --base use-m --out MODEL_DIR
    """
    _run_train("triplet", **kw)


@train.command("tripletxl", short_help="Train TripletXL (paper Eq. 1 + beta * Eq. 2) on monolingual title/body pairs.")
@_train_options
@click.option("--beta", type=NON_NEGATIVE_NUMBER, default=0.01, show_default=True, help="Weight of L_XL (Eq. 2).")
@click.option("--k", "k", type=POSITIVE, default=5, show_default=True, help="Neighbours per language in L_XL.")
@click.option("--refresh-every", type=POSITIVE, default=1, show_default=True, help="Recompute the neighbour sets every this many epochs.")
def train_tripletxl(**kw) -> None:
    """TripletXL (paper Eq. 1 + beta * Eq. 2) on monolingual title/body pairs over a frozen base model.

    Example: backretrieval train tripletxl --dataset ddtp --langs en,de,fr,it,ja,ru --base use-m --out MODEL_DIR
    """
    _run_train("tripletxl", **kw)


# ----------------------------------------------------------------------------- case study
@main.group("case-study", short_help="Base encoder vs Triplet vs TripletXL per language pair (paper Table 2 / Fig. 3).")
def case_study() -> None:
    """The case study of the paper's Sec. 3.2 (Table 2 / Fig. 3) with Triplet and TripletXL."""


@case_study.command("prepare", short_help="Split linked title/body data into monolingual training data and a held-out test set.")
@click.option("--dataset", default="ddtp", show_default=True, help="Dataset with title/body columns and cross-lingual links.")
@click.option("--langs", required=True, help="Comma-separated languages, e.g. en,de,fr,it,ja,ru,es.")
@click.option("--holdout", type=OPEN_UNIT, default=0.25, show_default=True, help="Share of concepts held out for the ground-truth check, in (0, 1).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--dataset-option", "dataset_option", multiple=True, help="Loader option KEY=VALUE.")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Work directory.")
def prepare(dataset, langs, holdout, seed, dataset_option, out) -> None:
    """Split a linked title/body dataset into monolingual training data and a held-out test set.

    Writes OUT/<dataset>_train.jsonl (id, lang, text, title, body: no concept column, no image,
    ids are positions) and OUT/<dataset>_heldout.jsonl (with the concept column for XLR and, where
    the dataset has images, an absolute image path for BkR), split by concept
    (backretrieval.data.splits).
    """
    from ..core import atomic_write_text
    from ..data import load_dataset
    from ..data.splits import title_body_split

    wanted = _langs(langs)
    options = parse_options(dataset_option, dataset)
    check_outputs((out, "--out"))
    check_inputs_kept(out, dataset, options)
    train_rows, test_rows, info = title_body_split(load_dataset(dataset, langs=wanted, **options), wanted, holdout, seed)
    out, name = Path(out), Path(dataset).stem
    dump = lambda rows: "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)  # noqa: E731
    atomic_write_text(out / f"{name}_train.jsonl", dump(train_rows))
    atomic_write_text(out / f"{name}_heldout.jsonl", dump(test_rows))
    atomic_write_text(out / "prepare.json", json.dumps({"dataset": dataset, **info}, indent=1))
    for lang, cnt in info["counts"].items():
        click.echo(f"{lang}: {cnt['train']} training items, {cnt['heldout']} held out")
    shared = info["heldout_shared_concepts"]
    click.echo(f"smallest held-out pair: {min(shared, key=shared.get)} with {min(shared.values())} shared concepts (the largest XLR n for all pairs)")
    click.echo(f"wrote {out / f'{name}_train.jsonl'} and {out / f'{name}_heldout.jsonl'}")


@case_study.command("report", short_help="Evaluate base vs trained models on every directed pair; tables and boxplot.")
@click.option("--langs", required=True, help="Comma-separated languages; every directed pair is evaluated.")
@click.option("--models", required=True, help="Base encoder first, then trained models, e.g. use-m,triplet:DIR,tripletxl:DIR.")
@click.option("--labels", default=None, help="Comma-separated short names of the models (default: derived from the specs); "
              "models with the same label are training seeds of one model and are averaged query by query.")
@click.option("--bkr-dataset", default="emoji-cldr", show_default=True, help="Data with images for BkR (and XLR where it has links).")
@click.option("--xlr-dataset", default=None, help="Held-out linked data for the ground-truth check, e.g. WORK/ddtp_heldout.jsonl.")
@click.option("--bkr-n", type=POSITIVE, default=1500, show_default=True)
@click.option("--xlr-n", type=POSITIVE, default=250, show_default=True)
@click.option("--seeds", default="3", show_default=True, help="Number of seeds (0..S-1) or a comma list of seeds >= 0.")
@click.option("--k", "k", type=POSITIVE, default=10, show_default=True, help="K of BkR@K; at most --bkr-n.")
@click.option("--truth-k", type=POSITIVE, default=1, show_default=True, help="K of the ground-truth XLR@K.")
@click.option("--image-model", default="efficientnet-lite0", show_default=True)
@click.option("--n-boot", type=N_BOOT, default=1000, show_default=True, help="Bootstrap resamples, 2 to 100,000.")
@click.option("--figure", type=click.Path(dir_okay=False), default=None, help="Where to write the boxplot PNG (default OUT/case_study.png).")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True)
@click.option("--quiet", is_flag=True)
def report(langs, models, labels, bkr_dataset, xlr_dataset, bkr_n, xlr_n, seeds, k, truth_k, image_model, n_boot, figure, out, quiet) -> None:
    """Fig. 3 / Table 2 analog: per directed pair, BkR on the image data and ground-truth XLR
    (on the image data where it has links, and on held-out linked data) for a base model and
    trained Triplet / TripletXL models; averages and lifts with CIs, spread across pairs, the
    worst pairs, per-pair ordering agreement of BkR and XLR, boxplot.

    Writes OUT/case_study.md, OUT/case_study.json, the figure, and the evaluation records under
    OUT/bkr and OUT/xlr (resumable).
    """
    from ..analysis.trained.case_study import spec_label
    from ..data import dataset_option_names
    from ..report.runs import case_study

    wanted = _langs(langs)
    if len(wanted) < 2:
        bad_option("--langs", f"{langs!r}: give at least two languages (every directed pair is evaluated)")
    specs = parse_list(models, "--models", "model")
    if len(specs) < 2 or len(set(specs)) != len(specs):
        bad_option("--models", "give the base model and at least one trained model, each once")
    names = [x.strip() for x in labels.split(",")] if labels else [spec_label(m) for m in specs]
    if len(names) != len(specs) or not all(names) or names.count(names[0]) != 1 or len(set(names)) < 2:
        bad_option("--labels", f"one non-empty label per model ({len(specs)} models), the base's label used once, got {labels!r}")
    seed_list = parse_seeds(seeds)
    if k > bkr_n:
        bad_option("--k", f"K={k} is larger than N={bkr_n} (--bkr-n)")
    if truth_k > bkr_n or (xlr_dataset and truth_k > xlr_n):
        bad_option("--truth-k", f"K={truth_k} is larger than N={min(bkr_n, xlr_n) if xlr_dataset else bkr_n}")
    for ds_spec in (bkr_dataset, xlr_dataset):
        if ds_spec:
            dataset_option_names(ds_spec)  # an unknown dataset is refused now
    check_image_models([image_model], "--image-model")
    check_text_models(specs, "--models")
    check_outputs((out, "--out"), files=[(figure, "--figure")] if figure else [])
    case_study(wanted, specs, out, labels=names, bkr_dataset=bkr_dataset, xlr_dataset=xlr_dataset, bkr_n=bkr_n, xlr_n=xlr_n,
               seeds=seed_list, k=k, truth_k=truth_k, image_model=image_model, n_boot=n_boot, figure=figure,
               progress=not quiet, log=warn)
    out = Path(out)
    fig_path = Path(figure) if figure else out / "case_study.png"
    click.echo((out / "case_study.md").read_text(encoding="utf-8"))
    click.echo(f"wrote {out / 'case_study.md'}, {out / 'case_study.json'}, {fig_path}")
