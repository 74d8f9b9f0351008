"""The bytes a model holds (harness.plan's formulas, its docstring states them): its parameters
per kind (whole, or one rank's of a layout's stage), the weights in a format, and the KV cache per
token and for a batch at a context.

Today's MoE architectures (issue 46), from config.json:
  MLA KV        = layers × (kv_lora_rank + qk_rope_head_dim) × bytes × tokens × batch, no factor
                  2 (vLLM caches the latent and the rope key; K and V are read from it), whole
                  on every tensor rank (vLLM replicates the MLA cache)
  MLA attention = q_a_proj, kv_a_proj_with_mqa whole on every rank; q_b_proj (or q_proj),
                  kv_b_proj, o_proj ÷ tp
  MoE layer     = routed experts (÷ tp, or ⌈E / tp⌉ whole under ep) + shared experts (÷ tp, or
                  whole on every rank under ep) + router (whole); the first
                  first_k_dense_replace layers hold a dense MLP instead
  shipped       = `none` plans a checkpoint in the format its quantization_config names
                  (planned_format); a checkpoint-only format keeps the routers in 16 bit
  decode reads  = the weights less the routed experts a step of B tokens does not touch:
                  routed × (1 − k/E)^B (experts_touched_share)
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.spec.capabilities import KV_CACHE_FORMATS, WEIGHT_FORMATS, Layout, compute_dtype_bytes
from harness.spec.catalog import MLP_LINEARS, GpuSpec, ModelArch, format_peak_tflops
from harness.spec.scenario import Point


class ParamCounts(BaseModel):
    model_config = ConfigDict(frozen=True)
    linear: int  # quantizable linears (attention + MLP + router)
    embeddings: int
    lm_head: int  # 0 when tied to the embeddings
    other: int  # norms and biases
    active_linear: int  # linears touched per token (MoE: top-k experts + shared experts)
    routed_experts: int = 0  # the routed experts' linears (inside `linear`)
    router: int = 0  # the MoE routers (inside `linear`)

    @property
    def total(self) -> int:
        return self.linear + self.embeddings + self.lm_head + self.other


# MLA's down-projections are whole on every tensor rank (vLLM builds them as ReplicatedLinear);
# K and V follow the KV heads a rank holds; every other attention linear splits over the ranks.
REPLICATED_LINEARS = frozenset({"q_a_proj", "kv_a_proj_with_mqa"})
KV_LINEARS = frozenset({"k_proj", "v_proj"})


def param_counts(arch: ModelArch, layout: Layout | None = None, stage: int = 0) -> ParamCounts:
    """The parameters of the whole model, or under a layout those of one rank of `stage` (the
    per-rank formulas in harness.plan). An MoE layer holds its routed experts (whole ones under
    expert parallelism, ⌈E / t⌉ a rank; else every expert split t ways), its shared experts
    (replicated whole on every rank under expert parallelism, else split t ways) and its router
    (whole); the first `dense_layers` layers hold a dense MLP instead."""
    h = arch.hidden_size
    shapes = arch.linear_shapes()
    t = 1 if layout is None else layout.tensor
    stages = 1 if layout is None else layout.pipeline
    layers = stage_layers(arch.num_layers, stages, stage)
    before = sum(stage_layers(arch.num_layers, stages, s) for s in range(stage))
    moe = arch.moe_layers and layers - _overlap(before, layers, arch.dense_layers)
    dense = layers - moe
    kv_share = kv_heads_per_rank(arch, t) / arch.num_kv_heads
    attention = sum(
        i * o * (1.0 if n in REPLICATED_LINEARS else kv_share if n in KV_LINEARS else 1 / t)
        for n, (i, o) in shapes.items()
        if n not in MLP_LINEARS
    )
    expert = sum(i * o for name, (i, o) in shapes.items() if name in MLP_LINEARS)
    dense_mlp = 3 * h * (arch.dense_intermediate_size or arch.intermediate_size) / t
    experts = arch.num_experts
    spread = layout is not None and layout.expert
    routed = expert * -(-experts // t) if spread else expert * experts / t
    shared = 3 * h * arch.shared_expert_size + (h if arch.shared_expert_gate else 0)
    shared_rank = shared if spread else shared / t
    router = h * experts
    active_moe = expert * arch.experts_per_token / t + shared_rank + router
    bias = _bias(arch, shapes, t, kv_share)
    norms = 2 * h + arch.q_lora_rank + arch.kv_lora_rank  # MLA: q_a and kv_a layernorms
    sinks = arch.num_heads / t if arch.attention_sinks else 0
    first, last = stage == 0, stage == stages - 1
    vocab_rows = arch.vocab_size * h / t
    lm_head = vocab_rows if last and (not arch.tie_embeddings or stages > 1) else 0
    return ParamCounts(
        linear=round(
            layers * attention + dense * dense_mlp + moe * (routed + shared_rank + router)
        ),
        embeddings=round(vocab_rows) if first else 0,
        lm_head=round(lm_head),
        other=round(layers * (norms + bias + sinks) + (h if last else 0)),
        active_linear=round(layers * attention + dense * dense_mlp + moe * active_moe),
        routed_experts=round(moe * routed),
        router=round(moe * router),
    )


def _overlap(start: int, count: int, dense_first: int) -> int:
    """How many of layers start .. start + count − 1 are among the first `dense_first`."""
    return max(0, min(dense_first, start + count) - start)


def _bias(arch: ModelArch, shapes: dict[str, tuple[int, int]], t: int, kv_share: float) -> float:
    """The q, k, v biases a rank holds (attention_bias models; MLA has none)."""
    if not arch.attention_bias or arch.is_mla:
        return 0.0
    q, k, v = (shapes[n][1] for n in ("q_proj", "k_proj", "v_proj"))
    return q / t + (k + v) * kv_share


def stage_layers(layers: int, stages: int, stage: int) -> int:
    """Decoder layers of pipeline stage `stage` of `stages`: the first `layers mod stages`
    stages take one more."""
    return layers // stages + (1 if stage < layers % stages else 0)


def kv_heads_per_rank(arch: ModelArch, tensor: int) -> int:
    """KV heads a tensor rank holds: kv_heads / t, and 1 (replicated) when t exceeds them."""
    return max(1, arch.num_kv_heads // tensor)


def planned_format(arch: ModelArch, quantization: str) -> tuple[str, str]:
    """(the weight format planned, the linears it covers): the scenario's, except that `none`
    plans a checkpoint that ships quantized (gpt-oss's MXFP4 experts, DeepSeek's block FP8) in
    its shipped format, as its config.json's quantization_config says."""
    if quantization == "none" and arch.shipped_format:
        return arch.shipped_format, arch.shipped_parts
    return quantization, "linears"


def weights_bytes(
    arch: ModelArch, quantization: str, layout: Layout | None = None, stage: int = 0
) -> float:
    """Bytes of the loaded weights in a format (see WeightFormat for the overhead terms): the
    whole model's, or under a layout one rank's of `stage`. A checkpoint-only format (block
    FP8, NVFP4, MXFP4, compressed-tensors) keeps the routers in 16 bit, as those checkpoints
    ship them; a format on the experts only quantizes the routed experts."""
    name, parts = planned_format(arch, quantization)
    fmt = WEIGHT_FORMATS[name]
    counts = param_counts(arch, layout, stage)
    if not fmt.quantizes_linears:
        return counts.total * unquantized_bytes_per_param(arch, name)
    if parts == "experts":
        quantized = counts.routed_experts
    else:
        quantized = counts.linear - (counts.router if fmt.checkpoint_only else 0)
    linear = quantized * fmt.bits_per_weight / 8
    rows = _linear_output_rows(arch) * quantized / max(1, param_counts(arch).linear)
    linear += rows * fmt.per_row_overhead_bits / 8
    kept = counts.total - quantized
    return linear + kept * unquantized_bytes_per_param(arch, name)


def unquantized_bytes_per_param(arch: ModelArch, quantization: str) -> float:
    """Bytes of a parameter the format leaves unquantized (all of them for plain dtypes).
    bitsandbytes and quanto leave embeddings, lm_head and norms in the loaded dtype;
    gptqmodel and vLLM serve them in 16 bit."""
    fmt = WEIGHT_FORMATS[planned_format(arch, quantization)[0]]
    if not fmt.quantizes_linears:
        return arch.dtype_bytes if fmt.bits is None else fmt.bits / 8
    return arch.dtype_bytes if fmt.rest_in_loaded_dtype else min(arch.dtype_bytes, 2)


def experts_touched_share(experts: int, top_k: int, batch: int) -> float:
    """The expected share of a layer's routed experts one decode step reads for `batch` tokens:
    1 − (1 − k/E)^B. Each token picks k of the E experts; taken as uniform and independent, an
    expert is missed by all B tokens with probability (1 − k/E)^B. So E × share experts are
    read: k at B = 1, k·B while B·k ≪ E, then saturating towards all E (DeepSeek-V3, k = 8 of
    256: 8 at B = 1, 57 at B = 8, 222 at B = 64, 255 by B = 170). Real routers are skewed,
    which touches fewer: this is the upper bound a bandwidth roofline wants. 1 for dense."""
    if experts <= 1:
        return 1.0
    return 1.0 - (1.0 - top_k / experts) ** batch


def untouched_expert_bytes(
    arch: ModelArch, quantization: str, batch: int, layout: Layout | None = None, stage: int = 0
) -> float:
    """Bytes of routed experts a decode step of `batch` tokens does not read (the whole
    model's, or one rank's of `stage`): the rank's routed-expert weights × (1 − share
    touched); a rank under expert parallelism holds E / t experts and, routing being uniform,
    reads the same share of them."""
    counts = param_counts(arch, layout, stage)
    if not counts.routed_experts:
        return 0.0
    share = experts_touched_share(arch.num_experts, arch.experts_per_token, batch)
    name, _ = planned_format(arch, quantization)
    fmt = WEIGHT_FORMATS[name]
    per_param = (
        fmt.bits_per_weight / 8
        if fmt.quantizes_linears
        else unquantized_bytes_per_param(arch, quantization)
    )
    return counts.routed_experts * (1.0 - share) * per_param


def _linear_output_rows(arch: ModelArch) -> int:
    """Output rows of every quantized linear (each carries its per-row scales)."""
    shapes = arch.linear_shapes()
    rows = sum(o * (arch.num_experts if n in MLP_LINEARS else 1) for n, (_, o) in shapes.items())
    return arch.num_layers * rows


def kv_bytes_per_token(arch: ModelArch, kv_cache_dtype: str, quantization: str) -> float:
    """Bytes of K and V for one token across all layers (before any sliding-window cap)."""
    per_element = KV_CACHE_FORMATS[kv_cache_dtype].bytes_per_element
    if per_element is None:
        per_element = compute_dtype_bytes(quantization, arch.dtype_bytes)
    return arch.kv_bytes_per_token(per_element)


def kv_cache_bytes(
    arch: ModelArch, kv_cache_dtype: str, quantization: str, tokens: float, batch: int
) -> float:
    """2 × layers × kv_heads × head_dim × bytes × tokens × batch; sliding layers cap tokens."""
    per_layer_token = kv_bytes_per_token(arch, kv_cache_dtype, quantization) / arch.num_layers
    window = arch.sliding_window or tokens
    sliding = arch.sliding_layers
    full = arch.num_layers - sliding
    token_layers = full * tokens + sliding * min(tokens, window)
    return per_layer_token * token_layers * batch


def rank_kv_share(arch: ModelArch, layout: Layout | None, stage: int) -> float:
    """The share of the KV cache one rank of `stage` holds: its stage's layers, and its KV heads
    (replicated ones count whole; MLA's latent, one "head", is whole on every tensor rank)."""
    if layout is None:
        return 1.0
    layers = stage_layers(arch.num_layers, layout.pipeline, stage) / arch.num_layers
    return layers * kv_heads_per_rank(arch, layout.tensor) / arch.num_kv_heads


def rank_kv_per_token(
    arch: ModelArch, kv_cache_dtype: str, quantization: str, layout: Layout | None
) -> float:
    """KV bytes per token on the rank holding the most (the whole model's on one card): the
    per-token bytes × the largest stage's share."""
    per_token = kv_bytes_per_token(arch, kv_cache_dtype, quantization)
    stages = range(1 if layout is None else layout.pipeline)
    return per_token * max(rank_kv_share(arch, layout, s) for s in stages)


def largest_batch(pool_bytes: float, kv_per_token: float, sequence_tokens: int) -> int | None:
    """Sequences of `sequence_tokens` a KV pool of `pool_bytes` holds: ⌊pool / KV per token⌋
    tokens ÷ the sequence (sliding-window caps not taken off: a lower bound)."""
    if not kv_per_token:
        return None
    return int(max(0.0, pool_bytes) // kv_per_token) // sequence_tokens


def pool_figures(point: Point, arch: ModelArch, kv_room: float) -> dict[str, Any]:
    """The plan's `kv_per_token_bytes` (the binding rank's KV bytes per token) and
    `largest_batch` (the sequences of context + output a KV pool of `kv_room` bytes holds, under
    vLLM's pre-allocation on a GPU only; None elsewhere)."""
    kv_token = rank_kv_per_token(arch, point.kv_cache_dtype, point.quantization, point.layout)
    most = None
    if point.backend == "vllm" and point.target != "cpu":
        most = largest_batch(kv_room, kv_token, point.context + point.output_tokens)
    return {"kv_per_token_bytes": kv_token, "largest_batch": most}


def format_peak(card: GpuSpec, arch: ModelArch, quantization: str) -> float:
    """TFLOP/s a prefill in this format runs at (catalog.format_peak_tflops of the format
    planned, a shipped one under `none`); the bf16 peak where the card has no unit for it."""
    peak = format_peak_tflops(card, planned_format(arch, quantization)[0])
    return peak or card.bf16_tflops
