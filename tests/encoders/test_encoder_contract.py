"""Every registered text and image model keeps the encoder contract
(:mod:`backretrieval.encoders.checks`): the list of models comes from the registries, so a new
plugin is checked here without editing this file, and one without an ``example`` hook fails."""
from __future__ import annotations

import dataclasses

import pytest

from backretrieval.core import EncoderError
from backretrieval.encoders import (
    ContractError, build_encoder, check_image_encoder, check_text_encoder, get_image_encoder, get_text_encoder,
    list_image_encoders, list_text_encoders,
)

TEXT = list_text_encoders()
IMAGE = list_image_encoders()


@pytest.mark.parametrize("info", TEXT, ids=[i.name for i in TEXT])
def test_text_model_keeps_the_contract(info, tmp_path):
    check_text_encoder(info, tmp_path)


@pytest.mark.parametrize("info", IMAGE, ids=[i.name for i in IMAGE])
def test_image_model_keeps_the_contract(info, tmp_path):
    check_image_encoder(info, tmp_path)


def test_the_registries_hold_the_built_in_models():
    assert {"use-m", "e5-small", "minilm-en", "st", "precomputed", "cr5", "triplet", "m3l", "random", "tfidf-char"} <= {
        i.name for i in TEXT
    }
    assert {"color-hist", "efficientnet-lite0", "mobilenet-v2", "precomputed"} <= {i.name for i in IMAGE}


def test_a_model_without_an_example_fails_with_a_message_saying_to_add_one(tmp_path):
    info = dataclasses.replace(next(i for i in TEXT if i.name == "random"), name="new-plugin", example=None)
    with pytest.raises(ContractError, match=r"text model 'new-plugin' registers no example: give its declaration an example=hook \(register_text"):
        check_text_encoder(info, tmp_path)


def test_a_broken_promise_is_named(tmp_path):
    """The checks catch what they check: a model that says it is unit norm and is not, and one whose
    other vectors keep the version."""
    random = next(i for i in TEXT if i.name == "random")

    def scaled(**options):
        enc = build_encoder(random, **options)
        encode = enc.encode
        enc.encode = lambda texts, lang, **kw: 2 * encode(texts, lang, **kw)
        return enc

    with pytest.raises(ContractError, match=r"'scaled' fails 'unit norm': promises unit_norm but row \d+ has L2 norm 2\.0"):
        check_text_encoder(dataclasses.replace(random, name="scaled", factory=scaled), tmp_path / "a")

    def same_version(**options):
        enc = build_encoder(random, **options)
        enc.version = "fixed"
        return enc

    with pytest.raises(ContractError, match=r"'fixed' fails 'the version is the cache key': .* gives other vectors under the same version"):
        check_text_encoder(dataclasses.replace(random, name="fixed", factory=same_version), tmp_path / "b")


def test_an_unknown_model_is_named():
    with pytest.raises(ContractError, match="no registered text model 'no-such-model'"):
        check_text_encoder("no-such-model")
    with pytest.raises(EncoderError, match="unknown text model 'no-such-model'"):
        get_text_encoder("no-such-model")
    with pytest.raises(EncoderError, match=r"^unknown text model 'e5-smal' \(did you mean 'e5-small'\?\); known: cr5, "):
        get_text_encoder("e5-smal")
    with pytest.raises(EncoderError, match=r"^unknown image model 'colour-hist' \(did you mean 'color-hist'\?\); known: "):
        get_image_encoder("colour-hist")


def test_the_plugin_guide_runs(tmp_path):
    """docs/plugins.md's worked example, in a fresh interpreter (it registers a model): the plugin is
    declared, passes the checks and is built from a spec string with options."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```python\n(.*?)```", guide, re.S)
    proc = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("letter-counts?lowercase=false letter-counts-1/cased (1, 27)")
