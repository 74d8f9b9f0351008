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
    assert set(data) == {"points", "skipped", "budget", "warnings"}
    assert data["warnings"] == []  # a one-card grid: every model has its reference
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


# --- the CPU terms (tiny-llama: 4,196,608 fp32 params = 16,786,432 B; K+V 4,096 B a token) ----

MIB = 2**20
TINY_WEIGHTS = 16_786_432


def tiny(**kw: object) -> Point:
    base: dict[str, object] = dict(
        model="tiny-llama", quantization="none", batch=1, context=128, output_tokens=32,
        target="cpu",
    )  # fmt: skip
    return point(**{**base, **kw})


def test_a_transformers_cpu_point_pays_its_first_forward_and_its_own_tensors() -> None:
    """KV: 128 tokens 524,288 B, 160 tokens 655,360 B; activations 128 × (2×256 + 512 + 2×768) ×
    4 B + 4,096 × 4 B of logits = 1,327,104 B. Reserve = 375 MiB + 5 % × (16,786,432 + 655,360 +
    1,327,104) = 394,154,444.8 B; load = 410,940,876.8 B (391.9 MiB); prefill = load + the first
    forward's 75 MiB (78,643,200 B) + 524,288 + 1,327,104 = 491,435,468.8 B; decode = load +
    78,643,200 + 655,360 + the prefill's activations still held (1,327,104 B, more than the
    decode step's 4 × 4,096 B of logits) = 491,566,540.8 B."""
    phases, terms = plan.inference_memory(tiny(quantization="none"), catalog.model("tiny-llama"))
    assert terms["weights"] == TINY_WEIGHTS
    assert terms["reserve"] == pytest.approx(394_154_444.8)
    assert phases["load"] == pytest.approx(410_940_876.8)
    assert phases["prefill"] == pytest.approx(491_435_468.8)
    assert phases["decode"] == pytest.approx(491_566_540.8)
    assert terms["activations"] == 75 * MIB + 1_327_104


def test_a_vllm_cpu_point_holds_its_kv_pool_from_the_load_on() -> None:
    """Pool = max(64 MiB, 1.25 × 655,360 B) = 67,108,864 B. Reserve = 800 MiB + 5 % ×
    (16,786,432 + 67,108,864 + 1,327,104) = 843,121,920 B; load = weights + pool + reserve =
    927,017,216 B (884.1 MiB); prefill = decode = load + the activations 1,327,104 B (no first-
    forward term: vLLM's load peak is its profiling run; the KV inside the pool adds nothing) =
    928,344,320 B."""
    phases, terms = plan.inference_memory(tiny(backend="vllm"), catalog.model("tiny-llama"))
    assert terms["kv_cache"] == 64 * MIB
    assert phases["load"] == pytest.approx(927_017_216)
    assert phases["prefill"] == phases["decode"] == pytest.approx(928_344_320)


def test_the_cpu_process_adds_the_weight_formats_library_and_a_first_forward_per_engine() -> None:
    """bitsandbytes: 375 + 36 = 411 MiB of process; a first forward leaves 75 MiB (transformers),
    0 (vLLM)."""
    assert plan.runtime_context_bytes("cpu", "transformers", "bnb-int8") == 411 * MIB
    assert plan.runtime_context_bytes("cpu", "transformers", "none") == 375 * MIB
    assert plan.runtime_context_bytes("cpu", "vllm", "fp32") == 800 * MIB
    assert plan.first_forward_bytes(tiny(quantization="bnb-nf4")) == 75 * MIB
    assert plan.first_forward_bytes(tiny(backend="vllm", kv_cache_dtype="fp8")) == 0


def test_gpu_and_training_terms_are_unchanged_by_the_cpu_ones() -> None:
    """On CUDA: no first-forward bytes, no held pool: prefill = weights + KV(context) +
    activations + reserve, the reserve 700 MiB + 5 %; a training worker (no engine named) keeps
    540 MiB."""
    p = point(backend="vllm")
    arch = catalog.model(LLAMA8B)
    phases, terms = plan.inference_memory(p, arch)
    kv_prefill = plan.kv_cache_bytes(arch, "auto", "bf16", 1024, 1)
    assert plan.first_forward_bytes(p) == 0
    assert phases["load"] == pytest.approx(terms["weights"] + terms["reserve"])
    expected = phases["load"] + kv_prefill + terms["activations"]
    assert phases["prefill"] == pytest.approx(expected)
    assert plan.runtime_context_bytes("cuda", "vllm", "bf16") == plan.CUDA_CONTEXT_BYTES
    assert plan.runtime_context_bytes("cpu") == plan.CPU_RUNTIME_BYTES == 540 * MIB


def test_a_large_cpu_point_adds_its_own_tensors_to_the_first_forward() -> None:
    """Llama 8B, batch 4 at 1,024 tokens: KV 4 × 134,217,728 B, activations 4,096 × 86,016 B +
    4 × 128,256 × 4 B of logits = 354,373,632 B; the prefill is load + the first forward's
    75 MiB + KV + activations; on vLLM the pool is 1.25 × KV(4 × 1,152 tokens) = 1.25 ×
    603,979,776 = 754,974,720 B."""
    arch = catalog.model(LLAMA8B)
    phases, terms = plan.inference_memory(point(target="cpu", batch=4), arch)
    kv_prefill = plan.kv_cache_bytes(arch, "auto", "bf16", 1024, 4)
    assert terms["activations"] == 75 * MIB + 354_373_632
    assert phases["prefill"] - phases["load"] == pytest.approx(kv_prefill + terms["activations"])
    _, vllm_terms = plan.inference_memory(point(backend="vllm", target="cpu", batch=4), arch)
    assert vllm_terms["kv_cache"] == 754_974_720


def test_the_devices_kv_pool_is_the_plans() -> None:
    from harness.run import device

    assert device.kv_pool_bytes is plan.kv_pool_bytes
    assert plan.kv_pool_bytes(1) == plan.KV_POOL_MIN_BYTES
    assert plan.kv_pool_bytes(1000 * MIB) == int(1000 * MIB * plan.KV_POOL_HEADROOM)
