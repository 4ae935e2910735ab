"""cli/output_paths.py: no output of a command overwrites one of its inputs or lands in a folder
it reads, and a file is not written where a folder stands."""
from __future__ import annotations

import pytest

from backretrieval.core.errors import OutputError
from backretrieval.cli.output_paths import (
    check_file_not_input, check_inputs_kept, check_not_inputs, check_output_paths, model_paths,
)


def test_a_folder_where_a_file_is_written(tmp_path):
    (tmp_path / "summary.md").mkdir()
    with pytest.raises(OutputError, match="summary.md is a folder where the run writes a file"):
        check_output_paths(tmp_path)
    check_output_paths(tmp_path / "new")  # a folder that does not exist yet is fine


def test_an_input_among_the_outputs(tmp_path):
    data = tmp_path / "results.jsonl"
    data.write_text("{}\n")
    with pytest.raises(OutputError, match=r"would overwrite the input .*results\.jsonl \(--dataset\)"):
        check_not_inputs(tmp_path, [(str(data), "--dataset")])
    check_not_inputs(tmp_path / "elsewhere", [(str(data), "--dataset")])
    check_not_inputs(tmp_path, [(None, "--dataset"), ("not-a-file", "--dataset")])


def test_out_inside_a_model_folder(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    assert model_paths([f"cr5:{model}", f"precomputed:{model}@noise=0.5", "random", object()]) == [
        (str(model), f"--models cr5:{model}"), (str(model), f"--models precomputed:{model}@noise=0.5")]
    with pytest.raises(OutputError, match="would write into the input folder"):
        check_inputs_kept(model / "out", "emoji-cldr", {}, models=[([f"cr5:{model}"], "--models")])


def test_the_one_output_file(tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text("x")
    with pytest.raises(OutputError, match=r"--out .* would overwrite the input"):
        check_file_not_input(f, [(str(f), "--dataset")])
    check_file_not_input(tmp_path / "other.jsonl", [(str(f), "--dataset")])

