"""Zero-shot cross-lingual image retrieval: ``train m3l``, ``train patr`` and ``image-retrieval``."""
from __future__ import annotations

from pathlib import Path

import click

from .options import (
    NON_NEGATIVE, OPEN_UNIT, POSITIVE, POSITIVE_NUMBER, SEED, UNIT_FROM_0, bad_option, check_image_models, check_outputs,
    check_text_models, parse_list, parse_numbers, parse_options, warn, main, train,
)
from .options import device_option
from .output_paths import check_inputs_kept

DEFAULT_LANGS = "en,de,fr,it,es,ru,ja,zh,pl,tr,ko"  # the XTD10 languages
DEFAULT_PLOT_LANGS = "en,de,ru,ja"


def _train_options(fn):
    opts = [
        click.option("--dataset", required=True, help="Dataset with images: emoji-cldr or a .jsonl/.csv/.parquet file."),
        click.option("--dataset-option", "dataset_option", multiple=True, help="Loader option KEY=VALUE (e.g. text=name, image_features=F.npy)."),
        click.option("--train-langs", default="en", show_default=True, help="Languages whose captions are trained on (en: zero-shot)."),
        click.option("--val-langs", default=None, help="Languages of the validation captions [default: the training languages]."),
        click.option("--base", default="use-m", show_default=True, help="Frozen multilingual text model (use-m, e5-small, any text model spec)."),
        click.option("--image-model", default="efficientnet-lite0", show_default=True, help="Frozen image model; 'precomputed' reads the dataset's feature file."),
        click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Model directory to write."),
        click.option("--epochs", type=NON_NEGATIVE, default=50, show_default=True),
        click.option("--batch-size", type=click.IntRange(min=2), default=128, show_default=True, help="Captions per batch, at least 2 (negatives come from the batch)."),
        click.option("--lr", type=POSITIVE_NUMBER, default=1e-3, show_default=True),
        click.option("--beta1", type=UNIT_FROM_0, default=0.99, show_default=True),
        click.option("--widths", default="1024,2048", show_default=True, help="Hidden widths of blocks 1-2 (block 3 = image feature size)."),
        click.option("--dropout", default="0.2,0.1,0.0", show_default=True, help="Dropout of the three blocks, each in [0, 1)."),
        click.option("--patience", type=NON_NEGATIVE, default=0, show_default=True, help="Stop after this many epochs without a better validation R@10 (0: run all epochs)."),
        click.option("--select", type=click.Choice(["best", "last"]), default="best", show_default=True, help="Keep the epoch with the best validation R@10, or the last one."),
        click.option("--init", type=click.Choice(["match", "mean", "default"]), default="match", show_default=True, help="Last block's initialisation: match = bias at the mean image feature and output spread scaled to the images' (see docs/m3l.md); mean = bias only; default = PyTorch's."),
        click.option("--standardize/--no-standardize", default=True, show_default=True, help="Centre the base embeddings and scale them to mean squared norm 1 (folded into the saved first layer)."),
        click.option("--threads", default=None, type=POSITIVE, help="torch threads for training [default: torch's choice]."),
        click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of initialisation, dropout and batch order."),
        click.option("--split-seed", type=SEED, default=0, show_default=True, help="Seed of the image split (keep it fixed to compare models)."),
        click.option("--test-frac", type=UNIT_FROM_0, default=0.25, show_default=True, help="Share of images held out for testing (never trained on)."),
        click.option("--val-frac", type=UNIT_FROM_0, default=0.1, show_default=True, help="Share of images held out for validation."),
        click.option("--quiet", is_flag=True, help="No progress bars or epoch lines."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _train(loss: str, loss_kw: dict, dataset, dataset_option, train_langs, val_langs, base, image_model, out, epochs,
           batch_size, lr, beta1, widths, dropout, patience, select, init, standardize, threads, seed, split_seed, test_frac, val_frac,
           quiet) -> None:
    from ..data import load_dataset
    from ..train.base import HyperParameterError, check_widths
    from ..train.m3l import M3L

    tl = parse_list(train_langs, "--train-langs", "language")
    vl = parse_list(val_langs, "--val-langs", "language") if val_langs is not None else None
    options = parse_options(dataset_option, dataset)
    hidden = parse_numbers(widths, "--widths", count=2, integer=True, low=1)
    try:
        check_widths(hidden)
    except HyperParameterError as e:
        bad_option("--widths", str(e))
    model = M3L(
        loss,
        base=base,
        image_model=image_model,
        train_langs=tl,
        val_langs=vl,
        widths=hidden,
        dropout=parse_numbers(dropout, "--dropout", count=3, low=0, high=1, high_open=True),
        lr=lr,
        beta1=beta1,
        batch_size=batch_size,
        epochs=epochs,
        patience=patience or None,
        select=select,
        init=init,
        standardize=standardize,
        threads=threads,
        seed=seed,
        split_seed=split_seed,
        test_frac=test_frac,
        val_frac=val_frac,
        progress=not quiet,
        **loss_kw,
    )
    model.check_params()  # every setting, before any data is read
    check_text_models([base], "--base")
    check_image_models([image_model], "--image-model")
    check_outputs((out, "--out"))
    check_inputs_kept(out, dataset, options, [([base], "--base"), ([image_model], "--image-model")])
    ds = load_dataset(dataset, langs=list(dict.fromkeys([*tl, *(vl or [])])), **options)
    model.fit(ds, source={"dataset": dataset, "options": options}, log=None if quiet else (lambda s: click.echo(s, err=True)))
    path = model.save(out)
    info = model.info_
    best = next(h for h in model.history_ if h["epoch"] == model.best_epoch_)
    first = model.history_[0]
    val = (
        f"validation R@10 {best['val_t2i@10']:.3f} (untrained {first['val_t2i@10']:.3f}) at epoch {model.best_epoch_}"
        if "val_t2i@10" in best else f"epoch {model.best_epoch_}"
    )
    eta = f", eta {model.eta_:.4g}" if model.eta_ is not None else ""
    click.echo(
        f"{loss.upper()} on {base} -> {image_model} ({info['image_dim']}-d), trained on {','.join(tl)}: "
        f"{info['n_train_captions']} captions of {info['split']['images']['train']} images{eta}; {val}\nwrote {path}"
    )


@train.command("m3l")
@_train_options
@device_option
@click.option("--rho", type=POSITIVE_NUMBER, default=4.0, show_default=True, help="Exponent of the distance ratios.")
@click.option("--alpha1", type=POSITIVE_NUMBER, default=0.5, show_default=True, help="Weight of the negative-image term.")
@click.option("--alpha2", type=POSITIVE_NUMBER, default=1.0, show_default=True, help="Weight of the negative-text term.")
def train_m3l(rho, alpha1, alpha2, **kw) -> None:
    """Train a text-to-image mapping with the Multi-modal Metric Loss (M3L).

    Frozen multilingual text embeddings are mapped into the frozen image model's feature space;
    with --train-langs en the model is trained on English captions only and used zero-shot in
    other languages (backretrieval image-retrieval --model DIR). The saved DIR is also the text
    model m3l:DIR.
    """
    _train("m3l", {"rho": rho, "alpha1": alpha1, "alpha2": alpha2}, **kw)


@train.command("patr")
@_train_options
@device_option
@click.option("--eta", default=None, type=POSITIVE_NUMBER, help="PATR margin eta (squared distance) [default: from --eta-quantile].")
@click.option("--eta-quantile", type=OPEN_UNIT, default=0.5, show_default=True, help="eta = this quantile of squared distances between distinct training images.")
def train_patr(eta, eta_quantile, **kw) -> None:
    """Train a text-to-image mapping with the Positive-Aware Triplet Ranking loss (PATR).

    Same model and data as `train m3l`; the loss has no negative-text term. The saved DIR is
    also the text model patr:DIR.
    """
    _train("patr", {"eta": eta, "eta_quantile": eta_quantile}, **kw)


# ---------------------------------------------------------------------------- image retrieval
@main.command("image-retrieval")
@device_option
@click.option("--model", "models", multiple=True, required=True, type=click.Path(file_okay=False, exists=True), help="Trained model directory (repeat for several; seeds of one configuration are averaged).")
@click.option("--dataset", required=True, help="Dataset with images: emoji-cldr or a .jsonl/.csv/.parquet file.")
@click.option("--dataset-option", "dataset_option", multiple=True, help="Loader option KEY=VALUE.")
@click.option("--langs", default=DEFAULT_LANGS, show_default=True, help="Query languages.")
@click.option("--split", type=click.Choice(["test", "val", "all"]), default="test", show_default=True, help="Images to retrieve from (the models' own seeded split; images a model trained on are always left out).")
@click.option("--ks", default="1,5,10", show_default=True, help="Recall cut-offs.")
@click.option("--sim", type=click.Choice(["euclidean", "cosine"]), default="euclidean", show_default=True, help="Ranking of images (euclidean: the training metric).")
@click.option("--plot-langs", default=None, help=f"Languages of the t-SNE projection plot, a subset of --langs (empty: no plot) [default: those of {DEFAULT_PLOT_LANGS} in --langs].")
@click.option("--plot-images", type=click.IntRange(min=3), default=40, show_default=True, help="Images in the projection plot (at least 3).")
@click.option("--n-perm", type=POSITIVE, default=10000, show_default=True, help="Permutations of the paired test best vs runner-up.")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output directory.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def image_retrieval(models, dataset, dataset_option, langs, split, ks, sim, plot_langs, plot_images, n_perm, out, quiet) -> None:
    """Text->image Recall@K per language of trained M3L/PATR models (XTD10 Table 2/3 layout).

    The gallery is the held-out test images (never trained on); the queries are their captions
    in each language. Writes OUT/results.json, OUT/table.md, OUT/ranks.npz (per model i and
    language L: ``mi/L/ranks`` and ``mi/L/ids``, the pessimistic rank of each query's image, in
    the order of results.json's models) and OUT/projection.png (a t-SNE of captions in several
    languages over the image features, one panel per configuration).
    """
    from ..analysis.trained.image_retrieval import image_retrieval as run_image_retrieval
    from ..core import BackretrievalError
    from ..data import load_dataset
    from ..encoders.trained.m3l import load_model
    from ..report.image_retrieval import write_image_retrieval

    lang_list = parse_list(langs, "--langs", "language")
    if plot_langs is None:  # the default never clashes with --langs: plot the languages both have
        plot_list = [x for x in DEFAULT_PLOT_LANGS.split(",") if x in lang_list]
        left_out = [x for x in DEFAULT_PLOT_LANGS.split(",") if x not in lang_list]
        plot_note = "" if not left_out else (
            f"projection plot: {', '.join(plot_list) or 'none'} of the default plot languages {DEFAULT_PLOT_LANGS} "
            f"({', '.join(left_out)} not in --langs)" + ("" if plot_list else "; no plot (choose some with --plot-langs)"))
    else:
        plot_note = ""
        plot_list = parse_list(plot_langs, "--plot-langs", "language") if plot_langs.strip() else []
        missing = [x for x in plot_list if x not in lang_list]
        if missing:
            bad_option("--plot-langs", f"plot language {missing[0]!r} is not in --langs ({','.join(lang_list)})")
    k_list = parse_numbers(ks, "--ks", integer=True, low=1)
    options = parse_options(dataset_option, dataset)
    for m in models:
        try:
            load_model(m)
        except BackretrievalError as e:
            bad_option("--model", str(e))
    check_outputs((out, "--out"))
    check_inputs_kept(out, dataset, options, folders=[(m, "--model") for m in models])
    if plot_note:
        warn(plot_note)
    ds = load_dataset(dataset, langs=lang_list, **options)
    run = run_image_retrieval(models, ds, dataset, lang_list, split=split, ks=k_list, sim=sim, n_perm=n_perm,
                              progress=not quiet, log=lambda s: click.echo(s, err=True), warn=warn)
    md, payload = write_image_retrieval(run, out, dataset_options=options, plot_langs=plot_list,
                                        plot_images=plot_images, warn=warn)
    click.echo(md)
    outp = Path(out)
    click.echo(f"wrote {outp / 'results.json'}, {outp / 'table.md'}" + (", projection.png" if "projection" in payload else ""))
