"""The `training:` block: strict like the rest of a scenario, training-only scenarios, the grid."""

from __future__ import annotations

import hashlib
import json

import pytest

from harness import __version__
from harness.errors import UserInputError
from harness.spec import scenario as scen

TRAINING_ONLY = """\
name: lora-vs-full
models: [tiny-llama]
backend: [transformers]
targets: [cpu]
repeats: 1
training:
  method: [full, lora, qlora]
  micro_batch: [1, 4]
  grad_accum: [1, 4]
  seq_len: [256]
  gradient_checkpointing: [false, true]
  optimizer: [adamw, adamw-8bit]
  steps: 30
  lr: 2.0e-4
  lora: {r: 8, alpha: 16, targets: [q_proj, k_proj, v_proj, o_proj]}
  data: {train: tinyshakespeare, eval: tinyshakespeare}
  target_eval_loss: null
"""


def test_the_issue_example_expands_to_every_training_configuration() -> None:
    grid = scen.expand(scen.parse(TRAINING_ONLY))
    assert len(grid.points) == 3 * 2 * 2 * 2 * 2 and not grid.skipped
    assert {p.mode for p in grid.points} == {"training"}
    qlora = [p for p in grid.points if p.training and p.training.method == "qlora"]
    assert {p.quantization for p in qlora} == {"bnb-nf4"}
    # each training point is a group of its own, and keys differ
    assert len({p.group for p in grid.points}) == len(grid.points)
    assert len({p.key("c") for p in grid.points}) == len(grid.points)


def test_a_scenario_without_training_still_needs_the_inference_axes() -> None:
    text = "name: t\nmodels: [tiny-llama]\nbackend: [transformers]\ntargets: [cpu]\nbatch: [1]\n"
    with pytest.raises(UserInputError, match="quantization: required field is missing"):
        scen.parse(text)


def test_inference_axes_beside_training_are_all_or_none() -> None:
    with pytest.raises(UserInputError, match="give all of quantization"):
        scen.parse(TRAINING_ONLY + "batch: [1]\n")
    both = scen.parse(
        TRAINING_ONLY + "quantization: [none]\nbatch: [1]\ncontext: [16]\noutput_tokens: 4\n"
    )
    modes = [p.mode for p in scen.expand(both).points]
    assert modes.count("offline") == 1 and modes.count("training") == 48


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("method: [full, lora, qlora]", "method: [full, dora]", "method"),
        ("micro_batch: [1, 4]", "micro_batch: [1, 1]", "duplicate value"),
        ("steps: 30", "steps: '30'", "steps"),
        ("steps: 30", "steps: 0", "greater than 0"),
        ("targets: [q_proj, k_proj", "targets: [qproj, k_proj", "q_proj"),
        ("optimizer: [adamw, adamw-8bit]", "optimizer: [sgd]", "optimizer"),
        ("lr: 2.0e-4", "lr: 2.0e-4\n  epochs: 3", "epochs"),
    ],
)
def test_bad_training_input_names_the_field(old: str, new: str, message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        scen.parse(TRAINING_ONLY.replace(old, new))


def test_vllm_does_not_train_and_says_so() -> None:
    text = TRAINING_ONLY.replace("backend: [transformers]", "backend: [transformers, vllm]")
    grid = scen.expand(scen.parse(text))
    assert len(grid.skipped) == 48 and {s.point.backend for s in grid.skipped} == {"vllm"}
    lora = [s for s in grid.skipped if s.point.training and s.point.training.method != "qlora"]
    assert lora and all("training-needs-transformers" in s.reason for s in lora)


def test_inference_keys_do_not_change_with_the_training_field() -> None:
    point = scen.Point(
        model="tiny-llama", backend="transformers", quantization="none",
        kv_cache_dtype="auto", batch=1, context=16, output_tokens=4, target="cpu",
    )  # fmt: skip
    fields = point.model_dump()
    # what earlier keys did not hold (the layout, speculation and the files read: unset here)
    for name in ("weights", "adapter", "serving", "training", "layout", "speculative", "inputs"):
        fields.pop(name, None)
    payload = json.dumps({**fields, "harness": __version__, "corpus": "abc"}, sort_keys=True)
    assert point.key("abc") == hashlib.sha256(payload.encode()).hexdigest()[:20]
    assert point.group.label == "tiny-llama|transformers|none|kv=auto|cpu"
