"""data.splits: the one content-hash split; M3L's image splits are bit-identical to the formula
they were written with before."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval.core import BackretrievalError, content_hash
from backretrieval.data.splits import hash_split, hash_uniform
from backretrieval.train.m3l import assign_splits


def _old_m3l_assign_splits(keys, seed, test_frac, val_frac):
    """train/m3l.py's assign_splits before the shared split (verbatim)."""
    u = np.array([int(content_hash(f"{int(seed)}\x00{k}", 8), 16) / 2.0**64 for k in keys], dtype=np.float64)
    out = np.zeros(len(keys), dtype=np.int8)
    out[u < test_frac + val_frac] = 1
    out[u < test_frac] = 2
    return out


@pytest.mark.parametrize("seed,test_frac,val_frac", [(0, 0.25, 0.1), (3, 0.5, 0.0), (7, 0.0, 0.3), (1, 0.1, 0.15)])
def test_m3l_splits_bit_identical_to_the_old_rule(seed, test_frac, val_frac):
    keys = [f"file:{i:05d}" for i in range(3000)] + ["feat:x", "", "é"]
    got = assign_splits(keys, seed, test_frac, val_frac)
    old = _old_m3l_assign_splits(keys, seed, test_frac, val_frac)
    assert got.dtype == old.dtype and np.array_equal(got, old)


def test_hash_split_bands_against_a_naive_loop():
    keys = [f"k{i}" for i in range(2000)]
    fr = (0.2, 0.3, 0.1)
    u = hash_uniform(keys, 5)
    naive = []
    for x in u:
        lo, band = 0.0, len(fr)
        for i, f in enumerate(fr):
            if lo <= x < lo + f:
                band = i
                break
            lo += f
        naive.append(band)
    got = hash_split(keys, 5, fr)
    assert got.tolist() == naive
    shares = np.bincount(got, minlength=4) / len(keys)
    assert np.allclose(shares, [0.2, 0.3, 0.1, 0.4], atol=0.04)
    # a key's band depends on its key and the seed only
    assert hash_split(keys[:50], 5, fr).tolist() == got[:50].tolist()
    assert hash_split(keys, 6, fr).tolist() != got.tolist()
    assert hash_uniform(["a"], 1, sep=":")[0] == int(content_hash("1:a", 8), 16) / 2.0**64


def test_hash_split_refuses_bad_shares():
    with pytest.raises(BackretrievalError, match="share 1 must be in"):
        hash_split(["a"], 0, (0.2, 1.5))
    with pytest.raises(BackretrievalError, match="sum to"):
        hash_split(["a"], 0, (0.6, 0.5))
    with pytest.raises(BackretrievalError, match="share 0"):
        hash_split(["a"], 0, (float("nan"),))
