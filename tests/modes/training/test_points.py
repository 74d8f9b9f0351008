"""harness.modes.training.points: one training point per (model, backend, configuration,
target), a LoRA rank above what a matrix can hold refused, and why a point cannot train."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.modes.training.points import training_points, training_skip_reason
from harness.spec import catalog, scenario

ROOT = Path(__file__).resolve().parents[3]
TRAINING = (ROOT / "scenarios" / "training.yaml").read_text()


def test_each_configuration_is_one_point_that_generates_nothing_and_runs_once() -> None:
    points = training_points(scenario.parse(TRAINING), [])
    # 3 methods x 2 micro-batches x 2 accumulations x 1 seq_len, on 1 model, backend, target
    assert len(points) == 12
    assert {(p.output_tokens, p.repeats, p.warmups, p.context) for p in points} == {(0, 1, 0, 64)}
    assert sorted({p.batch for p in points}) == [1, 4]  # the micro-batch
    assert {p.window_tokens for p in points} == {64} and {p.max_windows for p in points} == {32}


def test_a_lora_rank_above_the_smallest_side_of_a_targeted_matrix_is_refused() -> None:
    # tiny-llama: hidden 256, k_proj 256 x (2 KV heads x 64) = 256 x 128; q_proj 256 x 256
    # holds rank 200, k_proj (the next target) holds at most 128
    big = TRAINING.replace("r: 8,", "r: 200,")
    with pytest.raises(UserInputError, match=r"lora\.r 200 exceeds min\(in, out\) = 128 of k_proj"):
        training_points(scenario.parse(big), [])


def test_a_point_on_another_engine_cannot_train_and_one_on_transformers_can() -> None:
    (point, *_) = training_points(scenario.parse(TRAINING), [])
    arch = catalog.model(point.model)
    assert training_skip_reason(point, arch) is None
    vllm = point.model_copy(update={"backend": "vllm"})
    assert "[rule training-needs-transformers]" in (training_skip_reason(vllm, arch) or "")
