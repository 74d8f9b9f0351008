"""The analytic memory plan, the fit verdict, and the sweep budget — no GPU, no torch.

Formulas (bytes; GiB = 2**30):
  params        = embeddings + layers × (attention + MLP × experts + router + norms) + lm_head
  weights       = Σ quantized-linear params × (bits + overhead)/8
                  + the rest × 16-bit (or the model dtype)
  KV cache      = 2 × layers × kv_heads × head_dim × bytes(kv dtype) × tokens × batch,
                  tokens capped at the window on sliding-window layers
  activations   = prefill transient (hidden + MLP intermediates of B × S tokens, per layer) + logits
                  (fp32 over B × S positions when all are kept, else B × 1)
  reserve       = runtime context (CUDA/HIP context or the CPU process) + allocator margin
  peak(phase)   = load: weights + reserve;
                  prefill: + KV(context) + activations;
                  decode: + KV(context + output) + decode logits
A vLLM point instead pre-allocates gpu_memory_utilization × card memory: it fits when weights +
activations + the KV cache it needs fit inside that share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from harness import modes
from harness.measure import roofline
from harness.spec import catalog
from harness.spec.capabilities import KV_CACHE_FORMATS, WEIGHT_FORMATS, compute_dtype_bytes
from harness.spec.catalog import MLP_LINEARS, GpuSpec, ModelArch
from harness.spec.scenario import CONFIGURATION_FIELDS, Grid, GroupKey, Point, Scenario, Skip
from harness.units import GIB, MIB

CUDA_CONTEXT_BYTES = 700 * MIB  # CUDA context + cuBLAS: 680–750 MiB measured on an H200
HIP_CONTEXT_BYTES = 900 * MIB  # ROCm's runtime context is larger
CPU_RUNTIME_BYTES = 540 * MIB  # a worker's RSS with torch, transformers, bnb, Ray: ~540 MiB
ALLOCATOR_MARGIN = 0.05  # caching-allocator fragmentation, share of the tensors' bytes
EFFICIENCY = {"cpu": 0.25, "cuda": 0.6, "rocm": 0.5}  # share of roofline a budget assumes
LOAD_GB_S = 1.0  # disk → device, for the budget's load time per group
# Serving: a `vllm serve` start per group (process, engine, health check: 30-100 s measured on the
# 2-core CPU with the tiny model), and one load-generator process per level (its imports).
SERVER_START_S = 90.0
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


def runtime_context_bytes(target: str) -> float:
    """The runtime's own memory: the CUDA/HIP context, or the CPU worker process."""
    return {"cuda": CUDA_CONTEXT_BYTES, "rocm": HIP_CONTEXT_BYTES}.get(target, CPU_RUNTIME_BYTES)


def runtime_reserve_bytes(target: str, tensors_bytes: float) -> float:
    """The runtime's own memory and the allocator's margin over the tensors."""
    return runtime_context_bytes(target) + ALLOCATOR_MARGIN * tensors_bytes


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
    return plan_mode(point, card, catalog.model(point.model), options)


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


def inference_memory(point: Point, arch: ModelArch) -> tuple[dict[str, float], dict[str, float]]:
    """An inference point's bytes per phase (load, prefill, decode) and its terms (weights, the
    decode-time KV cache, the prefill activations, the reserve): the formulas above."""
    weights = weights_bytes(arch, point.quantization)
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
    reserve = runtime_reserve_bytes(point.target, weights + kv_decode + acts)
    phases = {
        "load": weights + reserve,
        "prefill": weights + kv_prefill + acts + reserve,
        "decode": weights + kv_decode + decode_acts + reserve,
    }
    terms = {"weights": weights, "kv_cache": kv_decode, "activations": acts, "reserve": reserve}
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


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    points: int
    skipped: int
    groups: int
    est_seconds: float
    est_load_seconds: float
    est_server_start_seconds: float = 0.0  # one `vllm serve` start per group with serving levels
    est_quality_seconds: float = 0.0  # each group's quality phase (windows + ARC items scored)
    est_gpu_hours: float
    est_cost_usd: float | None = None
    tariff: str | None = None


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    points: list[PointPlan]
    skipped: list[tuple[Skip, PointPlan | None]]
    budget: Budget

    def contract(self) -> dict[str, object]:
        """The `harness plan --json` object (a contract: see README)."""
        skipped = []
        for skip, plan in self.skipped:
            row: dict[str, object] = plan.contract() if plan else skip.point.model_dump()
            row["reason"] = skip.reason
            skipped.append(row)
        return {
            "points": [p.contract() for p in self.points],
            "skipped": skipped,
            "budget": self.budget.model_dump(),
        }


def plan_grid(grid: Grid, gpu: str | None = None, hourly_usd: float | None = None) -> Plan:
    """Plan every point; what cannot fit joins the skips (with the binding term)."""
    scenario: Scenario = grid.scenario
    default_gpu = gpu or scenario.gpu
    fitting: list[PointPlan] = []
    skipped: list[tuple[Skip, PointPlan | None]] = [(s, None) for s in grid.skipped]
    util = scenario.vllm.gpu_memory_utilization
    for point in grid.points:
        plan = plan_point(
            point,
            default_card(point.target, default_gpu),
            gpu_memory_utilization=util,
            warmups=scenario.warmups,
        )
        if plan.fits:
            fitting.append(plan)
        else:
            skipped.append((Skip(point=point, reason=f"does not fit: {plan.reason}"), plan))
    quality_s = quality_seconds(fitting, scenario)
    return Plan(
        points=fitting,
        skipped=skipped,
        budget=budget(fitting, skipped, hourly_usd, quality_s),
    )


# Tokens one ARC-Easy item costs to score: each choice is scored after its query as one sequence
# (the shipped items: 4.0 choices, queries of 124 and answers of 23 characters on average, at
# ~4 characters a token).
ARC_TOKENS_PER_ITEM = 4 * (31 + 6)
ARC_ITEMS_IN_CORPUS = 2376  # harness/data/corpus/arc_easy.jsonl (its README); checked by a test


def quality_seconds(fitting: Iterable[PointPlan], scenario: Scenario) -> dict[GroupKey, float]:
    """Seconds of each group's quality phase (once per group with checkpoint weights and
    offline points): a forward pass over every scored window and ARC item at the card's bf16
    FLOP/s, 2 × active params per token, at the target's EFFICIENCY."""
    settings = scenario.quality
    out: dict[GroupKey, float] = {}
    for p in fitting:
        point = p.point
        if point.mode != "offline" or point.weights == "random" or point.group in out:
            continue
        arch = catalog.model(point.model)
        windows = settings.max_windows or max(1, 300_000 // settings.window_tokens)
        arc = ARC_ITEMS_IN_CORPUS if settings.arc_count is None else settings.arc_count
        tokens = windows * settings.window_tokens + arc * ARC_TOKENS_PER_ITEM
        counts = param_counts(arch)
        flops = 2 * (counts.active_linear + counts.embeddings) * tokens
        card = catalog.gpu(p.gpu)
        out[point.group] = flops / (card.bf16_tflops * 1e12) / EFFICIENCY[point.target]
    return out


def budget(
    fitting: Iterable[PointPlan],
    skipped: list[tuple[Skip, PointPlan | None]],
    hourly_usd: float | None,
    quality_s: dict[GroupKey, float] | None = None,
) -> Budget:
    fitting = list(fitting)
    first_of_group = {p.point.group: p for p in reversed(fitting)}
    load_s = sum(p.weights_gib * GIB / (LOAD_GB_S * 1e9) for p in first_of_group.values())
    served = {p.point.group for p in fitting if p.point.serving is not None}
    server_s = len(served) * SERVER_START_S
    quality_s = quality_s or {}
    quality_total = sum(quality_s.values())
    seconds = sum(p.est_seconds for p in fitting) + load_s + server_s + quality_total
    gpu_seconds = sum(p.est_seconds for p in fitting if p.point.target != "cpu")
    gpu_seconds += sum(s for g, s in quality_s.items() if g.target != "cpu")
    gpu_seconds += SERVER_START_S * sum(1 for g in served if g.target != "cpu")
    gpu_hours = gpu_seconds / 3600
    return Budget(
        points=len(fitting),
        skipped=len(skipped),
        groups=len(first_of_group),
        est_seconds=seconds,
        est_load_seconds=load_s,
        est_server_start_seconds=server_s,
        est_quality_seconds=quality_total,
        est_gpu_hours=gpu_hours,
        est_cost_usd=gpu_hours * hourly_usd if hourly_usd is not None else None,
    )
