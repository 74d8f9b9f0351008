"""The analytic memory plan of a point, its fit verdict and its seconds — no GPU, no torch.
The sweep's plan and budget (groups, phases, calibration) are harness.budget's.

Formulas (bytes; GiB = 2**30):
  params        = embeddings + layers × (attention + MLP × experts + router + norms) + lm_head
  weights       = Σ quantized-linear params × (bits + overhead)/8
                  + the rest × 16-bit (or the model dtype)
  KV cache      = 2 × layers × kv_heads × head_dim × bytes(kv dtype) × tokens × batch,
                  tokens capped at the window on sliding-window layers
  activations   = prefill transient (hidden + MLP intermediates of B × S tokens, per layer) + logits
                  (fp32 over B × S positions when all are kept, else B × 1)
  adapter       = (a LoRA folder on the model, counted with the weights)
                  r × Σ_targets (in + out) × layers × bytes(compute dtype);
                  vLLM adds its LoRA slots: max_loras (1) × max_lora_rank (the smallest vLLM
                  rank ≥ r) × Σ_every linear (in + out) × layers × bytes(compute dtype)
  reserve       = runtime context + allocator margin; the context is the CUDA/HIP context, or on
                  the CPU the group's process: its engine's (imports, engine start, a Ray actor)
                  + the weight format's library
  KV pool       = vLLM on the CPU holds its whole pool from the load on: kv_pool_bytes(the
                  point's KV(context + output)), the pool the harness gives the engine
  first forward = on the CPU, what an engine's first forward leaves in the process (kernels'
                  scratch, thread arenas), per engine; 0 on GPUs
  peak(phase)   = load: weights + KV pool + reserve;
                  prefill: + first forward + KV(context) + activations;
                  decode: + first forward + KV(context + output) + decode logits, and on the
                  CPU the prefill's activations still (freed pages stay in the process's RSS
                  until the point ends: the device loop trims the heap between points)
                  (a KV cache inside the pool adds nothing)
A vLLM point instead pre-allocates gpu_memory_utilization × card memory: it fits when weights +
activations + the KV cache it needs fit inside that share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from harness import modes
from harness.measure import roofline
from harness.spec import adapters, catalog
from harness.spec.capabilities import KV_CACHE_FORMATS, WEIGHT_FORMATS, compute_dtype_bytes
from harness.spec.catalog import MLP_LINEARS, GpuSpec, ModelArch
from harness.spec.labels import model_key
from harness.spec.scenario import CONFIGURATION_FIELDS, Point
from harness.units import GIB, MIB

CUDA_CONTEXT_BYTES = 700 * MIB  # CUDA context + cuBLAS: 680–750 MiB measured on an H200
HIP_CONTEXT_BYTES = 900 * MIB  # ROCm's runtime context is larger
CPU_RUNTIME_BYTES = 540 * MIB  # a training worker's RSS with torch, transformers, bnb, Ray
ALLOCATOR_MARGIN = 0.05  # caching-allocator fragmentation, share of the tensors' bytes
# An inference group's process on the CPU (RSS), per engine, less the weights and the KV pool.
# Measured here on 2026-12-01 with the tiny model (2 cores, other jobs running), three ways:
# `make bench` at 7747e86 (results/bench-cpu: a fresh Ray actor per group), `make bench` on the
# working tree of 2026-12-01 15:05 (transformers groups in a child forked by the node's host,
# harness.run.host; vLLM groups in a fresh actor), both as peak_mib_load less the plan's weights
# and the 64 MiB pool; and each group loaded alone in a fresh process, RSS read after every step
# (the memory helper's probe, README "Memory"):
# - transformers 5.19: Python and the harness 51 MiB, + torch and transformers 262, + the model's
#   modules at load 405; a fresh Ray actor 478, a forked child 374 (shared library pages the
#   child has not touched are not in its RSS): the forked child is planned; a group that falls
#   back to a fresh process measures about 105 MiB more at load;
# - vLLM 0.32 (always a fresh actor): its import + 109 (371), its engine start (inductor, OpenMP
#   threads, buffers) and the actor 750-802 over the three benches, 796-810 in a fourth on a
#   quiet machine (16:00, with the heap trimmed between points): 800 is planned.
CPU_PROCESS_BYTES = {"transformers": 375 * MIB, "vllm": 800 * MIB}
# A weight format's library on top: bitsandbytes +114 MiB at import, of which the model's load
# then pays 79 less (+35 in the probe, +34 to +42 in the benches, fresh and forked).
CPU_LIBRARY_BYTES = {"bitsandbytes": 36 * MIB}
# What an engine's first forward leaves in the process on the CPU, with the heap trimmed after
# the quality pass (harness.run.device.trim_heap; without the trim, 100-580 MiB of the quality
# pass's freed pages stayed, different in every run): peak_mib_prefill - peak_mib_load at the
# smallest point (batch 1, context 128) of `make bench`, 2026-12-01 16:00, quiet machine:
# transformers 76 (fp32), 75 (bnb-int8), 66 (bnb-nf4) MiB; vLLM -13 to -4 (its load peak, the
# engine's profiling run, is above its points'): 0.
CPU_FIRST_FORWARD_BYTES = {"transformers": 75 * MIB, "vllm": 0.0}
# An engine that sizes its KV pool up front (vLLM on the CPU, offline or behind a server) gets
# the largest KV cache its sequences need with this headroom: blocks are allocated whole (128
# tokens on the CPU), so each sequence may hold up to one block it does not fill.
KV_POOL_HEADROOM = 1.25
KV_POOL_MIN_BYTES = 64 * MIB
EFFICIENCY = {"cpu": 0.25, "cuda": 0.6, "rocm": 0.5}  # share of roofline a budget assumes
# Serving: one load-generator process per level (its imports; the server's start per group is
# the budget's, harness.budget).
GENERATOR_START_S = 20.0
VLLM_MAX_BATCHED_TOKENS = 8192  # vLLM prefills in chunks of at most this many tokens


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


def param_counts(arch: ModelArch) -> ParamCounts:
    h = arch.hidden_size
    shapes = arch.linear_shapes()
    attention = sum(i * o for name, (i, o) in shapes.items() if name not in MLP_LINEARS)
    mlp = sum(i * o for name, (i, o) in shapes.items() if name in MLP_LINEARS)
    router = h * arch.num_experts if arch.num_experts > 1 else 0
    per_layer = attention + mlp * arch.num_experts + router
    active_per_layer = attention + mlp * arch.experts_per_token + router
    q, k, v = (shapes[n][1] for n in ("q_proj", "k_proj", "v_proj"))
    bias = q + k + v if arch.attention_bias else 0
    norms = 2 * h
    return ParamCounts(
        linear=arch.num_layers * per_layer,
        embeddings=arch.vocab_size * h,
        lm_head=0 if arch.tie_embeddings else arch.vocab_size * h,
        other=arch.num_layers * (norms + bias) + h,
        active_linear=arch.num_layers * active_per_layer,
    )


def weights_bytes(arch: ModelArch, quantization: str) -> float:
    """Bytes of the loaded weights in a format (see WeightFormat for the overhead terms)."""
    fmt = WEIGHT_FORMATS[quantization]
    counts = param_counts(arch)
    if not fmt.quantizes_linears:
        return counts.total * unquantized_bytes_per_param(arch, quantization)
    linear = counts.linear * fmt.bits_per_weight / 8
    rows = _linear_output_rows(arch)
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


def activation_bytes(
    arch: ModelArch, quantization: str, batch: int, context: int, *, all_logits: bool
) -> float:
    """Prefill transient of one layer (hidden, q/k/v, MLP gate+up) plus the logits tensor."""
    act = compute_dtype_bytes(quantization, arch.dtype_bytes)
    tokens = batch * context
    qkv = arch.num_heads * arch.head_dim + 2 * arch.num_kv_heads * arch.head_dim
    per_token = (2 * arch.hidden_size + qkv + 2 * arch.intermediate_size) * act
    logits_positions = tokens if all_logits else batch
    return tokens * per_token + logits_positions * arch.vocab_size * 4


def runtime_context_bytes(
    target: str, backend: str | None = None, quantization: str | None = None
) -> float:
    """The runtime's own memory: the CUDA/HIP context; on the CPU the inference group's process
    of `backend` (CPU_PROCESS_BYTES) plus its weight format's library (CPU_LIBRARY_BYTES), or a
    training worker's (CPU_RUNTIME_BYTES) when no engine is named."""
    gpu = {"cuda": CUDA_CONTEXT_BYTES, "rocm": HIP_CONTEXT_BYTES}.get(target)
    if gpu is not None:
        return gpu
    if backend is None:
        return CPU_RUNTIME_BYTES
    library = WEIGHT_FORMATS[quantization].library if quantization is not None else ""
    return CPU_PROCESS_BYTES[backend] + CPU_LIBRARY_BYTES.get(library, 0.0)


def runtime_reserve_bytes(
    target: str, tensors_bytes: float, backend: str | None = None, quantization: str | None = None
) -> float:
    """The runtime's own memory and the allocator's margin over the tensors."""
    return runtime_context_bytes(target, backend, quantization) + ALLOCATOR_MARGIN * tensors_bytes


def first_forward_bytes(point: Point) -> float:
    """What the engine's first forward leaves in a CPU process (CPU_FIRST_FORWARD_BYTES); 0 on
    GPUs, whose allocator figures count tensors only."""
    return CPU_FIRST_FORWARD_BYTES[point.backend] if point.target == "cpu" else 0.0


def kv_pool_bytes(largest_kv_bytes: float) -> int:
    """The pool for a group whose sequences need at most `largest_kv_bytes` at once."""
    return max(KV_POOL_MIN_BYTES, int(largest_kv_bytes * KV_POOL_HEADROOM))


def held_kv_pool_bytes(point: Point, kv_bytes: float) -> float:
    """The KV pool an engine holds from its load on (vLLM on the CPU: kv_pool_bytes of the
    point's KV cache; the group's pool is at least this), else 0."""
    if point.backend != "vllm" or point.target != "cpu":
        return 0.0
    return float(kv_pool_bytes(kv_bytes))


# `harness plan --json`, per point: its configuration (no revision) and these figures.
CONTRACT_FIGURES = (
    "gpu", "weights_gib", "kv_cache_gib", "activations_gib", "reserve_gib", "total_gib", "fits",
    "reason",
)  # fmt: skip


class PointPlan(BaseModel):
    """The plan of one point on one card, in GiB (2**30 bytes)."""

    model_config = ConfigDict(extra="forbid")
    point: Point
    gpu: str
    weights_gib: float
    kv_cache_gib: float
    activations_gib: float
    reserve_gib: float
    load_gib: float
    prefill_gib: float
    decode_gib: float
    total_gib: float
    capacity_gib: float
    fits: bool
    reason: str
    est_seconds: float
    roofline_decode_tok_s: float
    # the mode's own memory breakdown (training: the step's terms and phases), opaque here
    mode_memory: BaseModel | None = None
    # what the mode adds to `harness plan --json` for this point (its payload, its terms)
    mode_contract: dict[str, object] = {}
    # what the mode adds to the point's line in `harness plan` ("" for offline points)
    mode_note: str = ""

    def contract(self) -> dict[str, object]:
        point = {f: getattr(self.point, f) for f in CONFIGURATION_FIELDS if f != "revision"}
        point["model"] = model_key(self.point.model, self.point.revision)  # id@rev off main
        if self.point.adapter is None:  # the contract names an adapter only where there is one
            del point["adapter"]
        return {**point, **self.mode_contract, **{f: getattr(self, f) for f in CONTRACT_FIGURES}}


# The card a GPU target is planned on when no --gpu / scenario `gpu` names one.
DEFAULT_CARDS: dict[str, str] = {"cpu": "cpu", "cuda": "H100-SXM-80GB", "rocm": "MI300X"}


def default_card(target: str, gpu: str | None = None) -> GpuSpec:
    """The card a point of this target is planned on, and its measured row predicted on when
    the device is not in the catalog: the CPU for cpu targets, else the named card, else the
    target's default (CUDA: H100 SXM, ROCm: MI300X). `harness plan`, the sweep and the worker
    all ask here."""
    if target == "cpu":
        return catalog.gpu("cpu")
    return catalog.gpu(gpu or DEFAULT_CARDS[target])


@dataclass(frozen=True)
class PlanOptions:
    """What a mode's plan is given besides the point, its card and the model's architecture: the
    share of the card's memory vLLM pre-allocates (the scenario's ``vllm.gpu_memory_utilization``)
    and the untimed warm-up runs before each point's timed repeats (its ``warmups``)."""

    gpu_memory_utilization: float
    warmups: int


def plan_point(
    point: Point, card: GpuSpec, *, gpu_memory_utilization: float = 0.9, warmups: int = 1
) -> PointPlan:
    """The point's plan by its mode's plan part (harness.modes): memory per phase, fit, seconds."""
    plan_mode: ModePlan = modes.get(point.mode).load("plan")
    options = PlanOptions(gpu_memory_utilization=gpu_memory_utilization, warmups=warmups)
    return plan_mode(point, card, catalog.model(point.model, point.revision), options)


class ModePlan(Protocol):
    """A mode's plan part: one point on one card."""

    def __call__(
        self, point: Point, card: GpuSpec, arch: ModelArch, options: PlanOptions
    ) -> PointPlan: ...


def inference_plan(
    point: Point,
    card: GpuSpec,
    arch: ModelArch,
    *,
    gpu_memory_utilization: float,
    seconds: Callable[[float, float], float],
) -> PointPlan:
    """An inference point's memory per phase and fit verdict (the formulas above), and its
    seconds from ``seconds(weight bytes, decode ceiling tok/s)``: offline and serving differ
    only in how their time is spent."""
    phases, terms = inference_memory(point, arch)
    total = max(phases.values())
    capacity = card.memory_gib * GIB
    if point.backend == "vllm" and point.target != "cpu":
        capacity *= gpu_memory_utilization
    fits, reason = fit_verdict(total, capacity, terms, card.name)
    weights = terms["weights"]
    ceiling = decode_ceiling_tok_s(card, weights, arch, point)
    return PointPlan(
        point=point,
        gpu=card.name,
        weights_gib=weights / GIB,
        kv_cache_gib=terms["kv_cache"] / GIB,
        activations_gib=terms["activations"] / GIB,
        reserve_gib=terms["reserve"] / GIB,
        load_gib=phases["load"] / GIB,
        prefill_gib=phases["prefill"] / GIB,
        decode_gib=phases["decode"] / GIB,
        total_gib=total / GIB,
        capacity_gib=capacity / GIB,
        fits=fits,
        reason=reason,
        est_seconds=seconds(weights, ceiling),
        roofline_decode_tok_s=ceiling,
    )


def adapter_bytes(point: Point, arch: ModelArch) -> float:
    """A point's LoRA adapter in memory (the formula above): its weights, and on vLLM the
    engine's LoRA slots; 0 without an adapter."""
    if point.adapter is None:
        return 0.0
    adapter = adapters.read_adapter(point.adapter)
    shapes = arch.linear_shapes()
    per_value = compute_dtype_bytes(point.quantization, arch.dtype_bytes)
    targets = [shapes[t] for t in adapter.targets if t in shapes] * arch.num_layers
    own = adapters.lora_bytes(adapter.rank, targets, per_value)
    if point.backend != "vllm":
        return own
    slot = adapters.vllm_slot_rank(adapter.rank) or adapter.rank
    every = list(shapes.values()) * arch.num_layers
    return own + adapters.lora_bytes(slot, every, per_value)


def inference_memory(point: Point, arch: ModelArch) -> tuple[dict[str, float], dict[str, float]]:
    """An inference point's bytes per phase (load, prefill, decode) and its terms (weights, the
    decode-time KV cache or the pool that holds it, the prefill activations or on the CPU what
    the allocator retains if that is more, the reserve): the formulas above."""
    weights = weights_bytes(arch, point.quantization) + adapter_bytes(point, arch)
    kv_prefill = kv_cache_bytes(
        arch, point.kv_cache_dtype, point.quantization, point.context, point.batch
    )
    kv_decode = kv_cache_bytes(
        arch,
        point.kv_cache_dtype,
        point.quantization,
        point.context + point.output_tokens,
        point.batch,
    )
    if point.backend == "vllm":
        chunk = min(point.batch * point.context, VLLM_MAX_BATCHED_TOKENS)
        acts = activation_bytes(arch, point.quantization, 1, chunk, all_logits=False)
    else:
        acts = activation_bytes(
            arch, point.quantization, point.batch, point.context, all_logits=False
        )
    decode_acts = point.batch * arch.vocab_size * 4
    pool = held_kv_pool_bytes(point, kv_decode)
    kv = max(pool, kv_decode)
    reserve = runtime_reserve_bytes(
        point.target, weights + kv + acts, point.backend, point.quantization
    )
    first = first_forward_bytes(point)
    load = weights + pool + reserve
    own_kv = (0.0, 0.0) if pool else (kv_prefill, kv_decode)  # a KV inside the pool adds nothing
    held_acts = max(acts, decode_acts) if point.target == "cpu" else decode_acts
    phases = {
        "load": load,
        "prefill": load + first + own_kv[0] + acts,
        "decode": load + first + own_kv[1] + held_acts,
    }
    terms = {
        "weights": weights,
        "kv_cache": kv,
        "activations": first + acts,
        "reserve": reserve,
    }
    return phases, terms


def fit_verdict(
    total: float, capacity: float, terms: dict[str, float], card: str
) -> tuple[bool, str]:
    """Whether a peak of `total` bytes fits in `capacity` bytes of `card`, and the reason a
    person reads: both figures, and when it does not fit, the binding (largest) term."""
    if total <= capacity:
        return True, f"fits: {total / GIB:.2f} of {capacity / GIB:.2f} GiB"
    binding = max(terms, key=lambda t: terms[t])
    return False, (
        f"needs {total / GIB:.2f} GiB > {capacity / GIB:.2f} GiB on {card}; "
        f"binding term: {binding} ({terms[binding] / GIB:.2f} GiB)"
    )


def decode_ceiling_tok_s(card: GpuSpec, weights: float, arch: ModelArch, point: Point) -> float:
    """The bandwidth roofline (measure.roofline) for a point: weight bytes read per step + the KV
    cache at the mean decode context. An untied input embedding is a lookup of B rows, not a
    read of the whole table."""
    new = point.output_tokens
    mean_tokens = roofline.mean_decode_context(point.context, new) if new >= 2 else point.context
    kv = kv_cache_bytes(arch, point.kv_cache_dtype, point.quantization, mean_tokens, point.batch)
    per_param = unquantized_bytes_per_param(arch, point.quantization)
    lookup_only = 0 if arch.tie_embeddings else param_counts(arch).embeddings * per_param
    return roofline.decode_ceiling_tok_s(
        card.bandwidth_gb_s, weights - lookup_only, kv, point.batch
    )


def estimate_seconds(
    point: Point, card: GpuSpec, arch: ModelArch, weights: float, ceiling: float, warmups: int
) -> float:
    """(warmups + repeats) × (prefill at peak FLOP/s + decode at the roofline) / efficiency."""
    counts = param_counts(arch)
    active = counts.active_linear + counts.embeddings
    prefill_s = 2 * active * point.batch * point.context / (card.bf16_tflops * 1e12)
    decode_s = point.batch * point.output_tokens / ceiling
    per_run = (prefill_s + decode_s) / EFFICIENCY[point.target]
    return (warmups + point.repeats) * per_run
