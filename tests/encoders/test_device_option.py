"""``--device auto|cpu|cuda``: one shared option on evaluate, compare, meta,
train m3l, train patr and image-retrieval; it sets the device of the torch and ONNX Runtime
encoders for the run (through ``$BACKRETRIEVAL_DEVICE``, restored afterwards), is validated, and
the device is part of the cache key only of encoders whose output depends on it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from backretrieval.cli import main
from backretrieval.core import EncoderError
from backretrieval.encoders.devices import DEVICE_ENV, any_cuda_available, use_device
from backretrieval.encoders.registry import get_image_encoder, get_text_encoder

COMMANDS = (["evaluate"], ["compare"], ["meta"], ["train", "m3l"], ["train", "patr"], ["image-retrieval"])
no_gpu = pytest.mark.skipif(any_cuda_available(), reason="this machine has a CUDA GPU")


@pytest.fixture(scope="module")
def text_only(tmp_path_factory) -> Path:
    """Generic JSONL without images: en and de, 20 concepts."""
    rows = [{"id": f"{lang}{i}", "lang": lang, "text": f"{'blue dog' if lang == 'en' else 'blauer Hund'} {i}",
             "concept": f"c{i}"} for lang in ("en", "de") for i in range(20)]
    path = tmp_path_factory.mktemp("text-only") / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def evaluate(data: Path, out: Path, *extra: str, env: dict | None = None):
    args = ["evaluate", "--dataset", str(data), "--pairs", "en-de", "--models", "random,minilm-en", "--n", "10",
            "--k", "5", "--seeds", "1", "--out", str(out), "--quiet", *extra]
    return CliRunner().invoke(main, args, env=env)


def test_device_cpu_sets_the_encoders_device_for_the_run_only(tmp_path, text_only):
    before = os.environ.get(DEVICE_ENV)
    # $BACKRETRIEVAL_DEVICE=cuda would fail here without a GPU: --device cpu wins for the run
    res = evaluate(text_only, tmp_path / "out", "--device", "CPU", env={DEVICE_ENV: "cuda"} if not any_cuda_available() else None)
    assert res.exit_code == 0, res.output
    assert os.environ.get(DEVICE_ENV) == before  # restored when the command ends
    models = json.loads((tmp_path / "out" / "run.json").read_text())["inputs"]["models"]
    # the torch model's identity (cache and record key) names the device; the seeded random model's does not
    assert models["minilm-en"].endswith("-cpu") and "cpu" not in models["random"]
    # auto resolves to the same device here: the same keys, so the records are reused
    again = evaluate(text_only, tmp_path / "out", "--device", "cpu" if not any_cuda_available() else "auto")
    assert again.exit_code == 0 and "resuming: 2 finished records" in again.stderr, again.output


@no_gpu
def test_device_cuda_without_a_gpu_is_a_clear_error_on_every_command(tmp_path):
    for cmd in COMMANDS:
        res = CliRunner().invoke(main, [*cmd, "--device", "cuda"])
        assert res.exit_code == 2, (cmd, res.output)
        assert "error: Invalid value for '--device': device 'cuda' was asked for, but no CUDA GPU is usable here" in res.stderr, res.stderr
        assert "Traceback" not in res.output


@no_gpu
def test_without_the_option_the_environment_decides_and_the_encoder_says_so(tmp_path, text_only):
    res = evaluate(text_only, tmp_path / "out", env={DEVICE_ENV: "cuda"})
    assert res.exit_code == 2
    # the first encoder built (the default image model, checked before any work) names itself and its runtime
    assert "efficientnet-lite0: device 'cuda' was asked for, but no CUDA GPU is usable through" in res.stderr, res.stderr


def test_bad_device_values_are_refused():
    for cmd in COMMANDS:
        res = CliRunner().invoke(main, [*cmd, "--device", "gpu"])
        assert res.exit_code == 2
        assert "Invalid value for '--device': 'gpu' is not one of 'auto', 'cpu', 'cuda'" in res.stderr, res.stderr
    with pytest.raises(EncoderError, match="device must be one of auto, cpu, cuda, got 'tpu'"):
        with use_device("tpu"):
            pass


def test_the_device_is_in_the_key_only_where_outputs_differ():
    """torch and ONNX Runtime models name their device in ``version`` (the cache namespace);
    CPU-only encoders (use-m, TF-IDF, colour histograms) do not, so --device never splits their cache."""
    with use_device("cpu"):
        assert os.environ[DEVICE_ENV] == "cpu"
        cpu = {s: get_text_encoder(s).version for s in ("minilm-en", "use-m")}
        cnn = get_image_encoder("efficientnet-lite0").version
        hist = get_image_encoder("color-hist").version
    with use_device("auto"):
        auto = {s: get_text_encoder(s).version for s in ("minilm-en", "use-m")}
        assert get_image_encoder("color-hist").version == hist
    assert cpu["minilm-en"].endswith("-cpu") and "-cpu-" in cnn
    assert "cpu" not in cpu["use-m"] and auto["use-m"] == cpu["use-m"] and "cpu" not in hist
    if not any_cuda_available():
        assert auto == cpu
