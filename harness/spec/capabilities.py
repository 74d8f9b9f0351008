"""What each weight format and each KV-cache dtype is, declared once: one table per axis.

A row of a table says what the format costs in bytes, with which engines (backends) and on which
targets the harness measures it, and the names each engine gives it. Everything that needs one
of these facts reads it here: the planner (bytes, group sizes), the compatibility rules (engines,
targets), the transformers backend (torch dtype, GPTQ group size, quantized-cache settings) and
the vLLM backend (its `quantization`, `dtype` and `kv_cache_dtype` arguments). What an engine
itself costs and how its groups start: harness.spec.engines.

API: ``WEIGHT_FORMATS[name] -> WeightFormat``, ``KV_CACHE_FORMATS[name] -> KvCacheFormat``,
``weight_formats_for(backend)`` / ``kv_cache_formats_for(backend)``, ``compute_dtype_bytes``.
"""

from __future__ import annotations

import re
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

Quantization = Literal[
    "none",
    "fp32",
    "bf16",
    "fp16",
    "bnb-int8",
    "bnb-nf4",
    "bnb-fp4",
    "gptq-int4",
    "quanto-int8",
    "quanto-int4",
    "quanto-int2",
    "fp8",
    "fp8-block",
    "nvfp4",
    "mxfp4",
    "w8a8-int8",
    "w4a16",
]
KvCacheDtype = Literal["auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4"]
Backend = Literal["transformers", "vllm"]
Target = Literal["cpu", "cuda", "rocm"]

QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)
KV_CACHE_DTYPES: tuple[str, ...] = get_args(KvCacheDtype)
BACKENDS: tuple[str, ...] = get_args(Backend)
TARGETS: tuple[str, ...] = get_args(Target)

BOTH_ENGINES: frozenset[Backend] = frozenset(get_args(Backend))
ALL_TARGETS: frozenset[Target] = frozenset(get_args(Target))
GPU_TARGETS: frozenset[Target] = frozenset({"cuda", "rocm"})
TRANSFORMERS: frozenset[Backend] = frozenset({"transformers"})
VLLM: frozenset[Backend] = frozenset({"vllm"})

# vLLM's name for FP8 quantized on the fly from a 16-bit checkpoint differs between builds
# ("fp8_per_tensor" where registered, else "fp8"): the vLLM backend resolves this placeholder.
VLLM_ONLINE_FP8 = "online-fp8"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WeightFormat(Strict):
    """One weight format: its bytes per weight, where it runs, and each engine's name for it.

    bits: storage bits per weight of a quantized linear (None = the model's own dtype).
    group_size / group_overhead_bits: one scale (and zero point) per group of weights;
      e.g. GPTQ g64 with an fp16 scale and a packed 4-bit zero = (16 + 4) / 64 bit per weight.
    per_row_overhead_bits: one scale per output row (LLM.int8, quanto int8 per channel).
    rest_in_loaded_dtype: embeddings, lm_head and norms stay in the loaded dtype (bitsandbytes,
      quanto quantize in place); otherwise they are served in 16 bit (gptqmodel, vLLM).
    compute_dtype_bytes: activations and the "auto" KV cache (None = the model's own dtype).
    engines / targets: where the harness measures it (the compatibility rules read these).
    torch_dtype: the dtype transformers loads the weights in (None = the checkpoint's).
    vllm_quantization / vllm_dtype: vLLM's `quantization` and `dtype` arguments.
    vllm_checkpoint_methods: `quantization_config.quant_method`s a checkpoint may declare for it.
    """

    name: Quantization
    bits: float | None
    group_size: int | None = None
    group_overhead_bits: float = 0.0
    per_row_overhead_bits: float = 0.0
    quantizes_linears: bool = True
    library: str
    rest_in_loaded_dtype: bool = False
    compute_dtype_bytes: int | None = None
    engines: frozenset[Backend]
    targets: frozenset[Target] = ALL_TARGETS
    torch_dtype: str | None = None
    vllm_quantization: str | None = None
    vllm_dtype: str | None = None
    vllm_checkpoint_methods: frozenset[str] = frozenset()
    # The tensor units its matrix multiplies run on where the card has them (None: the compute
    # dtype's, bf16); an fp4 format runs on fp4 units only where the card lists its flavour
    # (catalog GpuSpec.fp4_flavours), else its weights are dequantized to bf16.
    tensor_unit: Literal["fp8", "int8", "fp4"] | None = None
    card_flavour: Literal["nvfp4", "mxfp4"] | None = None
    why_not_cpu: str = ""  # why the harness cannot measure it on the CPU (targets lack "cpu")
    # loaded only from a checkpoint already in the format (the harness does not quantize to it)
    checkpoint_only: bool = False

    @property
    def bits_per_weight(self) -> float:
        """Storage bits of one quantized-linear weight, its group's scale and zero included."""
        bits = self.bits or 16.0
        return bits + (self.group_overhead_bits / self.group_size if self.group_size else 0.0)


class QuantizedCacheSettings(Strict):
    """transformers' QuantizedCache for a KV dtype (q_group_size is the format's group_size).
    residual_length: the newest tokens kept in the compute dtype until a re-quantization; 32
    keeps most of a 128+ token context quantized."""

    backend: Literal["quanto", "hqq"]
    nbits: int
    axis_key: int | None = None
    axis_value: int | None = None
    residual_length: int = 32


class KvCacheFormat(Strict):
    """One KV-cache dtype: bytes per element, where it runs, and each engine's name for it.

    bits: per element (None = the compute dtype, "auto"); group_size / group_overhead_bytes: a
    quantized cache's scale and zero point per group of elements (16 bit each: 4 bytes).
    family: what kind of cache it is (the compatibility rules give one reason per family).
    """

    name: KvCacheDtype
    bits: int | None
    group_size: int | None = None
    group_overhead_bytes: float = 0.0
    family: Literal["compute", "float16", "fp8", "int"]
    engines: frozenset[Backend]
    targets: frozenset[Target] = ALL_TARGETS
    vllm_kv_cache_dtype: str | None = None
    transformers_cache: QuantizedCacheSettings | None = None

    @property
    def bytes_per_element(self) -> float | None:
        """None for "auto": the compute dtype's bytes (see compute_dtype_bytes)."""
        if self.bits is None:
            return None
        overhead = self.group_overhead_bytes / self.group_size if self.group_size else 0.0
        return self.bits / 8 + overhead

    def transformers_cache_config(self) -> dict[str, object] | None:
        """The keyword arguments of transformers' QuantizedCache, None for a plain cache."""
        if self.transformers_cache is None:
            return None
        settings = self.transformers_cache.model_dump(exclude_none=True)
        return {**settings, "q_group_size": self.group_size}


WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in [
        WeightFormat(
            name="none", bits=None, quantizes_linears=False, library="torch",
            engines=BOTH_ENGINES, vllm_dtype="auto",
        ),
        WeightFormat(
            name="fp32", bits=32, quantizes_linears=False, library="torch", compute_dtype_bytes=4,
            engines=BOTH_ENGINES, torch_dtype="float32", vllm_dtype="float32",
        ),
        WeightFormat(
            name="bf16", bits=16, quantizes_linears=False, library="torch", compute_dtype_bytes=2,
            engines=BOTH_ENGINES, torch_dtype="bfloat16", vllm_dtype="bfloat16",
        ),
        WeightFormat(
            name="fp16", bits=16, quantizes_linears=False, library="torch", compute_dtype_bytes=2,
            engines=BOTH_ENGINES, torch_dtype="float16", vllm_dtype="float16",
        ),
        # LLM.int8: int8 weights, one fp32 absmax per output row.
        WeightFormat(
            name="bnb-int8", bits=8, per_row_overhead_bits=32, library="bitsandbytes",
            rest_in_loaded_dtype=True, engines=TRANSFORMERS,
        ),
        # 4-bit bnb: blocks of 64 with an fp32 absmax each (no double quantization).
        WeightFormat(
            name="bnb-nf4", bits=4, group_size=64, group_overhead_bits=32, library="bitsandbytes",
            rest_in_loaded_dtype=True, engines=TRANSFORMERS,
        ),
        WeightFormat(
            name="bnb-fp4", bits=4, group_size=64, group_overhead_bits=32, library="bitsandbytes",
            rest_in_loaded_dtype=True, engines=TRANSFORMERS,
        ),
        # GPTQ 4 bit, groups of 64 (the transformers backend quantizes with this group size):
        # an fp16 scale and a packed 4-bit zero point per group.
        WeightFormat(
            name="gptq-int4", bits=4, group_size=64, group_overhead_bits=16 + 4,
            library="gptqmodel", engines=BOTH_ENGINES, vllm_quantization="gptq",
            vllm_dtype="auto", vllm_checkpoint_methods=frozenset({"gptq"}),
        ),
        WeightFormat(
            name="quanto-int8", bits=8, per_row_overhead_bits=16, library="optimum-quanto",
            rest_in_loaded_dtype=True, engines=TRANSFORMERS,
        ),
        # quanto int4/int2: groups of 128 with a 16-bit scale and a 16-bit shift.
        WeightFormat(
            name="quanto-int4", bits=4, group_size=128, group_overhead_bits=32,
            library="optimum-quanto", rest_in_loaded_dtype=True, engines=TRANSFORMERS,
        ),
        WeightFormat(
            name="quanto-int2", bits=2, group_size=128, group_overhead_bits=32,
            library="optimum-quanto", rest_in_loaded_dtype=True, engines=TRANSFORMERS,
        ),
        # FP8 weights, one fp32 scale per output row, quantized by vLLM on the fly (or an
        # FP8-serialized checkpoint): needs a GPU with FP8 support.
        WeightFormat(
            name="fp8", bits=8, per_row_overhead_bits=32, library="vllm", engines=VLLM,
            targets=GPU_TARGETS, vllm_quantization=VLLM_ONLINE_FP8, vllm_dtype="auto",
            vllm_checkpoint_methods=frozenset({"fp8"}), tensor_unit="fp8",
        ),
        # --- today's shipped formats (issue 46); all load from a checkpoint that declares them ---
        # FP8 E4M3 weights with one fp32 scale per 128 × 128 block (DeepSeek-V3/R1, Kimi-K2):
        # 8 + 32 / 16384 = 8.002 bit. vLLM: Fp8Config with weight_block_size (quant_method "fp8").
        WeightFormat(
            name="fp8-block", bits=8, group_size=128 * 128, group_overhead_bits=32,
            checkpoint_only=True, library="vllm",
            engines=VLLM, targets=GPU_TARGETS, vllm_quantization="fp8", vllm_dtype="auto",
            vllm_checkpoint_methods=frozenset({"fp8"}), tensor_unit="fp8",
            why_not_cpu="vLLM CPU has no fp8 weight kernels (docs/guide/vllm-cpu.md: worker start "
            "error); scaled_mm/cpu.py's fp8 path needs AMX (Sapphire Rapids or newer)",
        ),
        # NVFP4: E2M1 values in blocks of 16 with an FP8 E4M3 scale each, plus one fp32 scale per
        # tensor: 4 + 8 / 16 = 4.5 bit (the per-tensor scale is 32 bits a matrix: nothing per
        # weight). NVIDIA Blackwell tensor units only. vLLM: ModelOpt's "modelopt_fp4" or
        # compressed-tensors' W4A4 NVFP4 scheme.
        WeightFormat(
            name="nvfp4", bits=4, group_size=16, group_overhead_bits=8, checkpoint_only=True,
            library="vllm",
            engines=VLLM, targets=frozenset({"cuda"}), vllm_quantization="modelopt_fp4",
            vllm_dtype="auto", vllm_checkpoint_methods=frozenset({"modelopt_fp4",
            "compressed-tensors"}), tensor_unit="fp4", card_flavour="nvfp4",
            why_not_cpu="no CPU kernel: vLLM's NVFP4 GEMMs are CUTLASS/FlashInfer kernels for "
            "sm_100/sm_120 (and a Marlin weight-only fallback on other CUDA cards)",
        ),
        # MXFP4 (OCP microscaling): E2M1 values in blocks of 32 with an E8M0 (power-of-two)
        # scale each: 4 + 8 / 32 = 4.25 bit. gpt-oss ships its experts so. fp4 units on
        # Blackwell and CDNA 4; elsewhere vLLM dequantizes (Marlin / Triton weight-only).
        WeightFormat(
            name="mxfp4", bits=4, group_size=32, group_overhead_bits=8, checkpoint_only=True,
            library="vllm",
            engines=VLLM, targets=GPU_TARGETS, vllm_quantization="mxfp4", vllm_dtype="auto",
            vllm_checkpoint_methods=frozenset({"mxfp4"}), tensor_unit="fp4",
            card_flavour="mxfp4",
            why_not_cpu="vLLM's Mxfp4Config selects a CUDA or ROCm MoE backend; no CPU kernel",
        ),
        # compressed-tensors W8A8 int8: int8 weights with one scale per output channel (16-bit,
        # the model dtype) and int8 activations quantized per token at run time: 8 + 16 / row.
        # vLLM runs it on the CPU too (kernels/linear/scaled_mm/cpu.py, oneDNN).
        WeightFormat(
            name="w8a8-int8", bits=8, per_row_overhead_bits=16, checkpoint_only=True,
            library="compressed-tensors",
            engines=VLLM, vllm_quantization="compressed-tensors", vllm_dtype="auto",
            vllm_checkpoint_methods=frozenset({"compressed-tensors"}), tensor_unit="int8",
        ),
        # compressed-tensors W4A16 (GPTQ-style): 4-bit weights, groups of 128 with a 16-bit scale,
        # symmetric (no zero point): 4 + 16 / 128 = 4.125 bit; activations stay 16-bit. vLLM
        # runs it on the CPU too (kernels/linear/mixed_precision/cpu.py, CPUWNA16).
        WeightFormat(
            name="w4a16", bits=4, group_size=128, group_overhead_bits=16,
            checkpoint_only=True, library="compressed-tensors", engines=VLLM,
            vllm_quantization="compressed-tensors",
            vllm_dtype="auto", vllm_checkpoint_methods=frozenset({"compressed-tensors"}),
        ),
    ]
}  # fmt: skip

KV_CACHE_FORMATS: dict[str, KvCacheFormat] = {
    k.name: k
    for k in [
        KvCacheFormat(
            name="auto", bits=None, family="compute", engines=BOTH_ENGINES,
            vllm_kv_cache_dtype="auto",
        ),
        # A 16-bit cache is the compute dtype's business in both engines ("auto" selects it).
        KvCacheFormat(
            name="fp16", bits=16, family="float16", engines=frozenset(),
            vllm_kv_cache_dtype="float16",
        ),
        KvCacheFormat(
            name="bf16", bits=16, family="float16", engines=frozenset(),
            vllm_kv_cache_dtype="bfloat16",
        ),
        KvCacheFormat(
            name="fp8", bits=8, family="fp8", engines=VLLM, vllm_kv_cache_dtype="fp8",
        ),
        KvCacheFormat(
            name="fp8_e4m3", bits=8, family="fp8", engines=VLLM, vllm_kv_cache_dtype="fp8_e4m3",
        ),
        KvCacheFormat(
            name="fp8_e5m2", bits=8, family="fp8", engines=VLLM, targets=frozenset({"cpu", "cuda"}),
            vllm_kv_cache_dtype="fp8_e5m2",
        ),
        # transformers' quantized caches: int8 with hqq (per-channel axes), int4 with quanto;
        # groups of 64 elements, a 16-bit scale and a 16-bit zero point each.
        KvCacheFormat(
            name="int8", bits=8, group_size=64, group_overhead_bytes=4, family="int",
            engines=TRANSFORMERS,
            transformers_cache=QuantizedCacheSettings(
                backend="hqq", nbits=8, axis_key=1, axis_value=1
            ),
        ),
        KvCacheFormat(
            name="int4", bits=4, group_size=64, group_overhead_bytes=4, family="int",
            engines=TRANSFORMERS,
            transformers_cache=QuantizedCacheSettings(backend="quanto", nbits=4),
        ),
    ]
}  # fmt: skip


def weight_formats_for(backend: str) -> list[str]:
    """The weight formats an engine is measured with, in table order."""
    return [f.name for f in WEIGHT_FORMATS.values() if backend in f.engines]


def kv_cache_formats_for(backend: str) -> list[str]:
    """The KV-cache dtypes an engine is measured with, in table order."""
    return [k.name for k in KV_CACHE_FORMATS.values() if backend in k.engines]


def compute_dtype_bytes(quantization: str, model_dtype_bytes: int) -> int:
    """Bytes of the activations/KV dtype a format computes in (its own, else the model's)."""
    own = WEIGHT_FORMATS[quantization].compute_dtype_bytes
    return own if own is not None else model_dtype_bytes


# --- parallelism: how a configuration is laid out over cards -----------------------------------

MAX_CARDS = 1024  # cards a layout may span: beyond any node or cluster this harness rents
LAYOUT_PATTERN = r"^tp=(\d+)(?:,pp=(\d+))?(,ep)?$"


class Layout(Strict):
    """Tensor × pipeline ranks, and experts spread over the tensor ranks (vLLM's
    `--enable-expert-parallel`). Written as its label everywhere (a row, a key, a table):
    ``tp=2``, ``tp=4,pp=2``, ``tp=8,ep``; a point on one card has no layout (None), so the keys of
    earlier runs stay as they are. Data parallelism (replicas on a node) follows from the node's
    cards and is priced, not measured twice (harness.results.pricing)."""

    tensor: int = Field(1, ge=1, le=MAX_CARDS)
    pipeline: int = Field(1, ge=1, le=MAX_CARDS)
    expert: bool = False

    @model_validator(mode="before")
    @classmethod
    def from_label(cls, data: Any) -> Any:
        if not isinstance(data, str):
            return data
        match = re.fullmatch(LAYOUT_PATTERN, data)
        if match is None:
            raise ValueError(f"a layout is written like tp=2, tp=4,pp=2 or tp=8,ep; got {data!r}")
        return {
            "tensor": int(match.group(1)),
            "pipeline": int(match.group(2) or 1),
            "expert": bool(match.group(3)),
        }

    @model_serializer
    def as_label(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        pp = f",pp={self.pipeline}" if self.pipeline > 1 else ""
        return f"tp={self.tensor}{pp}{',ep' if self.expert else ''}"

    @property
    def cards(self) -> int:
        """Ranks, one card each: tensor × pipeline (experts live on the tensor ranks)."""
        return self.tensor * self.pipeline

    @property
    def is_single_card(self) -> bool:
        return self.cards == 1 and not self.expert


Executor = Literal["uni", "mp", "ray"]


def layout_executor(layout: Layout | None, target: str) -> Executor:
    """What starts a layout's ranks (vLLM's `distributed_executor_backend`): "uni" (the group's
    own process) on one card; "ray" (vLLM's Ray executor, a rank per placement-group bundle,
    across nodes) for pipeline stages on GPUs; "mp" (a process per rank, on the group's node)
    otherwise. vLLM CPU has no Ray executor (its platform names no Ray device: "current platform
    cpu does not support ray"), so a CPU layout stays on one node with "mp"."""
    if layout is None or layout.is_single_card:
        return "uni"
    if layout.pipeline > 1 and target != "cpu":
        return "ray"
    return "mp"


class EngineParallelism(Strict):
    """What an engine's real API lays out over cards, and why not where it does not."""

    tensor: bool
    pipeline: bool
    expert: bool
    why_not: str = ""


ENGINE_PARALLELISM: dict[str, EngineParallelism] = {
    # vLLM: ParallelConfig.tensor_parallel_size / pipeline_parallel_size / enable_expert_parallel
    # (https://docs.vllm.ai/en/latest/api/vllm/config/parallel/), ranks started by its executor
    # ("mp" on one node, "ray" across nodes).
    "vllm": EngineParallelism(tensor=True, pipeline=True, expert=True),
    # transformers has `tp_plan="auto"`, but only under torch.distributed with one process per
    # rank (torchrun); this harness measures a group in one process and does not launch ranks.
    "transformers": EngineParallelism(
        tensor=False, pipeline=False, expert=False,
        why_not="the transformers backend measures a group in one process; its tp_plan='auto' "
        "needs one torch.distributed process per rank (torchrun), which the harness does not "
        "launch: use the vllm backend for layouts over several cards",
    ),
}  # fmt: skip
