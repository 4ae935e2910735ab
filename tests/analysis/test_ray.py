"""The Ray executor on a local Ray cluster: the same records as local execution, and text
encoding through Ray Data batch inference."""
from __future__ import annotations

import pytest

from backretrieval.analysis import EvalConfig, run_grid
from backretrieval.analysis.executors import RayExecutor
from backretrieval.encoders.registry import get_text_encoder

TIMING = {"seconds", "encode_seconds"}


def _strip(records):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


@pytest.fixture(scope="module")
def ray_local():
    import ray  # scripts/setup.sh installs it (the `ray` extra); missing Ray fails here, loudly

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_grid_equals_local(ray_local, tmp_path, monkeypatch, shared_data):
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(tmp_path / "fresh-cache"))  # encoding must really run
    cfg = EvalConfig(dataset="emoji-cldr", pairs=[("de", "ja")], models=["use-m", "tfidf-char", "random"],
                     image_model="color-hist", n=150, seeds=[0, 1])
    via_ray = run_grid(cfg, tmp_path / "ray", progress=False, executor=RayExecutor())
    local = run_grid(cfg, tmp_path / "local", progress=False)
    assert _strip(via_ray.records) == _strip(local.records)
    assert len(via_ray.records) == 3 * 2


def test_ray_data_encoder_equals_local_model(ray_local):
    ex = RayExecutor()
    remote = ex.text_encoder("use-m")
    assert type(remote).__name__ == "RayDataTextEncoder"
    assert (remote.name, remote.version, remote.dim) == ("use-m", get_text_encoder("use-m").version, 512)
    texts = [f"text number {i}" for i in range(700)]
    import numpy as np

    np.testing.assert_allclose(remote.encode(texts, "en"), get_text_encoder("use-m").encode(texts, "en"), atol=1e-6)
    # fitted and seeded models stay local
    assert type(ex.text_encoder("tfidf-char")).__name__ != "RayDataTextEncoder"
    assert type(ex.text_encoder("random")).__name__ != "RayDataTextEncoder"


class _Unpicklable:
    """A user's model that refuses to be pickled (e.g. it holds a GPU handle or a lock)."""

    def __init__(self, base):
        self.base = base

    def __reduce__(self):
        raise TypeError("this model cannot be pickled")

    def encode(self, sentences):
        return self.base.encode(sentences, "en")


def test_ray_runs_python_object_models_in_the_driver(ray_local, tmp_path, shared_data):
    """An object model is encoded in this process (never shipped to the cluster); the records
    equal the local run's and those of its spec string."""
    models = {"use-m": "use-m", "mine": _Unpicklable(get_text_encoder("use-m"))}
    cfg = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=models, image_model="color-hist", n=40, seeds=[0])
    via_ray = run_grid(cfg, tmp_path / "ray", progress=False, executor=RayExecutor())
    local = run_grid(cfg, tmp_path / "local", progress=False)
    assert _strip(via_ray.records) == _strip(local.records)
    mine, usem = (_strip([r for r in via_ray.records if r["model"] == m]) for m in ("mine", "use-m"))
    for a, b in zip(mine, usem):
        assert {k: v for k, v in a.items() if k not in ("model", "model_identity", "model_spec")} == \
            {k: v for k, v in b.items() if k not in ("model", "model_identity", "model_spec")}
