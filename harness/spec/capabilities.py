"""What each weight format and each KV-cache dtype is, declared once: one table per axis.

A row of a table states the engine-neutral facts of a format: what it costs in bytes and on
which targets it can run. Which engines run it, and each engine's own name for it, are the
engines' own tables (``harness/backends/<engine>/card.py``, read through the registry
harness.spec.engines): a new engine adds no column here. The planner (bytes, group sizes) and the
compatibility rules (targets) read these rows.

API: ``WEIGHT_FORMATS[name] -> WeightFormat``, ``KV_CACHE_FORMATS[name] -> KvCacheFormat``,
``weight_formats_for(backend)`` / ``kv_cache_formats_for(backend)``, ``compute_dtype_bytes``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_serializer,
    model_validator,
)

from harness.errors import did_you_mean
from harness.spec.engines import REGISTRY as ENGINE_REGISTRY
from harness.spec.engines import EngineParallelism as EngineParallelism
from harness.spec.engines import engines_running_kv, engines_running_weights

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
    "gguf-q8_0",
    "gguf-q4_k_m",
    "fp8-block",
    "nvfp4",
    "mxfp4",
    "w8a8-int8",
    "w4a16",
]
KvCacheDtype = Literal[
    "auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "q8_0", "q4_0"
]
Target = Literal["cpu", "cuda", "rocm"]


def known_backend(name: str) -> str:
    """An engine of the registry (harness.spec.engines.REGISTRY), else a ValueError naming them."""
    if name not in ENGINE_REGISTRY:
        raise ValueError(
            f"{name!r} is not allowed{did_you_mean(name, ENGINE_REGISTRY)}; expected one of: "
            + ", ".join(ENGINE_REGISTRY)
        )
    return name


# An engine's name: a line of the registry (harness.spec.engines), each with its folder.
Backend = Annotated[str, AfterValidator(known_backend)]

QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)
KV_CACHE_DTYPES: tuple[str, ...] = get_args(KvCacheDtype)
BACKENDS: tuple[str, ...] = tuple(ENGINE_REGISTRY)
TARGETS: tuple[str, ...] = get_args(Target)

ALL_TARGETS: frozenset[Target] = frozenset(get_args(Target))
GPU_TARGETS: frozenset[Target] = frozenset({"cuda", "rocm"})


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WeightFormat(Strict):
    """One weight format: its bytes per weight and where it can run (engine-neutral).

    bits: storage bits per weight of a quantized linear (None = the model's own dtype).
    group_size / group_overhead_bits: one scale (and zero point) per group of weights;
      e.g. GPTQ g64 with an fp16 scale and a packed 4-bit zero = (16 + 4) / 64 bit per weight.
    per_row_overhead_bits: one scale per output row (LLM.int8, quanto int8 per channel).
    rest_in_loaded_dtype: embeddings, lm_head and norms stay in the loaded dtype (bitsandbytes,
      quanto quantize in place); otherwise they are served in 16 bit (gptqmodel, vLLM).
    compute_dtype_bytes: activations and the "auto" KV cache (None = the model's own dtype).
    targets: where it can run (the compatibility rules read these).
    Which engines run it, and their names for it: ``engines()`` (the engines' own tables).
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
    targets: frozenset[Target] = ALL_TARGETS
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

    def engines(self) -> frozenset[str]:
        """The engines whose own table names this format (harness.spec.engines)."""
        return engines_running_weights(self.name)


class KvCacheFormat(Strict):
    """One KV-cache dtype: bytes per element and where it can run (engine-neutral).

    bits: per element (None = the compute dtype, "auto"); group_size / group_overhead_bytes: a
    quantized cache's scale and zero point per group of elements (16 bit each: 4 bytes).
    family: what kind of cache it is (the compatibility rules give one reason per family).
    Which engines run it, and their names for it: ``engines()`` (the engines' own tables).
    """

    name: KvCacheDtype
    bits: int | None
    group_size: int | None = None
    group_overhead_bytes: float = 0.0
    family: Literal["compute", "float16", "fp8", "int", "block"]
    targets: frozenset[Target] = ALL_TARGETS

    @property
    def bytes_per_element(self) -> float | None:
        """None for "auto": the compute dtype's bytes (see compute_dtype_bytes)."""
        if self.bits is None:
            return None
        overhead = self.group_overhead_bytes / self.group_size if self.group_size else 0.0
        return self.bits / 8 + overhead

    def engines(self) -> frozenset[str]:
        """The engines whose own table names this KV-cache dtype (harness.spec.engines)."""
        return engines_running_kv(self.name)


WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in [
        WeightFormat(name="none", bits=None, quantizes_linears=False, library="torch"),
        WeightFormat(
            name="fp32", bits=32, quantizes_linears=False, library="torch", compute_dtype_bytes=4,
        ),
        WeightFormat(
            name="bf16", bits=16, quantizes_linears=False, library="torch", compute_dtype_bytes=2,
        ),
        WeightFormat(
            name="fp16", bits=16, quantizes_linears=False, library="torch", compute_dtype_bytes=2,
        ),
        # LLM.int8: int8 weights, one fp32 absmax per output row.
        WeightFormat(
            name="bnb-int8", bits=8, per_row_overhead_bits=32, library="bitsandbytes",
            rest_in_loaded_dtype=True,
        ),
        # 4-bit bnb: blocks of 64 with an fp32 absmax each (no double quantization).
        WeightFormat(
            name="bnb-nf4", bits=4, group_size=64, group_overhead_bits=32, library="bitsandbytes",
            rest_in_loaded_dtype=True,
        ),
        WeightFormat(
            name="bnb-fp4", bits=4, group_size=64, group_overhead_bits=32, library="bitsandbytes",
            rest_in_loaded_dtype=True,
        ),
        # GPTQ 4 bit, groups of 64 (the transformers backend quantizes with this group size):
        # an fp16 scale and a packed 4-bit zero point per group.
        WeightFormat(
            name="gptq-int4", bits=4, group_size=64, group_overhead_bits=16 + 4,
            library="gptqmodel",
        ),
        WeightFormat(
            name="quanto-int8", bits=8, per_row_overhead_bits=16, library="optimum-quanto",
            rest_in_loaded_dtype=True,
        ),
        # quanto int4/int2: groups of 128 with a 16-bit scale and a 16-bit shift.
        WeightFormat(
            name="quanto-int4", bits=4, group_size=128, group_overhead_bits=32,
            library="optimum-quanto", rest_in_loaded_dtype=True,
        ),
        WeightFormat(
            name="quanto-int2", bits=2, group_size=128, group_overhead_bits=32,
            library="optimum-quanto", rest_in_loaded_dtype=True,
        ),
        # FP8 weights, one fp32 scale per output row, quantized on the fly from a 16-bit
        # checkpoint (or an FP8-serialized checkpoint): needs a GPU with FP8 support.
        WeightFormat(
            name="fp8", bits=8, per_row_overhead_bits=32, library="vllm", targets=GPU_TARGETS,
            tensor_unit="fp8",
        ),
        # GGUF (ggml's block formats, ggml/src/ggml-common.h). Q8_0: blocks of 32 int8 weights
        # with one fp16 scale (8.5 bit a weight). Q4_K_M: super-blocks of 256 4-bit weights with
        # 6-bit scales and mins per 32 and an fp16 scale and min (Q4_K: 144 bytes per 256 = 4.5
        # bit a weight); the "M" mix keeps half of attn_v / ffn_down and the output in Q6_K
        # (6.56 bit), which this row does not count. Activations in f32, the "auto" KV cache in
        # f16 (llama.cpp's default type_k / type_v).
        WeightFormat(
            name="gguf-q8_0", bits=8, group_size=32, group_overhead_bits=16, library="ggml",
            compute_dtype_bytes=2,
        ),
        WeightFormat(
            name="gguf-q4_k_m", bits=4, group_size=256, group_overhead_bits=128, library="ggml",
            compute_dtype_bytes=2,
        ),
        # --- today's shipped formats (issue 46); all load from a checkpoint that declares them ---
        # FP8 E4M3 weights with one fp32 scale per 128 × 128 block (DeepSeek-V3/R1, Kimi-K2):
        # 8 + 32 / 16384 = 8.002 bit. vLLM: Fp8Config with weight_block_size (quant_method "fp8").
        WeightFormat(
            name="fp8-block", bits=8, group_size=128 * 128, group_overhead_bits=32,
            checkpoint_only=True, library="vllm", targets=GPU_TARGETS, tensor_unit="fp8",
            why_not_cpu="vLLM CPU has no fp8 weight kernels (docs/guide/vllm-cpu.md: worker start "
            "error); scaled_mm/cpu.py's fp8 path needs AMX (Sapphire Rapids or newer)",
        ),
        # NVFP4: E2M1 values in blocks of 16 with an FP8 E4M3 scale each, plus one fp32 scale per
        # tensor: 4 + 8 / 16 = 4.5 bit (the per-tensor scale is 32 bits a matrix: nothing per
        # weight). NVIDIA Blackwell tensor units only. vLLM: ModelOpt's "modelopt_fp4" or
        # compressed-tensors' W4A4 NVFP4 scheme.
        WeightFormat(
            name="nvfp4", bits=4, group_size=16, group_overhead_bits=8, checkpoint_only=True,
            library="vllm", targets=frozenset({"cuda"}), tensor_unit="fp4", card_flavour="nvfp4",
            why_not_cpu="no CPU kernel: vLLM's NVFP4 GEMMs are CUTLASS/FlashInfer kernels for "
            "sm_100/sm_120 (and a Marlin weight-only fallback on other CUDA cards)",
        ),
        # MXFP4 (OCP microscaling): E2M1 values in blocks of 32 with an E8M0 (power-of-two)
        # scale each: 4 + 8 / 32 = 4.25 bit. gpt-oss ships its experts so. fp4 units on
        # Blackwell and CDNA 4; elsewhere vLLM dequantizes (Marlin / Triton weight-only).
        WeightFormat(
            name="mxfp4", bits=4, group_size=32, group_overhead_bits=8, checkpoint_only=True,
            library="vllm", targets=GPU_TARGETS, tensor_unit="fp4", card_flavour="mxfp4",
            why_not_cpu="vLLM's Mxfp4Config selects a CUDA or ROCm MoE backend; no CPU kernel",
        ),
        # compressed-tensors W8A8 int8: int8 weights with one scale per output channel (16-bit,
        # the model dtype) and int8 activations quantized per token at run time: 8 + 16 / row.
        # vLLM runs it on the CPU too (kernels/linear/scaled_mm/cpu.py, oneDNN).
        WeightFormat(
            name="w8a8-int8", bits=8, per_row_overhead_bits=16, checkpoint_only=True,
            library="compressed-tensors", tensor_unit="int8",
        ),
        # compressed-tensors W4A16 (GPTQ-style): 4-bit weights, groups of 128 with a 16-bit scale,
        # symmetric (no zero point): 4 + 16 / 128 = 4.125 bit; activations stay 16-bit. vLLM
        # runs it on the CPU too (kernels/linear/mixed_precision/cpu.py, CPUWNA16).
        WeightFormat(
            name="w4a16", bits=4, group_size=128, group_overhead_bits=16,
            checkpoint_only=True, library="compressed-tensors",
        ),
    ]
}  # fmt: skip

KV_CACHE_FORMATS: dict[str, KvCacheFormat] = {
    k.name: k
    for k in [
        KvCacheFormat(name="auto", bits=None, family="compute"),
        KvCacheFormat(name="fp16", bits=16, family="float16"),
        KvCacheFormat(name="bf16", bits=16, family="float16"),
        KvCacheFormat(name="fp8", bits=8, family="fp8"),
        KvCacheFormat(name="fp8_e4m3", bits=8, family="fp8"),
        KvCacheFormat(name="fp8_e5m2", bits=8, family="fp8", targets=frozenset({"cpu", "cuda"})),
        # quantized caches in groups of 64 elements, a 16-bit scale and a 16-bit zero point each
        # (transformers' hqq int8 and quanto int4).
        KvCacheFormat(
            name="int8", bits=8, group_size=64, group_overhead_bytes=4, family="int",
        ),
        KvCacheFormat(
            name="int4", bits=4, group_size=64, group_overhead_bytes=4, family="int",
        ),
        # ggml's block formats: 32 elements with one fp16 scale (ggml/src/ggml-common.h).
        KvCacheFormat(
            name="q8_0", bits=8, group_size=32, group_overhead_bytes=2, family="block",
        ),
        KvCacheFormat(
            name="q4_0", bits=4, group_size=32, group_overhead_bytes=2, family="block",
        ),
    ]
}  # fmt: skip


def weight_formats_for(backend: str) -> list[str]:
    """The weight formats an engine is measured with, in table order."""
    return [f.name for f in WEIGHT_FORMATS.values() if backend in f.engines()]


def kv_cache_formats_for(backend: str) -> list[str]:
    """The KV-cache dtypes an engine is measured with, in table order."""
    return [k.name for k in KV_CACHE_FORMATS.values() if backend in k.engines()]


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
