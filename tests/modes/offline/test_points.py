"""harness.modes.offline.points: one offline point per combination of the inference axes, in the
order of the axes."""

from __future__ import annotations

from pathlib import Path

from harness.modes.offline.points import offline_points
from harness.spec import scenario

ROOT = Path(__file__).resolve().parents[3]

GRID = """name: s
models: [tiny-llama]
backend: [transformers]
quantization: [fp32, bf16]
batch: [1, 2]
context: [64]
output_tokens: 16
targets: [cpu]
"""


def test_every_combination_of_the_axes_is_one_point_the_later_axes_varying_first() -> None:
    points = offline_points(scenario.parse(GRID), [])
    # 1 model x 1 backend x 2 quantizations x 2 batches x 1 context = 4, batch varying first
    assert [(p.quantization, p.batch) for p in points] == [
        ("fp32", 1), ("fp32", 2), ("bf16", 1), ("bf16", 2),
    ]  # fmt: skip
    assert {(p.model, p.backend, p.context, p.output_tokens, p.target) for p in points} == {
        ("tiny-llama", "transformers", 64, 16, "cpu")
    }


def test_a_training_only_scenario_has_no_offline_point() -> None:
    training = scenario.parse((ROOT / "scenarios" / "training.yaml").read_text())
    assert training.batch is None  # no inference axes: nothing to combine
    assert offline_points(training, []) == []
