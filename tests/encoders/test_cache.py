"""The embedding cache: second run encodes nothing, interrupted runs resume, shards are atomic."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval.core import DataError
from backretrieval.encoders.cache import CachedImageEncoder, CachedTextEncoder


class CountingEncoder:
    name, version, dim, languages, cacheable = "count", "1", 4, None, True

    def __init__(self, fail_after: int | None = None):
        self.calls = 0
        self.seen = 0
        self.fail_after = fail_after

    def encode(self, texts, lang, *, ids=None):
        if self.fail_after is not None and self.seen + len(texts) > self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1
        self.seen += len(texts)
        return np.array([[len(t), t.count("a") + 1, ord(t[0]), 1.0] for t in texts], np.float32)

    def encode_images(self, paths):
        return np.array([[float(len(p)), 1.0] for p in paths], np.float32)


def test_second_run_encodes_nothing(tmp_path):
    texts = ["alpha", "beta", "gamma", "alpha"]
    first = CachedTextEncoder(CountingEncoder(), tmp_path, chunk=2)
    a = first.encode(texts, "en")
    assert first.n_encoded == 3  # the duplicate text is encoded once
    second = CachedTextEncoder(CountingEncoder(), tmp_path, chunk=2)
    b = second.encode(texts, "en")
    assert second.n_encoded == 0
    np.testing.assert_array_equal(a, b)
    # another language is another namespace
    third = CachedTextEncoder(CountingEncoder(), tmp_path)
    third.encode(texts, "de")
    assert third.n_encoded == 3


def test_interrupted_run_resumes(tmp_path):
    texts = [f"text {i}" for i in range(10)]
    broken = CachedTextEncoder(CountingEncoder(fail_after=6), tmp_path, chunk=3)
    with pytest.raises(KeyboardInterrupt):
        broken.encode(texts, "en")
    assert broken.n_encoded == 6  # two complete chunks were stored
    assert not list(tmp_path.rglob("*.tmp-*"))  # nothing half-written is left
    resumed = CachedTextEncoder(CountingEncoder(), tmp_path, chunk=3)
    out = resumed.encode(texts, "en")
    assert resumed.n_encoded == 4
    np.testing.assert_array_equal(out, CountingEncoder().encode(texts, "en"))


def test_version_change_invalidates(tmp_path):
    enc = CountingEncoder()
    CachedTextEncoder(enc, tmp_path).encode(["x"], "en")
    enc2 = CountingEncoder()
    enc2.version = "2"
    cached = CachedTextEncoder(enc2, tmp_path)
    cached.encode(["x"], "en")
    assert cached.n_encoded == 1


def test_image_cache_by_content(tmp_path):
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    a.write_bytes(b"same"), b.write_bytes(b"same")
    cached = CachedImageEncoder(CountingEncoder(), tmp_path / "cache")
    cached.encode_images([str(a), str(b)])
    assert cached.n_encoded == 1
    with pytest.raises(DataError, match="missing.png"):
        cached.encode_images([str(tmp_path / "missing.png")])


class TitleBodyEncoder:
    """Vectors from the per-item columns, not the text: the cache must key and slice them by row."""

    name, version, dim, languages, cacheable = "tb", "1", 3, None, True
    wants_extra = ("title", "body")

    def __init__(self):
        self.seen = 0

    def encode(self, texts, lang, *, ids=None, extra=None):
        self.seen += len(texts)
        return np.array([[len(t), len(b) + 1.0, 1.0] for t, b in zip(extra["title"], extra["body"])], np.float32)


def test_cache_keys_and_slices_extra_columns(tmp_path):
    enc = TitleBodyEncoder()
    cached = CachedTextEncoder(enc, root=tmp_path, chunk=2)
    texts = ["same text"] * 5
    extra = {"title": ["a", "bb", "ccc", "dddd", "a"], "body": ["x", "y", "zz", "w", "x"]}
    out = cached.encode(texts, "en", extra=extra)
    np.testing.assert_array_equal(out[:, 0], [1, 2, 3, 4, 1])  # rows kept their own columns across chunks
    assert enc.seen == 4  # the repeated (text, title, body) item is encoded once
    again = CachedTextEncoder(TitleBodyEncoder(), root=tmp_path, chunk=2)
    np.testing.assert_array_equal(again.encode(texts, "en", extra=extra), out)
    assert again.encoder.seen == 0


def test_replaced_image_bytes_are_re_encoded(tmp_path, shared_data):
    """The image cache is keyed by the file's bytes, not its path: new bytes under the same name
    are encoded again (a real encoder on real emoji images)."""
    import shutil

    from backretrieval.data import load_dataset
    from backretrieval.encoders.registry import get_image_encoder

    paths = load_dataset("emoji-cldr", langs=["en"])["en"].image_paths
    img = tmp_path / "item.png"
    shutil.copyfile(paths[0], img)
    cached = CachedImageEncoder(get_image_encoder("color-hist"), tmp_path / "cache")
    first = cached.encode_images([str(img)])
    assert cached.n_encoded == 1
    cached.encode_images([str(img)])
    assert cached.n_encoded == 1  # same bytes: from the cache
    shutil.copyfile(paths[1], img)  # the file is replaced under the same name
    second = CachedImageEncoder(get_image_encoder("color-hist"), tmp_path / "cache")
    out = second.encode_images([str(img)])
    assert second.n_encoded == 1
    np.testing.assert_array_equal(out, get_image_encoder("color-hist").encode_images([paths[1]]))
    assert not np.array_equal(out, first)


def test_namespace_names_never_merge():
    from backretrieval.encoders.cache import _safe

    long_a, long_b = "v" * 130 + "a", "v" * 130 + "b"
    assert _safe(long_a) != _safe(long_b) and len(_safe(long_a)) <= 120
    assert _safe("a b") != _safe("a_b") == "a_b"
    assert _safe("use-m") == "use-m"


class WiderEncoder(CountingEncoder):
    """CountingEncoder's name and version with one more component: a model changed without a new version."""

    def encode(self, texts, lang, *, ids=None):
        x = super().encode(texts, lang, ids=ids)
        return np.hstack([x, np.ones((len(texts), 1), np.float32)])


def test_vectors_of_another_width_than_the_models_cache_are_never_stored(tmp_path):
    """The width is the model version's, in every language: a model that changed without a new
    version is refused before anything is stored, also in a language the cache has nothing of."""
    from backretrieval.core import EncoderError

    CachedTextEncoder(CountingEncoder(), tmp_path).encode(["alpha", "beta"], "en")
    before = sorted(tmp_path.rglob("shard-*.npz"))
    for lang in ("en", "de"):
        with pytest.raises(EncoderError, match=rf"count/{lang}: the model gave vectors of shape \(1, 5\), but the cache "
                                               r"holds 4-d vectors of this model and version .*nothing of them is cached"):
            CachedTextEncoder(WiderEncoder(), tmp_path).encode(["gamma"], lang)
    assert sorted(tmp_path.rglob("shard-*.npz")) == before
