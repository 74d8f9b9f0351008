"""The memory planner against figures computed by hand (arithmetic in each docstring)."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from harness import modes, plan
from harness.cli.main import app
from harness.spec import catalog
from harness.spec.scenario import Point
from harness.units import GIB

LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"


def point(**kw: object) -> Point:
    base: dict[str, object] = dict(
        model=LLAMA8B,
        backend="transformers",
        quantization="bf16",
        kv_cache_dtype="auto",
        batch=1,
        context=1024,
        output_tokens=128,
        target="cuda",
    )
    return Point.model_validate({**base, **kw})


def test_llama_8b_has_8_03_billion_parameters() -> None:
    """embeddings 128256×4096 = 525,336,576, lm_head the same (untied);
    per layer: attention 4096×4096 + 2×4096×8×128 + 4096×4096 = 41,943,040,
    MLP 3×4096×14336 = 176,160,768 → 218,103,808 × 32 layers = 6,979,321,856;
    norms 32×2×4096 + 4096 = 266,240. Total 8,030,261,248."""
    counts = plan.param_counts(catalog.model(LLAMA8B))
    assert counts.total == 8_030_261_248
    assert counts.linear == 6_979_321_856


def test_bf16_weights_are_two_bytes_per_parameter() -> None:
    """8,030,261,248 × 2 = 16,060,522,496 bytes = 14.9575 GiB."""
    assert plan.weights_bytes(catalog.model(LLAMA8B), "bf16") == 16_060_522_496


def test_nf4_weights_count_block_scales_and_16_bit_embeddings() -> None:
    """linears 6,979,321,856 × (4 + 32/64) bits / 8 = 3,925,868,544;
    embeddings + lm_head + norms (1,050,673,152 + 266,240) × 2 = 2,101,878,784.
    Total 6,027,747,328 bytes."""
    assert plan.weights_bytes(catalog.model(LLAMA8B), "bnb-nf4") == 6_027_747_328


def test_gptq_weights_count_group_scales_and_zeros() -> None:
    """Groups of 64 (what the backend quantizes with): linears × (4 + (16 + 4)/64) / 8
    = 6,979,321,856 × 0.5390625 = 3,762,290,688; + 2,101,878,784 kept in 16 bit = 5,864,169,472."""
    assert plan.weights_bytes(catalog.model(LLAMA8B), "gptq-int4") == 5_864_169_472


def test_kv_cache_follows_gqa_heads_dtype_tokens_and_batch() -> None:
    """2 × 32 layers × 8 kv heads × 128 × 2 bytes = 131,072 B/token;
    × (1024 + 128) tokens × 4 rows = 603,979,776 bytes; fp8 halves it;
    int4 (0.5 + 4/64 B) = 0.28125×."""
    arch = catalog.model(LLAMA8B)
    assert plan.kv_cache_bytes(arch, "auto", "bf16", 1152, 4) == 603_979_776
    assert plan.kv_cache_bytes(arch, "fp8", "bf16", 1152, 4) == 301_989_888
    assert plan.kv_cache_bytes(arch, "int4", "bf16", 1152, 4) == 603_979_776 * 0.28125


def test_sliding_window_layers_cap_their_tokens() -> None:
    """Gemma-2-9B: 42 layers, half sliding (4096); 2 × 8 × 256 × 2 B = 8,192 B per layer-token.
    8,000 tokens: 21 × 8,000 + 21 × 4,096 = 254,016 layer-tokens × 8,192 = 2,080,899,072."""
    arch = catalog.model("google/gemma-2-9b")
    assert plan.kv_cache_bytes(arch, "auto", "bf16", 8000, 1) == 2_080_899_072


def test_moe_counts_all_experts_in_memory_but_top_k_per_token() -> None:
    """Mixtral: per layer 41,943,040 attention + 8 × 176,160,768 experts + 4096×8 router."""
    counts = plan.param_counts(catalog.model("mistralai/Mixtral-8x7B-v0.1"))
    assert counts.linear == 32 * (41_943_040 + 8 * 176_160_768 + 32_768)
    assert counts.active_linear == 32 * (41_943_040 + 2 * 176_160_768 + 32_768)


def test_all_position_logits_cost_fp32_over_every_token() -> None:
    """Logits of 2 × 512 positions × 128,256 vocab × 4 B = 525,336,576 bytes more than last-only
    (which keeps 2 positions)."""
    arch = catalog.model(LLAMA8B)
    every = plan.activation_bytes(arch, "bf16", 2, 512, all_logits=True)
    last = plan.activation_bytes(arch, "bf16", 2, 512, all_logits=False)
    assert every - last == (2 * 512 - 2) * 128_256 * 4


def test_a_70b_model_in_bf16_does_not_fit_one_h100_and_names_weights() -> None:
    result = plan.plan_point(
        point(model="meta-llama/Llama-3.1-70B-Instruct"), catalog.gpu("H100-SXM-80GB")
    )
    assert not result.fits
    assert "binding term: weights" in result.reason
    assert result.weights_gib == pytest.approx(70_553_706_496 * 2 / GIB)


def test_vllm_fits_inside_its_preallocated_share() -> None:
    card = catalog.gpu("H100-SXM-80GB")
    result = plan.plan_point(point(backend="vllm"), card, gpu_memory_utilization=0.5)
    assert result.capacity_gib == pytest.approx(card.memory_gib * 0.5)


def test_a_mode_plan_is_given_its_options_as_one_argument() -> None:
    """plan_point hands the mode's plan part one PlanOptions: the offline seconds are (warm-ups +
    repeats) runs, a vLLM point's capacity is the pre-allocated share."""
    card, arch = catalog.gpu("H100-SXM-80GB"), catalog.model(LLAMA8B)
    offline = modes.get("offline").load("plan")
    p = point(backend="vllm")
    cold = offline(p, card, arch, plan.PlanOptions(gpu_memory_utilization=0.5, warmups=0))
    warm = offline(p, card, arch, plan.PlanOptions(gpu_memory_utilization=0.5, warmups=2))
    assert warm.est_seconds == pytest.approx(cold.est_seconds * (2 + p.repeats) / p.repeats)
    assert cold.capacity_gib == pytest.approx(card.memory_gib * 0.5)
    assert plan.plan_point(p, card, gpu_memory_utilization=0.5, warmups=2) == warm


def test_total_is_the_peak_phase_and_sums_its_terms() -> None:
    r = plan.plan_point(point(batch=8, context=4096), catalog.gpu("H100-SXM-80GB"))
    assert r.total_gib == max(r.load_gib, r.prefill_gib, r.decode_gib)
    assert r.decode_gib <= r.weights_gib + r.kv_cache_gib + r.activations_gib + r.reserve_gib


def test_roofline_ceiling_is_bandwidth_over_bytes_read_per_step() -> None:
    """Weights read per step: 16,060,522,496 − the untied input embedding (525,336,576 × 2 B,
    a lookup of one row per token) = 15,009,849,344; KV at 1024 + 64 tokens = 142,606,336.
    3350 GB/s × 1 / 15,152,455,680 B = 221.09 tok/s."""
    r = plan.plan_point(point(), catalog.gpu("H100-SXM-80GB"))
    assert r.roofline_decode_tok_s == pytest.approx(3350e9 / 15_152_455_680)


def test_plan_json_matches_the_contract_and_is_fast() -> None:
    started = time.perf_counter()
    result = CliRunner().invoke(
        app, ["plan", "scenarios/examples/llama-8b-h100.yaml", "--gpu", "H100-SXM-80GB", "--json"]
    )
    elapsed = time.perf_counter() - started
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) == {"points", "skipped", "budget"}
    fields = {
        "model",
        "backend",
        "quantization",
        "kv_cache_dtype",
        "batch",
        "context",
        "output_tokens",
        "target",
        "weights",
        "gpu",
        "weights_gib",
        "kv_cache_gib",
        "activations_gib",
        "reserve_gib",
        "total_gib",
        "fits",
        "reason",
    }
    assert data["points"] and all(set(p) == fields for p in data["points"])
    assert all(p["fits"] for p in data["points"])
    assert all(s["reason"] for s in data["skipped"])
    assert any("binding term" in s["reason"] for s in data["skipped"])
    assert elapsed < 10  # a hang guard only; the 3 s target is measured by `make perf`


def test_the_plan_counts_the_arc_items_the_corpus_ships() -> None:
    from harness import corpus

    assert len(corpus.arc_items(None)) == plan.ARC_ITEMS_IN_CORPUS


def test_the_budget_carries_each_groups_quality_phase_and_all_items_cost_more() -> None:
    from harness.spec.scenario import Scenario, expand

    base = {
        "name": "q", "models": [{"id": "tiny-llama"}], "backend": ["transformers"],
        "quantization": ["none", "bf16"], "kv_cache_dtype": ["auto"], "batch": [1, 4],
        "context": [128], "output_tokens": 8, "targets": ["cpu"],
    }  # fmt: skip
    few = plan.plan_grid(expand(Scenario.model_validate({**base, "quality": {"arc_items": 10}})))
    every = plan.plan_grid(
        expand(Scenario.model_validate({**base, "quality": {"arc_items": "all"}}))
    )
    groups = 2  # none and bf16: one quality phase each, whatever the batches
    per_group = few.budget.est_quality_seconds / groups
    assert per_group > 0
    assert every.budget.est_quality_seconds > few.budget.est_quality_seconds
    assert every.budget.est_seconds - few.budget.est_seconds == pytest.approx(
        every.budget.est_quality_seconds - few.budget.est_quality_seconds
    )


def test_the_tasks_of_a_group_add_their_continuations_and_tokens_to_its_quality_phase() -> None:
    from harness.spec.scenario import Scenario, expand

    base = {
        "name": "q", "models": [{"id": "tiny-llama"}], "backend": ["transformers"],
        "quantization": ["none"], "kv_cache_dtype": ["auto"], "batch": [1],
        "context": [128], "output_tokens": 8, "targets": ["cpu"],
    }  # fmt: skip
    quality = {"arc_items": 0, "max_windows": 4}
    without = plan.plan_grid(expand(Scenario.model_validate({**base, "quality": quality})))
    tasks = {**quality, "tasks": ["snips-intent", "snips-slots"]}
    scenario = Scenario.model_validate({**base, "quality": tasks})
    assert scenario.quality.task_calls() == (210 * 7, 210 * 64)
    added = plan.plan_grid(expand(scenario)).budget.est_quality_seconds
    extra = (210 * 7 * plan.TASK_CONTINUATION_UNITS + 210 * 64 * plan.TASK_TOKEN_UNITS) * (
        plan.QUALITY_UNIT_S["cpu"]
    )
    # (the roofline floor of the four windows alone is a few hundredths of a second above theirs)
    assert added - without.budget.est_quality_seconds == pytest.approx(extra, rel=1e-2)
