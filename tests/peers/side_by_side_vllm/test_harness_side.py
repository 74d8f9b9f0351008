"""harness.peers.side_by_side_vllm.harness_side: the scenario the comparison reads, its model."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.peers.side_by_side_vllm import harness_side
from harness.peers.side_by_side_vllm.run import DEFAULT_SCENARIO


def test_the_scenario_is_the_points_the_comparison_reads() -> None:
    scenario = harness_side.read_scenario(DEFAULT_SCENARIO)
    assert scenario["backend"] == ["vllm"]
    assert scenario["quantization"] in (["fp32"], ["none"])
    assert harness_side.model_dir(str(scenario["models"][0])).joinpath("config.json").is_file()


def test_a_scenario_with_two_weight_formats_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text("models: [tiny-llama]\nbackend: [vllm]\nquantization: [fp32, bf16]\n")
    with pytest.raises(SystemExit, match="one quantization"):
        harness_side.read_scenario(path)


def test_a_model_that_is_nowhere_is_refused() -> None:
    with pytest.raises(SystemExit, match="neither harness/data/no-such-model"):
        harness_side.model_dir("no-such-model")
