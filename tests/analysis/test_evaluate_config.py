"""EvalConfig takes the CLI's spellings of pairs, seeds and models, and refuses every other value
by name when it is made, before any data is read."""
import math

import numpy as np
import pytest

from backretrieval.analysis import EvalConfig
from backretrieval.analysis.evaluate.config import MAX_CORR_BOOT, grid_pairs, grid_seeds
from backretrieval.core import BackretrievalError


def cfg(**kw) -> EvalConfig:
    return EvalConfig(**{"dataset": "emoji-cldr", "pairs": [("en", "de")], "models": ["random"], **kw})


@pytest.mark.parametrize("pairs, expected", [
    (["en-de"], [("en", "de")]),
    ("en-de,en-ja", [("en", "de"), ("en", "ja")]),
    (" en-ja , en-de ", [("en", "ja"), ("en", "de")]),  # in the order given
    (["en-de", ("de", "ja"), ["ja", "en"]], [("en", "de"), ("de", "ja"), ("ja", "en")]),
    (["en:zh-Hant"], [("en", "zh-Hant")]),
    ((("en", "de"),), [("en", "de")]),
])
def test_pairs_as_the_cli_spells_them(pairs, expected):
    assert cfg(pairs=pairs).pairs == expected
    assert grid_pairs(pairs) == expected


@pytest.mark.parametrize("pairs, message", [
    ([], "no language pair given: pairs is empty"),
    ("", "no language pair given"),
    ([("en", "en")], "bad language pair ('en', 'en'): source and target are the same language"),
    (["en-en"], "bad language pair 'en-en': source and target are the same language"),
    ("de-de,en-de", "bad language pair 'de-de': source and target are the same language"),
    (["ende"], "bad language pair 'ende': expected SRC-TGT, e.g. en-de"),
    ([("en", "de", "ja")], "bad language pair ('en', 'de', 'ja'): expected two language codes"),
    ([("en", 3)], "bad language pair ('en', 3): expected two language codes"),
    ([("en", " ")], "bad language pair ('en', ' '): expected two language codes"),
    ([7], "bad language pair 7: expected 'SRC-TGT' or (source, target)"),
    (42, "pairs 42: give 'en-de,en-ja' or a list"),
    (None, "pairs None: give 'en-de,en-ja' or a list"),
])
def test_bad_pairs_are_named(pairs, message):
    with pytest.raises(BackretrievalError) as e:
        cfg(pairs=pairs)
    assert str(e.value).startswith(message), str(e.value)


@pytest.mark.parametrize("seeds, expected", [
    (3, [0, 1, 2]),
    (np.int64(2), [0, 1]),
    ("3", [0, 1, 2]),
    ("0,3,7", [0, 3, 7]),
    ([5, 1], [5, 1]),
    (range(2), [0, 1]),
    (1000, list(range(1000))),
])
def test_seeds_as_the_cli_spells_them(seeds, expected):
    assert cfg(seeds=seeds).seeds == expected
    assert grid_seeds(seeds) == expected


@pytest.mark.parametrize("seeds, message", [
    (0, "seeds=0: the number of seeds must be at least 1"),
    (-2, "seeds=-2: the number of seeds must be at least 1 (one given seed: seeds=[2])"),
    (1001, "seeds=1,001: at most 1,000 seeds in one grid"),
    (10**12, "seeds=1,000,000,000,000: at most 1,000 seeds in one grid"),
    (True, "seeds True (bool): give a count"),
    (2.0, "seeds 2.0 (float): give a count"),
    (None, "seeds None (NoneType): give a count"),
    ("three", "seeds 'three': give a count (3 -> seeds 0..2) or a comma list"),
    ("1,x", "seeds '1,x': give a count"),
    ([1, 1], "seed 1 is given twice"),
])
def test_bad_seeds_are_named(seeds, message):
    with pytest.raises(BackretrievalError) as e:
        cfg(seeds=seeds)
    assert str(e.value).startswith(message), str(e.value)


@pytest.mark.parametrize("kw, message", [
    ({"n": "30"}, "n='30' (str): n must be an integer"),
    ({"n": 30.0}, "n=30.0 (float): n must be an integer"),
    ({"n": 0}, "n=0 is out of range: n must be >= 1"),
    ({"n": True}, "n=True (bool): n must be an integer"),
    ({"k": math.nan}, "k=NaN (float): k must be an integer"),
    ({"k": None}, "k=None (NoneType): k must be an integer"),
    ({"k": 0}, "k=0 is out of range: k must be >= 1"),
    ({"n": 20, "k": 21}, "k=21 is larger than n=20"),
    ({"csls_k": 2.5}, "csls_k=2.5 (float): csls_k must be an integer"),
    ({"sim": "csls", "n": 20, "k": 5, "csls_k": 30}, "csls_k=30 is larger than n=20"),
    ({"sim": "dot"}, "sim='dot': use one of cosine, csls"),
    ({"corr_boot": -1}, "corr_boot=-1 is out of range: corr_boot must be 0 or from 2 to 100,000"),
    ({"corr_boot": 1}, "corr_boot=1 is out of range"),
    ({"corr_boot": 10**9}, "corr_boot=1,000,000,000 is out of range: corr_boot must be 0 or from 2 to 100,000"),
    ({"corr_boot": 0.5}, "corr_boot=0.5 (float): corr_boot must be an integer"),
    ({"dataset_options": ["text=name"]}, "dataset_options must be a dict of loader options, got list"),
    ({"models": []}, "models=[]: give model specs"),
    ({"models": None}, "models=None: give model specs"),
])
def test_bad_settings_are_named(kw, message):
    with pytest.raises(BackretrievalError) as e:
        cfg(**kw)
    assert str(e.value).startswith(message), str(e.value)


def test_good_settings_are_kept_as_python_ints():
    c = cfg(n=np.int64(40), k=np.int32(5), corr_boot=MAX_CORR_BOOT, sim="csls", csls_k=40, models="tfidf-char, random")
    assert (c.n, c.k, c.corr_boot, c.csls_k) == (40, 5, MAX_CORR_BOOT, 40)
    assert all(type(v) is int for v in (c.n, c.k, c.corr_boot, c.csls_k))
    assert c.models == ["tfidf-char", "random"]
    assert cfg(corr_boot=0).corr_boot == 0 and cfg(corr_boot=2).corr_boot == 2


def test_records_and_summaries_keep_the_pairs_in_the_order_given(tmp_path):
    from backretrieval.analysis import run_grid, summarize
    from backretrieval.data.generic import write_example

    data = write_example(tmp_path / "data")
    c = EvalConfig(dataset=str(data), pairs="en-de,de-en", models=["tfidf-char", "random"], image_model="color-hist",
                   n=1, k=1, seeds=2)
    res = run_grid(c, None, progress=False)
    got = [(r["model"], r["src_lang"], r["tgt_lang"], r["seed"]) for r in res.records]
    assert got == [(m, s, t, seed) for m in ("tfidf-char", "random") for s, t in (("en", "de"), ("de", "en")) for seed in (0, 1)]
    assert list(summarize(res.records)["pair"]) == ["en->de", "de->en", "en->de", "de->en"]
