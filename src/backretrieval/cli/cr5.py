"""``backretrieval train cr5``: train a Cr5 model (a text model usable as ``cr5:DIR``)."""
from __future__ import annotations

from pathlib import Path

import click

from .options import (
    NON_NEGATIVE, POSITIVE, POSITIVE_NUMBER, SEED, UNIT_FROM_0, LibraryDefault, bad_option, check_outputs, parse_list,
    parse_numbers, parse_options, warn, train,
)
from .output_paths import check_inputs_kept


def _cr5(name: str):
    """The default of the Cr5 hyper-parameter ``name``: the estimator's (read when needed)."""
    def read():
        from ..train.cr5 import Cr5

        return Cr5().get_params()[name]
    return read


def _split(name: str):
    """The default of ``make_split``'s ``name`` (read when needed)."""
    def read():
        import inspect

        from ..train.cr5 import make_split

        return inspect.signature(make_split).parameters[name].default
    return read


def _pairs(spec: str, option: str) -> list[tuple[str, str]]:
    from ..analysis import parse_pairs
    from ..core import BackretrievalError

    try:
        return parse_pairs(spec)
    except BackretrievalError as e:
        bad_option(option, str(e))


def _one_pair(spec: str, option: str) -> tuple[str, str]:
    pairs = _pairs(spec, option)
    if len(pairs) != 1:
        bad_option(option, f"{spec!r}: give one pair, e.g. de-ja")
    return pairs[0]


@train.command("cr5")
@click.option("--dataset", required=True, help="Dataset with cross-lingual concepts (ddtp, multi30k, emoji-cldr, a file).")
@click.option("--langs", default=None, help="Languages to train on (comma list; default: all of the dataset).")
@click.option("--regime", type=click.Choice(["joint", "pairwise", "transitive"]), default="joint", show_default=True,
              help="joint: all languages, one model; pairwise: --pair only; transitive: --pair linked only through --pivot.")
@click.option("--pair", default=None, help="The pair of a pairwise/transitive model, e.g. de-ja.")
@click.option("--pivot", default=None, help="Pivot language of transitive training (e.g. en).")
@click.option("--eval-pairs", default=None, help="Pairs to hold out and evaluate (default: the pair, or the first language with each other one).")
@click.option("--rank", type=POSITIVE, cls=LibraryDefault, default=_cr5("rank"), show_default=True, help="Embedding dimension r.")
@click.option("--lam", cls=LibraryDefault, default=lambda: f"{_cr5('lam')():g}", show_default=True,
              help="Ridge lambda; a comma list (e.g. 0.3,1,3) is chosen from by mean validation xlr@1.")
@click.option("--max-vocab", type=POSITIVE, cls=LibraryDefault, default=_cr5("max_vocab"), show_default=True, help="Vocabulary size per language (most frequent tokens).")
@click.option("--min-df", type=POSITIVE, cls=LibraryDefault, default=_cr5("min_df"), show_default=True, help="Drop tokens in fewer training documents.")
@click.option("--min-words", type=NON_NEGATIVE, cls=LibraryDefault, default=_cr5("min_words"), show_default=True, help="Training documents need at least this many distinct tokens.")
@click.option("--max-words", type=POSITIVE, cls=LibraryDefault, default=_cr5("max_words"), show_default=True, help="... and at most this many.")
@click.option("--test-size", type=POSITIVE, cls=LibraryDefault, default=_split("test_size"), show_default=True, help="Test query concepts per pair (at most 20% of the shared concepts).")
@click.option("--val-size", type=POSITIVE, cls=LibraryDefault, default=_split("val_size"), show_default=True, help="Validation concepts per pair (at most 10% of the shared concepts).")
@click.option("--distractor-frac", type=UNIT_FROM_0, cls=LibraryDefault, default=_split("distractor_frac"), show_default=True, help="Share of the other concepts held out as extra candidates.")
@click.option("--split", "split_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Reuse the held-out concepts of another run (its split.json), e.g. to compare regimes on the same test.")
@click.option("--holdout/--no-holdout", default=True, show_default=True,
              help="--no-holdout trains on every concept (no evaluation): a model for use on other data.")
@click.option("--cg-tol", type=POSITIVE_NUMBER, cls=LibraryDefault, default=_cr5("cg_tol"), show_default=True)
@click.option("--cg-maxiter", type=POSITIVE, cls=LibraryDefault, default=_cr5("cg_maxiter"), show_default=True)
@click.option("--eig-tol", type=POSITIVE_NUMBER, cls=LibraryDefault, default=_cr5("eig_tol"), show_default=True)
@click.option("--eig-maxiter", type=POSITIVE, cls=LibraryDefault, default=_cr5("eig_maxiter"), show_default=True)
@click.option("--n-jobs", type=POSITIVE, cls=LibraryDefault, default=_cr5("n_jobs"), show_default=True, help="Threads for the per-language solves.")
@click.option("--seed", type=SEED, cls=LibraryDefault, default=_cr5("seed"), show_default=True, help="Seed of the split and of eigsh's start vector.")
@click.option("--dataset-option", "dataset_option", multiple=True, help="Loader option KEY=VALUE (e.g. source_dir=DIR, split=train).")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Model directory to write.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def train_cr5(dataset, langs, regime, pair, pivot, eval_pairs, rank, lam, max_vocab, min_df, min_words, max_words,
              test_size, val_size, distractor_frac, split_file, holdout, cg_tol, cg_maxiter, eig_tol, eig_maxiter, n_jobs, seed,
              dataset_option, out, quiet) -> None:
    """Train Cr5 (crosslingual reduced-rank ridge regression, WSDM 2019) on concept-aligned documents.

    Writes OUT as a model directory (use it as `--models cr5:OUT`), and with held-out concepts
    OUT/eval.md (xlr@1/5/10, cosine and CSLS, both directions), OUT/eval.json and OUT/split.json.

    Example: backretrieval train cr5 --dataset ddtp --langs en,de,fr,it,ja --rank 300 --out models/cr5-ddtp
    """
    import time

    from ..core import BackretrievalError
    from ..data import load_dataset
    from ..report.runs import train_cr5
    from ..train.cr5 import Cr5OptionError, Split, plan_training

    lang_list = parse_list(langs, "--langs", "language") if langs is not None else None
    the_pair = _one_pair(pair, "--pair") if pair else None
    eval_list = _pairs(eval_pairs, "--eval-pairs") if eval_pairs is not None else None
    split = None
    if split_file:
        try:
            split = Split.load(split_file)
        except (OSError, ValueError, KeyError, TypeError) as e:
            bad_option("--split", f"cannot read {split_file}: {e}")
    try:
        plan = plan_training(regime=regime, languages=lang_list, pair=the_pair, pivot=pivot, lams=parse_numbers(lam, "--lam"),
                             min_words=min_words, max_words=max_words, split=split, holdout=holdout)
    except Cr5OptionError as e:
        bad_option(e.flag, e.reason(cli=True))
    options = parse_options(dataset_option, dataset)
    params = dict(rank=rank, max_vocab=max_vocab, min_df=min_df, min_words=min_words, max_words=max_words,
                  cg_tol=cg_tol, cg_maxiter=cg_maxiter, eig_tol=eig_tol, eig_maxiter=eig_maxiter, n_jobs=n_jobs,
                  seed=seed, progress=not quiet)
    check_outputs((out, "--out"))
    check_inputs_kept(out, dataset, options)
    log = (lambda m: None) if quiet else warn
    t0 = time.perf_counter()
    ds = load_dataset(dataset, langs=plan.load, **options)
    langs_used = plan.trained or ds.languages
    try:
        run = train_cr5(
            ds,
            regime=plan.regime,
            languages=langs_used,
            pair=plan.pair,
            pivot=plan.pivot,
            eval_pairs=eval_list,
            lams=plan.lams,
            split=plan.split,
            split_options=dict(test_size=test_size, val_size=val_size, distractor_frac=distractor_frac, seed=seed),
            holdout=plan.holdout,
            params=params,
            out_dir=out,
            meta={"dataset": dataset, "dataset_options": options},
            log=log,
        )
    except ValueError as e:  # e.g. scipy refusing a degenerate problem
        raise BackretrievalError(f"train cr5: {e}") from e
    model = run.model
    click.echo(
        f"trained Cr5 {regime} on {', '.join(model.languages_)}: rank {model.rank}, lambda {run.lam:g}, "
        f"{sum(model.n_documents_.values())} documents, {model.n_concepts_} concepts, "
        f"fit {model.fit_seconds_:.0f}s (total {time.perf_counter() - t0:.0f}s)"
    )
    if len(run.lambda_table) > 1:
        click.echo("lambda selection (mean validation xlr@1): " + ", ".join(f"{r['lam']:g}: {r['val_xlr@1']:.3f}" for r in run.lambda_table))
    if run.test:
        from ..report.cr5_tables import precision_table_md

        click.echo("\n" + precision_table_md(run.test))
        click.echo(f"\nwrote {Path(out)} (model, eval.md, eval.json, split.json); use it as --models cr5:{out}")
    else:
        click.echo(f"wrote {Path(out)}; use it as --models cr5:{out}")
