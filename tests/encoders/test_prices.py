"""The price book beside the embedding cache: the timer's rate (the first batch, which loads the
model, left out), length classes, records keyed by identity and machine, the larger measurement
kept, whole files under concurrent writers, the nearest class, the vector size, bytes per item
from a serving form, and the fixed sample."""
from __future__ import annotations

import json
import multiprocessing
import time

import numpy as np

from backretrieval.encoders.cache import CachedTextEncoder
from backretrieval.encoders.prices import (EncodeTimer, Measurement, PriceBook, bytes_per_item, length_class, machine,
                                           measure_sample)


def meas(items: int, rate: float = 100.0, chars: float = 20.0, how: str = "run") -> Measurement:
    return Measurement(items=items, seconds=items / rate, cpu_seconds=items / rate, items_per_second=rate,
                       items_per_cpu_second=rate, warmup_seconds=0.0, batch_size=8, mean_chars=chars, how=how)


def test_the_timer_leaves_the_first_batch_out_of_the_rate():
    timer = EncodeTimer()
    timer.steps = [(10, 2.1, 0.5, 100), (40, 0.4, 0.4, 400), (40, 0.4, 0.4, 400)]  # the first one loaded the model
    m = timer.measurement("run", 10)
    assert m.items == 80 and m.items_per_second == 100.0 and m.items_per_cpu_second == 100.0
    assert abs(m.warmup_seconds - 2.0) < 1e-9 and m.mean_chars == 10.0 and m.length_class == "8-15 chars"
    assert EncodeTimer().measurement() is None  # nothing timed
    few = EncodeTimer()
    few.steps = [(5, 0.1, 0.1, 50)]
    assert few.measurement() is None  # fewer texts than a rate can be read from
    assert few.measurement(min_items=1).items == 5


def test_the_timer_times_calls_and_streams():
    timer = EncodeTimer()
    assert timer.call(lambda rows: len(rows), ["a", "b"], 2) == 2
    batches = [([0, 1], "x"), ([2], "y")]
    assert list(timer.stream(iter(batches), lambda rows: 3 * len(rows))) == batches
    assert [s[0] for s in timer.steps] == [2, 2, 1] and [s[3] for s in timer.steps] == [2, 6, 3]


def test_length_classes():
    assert [length_class(x) for x in (0, 1.9, 2, 15.9, 16, 100)] == [
        "0-1 chars", "0-1 chars", "2-3 chars", "8-15 chars", "16-31 chars", "64-127 chars"]


def test_records_are_kept_per_identity_machine_and_class(tmp_path):
    book = PriceBook(tmp_path)
    mach = {"cpu": "x", "cores": 2, "device": "cpu", "versions": {"numpy": "2"}, "settings": {"batch_size": 8}}
    assert book.read("m@1", mach, "16-31 chars") is None
    book.write("m@1", mach, meas(100, 50.0), "m")
    assert book.write("m@1", mach, meas(80, 999.0), "m").items_per_second == 50.0  # fewer texts: the record stays
    assert book.write("m@1", mach, meas(120, 60.0), "m").items_per_second == 60.0  # more texts: replaced
    assert book.read("m@1", mach, "16-31 chars").items == 120
    other = {**mach, "settings": {"batch_size": 64}}
    assert book.read("m@1", other, "16-31 chars") is None  # another batch size is another machine
    assert book.read("m@2", mach, "16-31 chars") is None  # another version is another model
    book.write("m@1", mach, meas(50, 5.0, chars=500.0), "m")
    assert book.read("m@1", mach, "256-511 chars").items_per_second == 5.0
    assert book.read("m@1", mach, "128-255 chars").items_per_second == 5.0  # the nearest class
    assert book.read("m@1", mach, "2-3 chars").items_per_second == 60.0
    (f,) = [p for p in book.folder("m@1", mach).glob("16-31*.json")]
    doc = json.loads(f.read_text())
    assert doc["identity"] == "m@1" and doc["machine"] == mach and doc["measured"] == time.strftime("%Y-%m-%d")
    f.write_text("{ damaged")
    assert book.read("m@1", mach, "16-31 chars").length_class == "256-511 chars"  # a damaged file is no record


def _write_many(args):
    root, items = args
    mach = {"cpu": "x", "cores": 1, "device": "cpu", "versions": {}, "settings": {}}
    for k in range(30):
        PriceBook(root).write("shared", mach, meas(items + k, float(items + k)), "m")


def test_concurrent_writers_leave_one_whole_record_with_the_most_texts(tmp_path):
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_write_many, [(str(tmp_path), base) for base in (100, 200, 300, 400)])
    mach = {"cpu": "x", "cores": 1, "device": "cpu", "versions": {}, "settings": {}}
    files = list(PriceBook(tmp_path).folder("shared", mach).iterdir())
    assert sorted(f.name for f in files if not f.name.startswith(".")) == ["16-31-chars.json"]  # no temporary left
    assert PriceBook(tmp_path).read("shared", mach, "16-31 chars").items == 429


def test_the_vector_size_is_kept_for_runs_that_do_not_know_it(tmp_path):
    book = PriceBook(tmp_path)
    assert book.shape("v", None, None) is None
    assert book.shape("v", 128, 512) == (128, 512)
    assert book.shape("v", None, None) == (128, 512)


class Int8Like:
    """A serving form as the variants expose it: bytes_per_item beside dim."""

    dim = 512
    bytes_per_item = 512


def test_bytes_per_item_comes_from_the_model_where_it_says():
    assert bytes_per_item(Int8Like(), 512) == 512
    assert bytes_per_item(object(), 512) == 2048 and bytes_per_item(object(), None) is None


class Toy:
    """A text model that counts what it is asked to encode."""

    name, version, batch_size, dim = "toy", "toy-1", 16, 4

    def __init__(self):
        self.calls: list[int] = []

    def encode(self, texts, lang, *, ids=None):
        self.calls.append(len(texts))
        return np.ones((len(texts), 4), np.float32)


def test_the_fixed_sample_is_the_same_texts_every_time():
    texts = {"en": [f"text number {i}" for i in range(300)], "de": [f"Text Nummer {i}" for i in range(300)]}
    a, b = Toy(), Toy()
    ma = measure_sample(a, texts, items=40)
    measure_sample(b, {k: v[::-1] for k, v in texts.items()}, items=40)
    assert a.calls == b.calls == [4, 20, 20] and ma.how == "sample" and ma.items == 40
    assert measure_sample(Toy(), {"en": []}) is None
    assert machine(Toy())["settings"] == {"batch_size": 16}


def test_the_cache_times_what_the_model_encodes(tmp_path):
    cached = CachedTextEncoder(Toy(), root=tmp_path)
    cached.encode([f"t{i}" for i in range(40)], "en")
    assert cached.timer.items == 40 and [s[0] for s in cached.timer.steps] == [16, 16, 8]
    cached.encode([f"t{i}" for i in range(40)], "en")  # all cached: nothing more timed
    assert cached.timer.items == 40
