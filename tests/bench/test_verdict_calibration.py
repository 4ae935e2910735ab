"""bench/bench_verdict_calibration.py on a small seeded grid: the verdict's error rates where the
truth is known (the code compare runs on every pair, decide_outcomes), held to their bounds with
a stated Monte-Carlo tolerance: false ship at most alpha, identical models always equivalent,
"equivalent" beyond the margin at most alpha, and the power note's prediction within its error."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_verdict_calibration.py"
REPS = 300
ALPHA = 0.05
# BkR@1 of the best model and the latent correlation of the models' hits on emoji-cldr at N = 200
# (the bench script's PARAMS, measured on the real runs)
P0, RHO = 0.21, 0.67


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_verdict_calibration", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def at_most(rate: float, bound: float, reps: int = REPS) -> bool:
    """Consistent with a true rate at most ``bound``: a one-sided binomial test at 0.001 (the
    Monte-Carlo tolerance: about 3 standard errors, 0.038 above 0.05 at 300 repetitions)."""
    return stats.binomtest(int(round(rate * reps)), reps, bound, alternative="greater").pvalue > 0.001


def test_the_planted_outcomes_have_the_rates_and_the_correlation_asked_for(bench):
    assert bench.PARAMS["1/200"] == {"p0": P0, "rho": RHO}
    rng = np.random.default_rng(0)
    hits = bench.planted(rng, 3, 0.1, 200_000, 0.6, 0.5)
    assert hits["m0"].mean() == pytest.approx(0.6, abs=0.005) and hits["m2"].mean() == pytest.approx(0.5, abs=0.005)
    assert bench.latent_rho(hits["m0"], hits["m1"]) == pytest.approx(0.5, abs=0.02)
    same = bench.planted(rng, 2, 0.0, 100, 0.6, 0.5, identical=True)
    assert np.array_equal(same["m0"], same["m1"])
    d = hits["m0"] - hits["m1"]
    assert bench.true_sd(0.1, 0.6, 0.5) == pytest.approx(d.std(), abs=0.005)


@pytest.mark.parametrize("k", [2, 4])
def test_equal_models_are_shipped_at_most_alpha_of_the_time(bench, k):
    row = bench.run_cell(k, 0.0, 200, 1, P0, RHO, REPS, seed=1, n_boot=100)
    assert at_most(row["ship_other"], ALPHA), row
    assert row["ship"] == row["ship_other"]  # at gap 0 any ship is false


def test_a_model_far_behind_is_rarely_called_equivalent_and_the_best_is_shipped_as_predicted(bench):
    row = bench.run_cell(3, 0.1, 400, 1, P0, RHO, REPS, seed=2, n_boot=100)
    assert at_most(row["eq_far"], ALPHA), row
    assert at_most(row["ship_other"], ALPHA), row
    se = math.sqrt(row["predicted_note"] * (1 - row["predicted_note"]) / REPS)
    assert abs(row["ship_best"] - row["predicted_note"]) <= 3 * se + 0.02, row  # the note's prediction, within its error


@pytest.mark.parametrize("k,n", [(2, 50), (6, 400)])
def test_identical_models_are_always_equivalent(bench, k, n):
    row = bench.run_cell(k, 0.0, n, 1, P0, RHO, 100, seed=3, n_boot=100, identical=True)
    assert row["equivalent"] == 1.0 and row["ship"] == 0.0, row


def test_the_tables_hold_every_cell_run_and_mark_the_cells_not_run(bench):
    rows = bench.planted_grid({"1/50": {"p0": P0, "rho": RHO}}, 20, 0, 50, ks=(2, 6), gaps=(0.0, 0.05), ns=(50,), kk=(1,),
                              progress=False)
    real = [{"metric": "bkr@10", "pair": "en->de", "n": 50, "seeds": 4, "reference": ["ship", "use-m"], "false_ship": 0.25,
             "ship": 0.5, "ship_ref": 0.25, "equivalent": 0.0, "false_equiv": 0.0, "same": 0.25, "compatible": 0.25,
             "at_chance": 0.0}]
    t = bench.tables(rows, real)

    def body(name: str) -> list[str]:
        return t[name].splitlines()[2:]  # below the header

    full = body("false_ship_full")
    assert len(full) == 1 and full[0].startswith(f"| 1 | 50 | {P0:.3f} | {RHO:.2f} |")
    assert "- / - / -" in full[0]  # k = 3, 4, 5 not run
    assert body("false_ship")[0].startswith(f"| 50 | {P0:.2f}/{RHO:.2f} · - |")  # K = 10 not run
    assert [line.split(" | ")[2] for line in body("power_full")] == ["2", "6"]
    assert len(body("power")) == 1 and body("power")[0].startswith("| 1 | 0.05 | ")
    assert body("real") == ["| bkr@10 | ship use-m | 25.0/25.0/25.0 |"]
    assert "4 seeds per N" in t["real_summary"] and "25.0 % (bkr@10, en->de, N = 50; 4 one-seed" in t["real_summary"]
    assert "20 repetitions per cell" in t["mc"]
