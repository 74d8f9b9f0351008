"""Today's MoE architectures in the planner (issue 46): latent attention, shared experts,
dense-first layers, sinks, checkpoints that ship quantized, and the experts a decode step reads.
Every expected figure is worked by hand in the comment beside it."""

from __future__ import annotations

import pytest

from harness import plan
from harness.plan import bytes as planbytes
from harness.spec import catalog
from harness.spec.capabilities import Layout
from harness.spec.scenario import Point
from harness.units import GIB

DSV3 = "deepseek-ai/DeepSeek-V3"

# DeepSeek-V3 (config.json: hidden 7168, 61 layers, 128 heads, q_lora 1536, kv_lora 512,
# rope 64, nope 128, v_head 128, 256 routed experts of 2048 + 1 shared, top-8, 3 dense layers of
# 18432, vocab 129280, untied). Per layer, by hand:
#   q_a 7168·1536 = 11,010,048   q_b 1536·128·192 = 37,748,736   kv_a 7168·576 = 4,128,768
#   kv_b 512·128·256 = 16,777,216   o 128·128·7168 = 117,440,512 → attention 187,105,280
#   expert 3·7168·2048 = 44,040,192   dense MLP 3·7168·18432 = 396,361,728   router 7168·256
ATTENTION = 187_105_280
EXPERT = 44_040_192
DENSE = 396_361_728
ROUTER = 7168 * 256  # 1,835,008
VOCAB = 129_280 * 7168  # 926,679,040 (embeddings; lm_head the same)


def test_deepseek_v3_totals_match_its_model_card_within_2_percent() -> None:
    # total = 61·attention + 3·dense + 58·(257 experts + router) + 2·vocab (+ norms)
    #       = 11,413,422,080 + 1,189,085,184 + 656,569,532,416 + 1,853,358,080 ≈ 671.03 B
    # active = 61·attention + 3·dense + 58·(9 experts + router) + 2·vocab ≈ 37.55 B
    # model card: 671 B total, 37 B activated (DeepSeek counts the embeddings)
    counts = planbytes.param_counts(catalog.model(DSV3))
    hand_total = 61 * ATTENTION + 3 * DENSE + 58 * (257 * EXPERT + ROUTER) + 2 * VOCAB
    assert counts.linear + counts.embeddings + counts.lm_head == hand_total
    assert counts.total == pytest.approx(671e9, rel=0.02)
    active = counts.active_linear + counts.embeddings + counts.lm_head
    assert active == 61 * ATTENTION + 3 * DENSE + 58 * (9 * EXPERT + ROUTER) + 2 * VOCAB
    assert active == pytest.approx(37e9, rel=0.02)


@pytest.mark.parametrize(
    ("model", "total", "active", "with_embeddings"),
    [
        # Kimi-K2 technical report: 1.04 T total, 32.6 B activated (embeddings counted)
        ("moonshotai/Kimi-K2-Instruct", 1.04e12, 32.6e9, True),
        # Qwen3-30B-A3B model card: 30.5 B total, 3.3 B activated (embeddings counted)
        ("Qwen/Qwen3-30B-A3B", 30.5e9, 3.3e9, True),
        # gpt-oss model card: 20b 20.9 B / 3.6 B and 120b 116.8 B / 5.1 B active, where OpenAI's
        # active count takes the unembedding, not the embedding lookup
        ("openai/gpt-oss-20b", 20.9e9, 3.6e9, False),
        ("openai/gpt-oss-120b", 116.8e9, 5.13e9, False),
        # Llama-4-Scout model card: 109 B total (vision encoder included; the text model is
        # planned), 17 B active
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 109e9, 17e9, True),
    ],
)
def test_moe_totals_and_active_match_the_model_cards_within_2_percent(
    model: str, total: float, active: float, with_embeddings: bool
) -> None:
    counts = planbytes.param_counts(catalog.model(model))
    assert counts.total == pytest.approx(total, rel=0.02)
    mine = counts.active_linear + counts.lm_head + (counts.embeddings if with_embeddings else 0)
    assert mine == pytest.approx(active, rel=0.02)


def test_qwen3_30b_a3b_parameters_by_hand() -> None:
    # per layer: q 2048·4096 + k, v 2048·512 each + o 4096·2048 = 18,874,368; 128 experts of
    # 3·2048·768 = 4,718,592 → 603,979,776; router 2048·128 = 262,144
    # 48 layers: 48 · 623,116,288 = 29,909,581,824; embeddings = lm_head = 151936·2048
    counts = planbytes.param_counts(catalog.model("Qwen/Qwen3-30B-A3B"))
    assert counts.linear == 29_909_581_824
    assert counts.embeddings == counts.lm_head == 311_164_928


def test_latent_attention_caches_the_latent_not_heads_times_head_dim() -> None:
    # 61 layers × (512 + 64) × 2 B = 70,272 B a token in bf16; fp8: 35,136 B. Heads × head_dim
    # would be 2 · 61 · 128 · 192 · 2 = 5,996,544 B: 85× more
    arch = catalog.model(DSV3)
    assert plan.kv_bytes_per_token(arch, "auto", "none") == 70_272
    assert plan.kv_bytes_per_token(arch, "fp8", "none") == 35_136
    # the latent is whole on every tensor rank (vLLM keeps the MLA cache replicated)
    assert planbytes.rank_kv_share(arch, Layout(tensor=8, expert=True), 0) == 1.0


def test_deepseek_v3_ships_block_fp8_and_none_plans_it() -> None:
    arch = catalog.model(DSV3)
    assert (arch.shipped_format, arch.shipped_parts) == ("fp8-block", "linears")
    assert plan.weights_bytes(arch, "none") == plan.weights_bytes(arch, "fp8-block")


# Per rank at tp=8,ep (8 ranks): attention: q_a and kv_a whole (15,138,816), q_b + kv_b + o
# split 8 ways (171,966,464 / 8 = 21,495,808) → 36,634,624 × 61 = 2,234,712,064; dense MLP
# 3 · 396,361,728 / 8 = 148,635,648; MoE layers: 32 whole routed experts + the shared expert
# replicated + router = 33 · 44,040,192 + 1,835,008 = 1,455,161,344 × 58 = 84,399,357,952.
# linears 86,782,705,664, of which the routers 58 · 1,835,008 = 106,430,464 stay bf16.
# block FP8: (86,782,705,664 − 106,430,464) × (8 + 32/16384)/8 = 86,697,436,400 B
# bf16 rest: routers + embeddings/8 + lm_head/8 (115,834,880 each) + norms 61·(2·7168 + 1536 +
# 512) + 7168 = 1,006,592 → 339,106,816 × 2 = 678,213,632 B
HAND_RANK_BYTES = 86_697_436_400 + 678_213_632  # 87,375,650,032 B = 81.37 GiB


def dsv3_point(gpu_cards: int = 8, kv: str = "auto") -> Point:
    return Point(
        model=DSV3, backend="vllm", quantization="none", kv_cache_dtype=kv, batch=64,
        context=4096, output_tokens=512, target="cuda",
        layout=Layout(tensor=gpu_cards, expert=True),
    )  # fmt: skip


@pytest.mark.parametrize("card", ["B200", "H200-141GB"])
def test_plan_of_deepseek_v3_fp8_on_8_cards_matches_the_hand_computation(card: str) -> None:
    arch = catalog.model(DSV3)
    rank = plan.weights_bytes(arch, "none", Layout(tensor=8, expert=True), 0)
    assert rank == pytest.approx(HAND_RANK_BYTES, rel=0.02)
    planned = plan.plan_point(dsv3_point(), catalog.gpu(card))
    assert planned.weights_gib == pytest.approx(HAND_RANK_BYTES / GIB, rel=0.02)
    # KV at batch 64 × (4096 + 512) tokens × 70,272 B, whole on the rank = 19.30 GiB
    assert planned.kv_cache_gib == pytest.approx(64 * 4608 * 70_272 / GIB, rel=0.02)
    assert planned.fits  # 81 + 19 + activations + 2 GiB NCCL < 0.9 × 140.4 and × 179.06


def test_gpt_oss_120b_in_its_shipped_mxfp4_fits_one_80_gb_card() -> None:
    # routed experts 36 · 128 · 3 · 2880 · 2880 = 114,661,785,600 × 4.25 / 8 = 60,914,073,600 B;
    # bf16 rest: attention 36 · 26,542,080 = 955,514,880, routers 36 · 2880 · 128 = 13,271,040,
    # embeddings + lm_head 2 · 201088 · 2880 = 1,158,266,880, norms, biases and sinks
    # 36 · (5760 + 5120 + 64) + 2880 = 396,864 → 2,127,449,664 × 2 = 4,254,899,328 B
    # total 65,168,972,928 B = 60.69 GiB (the bf16 plan said 218 GiB)
    arch = catalog.model("openai/gpt-oss-120b")
    assert plan.weights_bytes(arch, "none") == pytest.approx(65_168_972_928, rel=1e-9)
    point = Point(
        model="openai/gpt-oss-120b", backend="vllm", quantization="none", kv_cache_dtype="auto",
        batch=1, context=1024, output_tokens=128, target="cuda",
    )  # fmt: skip
    planned = plan.plan_point(point, catalog.gpu("H100-SXM-80GB"))
    assert planned.fits and planned.weights_gib == pytest.approx(60.69, abs=0.01)


def test_a_batch_touches_more_experts_than_one_token() -> None:
    # DeepSeek-V3, k = 8 of E = 256: share touched = 1 − (1 − 8/256)^B
    #   B = 1: 8/256 = 0.03125 (8 experts); B = 8: 1 − 0.96875^8 = 0.2243 (57.4 experts);
    #   B = 64: 1 − 0.96875^64 = 0.8689 (222.4 experts)
    share = planbytes.experts_touched_share
    assert share(256, 8, 1) == pytest.approx(0.03125)
    assert share(256, 8, 8) == pytest.approx(0.2243, abs=1e-4)
    assert share(256, 8, 64) == pytest.approx(0.8689, abs=1e-4)
    assert share(1, 1, 64) == 1.0


def test_decode_reads_only_the_touched_experts() -> None:
    # gpt-oss-120b at B = 1: 4 of 128 experts read; unread = 124/128 of the routed experts'
    # 60,914,073,600 B = 59,010,508,800 B
    arch = catalog.model("openai/gpt-oss-120b")
    unread = planbytes.untouched_expert_bytes(arch, "none", batch=1)
    assert unread == pytest.approx(59_010_508_800, rel=1e-9)


def test_dense_first_layers_sit_in_the_first_pipeline_stage() -> None:
    # DeepSeek-V3 over 2 stages: 31 + 30 layers; stage 0 holds the 3 dense layers and 28 MoE
    arch = catalog.model(DSV3)
    layout = Layout(tensor=1, pipeline=2)
    first = planbytes.param_counts(arch, layout, 0)
    assert first.routed_experts == 28 * 256 * EXPERT
    assert planbytes.param_counts(arch, layout, 1).routed_experts == 30 * 256 * EXPERT


def test_llama4_scout_chunks_three_of_four_layers() -> None:
    arch = catalog.model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert (arch.sliding_window, arch.sliding_layers, arch.shared_expert_size) == (8192, 36, 8192)


@pytest.mark.parametrize("card", ["B200", "H200-141GB"])
def test_harness_plan_prints_the_hand_computed_rank_weights_and_latent_kv(card: str) -> None:
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from harness.cli.main import app

    example = Path(__file__).resolve().parents[2] / "scenarios/examples/deepseek-b200-nvl72.yaml"
    result = CliRunner().invoke(app, ["plan", str(example), "--gpu", card, "--json"])
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)["points"]
    ep = next(
        p for p in points
        if p["layout"] == "tp=8,ep" and p["quantization"] == "none" and p["batch"] == 64
        and p["kv_cache_dtype"] == "auto"
    )  # fmt: skip
    assert ep["weights_gib"] == pytest.approx(HAND_RANK_BYTES / GIB, rel=0.02)  # 81.37 GiB
    assert ep["kv_per_token_bytes"] == pytest.approx(70_272, rel=0.02)  # 61 × 576 × 2 B
    assert ep["largest_batch"] > 64 and ep["fits"]
