"""Speculative decoding as an axis: typed entries, labels, keys, groups, rules with reasons, bad
input as one line, vLLM's speculative_config and the draft's terms in the memory plan."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness import __version__
from harness import plan as planner
from harness.cli.main import app
from harness.errors import UserInputError
from harness.spec import catalog, scenario, speculative
from harness.spec.labels import configuration_label
from harness.units import GIB

BASE = """\
name: spec
models: [meta-llama/Llama-3.1-8B-Instruct]
backend: [vllm, transformers]
quantization: [none]
batch: [64]
context: [2048]
output_tokens: 256
targets: [cuda]
gpu: H100-SXM-80GB
"""
AXIS = """speculative:
  - none
  - {method: ngram, tokens: 4, lookup: [2, 4]}
  - {method: draft, model: llama-3.2-1b, tokens: 5}
"""


def grid(text: str = AXIS) -> scenario.Grid:
    return scenario.expand(scenario.parse(BASE + text))


def vllm_points(g: scenario.Grid) -> list[scenario.Point]:
    return [p for p in g.points if p.backend == "vllm"]


def test_each_entry_is_typed_by_its_method_and_written_as_its_label() -> None:
    s = scenario.parse(BASE + AXIS)
    none, ngram, draft = s.speculations
    assert none is None
    assert isinstance(ngram, speculative.Ngram) and ngram.lookup == (2, 4)
    assert isinstance(draft, speculative.Draft) and draft.model == "llama-3.2-1b"
    assert ngram.label == "ngram:k=4,lookup=2-4"
    assert draft.label == "draft:k=5,model=llama-3.2-1b"
    # the label reads back to the same configuration (rows and keys hold the label)
    point = vllm_points(grid())[1]
    assert scenario.Point.model_validate(point.model_dump()) == point


def test_each_point_carries_its_speculation_in_key_group_and_label() -> None:
    plain, ngram, draft = vllm_points(grid())
    assert plain.speculative is None
    assert len({plain.key("c"), ngram.key("c"), draft.key("c")}) == 3
    assert len({plain.group, ngram.group, draft.group}) == 3
    assert ngram.group.label.endswith("|spec=ngram:k=4,lookup=2-4|cuda")
    assert configuration_label(ngram.model_dump()) == (
        "vllm none kv=auto spec=ngram:k=4,lookup=2-4 b=64 ctx=2048"
    )
    assert configuration_label(plain.model_dump()) == "vllm none kv=auto b=64 ctx=2048"


def test_a_key_without_speculation_stays_that_of_earlier_runs() -> None:
    point = vllm_points(grid(""))[0]
    fields = point.model_dump()
    for name in ("speculative", "layout", "weights", "adapter", "serving", "training", "inputs"):
        fields.pop(name, None)
    payload = json.dumps({**fields, "harness": __version__, "corpus": "c"}, sort_keys=True)
    assert point.key("c") == hashlib.sha256(payload.encode()).hexdigest()[:20]


def test_speculation_is_skipped_on_transformers_with_its_reason() -> None:
    g = grid()
    reasons = [s.reason for s in g.skipped if s.point.speculative is not None]
    # 2 speculative entries × transformers: both refused, vLLM only
    assert len(reasons) == 2
    assert all("[rule speculation-vllm-only]" in r for r in reasons)


def test_a_draft_with_another_tokenizer_is_skipped() -> None:
    # Qwen2.5-0.5B's vocabulary (151,936) is not Llama-3.1's (128,256)
    g = grid("speculative: [{method: draft, model: qwen2.5-0.5b, tokens: 3}]\n")
    (skip,) = [s for s in g.skipped if s.point.backend == "vllm"]
    assert "[rule draft-same-tokenizer]" in skip.reason and "151,936" in skip.reason


def test_mtp_only_where_the_checkpoint_ships_mtp_layers() -> None:
    g = grid("speculative: [{method: mtp, tokens: 1}]\n")
    (skip,) = [s for s in g.skipped if s.point.backend == "vllm"]
    assert "[rule mtp-checkpoint-ships-layers]" in skip.reason


def test_an_eagle_head_of_another_width_is_skipped() -> None:
    # Llama-3.2-1B (hidden 2048) as a head for Llama-3.1-8B (hidden 4096)
    g = grid("speculative: [{method: eagle3, model: llama-3.2-1b, tokens: 3}]\n")
    (skip,) = [s for s in g.skipped if s.point.backend == "vllm"]
    assert "[rule eagle-head-width]" in skip.reason and "2048" in skip.reason


def test_eagle_is_not_measured_on_the_cpu_and_ngram_is() -> None:
    text = BASE.replace("targets: [cuda]", "targets: [cpu]").replace("gpu: H100-SXM-80GB\n", "")
    text = text.replace("meta-llama/Llama-3.1-8B-Instruct", "tiny-llama")
    text = text.replace("context: [2048]", "context: [128]").replace(": 256", ": 16")
    g = scenario.expand(
        scenario.parse(
            text
            + """speculative:
  - {method: ngram, tokens: 2}
  - {method: eagle, model: tiny-llama, tokens: 2}
"""
        )
    )
    assert [p.speculative.label for p in g.points if p.speculative] == ["ngram:k=2,lookup=2-4"]
    (skip,) = [s for s in g.skipped if s.point.backend == "vllm"]
    assert "[rule speculation-eagle-targets]" in skip.reason


def test_a_synthetic_replay_is_skipped_on_the_cpu_with_vllm_s_own_limit() -> None:
    # vLLM CPU 0.32 asserts "Synthetic acceptance not supported with CPU sampling" at its first
    # step (run here on 2026-12-05): skipped with that reason, never an error row
    text = BASE.replace("targets: [cuda]", "targets: [cpu]").replace("gpu: H100-SXM-80GB\n", "")
    text = text.replace("meta-llama/Llama-3.1-8B-Instruct", "tiny-llama")
    text = text.replace("context: [2048]", "context: [128]").replace(": 256", ": 16")
    axis = "speculative: [{method: ngram, tokens: 4, synthetic: 2.5}]\n"
    g = scenario.expand(scenario.parse(text + axis))
    assert g.points == []
    (skip,) = [s for s in g.skipped if s.point.backend == "vllm"]
    assert "[rule speculation-synthetic-gpu-only]" in skip.reason
    assert "Synthetic acceptance not supported with CPU sampling" in skip.reason
    assert [p.speculative for p in grid(axis).points if p.backend == "vllm"] != []  # on CUDA


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ("speculative: [{method: medusa, tokens: 2}]", "speculative"),
        ("speculative: [{method: ngram, tokens: 0}]", "speculative"),
        ("speculative: [{method: ngram, tokens: 4, lookup: [4, 2]}]", "min 4 > max 2"),
        ("speculative: [{method: ngram, tokens: 2, synthetic: 4.5}]", "exceeds tokens + 1 = 3"),
        ("speculative: [{method: draft, tokens: 2, model: no-such-model}]", "no-such-model"),
        ("speculative: [none, none]", "listed twice"),
        ("speculative: [{method: ngram, tokens: '4'}]", "speculative"),
    ],
)
def test_bad_speculation_is_one_line_naming_file_line_and_field(block: str, words: str) -> None:
    with pytest.raises(UserInputError) as exc:
        scenario.parse(BASE + block + "\n", "s.yaml")
    text = str(exc.value)
    assert words in text and "s.yaml:10:" in text and "\n" not in text


def test_the_cli_exits_2_on_an_unknown_method(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASE + "speculative: [{method: lookahead, tokens: 2}]\n")
    result = CliRunner().invoke(app, ["plan", str(bad)])
    assert result.exit_code == 2
    assert "bad.yaml:10" in result.output


def test_vllm_speculative_config_follows_vllm_names() -> None:
    from harness.backends.vllm.args import speculative_config

    ngram, draft = scenario.parse(BASE + AXIS).speculations[1:]
    assert ngram is not None and draft is not None
    assert speculative_config(ngram) == {
        "method": "ngram", "num_speculative_tokens": 4,
        "prompt_lookup_min": 2, "prompt_lookup_max": 4,
    }  # fmt: skip
    assert speculative_config(draft) == {
        "method": "draft_model", "num_speculative_tokens": 5, "model": "llama-3.2-1b",
    }  # fmt: skip
    replay = speculative.Ngram(tokens=3, synthetic=2.5)
    config = speculative_config(replay)
    assert config["rejection_sample_method"] == "synthetic"
    assert config["synthetic_acceptance_length"] == 2.5
    assert replay.label == "ngram:k=3,synthetic=2.5,lookup=2-4"


# --- the memory plan (golden values by hand) ----------------------------------------------------


def test_the_draft_adds_its_weights_and_its_kv_per_token() -> None:
    _, ngram, draft = vllm_points(grid())
    target = catalog.model("meta-llama/Llama-3.1-8B-Instruct")
    # n-gram lookup loads nothing
    assert planner.draft_terms(ngram, target) == (0.0, 0.0)
    weights, kv = planner.draft_terms(draft, target)
    # Llama-3.2-1B: KV = 2 × 16 layers × 8 kv_heads × 64 head_dim × 2 bytes = 32,768 B per token
    assert kv == 32_768
    # params: embeddings 128,256 × 2,048 = 262,668,288 (tied: no lm_head); per layer attention
    # q,o 2 × 2048² = 8,388,608 + k,v 2 × 2048 × 512 = 2,097,152, MLP 3 × 2048 × 8192 =
    # 50,331,648, norms 2 × 2048 = 4,096 → 60,821,504 × 16 = 973,144,064; final norm 2,048;
    # total 1,235,814,400 × 2 bytes (bf16) = 2,471,628,800 B
    assert weights == 2_471_628_800
    # Llama-3.1-8B: 2 × 32 × 8 × 128 × 2 = 131,072 B per token; scale 1 + 32,768 / 131,072
    assert planner.speculative_kv_scale(draft, target) == 1.25


def test_an_80_gb_card_shows_the_kv_pool_shrink() -> None:
    _, _, draft = vllm_points(grid())
    plan = planner.plan_point(draft, catalog.gpu("H100-SXM-80GB"))
    plain = planner.plan_point(draft.model_copy(update={"speculative": None}),
                               catalog.gpu("H100-SXM-80GB"))  # fmt: skip
    # KV: 64 sequences × 2,304 tokens × 131,072 B = 18 GiB plain, × 1.25 with the draft
    assert plain.kv_cache_gib == pytest.approx(18.0)
    assert plan.kv_cache_gib == pytest.approx(22.5)
    assert plan.draft_kv_cache_gib == pytest.approx(4.5)
    assert plan.weights_gib - plain.weights_gib == pytest.approx(2_471_628_800 / GIB)
    assert plan.pool is not None and plan.pool.tokens < plan.pool.tokens_plain
    assert plan.pool.batch < plan.pool.batch_plain
    assert "shrinks the KV pool" in plan.reason
    assert plan.contract()["largest_batch"] == plan.pool.batch


def test_pool_shrink_by_hand() -> None:
    pool = speculative.pool_shrink(
        capacity_bytes=72 * GIB,
        held_bytes=20 * GIB,
        draft_weights_bytes=2 * GIB,
        kv_per_token=131_072,
        draft_kv_per_token=32_768,
        sequence_tokens=2_048,
    )
    # plain: 52 GiB / 131,072 B = 425,984 tokens → 208 sequences of 2,048
    assert (pool.tokens_plain, pool.batch_plain) == (425_984, 208)
    # draft: 50 GiB / 163,840 B = 327,680 tokens → 160 sequences; 23.08 % fewer tokens
    assert (pool.tokens, pool.batch) == (327_680, 160)
    assert pool.shrink_pct == pytest.approx(100 * (1 - 327_680 / 425_984))
