"""The analytic memory plan of a point, its fit verdict and its seconds — no GPU, no torch.
The sweep's plan and budget (groups, phases, calibration) are harness.budget's.

Formulas (bytes; GiB = 2**30):
  params        = embeddings + layers × (attention + MLP × experts + router + norms) + lm_head
  weights       = Σ quantized-linear params × (bits + overhead)/8
                  + the rest × 16-bit (or the model dtype)
  KV cache      = 2 × layers × kv_heads × head_dim × bytes(kv dtype) × tokens × batch, capped at
                  the window on sliding layers; MLA and MoE terms: harness.plan.bytes's docstring
  activations   = prefill transient (hidden + MLP intermediates of B × S tokens, per layer) + logits
                  (fp32 over B × S positions when all are kept, else B × 1)
  adapter       = (a LoRA folder on the model, counted with the weights)
                  r × Σ_targets (in + out) × layers × bytes(compute dtype);
                  vLLM adds its LoRA slots: max_loras (1) × max_lora_rank (the smallest vLLM
                  rank ≥ r) × Σ_every linear (in + out) × layers × bytes(compute dtype)
  reserve       = runtime context + allocator margin; the context is the CUDA/HIP context, or on
                  the CPU the group's process: its engine's (imports, engine start, a Ray actor)
                  + the weight format's library
  KV pool       = an engine whose card holds its pool from the load on (Engine.kv_pool_held_on:
                  vLLM on the CPU, llama.cpp's n_ctx cache) holds all of it: kv_pool_bytes(the
                  point's KV(context + output)), the pool the harness gives the engine
  first forward = on the CPU, what an engine's first forward leaves in the process (kernels'
                  scratch, thread arenas), per engine; 0 on GPUs
  peak(phase)   = load: weights + KV pool + reserve;
                  prefill: + first forward + KV(context) + activations;
                  decode: + first forward + KV(context + output) + decode logits, and on the
                  CPU the prefill's activations still (freed pages stay in the process's RSS
                  until the point ends: the device loop trims the heap between points)
                  (a KV cache inside the pool adds nothing)
An engine that takes a share of a GPU up front (Engine.gpu_share: vLLM's
gpu_memory_utilization, SGLang's mem_fraction_static) pre-allocates that share × card memory
instead: a point fits when weights +
activations + the KV cache it needs fit inside that share.

Speculative decoding (harness.spec.speculative): a draft model, an EAGLE head or MTP layers add
  draft weights = the draft's architecture in its own dtype (the formula above, unquantized)
  draft KV      = the KV formula over the draft's layers, in the target's KV dtype: one entry per
                  token beside the target's, in the same pool (KV × (1 + kv_draft / kv_target))
and n-gram lookup adds nothing. Under a layout a rank of the last pipeline stage holds the draft
sharded at the target's tensor parallel size (its per-rank weights), the other stages none
(speculative.draft_layout, draft_on_stage: where vLLM puts it).
Under vLLM's pre-allocation the pool is what the share leaves:
  tokens = ⌊(capacity − target weights − activations − reserve − draft weights)
            / (kv_target + kv_draft) per token⌋,  largest batch = ⌊tokens / (context + output)⌋
and the plan states both against the plain pool (speculative.pool_shrink).

Per rank, under a layout of t tensor × p pipeline ranks (harness.spec.capabilities.Layout; vLLM's
sharding):
  layers of stage s = ⌈L / p⌉ on the first L mod p stages, ⌊L / p⌋ on the rest
  attention     = (q + o) / t + (k + v) × kv_heads_per_rank / kv_heads, where
                  kv_heads_per_rank = max(1, kv_heads / t) (KV heads replicated when t exceeds them)
  MLP           = dense: MLP / t; MoE: experts × MLP / t, or with expert parallelism
                  ⌈experts / t⌉ whole experts (the same bytes when t divides the experts)
  router, norms = whole on every rank; embeddings / t on stage 0, lm_head / t on the last stage
  KV cache      = the KV formula over the stage's layers and kv_heads_per_rank
  activations   = B × S × (2 × hidden + qkv / t + 2 × intermediate / t) + the logits (whole:
                  gathered on the rank that samples)
  communication = COMM_BUFFER_BYTES per rank on GPUs once a layout has 2 ranks or more
  binding rank  = the rank whose peak is largest (the first of its stage); on the CPU every rank
                  shares the node's memory: the node's peak is Σ ranks, each a process of its own
Decode under a layout: a step reads each stage's rank bytes at the card's bandwidth, stage after
stage, and all-reduces 2 × B × hidden activations per layer over the interconnect (ring:
2 (t − 1) / t of them per rank): step = Σ_s bytes(s) / bandwidth + allreduce; prefill likewise at
the compute peak over t ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from harness import modes
from harness.plan import bytes as planbytes
from harness.plan.bytes import (
    ParamCounts as ParamCounts,
)
from harness.plan.bytes import (
    kv_bytes_per_token as kv_bytes_per_token,
)
from harness.plan.bytes import (
    kv_cache_bytes as kv_cache_bytes,
)
from harness.plan.bytes import (
    kv_heads_per_rank as kv_heads_per_rank,
)
from harness.plan.bytes import (
    param_counts as param_counts,
)
from harness.plan.bytes import (
    stage_layers as stage_layers,
)
from harness.plan.bytes import (
    unquantized_bytes_per_param as unquantized_bytes_per_param,
)
from harness.plan.bytes import (
    weights_bytes as weights_bytes,
)
from harness.plan.seconds import (
    EFFICIENCY as EFFICIENCY,
)
from harness.plan.seconds import (
    allreduce_seconds as allreduce_seconds,
)
from harness.plan.seconds import (
    decode_ceiling_tok_s as decode_ceiling_tok_s,
)
from harness.plan.seconds import (
    decode_step_bytes as decode_step_bytes,
)
from harness.plan.seconds import (
    estimate_seconds as estimate_seconds,
)
from harness.plan.seconds import (
    layout_decode_ceiling_tok_s as layout_decode_ceiling_tok_s,
)
from harness.spec import adapters, catalog, speculative
from harness.spec.capabilities import (
    WEIGHT_FORMATS,
    compute_dtype_bytes,
)
from harness.spec.catalog import GpuSpec, ModelArch
from harness.spec.engines import engine
from harness.spec.labels import model_key
from harness.spec.scenario import CONFIGURATION_FIELDS, Point
from harness.units import GIB, MIB

CUDA_CONTEXT_BYTES = 700 * MIB  # CUDA context + cuBLAS: 680–750 MiB measured on an H200
HIP_CONTEXT_BYTES = 900 * MIB  # ROCm's runtime context is larger
CPU_RUNTIME_BYTES = 540 * MIB  # a training worker's RSS with torch, transformers, bnb, Ray
ALLOCATOR_MARGIN = 0.05  # caching-allocator fragmentation, share of the tensors' bytes
# An inference group's process on the CPU (RSS) and what its first forward leaves there: per
# engine, its row of harness.spec.engines.ENGINES (with the measurements behind them).
# A weight format's library on top: bitsandbytes +114 MiB at import, of which the model's load
# then pays 79 less (+35 in the probe, +34 to +42 in the benches, fresh and forked).
CPU_LIBRARY_BYTES = {"bitsandbytes": 36 * MIB}
# An engine that sizes its KV pool up front (vLLM on the CPU, offline or behind a server) gets
# the largest KV cache its sequences need with this headroom: blocks are allocated whole (128
# tokens on the CPU), so each sequence may hold up to one block it does not fill.
KV_POOL_HEADROOM = 1.25
KV_POOL_MIN_BYTES = 64 * MIB
# Serving: one load-generator process per level (its imports; the server's start per group is
# the budget's, harness.budget).
GENERATOR_START_S = 20.0
# NCCL's communicators and buffers (and vLLM's custom all-reduce buffers) per GPU rank once a
# layout has 2 ranks or more. Source: issue 37 quoting llm-d-planner's accuracy report, "NCCL
# ≈ 2 GiB per GPU at TP ≥ 2", which that report found its own figure under-counted by 44 %. Not
# yet measured by this harness: lent machines have had one card (docs/guide/parallelism.md).
COMM_BUFFER_BYTES = 2 * GIB
# On the CPU, vLLM's ranks all-reduce through shared memory; each rank is a process of its own
# (Engine.cpu_process_bytes), counted per rank, and no buffer beside it is planned.


def activation_bytes(
    arch: ModelArch,
    quantization: str,
    batch: int,
    context: int,
    *,
    all_logits: bool,
    tensor: int = 1,
) -> float:
    """Prefill transient of one layer (hidden, q/k/v, MLP gate+up; q/k/v and the MLP split over
    `tensor` ranks) plus the logits tensor (whole: gathered where it is sampled)."""
    act = compute_dtype_bytes(quantization, arch.dtype_bytes)
    tokens = batch * context
    kv_heads = kv_heads_per_rank(arch, tensor) if tensor > 1 else arch.num_kv_heads
    qkv = arch.num_heads * arch.head_dim / tensor + 2 * kv_heads * arch.head_dim
    per_token = (2 * arch.hidden_size + qkv + 2 * arch.intermediate_size / tensor) * act
    logits_positions = tokens if all_logits else batch
    return tokens * per_token + logits_positions * arch.vocab_size * 4


def runtime_context_bytes(
    target: str, backend: str | None = None, quantization: str | None = None
) -> float:
    """The runtime's own memory: the CUDA/HIP context; on the CPU the inference group's process
    of `backend` (Engine.cpu_process_bytes) plus its weight format's library
    (CPU_LIBRARY_BYTES), or a training worker's (CPU_RUNTIME_BYTES) when no engine is named."""
    gpu = {"cuda": CUDA_CONTEXT_BYTES, "rocm": HIP_CONTEXT_BYTES}.get(target)
    if gpu is not None:
        return gpu
    if backend is None:
        return CPU_RUNTIME_BYTES
    library = WEIGHT_FORMATS[quantization].library if quantization is not None else ""
    return engine(backend).cpu_process_bytes + CPU_LIBRARY_BYTES.get(library, 0.0)


def runtime_reserve_bytes(
    target: str, tensors_bytes: float, backend: str | None = None, quantization: str | None = None
) -> float:
    """The runtime's own memory and the allocator's margin over the tensors."""
    return runtime_context_bytes(target, backend, quantization) + ALLOCATOR_MARGIN * tensors_bytes


def first_forward_bytes(point: Point) -> float:
    """What the engine's first forward leaves in a CPU process
    (Engine.cpu_first_forward_bytes); 0 on GPUs, whose allocator figures count tensors only."""
    return engine(point.backend).cpu_first_forward_bytes if point.target == "cpu" else 0.0


def kv_pool_bytes(largest_kv_bytes: float) -> int:
    """The pool for a group whose sequences need at most `largest_kv_bytes` at once."""
    return max(KV_POOL_MIN_BYTES, int(largest_kv_bytes * KV_POOL_HEADROOM))


def held_kv_pool_bytes(point: Point, kv_bytes: float) -> float:
    """The KV pool an engine holds from its load on where its card says so (vLLM on the CPU,
    llama.cpp everywhere: kv_pool_bytes of the point's KV cache; the group's pool is at least
    this), else 0."""
    if point.target not in engine(point.backend).kv_pool_held_on:
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
    # under a layout: the cards it holds, the binding rank, its communication buffers (GiB)
    cards: int = 1
    binding_rank: str = ""
    communication_gib: float = 0.0
    # speculative decoding: the draft's weights and KV cache (GiB, inside weights and KV above)
    # and, under vLLM's pre-allocation, the target's KV pool and largest batch with and without
    draft_weights_gib: float = 0.0
    draft_kv_cache_gib: float = 0.0
    pool: speculative.PoolShrink | None = None
    kv_per_token_bytes: float = 0.0  # the binding rank's; bytes.pool_figures
    largest_batch: int | None = None

    def contract(self) -> dict[str, object]:
        point = {f: getattr(self.point, f) for f in CONFIGURATION_FIELDS if f != "revision"}
        point["model"] = model_key(self.point.model, self.point.revision)  # id@rev off main
        if self.point.adapter is None:  # the contract names an adapter only where there is one
            del point["adapter"]
        layout = {}
        if self.point.layout is None:  # and a layout only where there is one
            del point["layout"]
        else:
            point["layout"] = self.point.layout.label
            layout = {
                "cards": self.cards,
                "binding_rank": self.binding_rank,
                "communication_gib": self.communication_gib,
                "kv_per_token_bytes": self.kv_per_token_bytes,
                "largest_batch": self.largest_batch,
            }
        if self.point.speculative is None:  # and speculative decoding only where it is used
            del point["speculative"]
        figures = {f: getattr(self, f) for f in CONTRACT_FIGURES}
        return {**point, **self.mode_contract, **figures, **layout, **self.speculation_contract()}

    def speculation_contract(self) -> dict[str, object]:
        """What speculative decoding adds to `harness plan --json`: nothing without it."""
        if self.point.speculative is None:
            return {}
        out: dict[str, object] = {
            "speculative": self.point.speculative.label,
            "draft_weights_gib": self.draft_weights_gib,
            "draft_kv_cache_gib": self.draft_kv_cache_gib,
        }
        if self.pool is not None:
            out.update(
                kv_pool_tokens_plain=self.pool.tokens_plain, kv_pool_tokens=self.pool.tokens,
                largest_batch_plain=self.pool.batch_plain, largest_batch=self.pool.batch,
                kv_pool_shrink_pct=self.pool.shrink_pct,
            )  # fmt: skip
        return out


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
    share of the card's memory an engine pre-allocates (its options' ``gpu_share``,
    harness.spec.engine_options.gpu_share)
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
    rank, phases, terms = binding_rank(point, arch)
    total = max(phases.values())
    capacity = card.memory_gib * GIB
    if engine(point.backend).gpu_share and point.target != "cpu":
        capacity *= gpu_memory_utilization
    fits, reason = fit_verdict(total, capacity, terms, card.name, rank=rank)
    weights = terms["weights"]
    if point.layout is None:
        ceiling = decode_ceiling_tok_s(card, weights, arch, point)
    else:
        ceiling = layout_decode_ceiling_tok_s(card, arch, point)
    draft_weights, draft_kv = draft_terms(point, arch)
    pool = None
    in_pool = engine(point.backend).draft_in_pool
    if draft_weights and in_pool and point.target != "cpu" and not point.layout:
        pool = speculative.pool_shrink(
            capacity_bytes=capacity,
            held_bytes=weights - draft_weights + terms["activations"] + terms["reserve"],
            draft_weights_bytes=draft_weights,
            kv_per_token=kv_bytes_per_token(arch, point.kv_cache_dtype, point.quantization),
            draft_kv_per_token=draft_kv,
            sequence_tokens=point.context + point.output_tokens,
        )
    kv_room = capacity - sum(terms.values()) + terms["kv_cache"]  # what vLLM's share leaves KV
    return PointPlan(
        **planbytes.pool_figures(point, arch, kv_room),
        draft_weights_gib=draft_weights / GIB,
        draft_kv_cache_gib=terms["kv_cache"] * (1 - 1 / speculative_kv_scale(point, arch)) / GIB,
        pool=pool,
        cards=1 if point.layout is None else point.layout.cards,
        binding_rank=rank,
        communication_gib=terms.get("communication", 0.0) / GIB,
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
        reason=reason if pool is None else f"{reason}; {pool.sentence()}",
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
    targets = [shapes[t] for t in adapters.adapted_modules(adapter, list(shapes))]
    targets *= arch.num_layers
    own = adapters.lora_bytes(adapter.rank, targets, per_value)
    if not engine(point.backend).lora_slots:
        return own
    slot = adapters.vllm_slot_rank(adapter.rank) or adapter.rank
    every = list(shapes.values()) * arch.num_layers
    return own + adapters.lora_bytes(slot, every, per_value)


Rank = tuple[str, dict[str, float], dict[str, float]]


def binding_rank(point: Point, arch: ModelArch) -> Rank:
    """(the binding rank's name, its bytes per phase, its terms): the point's own on one card;
    under a layout the rank with the largest peak (the first of each stage is checked: a
    stage's tensor ranks hold the same bytes), or on the CPU the node's sum over its ranks."""
    layout = point.layout
    if layout is None:
        return ("", *inference_memory(point, arch))
    ranks = [
        (f"rank {s * layout.tensor} of {layout.label} (stage {s + 1} of {layout.pipeline})",
         *inference_memory(point, arch, stage=s))
        for s in range(layout.pipeline)
    ]  # fmt: skip
    if point.target == "cpu":  # one host's memory: every rank's process counts
        phases = {ph: layout.tensor * sum(r[1][ph] for r in ranks) for ph in ranks[0][1]}
        terms = {t: layout.tensor * sum(r[2][t] for r in ranks) for t in ranks[0][2]}
        return f"the node's {layout.cards} ranks together", phases, terms
    return max(ranks, key=lambda r: max(r[1].values()))


def inference_memory(
    point: Point, arch: ModelArch, stage: int = 0
) -> tuple[dict[str, float], dict[str, float]]:
    """An inference point's bytes per phase (load, prefill, decode) and its terms (weights, the
    decode-time KV cache or the pool that holds it, the prefill activations or on the CPU what
    the allocator retains if that is more, the reserve; under a layout, one rank's of `stage`
    and its communication buffers): the formulas above."""
    layout = point.layout
    weights = weights_bytes(arch, point.quantization, layout, stage) + adapter_bytes(point, arch)
    weights += draft_terms(point, arch, stage)[0]  # the draft, as the engine shards it
    kv_share = planbytes.rank_kv_share(arch, layout, stage)
    if speculative.draft_on_stage(layout, stage):
        kv_share *= speculative_kv_scale(point, arch)
    kv_prefill = kv_share * kv_cache_bytes(
        arch, point.kv_cache_dtype, point.quantization, point.context, point.batch
    )
    kv_decode = kv_share * kv_cache_bytes(
        arch,
        point.kv_cache_dtype,
        point.quantization,
        point.context + point.output_tokens,
        point.batch,
    )
    tensor = 1 if layout is None else layout.tensor
    chunk_tokens = engine(point.backend).prefill_chunk_tokens
    if chunk_tokens is not None:
        chunk = min(point.batch * point.context, chunk_tokens)
        acts = activation_bytes(arch, point.quantization, 1, chunk, all_logits=False, tensor=tensor)
    else:
        acts = activation_bytes(
            arch, point.quantization, point.batch, point.context, all_logits=False
        )
    decode_acts = point.batch * arch.vocab_size * 4
    pool = held_kv_pool_bytes(point, kv_decode)
    kv = max(pool, kv_decode)
    comm = communication_bytes(point)
    reserve = comm + runtime_reserve_bytes(
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
        "reserve": reserve - comm,
    }
    if layout is not None:
        terms["communication"] = comm
    return phases, terms


def draft_terms(point: Point, arch: ModelArch, stage: int | None = None) -> tuple[float, float]:
    """(weights bytes, KV bytes per token) of the point's speculative draft (the formulas
    above; the draft's own dtype, the target's KV dtype); (0, 0) without one or for n-gram.
    With a pipeline ``stage``: one rank's of that stage, as vLLM places the draft (sharded at
    the target's tensor parallel size, on the last stage: speculative.draft_layout)."""
    draft = speculative.draft_arch(point.speculative, arch)
    if draft is None:
        return 0.0, 0.0
    layout = None
    if stage is not None:
        if not speculative.draft_on_stage(point.layout, stage):
            return 0.0, 0.0
        layout = speculative.draft_layout(point.layout)
    kv_dtype = point.kv_cache_dtype
    return weights_bytes(draft, "none", layout), kv_bytes_per_token(draft, kv_dtype, "none")


def speculative_kv_scale(point: Point, arch: ModelArch) -> float:
    """1 + kv_draft / kv_target per token: the draft keeps its own KV entry for every token
    the target holds, in the same pool (1 without a draft)."""
    draft_kv = draft_terms(point, arch)[1]
    if not draft_kv:
        return 1.0
    return 1.0 + draft_kv / kv_bytes_per_token(arch, point.kv_cache_dtype, point.quantization)


def communication_bytes(point: Point) -> float:
    """COMM_BUFFER_BYTES on a GPU rank of a layout with 2 ranks or more, else 0."""
    if point.layout is None or point.layout.cards < 2 or point.target == "cpu":
        return 0.0
    return float(COMM_BUFFER_BYTES)


def fit_verdict(
    total: float, capacity: float, terms: dict[str, float], card: str, *, rank: str = ""
) -> tuple[bool, str]:
    """Whether a peak of `total` bytes fits in `capacity` bytes of `card`, and the reason a
    person reads: both figures, the binding rank under a layout, and when it does not fit, the
    binding (largest) term; weights that alone exceed the card say so first."""
    at = f" at {rank}" if rank else ""
    if total <= capacity:
        return True, f"fits: {total / GIB:.2f} of {capacity / GIB:.2f} GiB{at}"
    binding = max(terms, key=lambda t: terms[t])
    weights = terms.get("weights", 0.0)
    alone = f"weights {weights / GIB:.0f} GiB exceed the card; " if weights > capacity else ""
    return False, (
        f"{alone}needs {total / GIB:.2f} GiB > {capacity / GIB:.2f} GiB on {card}{at}; "
        f"binding term: {binding} ({terms[binding] / GIB:.2f} GiB)"
    )
