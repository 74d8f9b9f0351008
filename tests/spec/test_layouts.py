"""Layouts as an axis: the scenario's `parallel` block, keys, groups, labels and the rules."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness import __version__
from harness.cli.main import app
from harness.errors import UserInputError
from harness.spec import scenario
from harness.spec.capabilities import Layout
from harness.spec.labels import configuration_label

BASE = """\
name: layouts
models: [meta-llama/Llama-3.1-70B-Instruct, mistralai/Mixtral-8x7B-v0.1]
backend: [vllm, transformers]
quantization: [bf16]
batch: [1]
context: [128]
output_tokens: 16
targets: [cuda]
"""


def grid(parallel: str) -> scenario.Grid:
    return scenario.expand(scenario.parse(BASE + parallel))


def test_a_layout_is_written_as_its_label_and_read_back() -> None:
    layout = Layout.model_validate("tp=4,pp=2")
    assert (layout.tensor, layout.pipeline, layout.expert, layout.cards) == (4, 2, False, 8)
    assert Layout(tensor=8, expert=True).label == "tp=8,ep"
    with pytest.raises(ValueError):
        Layout.model_validate("tp=two")


def test_each_point_carries_its_layout_in_key_group_and_label() -> None:
    g = grid("parallel: {cards: 8, tensor: [1, 2]}\n")
    vllm = [p for p in g.points if p.backend == "vllm" and p.model.startswith("meta")]
    one, two = sorted(vllm, key=lambda p: p.layout is not None)
    assert one.layout is None and two.layout == Layout(tensor=2)
    assert one.key("c") != two.key("c") and one.group != two.group
    assert two.group.label.endswith("|tp=2|cuda") and two.group.cards == 2
    row = two.model_dump()
    assert configuration_label(row) == "vllm bf16 kv=auto tp=2 b=1 ctx=128"


def test_a_one_card_key_stays_that_of_earlier_runs() -> None:
    point = grid("").points[0]
    fields = point.model_dump()
    # the key as it was before layouts: the same fields without `layout` (and without the
    # defaults that earlier keys also leave out)
    for name in ("layout", "speculative", "weights", "adapter", "serving", "training", "inputs"):
        fields.pop(name, None)
    payload = json.dumps({**fields, "harness": __version__, "corpus": "c"}, sort_keys=True)
    assert point.key("c") == hashlib.sha256(payload.encode()).hexdigest()[:20]


def test_the_rules_skip_what_a_model_or_engine_cannot_lay_out_with_the_reason() -> None:
    g = grid("parallel: {cards: 16, tensor: [1, 3, 16], expert: [false, true]}\n")
    reasons = {(s.point.model[:7], s.point.backend, s.point.layout.label): s.reason
               for s in g.skipped if s.point.layout}  # fmt: skip
    assert "[rule tp-divides-heads]" in reasons[("meta-ll", "vllm", "tp=3")]  # 64 heads
    assert "[rule ep-moe-only]" in reasons[("meta-ll", "vllm", "tp=16,ep")]
    assert "[rule ep-needs-ranks]" in reasons[("mistral", "vllm", "tp=1,ep")]
    assert "tp_plan='auto'" in reasons[("mistral", "transformers", "tp=16")]
    kept = {(p.model[:7], p.backend, p.layout and p.layout.label) for p in g.points}
    # 16 ranks over 8 KV heads: each KV head replicated on 2 ranks (16 is a multiple of 8)
    assert ("meta-ll", "vllm", "tp=16") in kept
    assert ("mistral", "vllm", "tp=16,ep") in kept
    assert ("mistral", "vllm", None) in kept  # tp=1 without experts spread: one card, no layout


def test_tp_must_divide_the_kv_heads_or_be_a_multiple_of_them() -> None:
    # Qwen2.5-7B: 28 heads, 4 KV heads; tp=7 divides the heads, but 7 is no multiple of 4
    text = BASE.replace(
        "models: [meta-llama/Llama-3.1-70B-Instruct, mistralai/Mixtral-8x7B-v0.1]",
        "models: [Qwen/Qwen2.5-7B-Instruct]",
    )
    g = scenario.expand(scenario.parse(text + "parallel: {tensor: [7]}\n"))
    vllm = [s for s in g.skipped if s.point.backend == "vllm"]
    assert vllm and "[rule tp-kv-heads]" in vllm[0].reason


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ("parallel: {cards: 2, tensor: [1, 4]}", "tensor=4 exceeds the node's 2 cards"),
        ("parallel: {cards: 4, tensor: [4], pipeline: [2]}", "exceeds the cluster's 4 cards"),
        ("parallel: {tensor: [0]}", "parallel.tensor"),
        ("parallel: {tensor: [2, 2]}", "parallel.tensor"),
        ("parallel: {tensor: [2], expert: [1]}", "parallel.expert"),
    ],
)
def test_a_bad_layout_is_one_line_naming_file_line_and_field(block: str, words: str) -> None:
    with pytest.raises(UserInputError) as exc:
        scenario.parse(BASE + block + "\n", "s.yaml")
    text = str(exc.value)
    assert words in text and "s.yaml:9:" in text and "\n" not in text


def test_the_cli_exits_2_on_a_layout_wider_than_the_node(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASE + "parallel: {cards: 2, tensor: [4]}\n")
    result = CliRunner().invoke(app, ["plan", str(bad)])
    assert result.exit_code == 2
    assert "exceeds the node's 2 cards" in result.output
