"""bench/bench_gpu.py without a GPU: its CPU-against-device comparison run CPU against CPU (every
difference 0, within tolerance, items per second measured), its difference measure on known
vectors, and the clear refusal when no CUDA device is usable."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_gpu.py"


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def _module():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_difference_measures_the_largest_gap_relative_to_the_cpu_scale():
    mod = _module()
    rng = np.random.default_rng(0)
    cpu = rng.standard_normal((20, 8)).astype(np.float32)
    assert mod.difference(cpu, cpu.copy()) == {"max_abs": 0.0, "rel": 0.0, "min_cos": pytest.approx(1.0)}
    dev = cpu.copy()
    dev[3, 5] += 0.25
    d = mod.difference(cpu, dev)
    assert d["max_abs"] == pytest.approx(0.25, rel=1e-6)
    assert d["rel"] == pytest.approx(0.25 / np.abs(cpu).max(), rel=1e-6)
    assert d["min_cos"] < 1.0
    flipped = cpu.copy()
    flipped[7] *= -1
    assert mod.difference(cpu, flipped)["min_cos"] == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="shapes differ"):
        mod.difference(cpu, cpu[:, :4])


def test_cpu_against_cpu_gives_difference_zero(tmp_path):
    out = tmp_path / "gpu.json"
    res = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--no-demo", "--no-write",
                          "--models", "minilm-en", "--items", "16", "--json", str(out)],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["device"] == "cpu" and got["demo"] is None
    (row,) = got["rows"]
    assert row["model"] == "minilm-en" and row["items"] == 16 and row["dim"] == 384
    assert row["max_abs"] == 0.0 and row["rel"] == 0.0 and row["within_tolerance"] is True
    assert row["cpu_items_per_s"] > 0 and row["device_items_per_s"] > 0
    assert "| minilm-en | torch | 16 | 384 | 0.00e+00 |" in res.stdout


def test_no_cuda_device_exits_with_the_reason(tmp_path):
    import torch

    from backretrieval.encoders.devices import ort_cuda_available

    if torch.cuda.is_available() or ort_cuda_available():
        pytest.skip("a CUDA device is usable here")
    out = tmp_path / "gpu.json"
    res = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)], env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert "no CUDA device: nothing measured" in res.stderr
    assert "torch" in res.stderr  # says why: torch's build and what it sees
    assert not out.exists()
