"""The options evaluate and compare share (backretrieval.cli.run_options): each one reaches the
configuration, the approximate-search options are checked there, and both commands show them."""
from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from backretrieval.analysis import EvalConfig
from backretrieval.cli import main
from backretrieval.cli.run_options import run_config, run_options

BASE = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=["random"], n=50, seeds=[0])
EXACT = dict(approx=None, approx_target=0.99, approx_always=False)


def test_every_option_reaches_the_configuration():
    cfg = run_config(BASE, **EXACT, reuse_stale=True, margin=0.1, no_measure_speed=True, cost="speed")
    assert (cfg.reuse_stale, cfg.margin, cfg.measure_speed, cfg.cost, cfg.approx) == (True, 0.1, False, "speed", None)
    plain = run_config(BASE, **EXACT, reuse_stale=False, margin=0.05, no_measure_speed=False)
    assert (plain.reuse_stale, plain.measure_speed, plain.cost) == (False, True, "bytes")
    assert (plain.models, plain.n, plain.pairs) == (BASE.models, BASE.n, BASE.pairs)  # the grid is left as it was


def test_approximate_search_is_set_and_checked():
    cfg = run_config(BASE, approx="hnsw", approx_target=0.9, approx_always=True, reuse_stale=False, margin=0.05,
                     no_measure_speed=False)
    assert (cfg.approx, cfg.approx_target, cfg.approx_cost_check) == ("hnsw", 0.9, False)
    with pytest.raises(click.BadParameter, match="needs --approx"):
        run_config(BASE, approx=None, approx_target=0.99, approx_always=True, reuse_stale=False, margin=0.05,
                   no_measure_speed=False)
    csls = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=["random"], n=50, seeds=[0], sim="csls")
    with pytest.raises(click.BadParameter, match="ranks by cosine only"):
        run_config(csls, approx="ivf", approx_target=0.99, approx_always=False, reuse_stale=False, margin=0.05,
                   no_measure_speed=False)


def test_evaluate_and_compare_show_the_same_shared_options():
    @click.command()
    @run_options
    def probe(**kw):
        click.echo(",".join(sorted(kw)))

    shared = [p.opts[0] for p in probe.params]
    assert shared == ["--approx", "--approx-target", "--approx-always", "--reuse-stale", "--save-queries",
                      "--dry-run", "--no-measure-speed", "--margin"]
    for command in ("evaluate", "compare"):
        text = CliRunner().invoke(main, [command, "--help"]).output
        assert all(option in text for option in shared), command
    assert CliRunner().invoke(probe, ["--margin", "0.2"]).output.strip() == (
        "approx,approx_always,approx_target,dry_run,margin,no_measure_speed,reuse_stale,save_queries")
