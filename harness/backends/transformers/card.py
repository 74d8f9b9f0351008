"""The transformers engine's card (harness.spec.engines): its facts and its own name for each
weight format (the dtype it loads in) and KV-cache dtype (its QuantizedCache settings)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from harness.spec.engines import Engine, EngineParallelism, PerDevice
from harness.units import MIB


class TransformersWeights(BaseModel):
    """torch_dtype: the dtype transformers loads the weights in (None = the checkpoint's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    torch_dtype: str | None = None


class QuantizedCacheSettings(BaseModel):
    """transformers' QuantizedCache for a KV dtype (q_group_size is the format's group_size).
    residual_length: the newest tokens kept in the compute dtype until a re-quantization; 32
    keeps most of a 128+ token context quantized."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    backend: Literal["quanto", "hqq"]
    nbits: int
    axis_key: int | None = None
    axis_value: int | None = None
    residual_length: int = 32


PLAIN = TransformersWeights()

# Sources: harness.spec.engines' figures were measured on this 2-core CPU and an H200
# (2026-12-01, `make bench` and each group loaded alone; docs/guide/engines.md): Python and the
# harness 51 MiB, + torch and transformers 262, + the model's modules at load 405; a forked child
# 374 (planned 375); first forward 66-76 MiB (planned 75); load 0.10-0.25 s forked on the CPU,
# 7.0-8.2 s on the H200; a step 2.3-14.1 ms (median 5.8) on the CPU, 3.7-16.8 ms (median 7.8) on
# the H200; a quality unit 19.4 ms (CPU), 26 ms (H200).
CARD = Engine[TransformersWeights, QuantizedCacheSettings | None](
    name="transformers",
    cpu_process_bytes=375 * MIB,
    cpu_first_forward_bytes=75 * MIB,
    start_s=PerDevice(cpu=0.2, cuda=7.6),
    step_floor_s=PerDevice(cpu=0.0058, cuda=0.0078),
    quality_unit_s=PerDevice(cpu=0.0194, cuda=0.026),
    none_is_own_dtype=True,
    targets=frozenset({"cpu", "cuda", "rocm"}),
    # transformers has `tp_plan="auto"`, but only under torch.distributed with one process per
    # rank (torchrun); this harness measures a group in one process and does not launch ranks.
    parallelism=EngineParallelism(
        tensor=False, pipeline=False, expert=False,
        why_not="the transformers backend measures a group in one process; its tp_plan='auto' "
        "needs one torch.distributed process per rank (torchrun), which the harness does not "
        "launch: use the vllm backend for layouts over several cards",
    ),
    weights={
        "none": PLAIN,
        "fp32": TransformersWeights(torch_dtype="float32"),
        "bf16": TransformersWeights(torch_dtype="bfloat16"),
        "fp16": TransformersWeights(torch_dtype="float16"),
        "bnb-int8": PLAIN,
        "bnb-nf4": PLAIN,
        "bnb-fp4": PLAIN,
        "gptq-int4": PLAIN,
        "quanto-int8": PLAIN,
        "quanto-int4": PLAIN,
        "quanto-int2": PLAIN,
    },
    # its quantized caches: int8 with hqq (per-channel axes), int4 with quanto
    kv_caches={
        "auto": None,
        "int8": QuantizedCacheSettings(backend="hqq", nbits=8, axis_key=1, axis_value=1),
        "int4": QuantizedCacheSettings(backend="quanto", nbits=4),
    },
    package="transformers",
    backend="harness.backends.transformers.backend:TransformersBackend",
    options="harness.backends.transformers.options:TransformersOptions",
)  # fmt: skip
