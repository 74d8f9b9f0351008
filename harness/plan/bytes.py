"""The bytes a model holds (harness.plan's formulas, its docstring states them): its parameters
per kind (whole, or one rank's of a layout's stage), the weights in a format, and the KV cache per
token and for a batch at a context."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness.spec.capabilities import KV_CACHE_FORMATS, WEIGHT_FORMATS, Layout, compute_dtype_bytes
from harness.spec.catalog import MLP_LINEARS, ModelArch


class ParamCounts(BaseModel):
    model_config = ConfigDict(frozen=True)
    linear: int  # quantizable linears (attention + MLP + router)
    embeddings: int
    lm_head: int  # 0 when tied to the embeddings
    other: int  # norms and biases
    active_linear: int  # linears touched per token (MoE: top-k experts)

    @property
    def total(self) -> int:
        return self.linear + self.embeddings + self.lm_head + self.other


def param_counts(arch: ModelArch, layout: Layout | None = None, stage: int = 0) -> ParamCounts:
    """The parameters of the whole model, or under a layout those of one rank of `stage` (the
    per-rank formulas above)."""
    h = arch.hidden_size
    shapes = arch.linear_shapes()
    t = 1 if layout is None else layout.tensor
    stages = 1 if layout is None else layout.pipeline
    layers = stage_layers(arch.num_layers, stages, stage)
    kv_share = kv_heads_per_rank(arch, t) / arch.num_kv_heads
    qo = sum(i * o for n, (i, o) in shapes.items() if n in ("q_proj", "o_proj"))
    kv = sum(i * o for n, (i, o) in shapes.items() if n in ("k_proj", "v_proj"))
    attention = qo / t + kv * kv_share
    mlp = sum(i * o for name, (i, o) in shapes.items() if name in MLP_LINEARS)
    experts = arch.num_experts
    spread = layout is not None and layout.expert  # whole experts, ⌈E / t⌉ per rank
    mlp_rank = mlp * -(-experts // t) if spread else mlp * experts / t
    router = h * experts if experts > 1 else 0
    per_layer = attention + mlp_rank + router
    active_per_layer = attention + mlp * arch.experts_per_token / t + router
    q, k, v = (shapes[n][1] for n in ("q_proj", "k_proj", "v_proj"))
    bias = (q / t + (k + v) * kv_share) if arch.attention_bias else 0
    norms = 2 * h
    first, last = stage == 0, stage == stages - 1
    vocab_rows = arch.vocab_size * h / t
    lm_head = vocab_rows if last and (not arch.tie_embeddings or stages > 1) else 0
    return ParamCounts(
        linear=round(layers * per_layer),
        embeddings=round(vocab_rows) if first else 0,
        lm_head=round(lm_head),
        other=round(layers * (norms + bias) + (h if last else 0)),
        active_linear=round(layers * active_per_layer),
    )


def stage_layers(layers: int, stages: int, stage: int) -> int:
    """Decoder layers of pipeline stage `stage` of `stages`: the first `layers mod stages`
    stages take one more."""
    return layers // stages + (1 if stage < layers % stages else 0)


def kv_heads_per_rank(arch: ModelArch, tensor: int) -> int:
    """KV heads a tensor rank holds: kv_heads / t, and 1 (replicated) when t exceeds them."""
    return max(1, arch.num_kv_heads // tensor)


def weights_bytes(
    arch: ModelArch, quantization: str, layout: Layout | None = None, stage: int = 0
) -> float:
    """Bytes of the loaded weights in a format (see WeightFormat for the overhead terms): the
    whole model's, or under a layout one rank's of `stage`."""
    fmt = WEIGHT_FORMATS[quantization]
    counts = param_counts(arch, layout, stage)
    if not fmt.quantizes_linears:
        return counts.total * unquantized_bytes_per_param(arch, quantization)
    linear = counts.linear * fmt.bits_per_weight / 8
    rows = _linear_output_rows(arch) * counts.linear / max(1, param_counts(arch).linear)
    linear += rows * fmt.per_row_overhead_bits / 8
    kept = counts.embeddings + counts.lm_head + counts.other
    return linear + kept * unquantized_bytes_per_param(arch, quantization)


def unquantized_bytes_per_param(arch: ModelArch, quantization: str) -> float:
    """Bytes of a parameter the format leaves unquantized (all of them for plain dtypes).
    bitsandbytes and quanto leave embeddings, lm_head and norms in the loaded dtype;
    gptqmodel and vLLM serve them in 16 bit."""
    fmt = WEIGHT_FORMATS[quantization]
    if not fmt.quantizes_linears:
        return arch.dtype_bytes if fmt.bits is None else fmt.bits / 8
    return arch.dtype_bytes if fmt.rest_in_loaded_dtype else min(arch.dtype_bytes, 2)


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
