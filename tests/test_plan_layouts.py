"""The plan per rank under tensor / pipeline / expert parallelism: hand-computed goldens."""

from __future__ import annotations

import pytest

from harness import plan
from harness.plan import bytes as planbytes
from harness.plan import seconds
from harness.spec import catalog
from harness.spec.capabilities import Layout
from harness.spec.scenario import Point

LLAMA70B = "meta-llama/Llama-3.1-70B-Instruct"
QWEN3 = "Qwen/Qwen3-235B-A22B"

# Llama-3.1-70B (config.json: hidden 8192, 80 layers, 64 heads, 8 KV heads, head_dim 128,
# intermediate 28672, vocab 128256, untied), by hand:
#   per layer: q 8192·8192 = 67,108,864; k = v = 8192·1024 = 8,388,608; o = 67,108,864;
#              MLP 3·8192·28672 = 704,643,072 → 855,638,016; × 80 layers = 68,451,041,280
#   embeddings = lm_head = 128256·8192 = 1,050,673,152; norms 80·2·8192 + 8192 = 1,318,912
# Per rank at TP t (t ≤ 8 KV heads: nothing replicated): linears / t, embeddings / t and
# lm_head / t, norms whole; bf16: 2 bytes each.
LINEARS = 68_451_041_280
VOCAB = 1_050_673_152
NORMS = 1_318_912
HAND_RANK_BYTES = {
    1: 2 * (LINEARS + 2 * VOCAB + NORMS),  # 141,107,412,992 B = 131.42 GiB
    2: 2 * (LINEARS // 2 + VOCAB + NORMS),  # 70,555,025,408 B = 65.71 GiB
    4: 2 * (LINEARS // 4 + VOCAB // 2 + NORMS),  # 35,278,831,616 B = 32.86 GiB
    8: 2 * (LINEARS // 8 + VOCAB // 4 + NORMS),  # 17,640,734,720 B = 16.43 GiB
}


def point70b(tp: int, batch: int = 8, context: int = 2048) -> Point:
    return Point(
        model=LLAMA70B, backend="vllm", quantization="bf16", kv_cache_dtype="auto",
        batch=batch, context=context, output_tokens=256, target="cuda",
        layout=None if tp == 1 else Layout(tensor=tp),
    )  # fmt: skip


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_per_rank_weights_of_llama_70b_match_the_hand_computation(tp: int) -> None:
    layout = None if tp == 1 else Layout(tensor=tp)
    planned = plan.weights_bytes(catalog.model(LLAMA70B), "bf16", layout)
    assert planned == pytest.approx(HAND_RANK_BYTES[tp], rel=0.02)


def test_llama_70b_bf16_on_an_80_gb_card_fits_at_tp_4_and_8_not_at_tp_1() -> None:
    card = catalog.gpu("H100-SXM-80GB")
    plans = {tp: plan.plan_point(point70b(tp), card) for tp in (1, 2, 4, 8)}
    assert not plans[1].fits
    assert "weights 131 GiB exceed the card" in plans[1].reason
    assert plans[4].fits and plans[8].fits
    # TP 2 fits only if the binding rank's sum says so: 65.71 GiB of weights alone leave
    # 71.69 - 65.71 = 5.98 GiB of the 0.9 × 79.65 GiB vLLM takes, and 2 GiB of that is NCCL's
    assert plans[2].fits == (plans[2].total_gib <= plans[2].capacity_gib)
    assert "rank 0 of tp=2" in plans[2].reason
    assert plans[2].communication_gib == 2.0
    assert plans[1].communication_gib == 0.0


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    # Qwen3-235B-A22B: 94 layers, 4 KV heads of 128; at TP 8 each rank holds 1 KV head (each
    # head on 2 ranks), so a rank's KV per token = 2 × 94 × 1 × 128 × 2 B = 48,128 B, a
    # quarter (not an eighth) of the whole 192,512 B
    arch = catalog.model(QWEN3)
    whole = plan.kv_cache_bytes(arch, "auto", "bf16", tokens=1, batch=1)
    assert whole == 2 * 94 * 4 * 128 * 2
    assert planbytes.rank_kv_share(arch, Layout(tensor=8), 0) * whole == 48_128


def test_pipeline_stages_split_the_layers_and_the_first_stage_binds() -> None:
    # 80 layers over 3 stages: 27, 27, 26 (the first 80 mod 3 = 2 stages take one more)
    assert [plan.stage_layers(80, 3, s) for s in range(3)] == [27, 27, 26]
    arch = catalog.model(LLAMA70B)
    layout = Layout(tensor=1, pipeline=2)
    # stage 0: 40 layers + embeddings; stage 1: 40 layers + lm_head + final norm; per layer
    # 855,638,016 linears + 16,384 norms; bf16
    stage0 = 2 * (40 * (855_638_016 + 16_384) + VOCAB)
    stage1 = 2 * (40 * (855_638_016 + 16_384) + VOCAB + 8192)
    assert plan.weights_bytes(arch, "bf16", layout, 0) == stage0
    assert plan.weights_bytes(arch, "bf16", layout, 1) == stage1


def test_expert_parallel_ranks_hold_whole_experts() -> None:
    # Mixtral-8x7B at TP 4 with EP: ⌈8 / 4⌉ = 2 whole experts of 3·4096·14336 = 176,160,768 per
    # layer and rank, the same linears as 8 experts split 4 ways
    arch = catalog.model("mistralai/Mixtral-8x7B-v0.1")
    ep = plan.param_counts(arch, Layout(tensor=4, expert=True))
    tp = plan.param_counts(arch, Layout(tensor=4))
    assert ep.linear == tp.linear
    attention = (2 * 4096 * 4096 + 2 * 4096 * 1024) / 4  # q, o, k, v over 4 ranks
    router = 4096 * 8
    assert ep.linear == 32 * (attention + 2 * 176_160_768 + router)


def test_decode_ceiling_counts_the_all_reduce_over_the_interconnect() -> None:
    card = catalog.gpu("H100-SXM-80GB")
    arch = catalog.model(LLAMA70B)
    point = point70b(8, batch=1, context=128)
    # 2 all-reduces per layer of 1 × 8192 bf16 values, ring factor 2 · 7/8, 80 layers, over
    # 450 GB/s one way: 80 · 2 · 8192 · 2 · 1.75 / 450e9 = 1.0194e-5 s
    assert seconds.allreduce_seconds(card, arch, point, 1) == pytest.approx(
        80 * 2 * 8192 * 2 * 1.75 / 450e9
    )
    assert seconds.layout_decode_ceiling_tok_s(card, arch, point) > 0


def test_on_the_cpu_the_node_holds_every_rank() -> None:
    one = Point(model="tiny-llama", backend="vllm", quantization="none", kv_cache_dtype="auto",
                batch=1, context=64, output_tokens=8, target="cpu")  # fmt: skip
    two = one.model_copy(update={"layout": Layout(tensor=2)})
    card = catalog.gpu("cpu")
    p1, p2 = plan.plan_point(one, card), plan.plan_point(two, card)
    # two processes: the reserve (each rank's 800 MiB process) counts twice
    assert p2.reserve_gib > 1.9 * 800 / 1024
    assert p2.binding_rank == "the node's 2 ranks together"
    assert p1.binding_rank == ""
    assert p2.total_gib > p1.total_gib
