"""The rules between Cr5's training options (train/cr5/plan.py), the same for the command line and Python."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from backretrieval.cli import main
from backretrieval.train.cr5 import Cr5OptionError, Split, plan_training


@pytest.mark.parametrize("kwargs,option,python,cli", [
    (dict(lams=[1, 0]), "lam", "lambda 0 is not positive", "lambda 0 is not positive"),
    (dict(regime="pairwise"), "pair", "pairwise training needs pair", "pairwise training needs --pair"),
    (dict(regime="transitive", pair=("de", "ja")), "pivot", "transitive training needs pivot", "transitive training needs --pivot"),
    (dict(min_words=10, max_words=5), "max_words", "max_words 5 is below min_words 10", "--max-words 5 is below --min-words 10"),
    (dict(split=Split(["de", "en"], [], {}, {}, [], 0), holdout=False), "split", "split and holdout=False exclude each other",
     "--split and --no-holdout exclude each other"),
    (dict(lams=[1, 3], holdout=False), "lam", "training without held-out concepts (holdout=False) cannot choose lambda: give one lambda",
     "training without held-out concepts (--no-holdout) cannot choose lambda: give one lambda"),
])
def test_each_rule_names_its_option_in_the_callers_spelling(kwargs, option, python, cli):
    with pytest.raises(Cr5OptionError) as e:
        plan_training(**kwargs)
    assert e.value.option == option and str(e.value) == f"{option}: {python}"
    assert e.value.reason(cli=True) == cli and e.value.flag == "--" + option.replace("_", "-")


def test_plan_fills_in_the_pair_and_the_languages_to_load():
    p = plan_training(regime="pairwise", languages=["de", "ja"], lams=[0.3, 1])
    assert (p.pair, p.trained, p.load, p.lams) == (("de", "ja"), ["de", "ja"], ["de", "ja"], [0.3, 1.0])
    p = plan_training(regime="transitive", pair=("de", "ja"), pivot="en")
    assert p.trained == ["de", "ja", "en"] and p.load == ["de", "ja", "en"]
    split = Split(["de", "en", "fr"], [], {}, {}, [], 0)
    p = plan_training(split=split)
    assert p.trained == ["de", "en", "fr"] and p.load == ["de", "en", "fr"]
    assert plan_training().load is None  # joint over every language of the dataset


def test_the_command_reports_the_rule_as_an_option_error(tmp_path):
    res = CliRunner().invoke(main, ["train", "cr5", "--dataset", "emoji-cldr", "--regime", "transitive", "--pair", "de-ja",
                                    "--out", str(tmp_path / "m")])
    assert res.exit_code == 2 and "Invalid value for '--pivot': transitive training needs --pivot" in res.output
    assert not (tmp_path / "m").exists()
