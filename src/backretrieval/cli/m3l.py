"""Zero-shot cross-lingual image retrieval: ``train m3l``, ``train patr`` and ``image-retrieval``."""
from __future__ import annotations

import json
from pathlib import Path

import click

from ._app import (
    NON_NEGATIVE, OPEN_UNIT, POSITIVE, POSITIVE_NUMBER, SEED, UNIT_FROM_0, _bad, _check_image_models, _check_outputs,
    _check_text_models, _parse_list, _parse_numbers, _parse_options, _warn, main, train,
)
from ._app import device_option

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
    from ..train.m3l import M3LModel

    tl = _parse_list(train_langs, "--train-langs", "language")
    vl = _parse_list(val_langs, "--val-langs", "language") if val_langs is not None else None
    options = _parse_options(dataset_option, dataset)
    model = M3LModel(
        loss,
        base=base,
        image_model=image_model,
        train_langs=tl,
        val_langs=vl,
        widths=_parse_numbers(widths, "--widths", count=2, integer=True, low=1),
        dropout=_parse_numbers(dropout, "--dropout", count=3, low=0, high=1, high_open=True),
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
    model._check_params()  # every setting, before any data is read
    _check_text_models([base], "--base")
    _check_image_models([image_model], "--image-model")
    _check_outputs((out, "--out"))
    ds = load_dataset(dataset, langs=list(dict.fromkeys([*tl, *(vl or [])])), **options)
    model.fit(ds, source={"dataset": dataset, "options": options}, log=None if quiet else (lambda s: click.echo(s, err=True)))
    path = model.save(out)
    cfg = model.config_()
    best = next(h for h in model.history_ if h["epoch"] == model.best_epoch_)
    first = model.history_[0]
    val = (
        f"validation R@10 {best['val_r@10']:.3f} (untrained {first['val_r@10']:.3f}) at epoch {model.best_epoch_}"
        if "val_r@10" in best else f"epoch {model.best_epoch_}"
    )
    eta = f", eta {model.eta_:.4g}" if model.eta_ is not None else ""
    click.echo(
        f"{loss.upper()} on {base} -> {image_model} ({cfg['image_dim']}-d), trained on {','.join(tl)}: "
        f"{cfg['n_train_captions']} captions of {cfg['split']['images']['train']} images{eta}; {val}\nwrote {path}"
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
def _settings(cfg: dict) -> dict:
    """What was chosen for a model apart from its training seed (a derived eta is left out: it is
    estimated from the data per run)."""
    lp = {k: v for k, v in cfg["loss_params"].items() if k != "d"}
    rule = lp.pop("eta_rule", "given")
    if rule != "given":  # "quantile Q of squared distances ...": eta itself is estimated per run
        lp.pop("eta", None)
        lp["eta_quantile"] = float(rule.split()[1])
    flat = {**lp, "widths": cfg["widths"], "dropout": cfg["dropout"], "init": cfg["init"],
            "standardize": cfg["standardize"], "batch": cfg["batch_size"], "epochs": cfg["epochs"],
            "select": cfg["select"], "patience": cfg["patience"], "val_langs": cfg.get("val_langs")}
    flat.update({k: v for k, v in cfg["optimizer"].items() if k != "name"})
    return flat


def _group_key(cfg: dict) -> tuple:
    """Models that differ only in their training seed form one configuration (averaged)."""
    return (cfg["base"], cfg["loss"], ",".join(cfg["train_langs"]), cfg["image_model"],
            json.dumps(_settings(cfg), sort_keys=True))


def _labels(keys: list[tuple]) -> dict[tuple, str]:
    """``base LOSS``, plus the settings that tell apart configurations sharing that name."""
    out = {}
    for gk in keys:
        same = [k for k in keys if k[:4] == gk[:4]]
        name = f"{gk[0]} {gk[1].upper()}"
        if len(same) > 1:
            mine, others = json.loads(gk[4]), [json.loads(k[4]) for k in same]
            diff = [k for k in mine if any(o.get(k) != mine[k] for o in others)]
            if diff:
                name += " (" + ", ".join(f"{k} {mine[k]}" for k in diff) + ")"
        out[gk] = name
    return out


def _cell(vals: list[float]) -> str:
    import numpy as np

    if len(vals) == 1:
        return f"{vals[0]:.3f}"
    return f"{np.mean(vals):.3f} ± {np.std(vals, ddof=1):.3f}"


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
    import numpy as np

    from ..analysis.stats import paired_permutation_test
    from ..core import BackretrievalError, atomic_write_text
    from ..data import load_dataset
    from ..encoders.base import get_text_encoder
    from ..encoders.cache import CachedTextEncoder
    from ..encoders.m3l import M3LTextEncoder, load_model
    from ..train.m3l import collect_images, evaluate_retrieval, model_label, projection_figure

    lang_list = _parse_list(langs, "--langs", "language")
    if plot_langs is None:  # the default never clashes with --langs: plot the languages both have
        plot_list = [x for x in DEFAULT_PLOT_LANGS.split(",") if x in lang_list]
        left_out = [x for x in DEFAULT_PLOT_LANGS.split(",") if x not in lang_list]
        plot_note = "" if not left_out else (
            f"projection plot: {', '.join(plot_list) or 'none'} of the default plot languages {DEFAULT_PLOT_LANGS} "
            f"({', '.join(left_out)} not in --langs)" + ("" if plot_list else "; no plot (choose some with --plot-langs)"))
    else:
        plot_note = ""
        plot_list = _parse_list(plot_langs, "--plot-langs", "language") if plot_langs.strip() else []
        missing = [x for x in plot_list if x not in lang_list]
        if missing:
            _bad("--plot-langs", f"plot language {missing[0]!r} is not in --langs ({','.join(lang_list)})")
    k_list = sorted(set(_parse_numbers(ks, "--ks", integer=True, low=1)))
    options = _parse_options(dataset_option, dataset)
    for m in models:
        try:
            load_model(m)
        except BackretrievalError as e:
            _bad("--model", str(e))
    _check_outputs((out, "--out"))
    if plot_note:
        _warn(plot_note)
    ds = load_dataset(dataset, langs=lang_list, **options)
    data_cache: dict[tuple, object] = {}
    bases: dict[str, object] = {}  # one loaded base text model per spec
    results = []
    for m in models:
        cfg, _ = load_model(m)
        sp = cfg["split"]
        key = (cfg["image_model"], sp["seed"], sp["test_frac"], sp["val_frac"])
        if key not in data_cache:
            data_cache[key] = collect_images(
                ds, lang_list, cfg["image_model"], split_seed=sp["seed"], test_frac=sp["test_frac"],
                val_frac=sp["val_frac"], progress=not quiet,
            )
        if cfg["base"] not in bases:
            bases[cfg["base"]] = CachedTextEncoder(get_text_encoder(cfg["base"], progress=not quiet), progress=not quiet)
        res = evaluate_retrieval(m, ds, lang_list, split=split, ks=k_list, sim=sim, data=data_cache[key],
                                 base_encoder=bases[cfg["base"]], progress=not quiet)
        results.append(res)
        click.echo(f"{model_label(cfg)} (train {','.join(cfg['train_langs'])}, seed {cfg['seed']}) {m}: "
                   + ", ".join(f"{x} {res.per_lang[x][f'r@{k_list[-1]}']:.3f}" for x in lang_list), err=True)

    groups: dict[tuple, list] = {}
    for r in results:
        groups.setdefault(_group_key(r.config), []).append(r)
    same_queries = all(
        r.query_ids[x] == results[0].query_ids[x] for r in results for x in lang_list
    )

    def recall(grp, lang, k):
        return [g.per_lang[lang][f"r@{k}"] for g in grp]

    names = _labels(list(groups))

    def label(gk):
        return names[gk]

    lines = [
        f"# Text->image retrieval on {dataset} ({split} split, {results[0].n_images} images, ranking: {sim})",
        "",
        "Queries are the captions of the gallery images in each language; cells are Recall@K"
        + (", mean ± sd over training seeds" if any(len(g) > 1 for g in groups.values()) else "")
        + ". Ties never help (pessimistic ranks).",
    ]
    for k in sorted(k_list, reverse=True):
        lines += ["", f"## Recall@{k}", "", "| model | train langs | seeds | " + " | ".join(lang_list) + " |",
                  "|---|---|---|" + "---|" * len(lang_list)]
        for gk, grp in groups.items():
            lines.append(f"| {label(gk)} | {gk[2]} | {len(grp)} | " + " | ".join(_cell(recall(grp, x, k)) for x in lang_list) + " |")
    comparisons = {}
    k_cmp = 10 if 10 in k_list else k_list[-1]
    if len(groups) > 1 and same_queries:
        lines += ["", f"## Best configuration per language (Recall@{k_cmp})", "",
                  "Gap = best minus runner-up; p = two-sided paired sign-flip permutation test over the same queries "
                  "(per-query hit averaged over seeds).", "",
                  "| lang | best | R@%d | runner-up | R@%d | gap | p |" % (k_cmp, k_cmp), "|---|---|---|---|---|---|---|"]
        for x in lang_list:
            scored = sorted(groups.items(), key=lambda kv: -float(np.mean(recall(kv[1], x, k_cmp))))
            (g1, r1), (g2, r2) = scored[0], scored[1]
            h1 = np.mean([(g.ranks[x] <= k_cmp).astype(float) for g in r1], axis=0)
            h2 = np.mean([(g.ranks[x] <= k_cmp).astype(float) for g in r2], axis=0)
            t = paired_permutation_test(h1, h2, n_perm=n_perm, seed=0)
            comparisons[x] = {"best": label(g1) + f" [{g1[2]}]", "runner_up": label(g2) + f" [{g2[2]}]",
                              "best_recall": float(h1.mean()), "runner_up_recall": float(h2.mean()),
                              "gap": float(t.diff), "p": float(t.p_value)}
            lines.append(f"| {x} | {label(g1)} [{g1[2]}] | {h1.mean():.3f} | {label(g2)} [{g2[2]}] | {h2.mean():.3f} | "
                         f"{t.diff:+.3f} | {t.p_value:.3g} |")
    elif len(groups) > 1:
        _warn("the models do not share their test queries (different splits): no paired comparison")
    md = "\n".join(lines) + "\n"
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    payload = {
        "dataset": dataset,
        "dataset_options": options,
        "split": split,
        "sim": sim,
        "ks": k_list,
        "langs": lang_list,
        "models": [r.to_json() for r in results],
        "groups": [
            {"label": label(gk), "base": gk[0], "loss": gk[1], "train_langs": gk[2], "image_model": gk[3],
             "settings": json.loads(gk[4]), "n_models": len(grp),
             "per_lang": {x: {f"r@{k}": float(np.mean(recall(grp, x, k))) for k in k_list} for x in lang_list}}
            for gk, grp in groups.items()
        ],
        "comparisons": comparisons,
    }
    if plot_list:
        panels = []
        for gk, grp in groups.items():
            r = grp[0]
            if r.config["image_model"] != results[0].config["image_model"]:
                continue  # one image space per figure
            panels.append((f"{label(gk)} (trained on {gk[2]}, seed {r.config['seed']})",
                           M3LTextEncoder(r.model_dir, base_encoder=bases[r.config["base"]])))
        first = results[0].config
        sp = first["split"]
        data = data_cache[(first["image_model"], sp["seed"], sp["test_frac"], sp["val_frac"])]
        try:
            fig = projection_figure(panels, data, plot_list, outp / "projection.png", n_images=plot_images,
                                    split=split)
            payload["projection"] = str(fig)
            md += "\n![t-SNE projection](projection.png)\n"
        except BackretrievalError as e:
            _warn(f"no projection plot: {e}")
    from ..core import atomic_save_npz

    arrays = {}
    for i, r in enumerate(results):
        for x in lang_list:
            arrays[f"m{i}/{x}/ranks"] = np.asarray(r.ranks[x], dtype=np.int64)
            arrays[f"m{i}/{x}/ids"] = np.asarray(r.query_ids[x], dtype=str)
    atomic_save_npz(outp / "ranks.npz", **arrays)
    atomic_write_text(outp / "results.json", json.dumps(payload, indent=1))
    atomic_write_text(outp / "table.md", md)
    click.echo(md)
    click.echo(f"wrote {outp / 'results.json'}, {outp / 'table.md'}" + (", projection.png" if "projection" in payload else ""))
