"""Memory-mapped inputs (``np.load(mmap_mode="r")``): the exact and the approximate metrics accept
them, give the same results as in-memory arrays, and read them chunk by chunk instead of holding
a whole copy (tracemalloc's peak stays below one float64 copy of the largest input)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from backretrieval.metrics import bkr, xlr
from backretrieval.metrics.approx import bkr_approx, xlr_approx
from backretrieval.search import unit_rows
from backretrieval.search.faiss_backend import FaissOptions

N = 5000
DIMS = {"src_text": 512, "tgt_text": 512, "src_img": 1280, "tgt_img": 1280}  # use-m's and the CNN's sizes
NAMES = tuple(DIMS)
FULL_F64_COPY = N * max(DIMS.values()) * 8  # bytes of one float64 copy of an image matrix
F32_COPIES = N * sum(DIMS.values()) * 4  # bytes of one float32 copy of every input


def _latent(unit: bool) -> dict[str, np.ndarray]:
    """Aligned rows near a 8-dimensional latent structure (targets: the latent plus noise)."""
    rng = np.random.default_rng(5)
    out = {}
    for side in ("text", "img"):
        z = rng.standard_normal((N, 8)).astype(np.float32)
        P = rng.standard_normal((8, DIMS[f"src_{side}"])).astype(np.float32)
        for name, lat in ((f"src_{side}", z), (f"tgt_{side}", z + 0.6 * rng.standard_normal(z.shape).astype(np.float32))):
            x = lat @ P + 0.2 * rng.standard_normal((N, P.shape[1])).astype(np.float32)
            out[name] = x / np.linalg.norm(x, axis=1, keepdims=True) if unit else 3.0 * x
    return out


@pytest.fixture(scope="module", params=["unit", "raw"])
def arrays(request, tmp_path_factory):
    """(in-memory arrays, the same saved to .npy and loaded with mmap_mode="r"), unit rows or not."""
    mem = _latent(request.param == "unit")
    folder = tmp_path_factory.mktemp(f"memmap-{request.param}")
    for name, x in mem.items():
        np.save(folder / f"{name}.npy", x)
    mapped = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in NAMES}
    assert all(isinstance(x, np.memmap) for x in mapped.values())
    return request.param, mem, mapped


@pytest.fixture
def one_faiss_thread():
    faiss = pytest.importorskip("faiss")
    before = faiss.omp_get_max_threads()
    yield FaissOptions(m=8, ef_construction=20, ef_search=16, threads=1)  # one thread: a deterministic graph
    faiss.omp_set_num_threads(before)


def _peak(fn):
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if key.endswith("calibration_seconds"):
            continue
        if isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        elif key == "nearest":  # (offsets, rows)
            for x, y in zip(a[key], b[key]):
                np.testing.assert_array_equal(x, y, err_msg=key)
        else:
            assert a[key] == b[key], key


def test_exact_route_accepts_memmaps(arrays):
    kind, mem, mm = arrays
    _same(xlr(mm["src_text"], mm["tgt_text"], ks=(1, 10)), xlr(mem["src_text"], mem["tgt_text"], ks=(1, 10)))
    args = lambda d: (d["src_text"], d["tgt_text"], d["src_img"], d["tgt_img"])  # noqa: E731
    got, peak = _peak(lambda: bkr(*args(mm), ks=(1, 10), block_bytes=1 << 20))
    _same(got, bkr(*args(mem), ks=(1, 10)))
    if kind == "unit":
        # float32 unit rows are used where they lie: no copy of a whole input (image: 24 MiB)
        assert peak < N * DIMS["src_img"] * 4, peak
        assert np.shares_memory(unit_rows(mm["src_img"]), mm["src_img"])
    else:
        # rows to normalise: at most one float32 unit copy of each input (the tiles' working
        # memory included); a float64 copy of an image side instead would add 25.6 MB on top
        assert peak < F32_COPIES, peak


def test_approximate_route_accepts_memmaps_without_copying_them(arrays, one_faiss_thread):
    _, mem, mm = arrays
    opts = one_faiss_thread
    kw = {"method": "hnsw", "options": opts, "cost_check": False, "found_at": True}
    got, peak_x = _peak(lambda: xlr_approx(mm["src_text"], mm["tgt_text"], (1, 10), **kw))
    want = xlr_approx(mem["src_text"], mem["tgt_text"], (1, 10), **kw)
    _same(got, want)
    assert got["text_route"] == got["t2s_route"] == "approximate"
    args = lambda d: (d["src_text"], d["tgt_text"], d["src_img"], d["tgt_img"])  # noqa: E731
    got, peak_b = _peak(lambda: bkr_approx(*args(mm), (1, 10), **kw))
    _same(got, bkr_approx(*args(mem), (1, 10), **kw))
    assert got["image_route"] == "approximate"
    # chunks of at most FAISS's chunk size (all 5,000 rows here, float32) and bounded exact blocks
    # for the self-check; a float64 copy of an input would exceed this
    assert max(peak_x, peak_b) < FULL_F64_COPY, (peak_x, peak_b)
    # the flat (exact) index and the exact metrics agree on the memory-mapped inputs too
    flat = xlr_approx(mm["src_text"], mm["tgt_text"], (1, 10), method="flat")
    exact = xlr(mem["src_text"], mem["tgt_text"], ks=(1, 10))
    assert (flat["xlr@1"], flat["xlr@10"]) == (exact["xlr@1"], exact["xlr@10"])  # flat search is the exact route
