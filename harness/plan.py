"""The analytic memory plan, the fit verdict, and the sweep budget — no GPU, no torch.

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
from harness.spec import adapters, catalog
from harness.spec.capabilities import KV_CACHE_FORMATS, WEIGHT_FORMATS, compute_dtype_bytes
from harness.spec.catalog import MLP_LINEARS, GpuSpec, ModelArch
from harness.spec.labels import model_key
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

# The phases a run pays, as a person reads them (`harness plan`, the end-of-run line); a point's
# own seconds are its mode's phase (MODE_PHASE). harness.run.history records each phase's seconds
# and calibrates the budget from them.
PHASES: dict[str, str] = {
    "cluster": "Ray start",
    "startup": "process start + imports",
    "load": "model load + engine start",
    "quality": "quality scoring",
    "measured": "measured work",
    "server_start": "server starts",
    "serving": "serving levels",
    "training": "training steps",
}
MODE_PHASE = {"offline": "measured", "serving": "serving", "training": "training"}
ANY = "*"  # a phase not of one engine or model (the Ray start), and a calibration's wildcard
# Defaults before any history, per (engine, device kind), from runs measured here and on the H200:
# - cpu: `make bench` (scenarios/default.yaml, 6 groups) on this 2-core CPU, 2026-12-01 09:48 at
#   7747e86 (results/bench-cpu): load_s transformers 3.5-3.7 s, vLLM 0.32 16.8-31.1 s; wall
#   176.0 s - Σ the rows' phases 155.3 s = 20.7 s for the Ray start and six group processes.
# - cuda: results/example/h200-2026-11-29 (`harness run`, two transformers groups in fresh Ray
#   actors): load_s 7.0 and 8.2 s; wall 41.0 s - phases 26.1 s = 14.9 s for the Ray start and two
#   processes; results/example/h200-2026-11-30: vLLM 0.26's engine start with CUDA graphs, 51.9 s
#   (tiny model, with 16 windows scored) and 51.2 s (8B architecture).
# - rocm: no run recorded; the cuda figures.
ENGINE_START_S = {
    ("transformers", "cpu"): 3.6,
    ("vllm", "cpu"): 26.0,
    ("transformers", "cuda"): 7.6,
    ("vllm", "cuda"): 51.0,
}
GROUP_START_S = {"cpu": 2.5, "cuda": 5.0}  # a fresh Ray actor's process start + imports
CLUSTER_START_S = {"cpu": 5.7, "cuda": 5.0}  # `ray.init` of a local node
# Per-call latency bounds a small model rather than the roofline: the seconds of one decode step
# (any batch; the timed runs, warm-ups and the energy pass) and of one scored quality unit (a
# window or an ARC item) at least, per (engine, device kind), from the same runs' rows (timing =
# measured_s less the quality share):
# - cpu: transformers 2.3-14.1 ms a step (median 5.8, 12 rows), vLLM 1.8-9.7 ms (median 3.4);
#   quality 24.6-59.1 ms a unit (mean of the six groups 46.9);
# - cuda: transformers on the H200 (38 rows, 9 groups) 3.7-16.8 ms a step (median 7.8), quality
#   13.4-52.5 ms a unit (median 26); vLLM (CUDA graphs): no small-model step recorded, the 8B
#   architecture's batch-1 step was 5.0 ms (bandwidth-bound), so 3 ms is assumed.
STEP_FLOOR_S = {
    ("transformers", "cpu"): 0.0058,
    ("vllm", "cpu"): 0.0034,
    ("transformers", "cuda"): 0.0078,
    ("vllm", "cuda"): 0.003,
}
QUALITY_UNIT_S = {"cpu": 0.047, "cuda": 0.026}
# The tasks of a group (harness.tasks), in quality units: a scored continuation (a label, a
# choice) and a generated token of an extract item (batched 32 at a time), from the tiny model on
# this CPU with transformers, unloaded: 1,470 continuations in 18.5 s (12.6 ms each) and 210 items
# × 64 tokens in 26.8 s (2.0 ms a token).
TASK_CONTINUATION_UNITS = 0.0126 / 0.047
TASK_TOKEN_UNITS = 0.0020 / 0.047


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
    decode-time KV cache, the prefill activations, the reserve): the formulas above."""
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
    est_phase_seconds: dict[str, float] = {}  # every phase (PHASES), calibrated where history is
    calibrated_from: str | None = None  # the history file the figures were calibrated from
    est_gpu_hours: float
    est_cost_usd: float | None = None
    tariff: str | None = None


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    points: list[PointPlan]
    skipped: list[tuple[Skip, PointPlan | None]]
    budget: Budget
    phases: list[PhaseSeconds] = []  # the budget's phases per group (not in the --json contract)

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


def plan_grid(
    grid: Grid,
    gpu: str | None = None,
    hourly_usd: float | None = None,
    *,
    calibration: Calibration | None = None,
    runner: str = "ray",
) -> Plan:
    """Plan every point; what cannot fit joins the skips (with the binding term). The budget's
    phases are the defaults × `calibration` (harness.run.history); `runner` "in-process" (`harness
    measure`) pays no Ray start and no process per group."""
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
    phases = phase_seconds(fitting, quality_s, warmups=scenario.warmups, runner=runner)
    phases = calibrate(phases, calibration or {})
    return Plan(
        points=fitting,
        skipped=skipped,
        budget=budget(fitting, skipped, hourly_usd, phases=phases),
        phases=phases,
    )


# Tokens one ARC-Easy item costs to score: each choice is scored after its query as one sequence
# (the shipped items: 4.0 choices, queries of 124 and answers of 23 characters on average, at
# ~4 characters a token).
ARC_TOKENS_PER_ITEM = 4 * (31 + 6)
ARC_ITEMS_IN_CORPUS = 2376  # harness/data/corpus/arc_easy.jsonl (its README); checked by a test


def quality_seconds(fitting: Iterable[PointPlan], scenario: Scenario) -> dict[GroupKey, float]:
    """Seconds of each group's quality phase (once per group with checkpoint weights and
    offline points): a forward pass over every scored window and ARC item at the card's bf16
    FLOP/s, 2 × active params per token, at the target's EFFICIENCY; at least the measured
    seconds per unit (windows, ARC items, and the tasks' continuations and generated tokens)."""
    settings = scenario.quality
    out: dict[GroupKey, float] = {}
    for p in fitting:
        point = p.point
        if point.mode != "offline" or point.weights == "random" or point.group in out:
            continue
        arch = catalog.model(point.model, point.revision)
        windows = settings.max_windows or max(1, 300_000 // settings.window_tokens)
        arc = ARC_ITEMS_IN_CORPUS if settings.arc_count is None else settings.arc_count
        tokens = windows * settings.window_tokens + arc * ARC_TOKENS_PER_ITEM
        counts = param_counts(arch)
        flops = 2 * (counts.active_linear + counts.embeddings) * tokens
        card = catalog.gpu(p.gpu)
        roof_s = flops / (card.bf16_tflops * 1e12) / EFFICIENCY[point.target]
        continuations, generated = settings.task_calls()
        units = windows + arc + continuations * TASK_CONTINUATION_UNITS
        units += generated * TASK_TOKEN_UNITS
        out[point.group] = max(roof_s, units * QUALITY_UNIT_S[device_kind(point.target)])
    return out


def device_kind(target: str) -> str:
    """The device kind a default was measured on: rocm has none of its own yet (cuda's)."""
    return "cuda" if target == "rocm" else target


class PhaseSeconds(BaseModel):
    """One phase of one group (of the sweep, for the Ray start: group ``""``), in seconds: the
    defaults' figure and the one calibrated from the node's history (harness.run.history)."""

    model_config = ConfigDict(extra="forbid")
    phase: str  # a key of PHASES
    group: str  # GroupKey.label, "" for the sweep's own phases
    engine: str  # the backend, ANY for the Ray start
    device: str  # cpu | cuda | rocm
    model: str  # ANY for the Ray start
    default_s: float
    seconds: float

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.engine, self.device, self.model, self.phase)


# measured ÷ default seconds per (engine, device, model, phase); model ANY: any model
Calibration = dict[tuple[str, str, str, str], float]


def phase_seconds(
    fitting: Iterable[PointPlan],
    quality_s: dict[GroupKey, float],
    *,
    warmups: int = 1,
    runner: str = "ray",
) -> list[PhaseSeconds]:
    """Every phase a run pays, per group. Ray: the Ray start once and a fresh process per group;
    in one process: its start and imports once. Then the model load and engine start
    (ENGINE_START_S + weights at LOAD_GB_S; training loads per point), the quality phase, a server
    start per serving group, and each mode's points (offline points at least STEP_FLOOR_S a
    decode step, warm-ups and the energy pass included). Uncalibrated: seconds = default_s."""
    groups: dict[GroupKey, list[PointPlan]] = {}
    for p in fitting:
        groups.setdefault(p.point.group, []).append(p)
    out: list[PhaseSeconds] = []
    if groups:  # Ray: its start; in one process: that process's imports, once
        device = device_kind(next(iter(groups)).target)
        ray = runner == "ray"
        phase, table = ("cluster", CLUSTER_START_S) if ray else ("startup", GROUP_START_S)
        out.append(_phase(phase, "", ANY, device, ANY, table[device]))
    for group, plans in groups.items():
        out += group_phases(group, plans, quality_s.get(group), warmups=warmups, runner=runner)
    return out


def group_phases(
    group: GroupKey, plans: list[PointPlan], quality: float | None, *, warmups: int, runner: str
) -> list[PhaseSeconds]:
    """One group's phases (phase_seconds)."""
    kind = device_kind(group.target)
    loads = len(plans) if plans[0].point.mode == "training" else 1
    weights_s = plans[0].weights_gib * GIB / (LOAD_GB_S * 1e9)
    seconds: dict[str, float] = {}
    if runner == "ray":
        seconds["startup"] = GROUP_START_S[kind]
    seconds["load"] = loads * (ENGINE_START_S[(group.backend, kind)] + weights_s)
    if quality is not None:
        seconds["quality"] = quality
    if any(p.point.serving is not None for p in plans):
        seconds["server_start"] = SERVER_START_S
    for mode, phase in MODE_PHASE.items():
        mine = [p for p in plans if p.point.mode == mode]
        if mine:
            seconds[phase] = sum(point_seconds(p, warmups) for p in mine)
    return [
        _phase(phase, group.label, group.backend, group.target, group.model, s)
        for phase, s in seconds.items()
    ]


def _phase(phase: str, group: str, engine: str, device: str, model: str, s: float) -> PhaseSeconds:
    return PhaseSeconds(
        phase=phase, group=group, engine=engine, device=device, model=model, default_s=s, seconds=s
    )


def point_seconds(plan: PointPlan, warmups: int) -> float:
    """A point's planned seconds; an offline point at least STEP_FLOOR_S per decode step."""
    point = plan.point
    if point.mode != "offline":
        return plan.est_seconds
    runs = warmups + point.repeats + 1  # the timed runs, then the energy pass
    steps = runs * (point.output_tokens + 1)  # + the prefill's own step
    return max(plan.est_seconds, steps * STEP_FLOOR_S[(point.backend, device_kind(point.target))])


def calibrate(phases: list[PhaseSeconds], calibration: Calibration) -> list[PhaseSeconds]:
    """Each phase's seconds × its measured ÷ default ratio from the history: the exact (engine,
    device, model, phase) first, else the same engine and device on any model, else the
    defaults."""
    out = []
    for p in phases:
        wildcard = (p.engine, p.device, ANY, p.phase)
        factor = calibration.get(p.key, calibration.get(wildcard, 1.0))
        out.append(p.model_copy(update={"seconds": p.default_s * factor}))
    return out


def budget(
    fitting: Iterable[PointPlan],
    skipped: list[tuple[Skip, PointPlan | None]],
    hourly_usd: float | None,
    quality_s: dict[GroupKey, float] | None = None,
    phases: list[PhaseSeconds] | None = None,
) -> Budget:
    """The sweep's wall time as the sum of its phases (groups one after another on one device),
    and its price: the package-hour price × that wall time when a GPU target is in it."""
    fitting = list(fitting)
    if phases is None:
        phases = phase_seconds(fitting, quality_s or {})
    by_phase: dict[str, float] = {}
    for p in phases:
        by_phase[p.phase] = by_phase.get(p.phase, 0.0) + p.seconds
    seconds = sum(by_phase.values())
    on_gpu = any(p.point.target != "cpu" for p in fitting)
    gpu_hours = seconds / 3600 if on_gpu else 0.0
    return Budget(
        points=len(fitting),
        skipped=len(skipped),
        groups=len({p.point.group for p in fitting}),
        est_seconds=seconds,
        est_load_seconds=by_phase.get("load", 0.0),
        est_server_start_seconds=by_phase.get("server_start", 0.0),
        est_quality_seconds=by_phase.get("quality", 0.0),
        est_phase_seconds=by_phase,
        est_gpu_hours=gpu_hours,
        est_cost_usd=gpu_hours * hourly_usd if hourly_usd is not None else None,
    )
