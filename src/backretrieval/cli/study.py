"""``backretrieval study``: blinded human relevance studies (create, add-rater, raters, serve, analyze)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..core import BackretrievalError
from .options import N_BOOT, NON_NEGATIVE, PORT, POSITIVE, SEED, bad_option, check_image_models, parse_options, warn, main
from .output_paths import check_file_not_input


@main.group()
def study() -> None:
    """Blinded human relevance study of two or more models (paper, end of Sec. 3.2).

    \b
    backretrieval study create --dataset emoji-cldr --src en --tgt ru --models use-m,e5-small --out STUDY.db
    backretrieval study serve STUDY.db            # open the printed link(s), rate with keys 1-4
    backretrieval study analyze STUDY.db --out DIR
    """


def _wildcard_note(host: str, shown: str | None) -> None:
    """Say which host the links use when ``host`` (0.0.0.0, ::) cannot be opened by a browser."""
    from ..study.server import WILDCARD_HOSTS

    if host not in WILDCARD_HOSTS:
        return
    if shown is None:
        warn(f"{host!r} is not an address a browser can open, and no address of this machine was found: "
              "replace HOST in the links with this machine's name or address")
    else:
        warn(f"{host!r} is not an address a browser can open: the links use {shown}, this machine's address; "
              f"if raters cannot reach it, replace {shown} with an address of this machine they can reach")


@study.command()
@click.option("--dataset", required=True, help="Registered dataset or a .jsonl/.csv/.parquet file.")
@click.option("--src", required=True, help="Language of the queries.")
@click.option("--tgt", required=True, help="Language of the suggestions.")
@click.option("--models", required=True, help="Comma-separated text models, two or more (e.g. use-m,e5-small).")
@click.option("--queries", type=POSITIVE, default=20, show_default=True, help="Number of source-language queries.")
@click.option("--per-model", type=POSITIVE, default=5, show_default=True, help="Suggestions per model and query (its top-k).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the query / pool sampling and rater orders.")
@click.option("--pool", type=click.Choice(["disjoint", "all"]), default="disjoint", show_default=True,
              help="disjoint: the queries' own translations are not in the target pool; all: keep them.")
@click.option("--pool-size", type=POSITIVE, default=None, help="Subsample the target pool to this many items (default: all).")
@click.option("--images", type=click.Choice(["all", "query", "none"]), default="all", show_default=True,
              help="Show images (when the dataset has image files) for queries and suggestions, queries only, or none.")
@click.option("--from-queries", "from_queries", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Take the queries from an evaluation's per-query results (OUT/queries.parquet of evaluate/compare "
                   "--save-queries): those of --src/--tgt on which the --disagree models retrieved different targets "
                   "(at most --queries of them, drawn with --seed).")
@click.option("--disagree", default=None,
              help="With --from-queries: the models (as the file names them, two or more, comma-separated) whose "
                   "retrieved targets must differ; default: --models.")
@click.option("--raters", type=NON_NEGATIVE, default=1, show_default=True, help="Raters to register now (more with `study add-rater`).")
@click.option("--dataset-option", "dataset_option", multiple=True, help="Loader option KEY=VALUE (e.g. source_dir=DIR).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The study file to write (SQLite).")
@click.option("--force", is_flag=True, help="Replace an existing study file (and its ratings).")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def create(dataset, src, tgt, models, queries, per_model, seed, pool, pool_size, images, from_queries, disagree, raters,
           dataset_option, out, force, quiet) -> None:
    """Build the blinded, randomised study file.

    With --from-queries the queries are those of an evaluation on which models disagree, so raters
    judge exactly the cases that decide which model wins.
    """
    from ..study import StudyConfig, create_study

    model_list = [m for m in models.split(",") if m.strip()]
    check_file_not_input(out, [(dataset, "--dataset"), (from_queries, "--from-queries"),
                               *((v, f"--dataset-option {k}") for k, v in parse_options(dataset_option).items())])
    query_ids = None
    if disagree is not None and from_queries is None:
        bad_option("--disagree", "needs --from-queries (the per-query results the models disagree in)")
    if from_queries is not None:
        from ..study import disagreeing_queries, query_texts, read_query_table, target_texts

        names = [m.strip() for m in (disagree.split(",") if disagree is not None else model_list) if m.strip()]
        table = read_query_table(from_queries)
        texts, targets = query_texts(table, src, tgt), target_texts(table, src, tgt)
        try:
            query_ids = disagreeing_queries(table, src, tgt, names)
        except BackretrievalError as e:
            bad_option("--disagree" if disagree is not None else "--from-queries", str(e))
        if not query_ids:
            bad_option("--from-queries", f"{', '.join(names)} retrieved the same targets for every {src}-{tgt} query in "
                       f"{from_queries}: no query to study")
    cfg = StudyConfig(
        dataset=dataset,
        src=src,
        tgt=tgt,
        models=model_list,
        queries=queries,
        per_model=per_model,
        seed=seed,
        pool=pool,
        pool_size=pool_size,
        images=images,
        dataset_options=parse_options(dataset_option),
        query_ids=query_ids,
        query_texts=texts if from_queries is not None else None,
        target_texts=targets if from_queries is not None else None,
    )
    summary = create_study(cfg, out, raters=raters, force=force, progress=not quiet, log=warn)
    if query_ids is not None:
        warn(f"{len(query_ids)} {src} queries on which {', '.join(names)} disagree in {from_queries}; "
             f"the study takes {min(len(query_ids), queries)}")
    click.echo(
        f"wrote {out}: {summary['queries']} queries, {summary['suggestions']} suggestions "
        f"({summary['shared_suggestions']} retrieved by more than one model), {len(summary['raters'])} rater(s)"
    )
    from ..study.server import link

    for r in summary["raters"]:
        click.echo(f"  {r['name']}: {link('127.0.0.1', 8765, r['token'])}")
    click.echo(f"start the server with: backretrieval study serve {out}")


@study.command("add-rater")
@click.argument("db", type=click.Path(dir_okay=False))
@click.option("--name", default=None, help="Rater name (default rater<N>).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Host to print in the link.")
@click.option("--port", type=PORT, default=8765, show_default=True, help="Port to print in the link.")
def add_rater(db, name, host, port) -> None:
    """Register a rater and print the rater's private link."""
    from ..study import store
    from ..study.server import link, link_host

    con = store.connect(db)
    try:
        r = store.add_rater(con, name)
    finally:
        con.close()
    shown = link_host(host)
    click.echo(f"{r['name']}: {link(shown, port, r['token'])}")
    _wildcard_note(host, shown)


@study.command()
@click.argument("db", type=click.Path(dir_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=PORT, default=8765, show_default=True)
def raters(db, host, port) -> None:
    """List raters, their progress and links."""
    from ..study import store
    from ..study.server import link, link_host

    con = store.connect(db)
    try:
        rows = store.list_raters(con)
    finally:
        con.close()
    shown = link_host(host)
    for r in rows:
        click.echo(f"{r['name']}\t{r['rated']}/{r['total']}\t{link(shown, port, r['token'])}")
    _wildcard_note(host, shown)


@study.command()
@click.argument("db", type=click.Path(dir_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind; 127.0.0.1 keeps the study on this machine.")
@click.option("--port", type=PORT, default=8765, show_default=True, help="Port (0 = any free port).")
def serve(db, host, port) -> None:
    """Serve the rating pages until interrupted (Ctrl-C). Prints each rater's link.

    The access log names raters, never their link tokens."""
    from ..study import store
    from ..study.server import StudyServer, base_url

    srv = StudyServer(db, host, port)
    try:
        if host not in ("127.0.0.1", "localhost", "::1"):
            warn(f"listening on {host}: anyone who can reach this machine and has a link can rate")
        con = store.connect(db)
        try:
            rows = store.list_raters(con)
        finally:
            con.close()
        click.echo(f"serving {db} on {base_url(srv.link_host, srv.port)} (Ctrl-C to stop)")
        _wildcard_note(host, srv.link_host)
        if not rows:
            warn("no raters yet: add one with `backretrieval study add-rater`")
        for r in rows:
            click.echo(f"  {r['name']} ({r['rated']}/{r['total']} rated): {srv.url(r['token'])}")
        sys.stdout.flush()
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.close()


@study.command("proxy-rate")
@click.argument("db", type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The copy of the study that receives the proxy ratings.")
@click.option("--terms", default="words,keywords", show_default=True,
              help="One proxy rater per entry: words (word overlap) and/or keywords (phrase overlap).")
@click.option("--force", is_flag=True, help="Replace an existing --out file.")
def proxy_rate(db, out, terms, force) -> None:
    """Dry run: rate a COPY of the study with automatic proxy raters (not people).

    Needs data whose target items also exist in the query language (emoji-cldr): a suggestion
    is scored by the term overlap of its query-language twin with the query. Use it to test the
    pipeline and the analysis before the human study, never instead of it.
    """
    from ..study.proxy import proxy_rate as run

    report = run(db, out, [t.strip() for t in terms.split(",") if t.strip()], force=force)
    for name, r in report.items():
        click.echo(f"{name}: {r['rated']} rated, {r['unrated']} without a twin in the query language")
    click.echo(f"wrote {out}; analyze it with: backretrieval study analyze {out}")


@study.command()
@click.argument("db", type=click.Path(dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Write analysis.md, analysis.json and ratings.csv here.")
@click.option("--bkr/--no-bkr", default=True, show_default=True, help="Also compute the models' BkR on the study's pair.")
@click.option("--bkr-n", type=POSITIVE, default=None,
              help="N items per side for BkR (default: 1,000, or the largest N the pair allows when smaller).")
@click.option("--bkr-seeds", type=click.IntRange(1, 1000), default=3, show_default=True, help="Seeds for BkR (1 to 1,000).")
@click.option("--image-model", default="efficientnet-lite0", show_default=True, help="Image model g for BkR.")
@click.option("--n-boot", type=N_BOOT, default=2000, show_default=True, help="Bootstrap resamples of the ratio's interval, 2 to 100,000.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def analyze(db, out, bkr, bkr_n, bkr_seeds, image_model, n_boot, quiet) -> None:
    """Score distributions, ratio of "very relevant", tests, agreement, BkR (Markdown + JSON)."""
    from ..report.study_analysis import format_study_analysis
    from ..study.analyze import analyze as run
    from ..study.export import write_outputs

    if bkr:
        check_image_models([image_model], "--image-model")
    res = run(db, bkr=bkr, bkr_n=bkr_n, bkr_seeds=bkr_seeds, image_model=image_model, n_boot=n_boot,
              progress=not quiet, log=warn)
    click.echo(format_study_analysis(res))
    if out:
        files = write_outputs(res, db, out)
        click.echo("wrote " + ", ".join(str(f) for f in files))
