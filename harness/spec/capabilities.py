"""Weight formats and KV-cache dtypes: the names a scenario may use and what each costs in bytes.

One table of data per axis; the planner reads the byte costs, the backends read the engine names.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

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
]
KvCacheDtype = Literal["auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4"]
Backend = Literal["transformers", "vllm"]
Target = Literal["cpu", "cuda", "rocm"]

QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)
KV_CACHE_DTYPES: tuple[str, ...] = get_args(KvCacheDtype)


class WeightFormat(BaseModel):
    """Bytes a format spends per weight of a quantized linear layer.

    bits: storage bits per weight (None = the model's own dtype).
    group_size / group_overhead_bits: one scale (and zero point) per group of weights;
    e.g. GPTQ g128 with an fp16 scale and a packed 4-bit zero = (16 + 4) / 128 bit per weight.
    per_row_overhead_bits: one scale per output row (LLM.int8, quanto int8 per channel).
    keeps_embeddings_16bit: embeddings and lm_head stay in 16-bit (2 bytes) when quantized.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    bits: float | None
    group_size: int | None = None
    group_overhead_bits: float = 0.0
    per_row_overhead_bits: float = 0.0
    quantizes_linears: bool = True
    library: str


WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in [
        WeightFormat(name="none", bits=None, quantizes_linears=False, library="torch"),
        WeightFormat(name="fp32", bits=32, quantizes_linears=False, library="torch"),
        WeightFormat(name="bf16", bits=16, quantizes_linears=False, library="torch"),
        WeightFormat(name="fp16", bits=16, quantizes_linears=False, library="torch"),
        # LLM.int8: int8 weights, one fp32 absmax per output row.
        WeightFormat(name="bnb-int8", bits=8, per_row_overhead_bits=32, library="bitsandbytes"),
        # 4-bit bnb: blocks of 64 with an fp32 absmax each (no double quantization).
        WeightFormat(
            name="bnb-nf4", bits=4, group_size=64, group_overhead_bits=32, library="bitsandbytes"
        ),
        WeightFormat(
            name="bnb-fp4", bits=4, group_size=64, group_overhead_bits=32, library="bitsandbytes"
        ),
        WeightFormat(
            name="gptq-int4",
            bits=4,
            group_size=128,
            group_overhead_bits=16 + 4,
            library="gptqmodel",
        ),
        WeightFormat(
            name="quanto-int8", bits=8, per_row_overhead_bits=16, library="optimum-quanto"
        ),
        # quanto int4/int2: groups of 128 with a 16-bit scale and a 16-bit shift.
        WeightFormat(
            name="quanto-int4",
            bits=4,
            group_size=128,
            group_overhead_bits=32,
            library="optimum-quanto",
        ),
        WeightFormat(
            name="quanto-int2",
            bits=2,
            group_size=128,
            group_overhead_bits=32,
            library="optimum-quanto",
        ),
        WeightFormat(name="fp8", bits=8, per_row_overhead_bits=32, library="vllm"),
    ]
}

# Bytes per KV element; None = the model's compute dtype. int8/int4 add one 16-bit scale and
# zero point per group of 64 elements (transformers' quantized cache, q_group_size=64).
KV_BYTES: dict[str, float | None] = {
    "auto": None,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "int8": 1.0 + 4.0 / 64,
    "int4": 0.5 + 4.0 / 64,
}

COMPUTE_DTYPE_BYTES: dict[str, int | None] = {"fp32": 4, "bf16": 2, "fp16": 2}


def compute_dtype_bytes(quantization: str, model_dtype_bytes: int) -> int:
    """Bytes of the activations/KV dtype a format computes in (its own, else the model's)."""
    own = COMPUTE_DTYPE_BYTES.get(quantization)
    return own if own is not None else model_dtype_bytes
