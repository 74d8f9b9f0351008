"""The vLLM engine's memory: its KV pool, the weights its worker holds, what it pre-allocates, and
its way of saying memory ran out.

The KV pool is read from the engine (`num_gpu_blocks` × bytes per block, the block from
`spec.catalog.kv_bytes_per_token`), the weights from the worker (`HarnessWorkerExtension`, called
by name, so nothing is pickled); on GPUs the pre-allocated share (`gpu_memory_utilization` × the
card) is reported apart. On CPU the KV pool is sized from the plan instead.

vLLM and torch are imported only inside `device_total_bytes`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from harness.backends.base import MemoryFacts
from harness.backends.vllm.card import CARD
from harness.spec.capabilities import KV_CACHE_FORMATS
from harness.spec.catalog import kv_bytes_per_token

# What vLLM raises (as ValueError) when the memory it was given cannot hold the KV cache.
_KV_MEMORY_ERRORS = (
    "no available memory for the cache blocks",
    "kv cache is needed, which is larger than the available kv cache memory",
    "is less than requested memory for kv",
    "is less than desired cpu memory utilization",
)


SIXTEEN_BIT = frozenset({"float16", "bfloat16", "half"})


def kv_dtype_bytes(cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per KV element for a vLLM cache_dtype ('auto' = the model's dtype), from the table."""
    if cache_dtype == "auto":
        return model_dtype_bytes
    if cache_dtype in SIXTEEN_BIT:  # vLLM's own 16-bit cache names (the model dtype's)
        return 2
    for name, vllm_name in CARD.kv_caches.items():
        per_element = KV_CACHE_FORMATS[name].bytes_per_element
        if vllm_name == cache_dtype and per_element is not None:
            return int(per_element)
    raise ValueError(f"unknown vLLM kv_cache_dtype {cache_dtype!r}")


def kv_block_bytes(
    *, num_layers: int, num_kv_heads: int, head_size: int, block_size: int, dtype_bytes: int
) -> int:
    """Bytes of one KV block over all layers: 2 (K and V) × layers × kv_heads × head × tokens."""
    per_token = kv_bytes_per_token(
        num_layers=num_layers,
        num_kv_heads=num_kv_heads,
        head_dim=head_size,
        bytes_per_element=dtype_bytes,
    )
    return int(per_token * block_size)


def engine_kv_block_bytes(model_config: Any, parallel_config: Any, cache_config: Any) -> int | None:
    """Bytes of one KV block of a running engine, from its configs; None where it cannot say."""
    try:
        return kv_block_bytes(
            num_layers=model_config.get_num_layers(parallel_config),
            num_kv_heads=model_config.get_num_kv_heads(parallel_config),
            head_size=model_config.get_head_size(),
            block_size=int(cache_config.block_size),
            dtype_bytes=kv_dtype_bytes(
                str(cache_config.cache_dtype), int(model_config.dtype.itemsize)
            ),
        )
    except (AttributeError, TypeError, ValueError):
        return None


def build_memory_facts(
    *,
    num_gpu_blocks: int | None,
    block_bytes: int | None,
    gpu_memory_utilization: float,
    device_total_bytes: int | None,
    worker: Mapping[str, int] | None = None,
    extra: Mapping[str, Any] | None = None,
    preallocates: bool = True,
) -> MemoryFacts:
    """The engine's memory figures, each None where the engine could not say.

    kv_cache_bytes = num_gpu_blocks × block_bytes; preallocated = utilization × device total
    (what vLLM takes up front on a GPU, whatever the weights and blocks need; nothing on a CPU,
    where the KV pool is sized explicitly); weights from the worker.
    """
    report = dict(worker or {})
    kv = num_gpu_blocks * block_bytes if num_gpu_blocks and block_bytes else None
    total = device_total_bytes or report.get("total_bytes")
    preallocated = math.ceil(total * gpu_memory_utilization) if total and preallocates else None
    return MemoryFacts(
        weights_bytes=report.get("weights_bytes"),
        kv_cache_bytes=kv,
        preallocated_bytes=preallocated,
        extra={
            "num_gpu_blocks": num_gpu_blocks,
            "kv_block_bytes": block_bytes,
            "gpu_memory_utilization": gpu_memory_utilization,
            "device_total_bytes": total,
            **{f"worker_{key}": value for key, value in report.items()},
            **dict(extra or {}),
        },
    )


class EngineOutOfMemory(MemoryError):
    """vLLM could not fit its KV cache: an `oom` row, as a CUDA OOM is for transformers."""


def as_memory_error(exc: BaseException) -> BaseException:
    """`exc` as an EngineOutOfMemory when it is vLLM's way of saying memory ran out."""
    message = str(exc).lower()
    if any(marker in message for marker in _KV_MEMORY_ERRORS):
        return EngineOutOfMemory(f"out of memory: {str(exc).splitlines()[0][:300]}")
    return exc


class HarnessWorkerExtension:
    """Mixed into vLLM's GPU worker (`worker_extension_cls`); called by name via collective_rpc.

    Reads the figures the worker computed while profiling (vllm/v1/worker/gpu_worker.py); each
    is absent where this vLLM version does not have it. Returns plain ints so nothing is pickled.
    """

    def harness_memory_report(self) -> dict[str, int]:
        runner = getattr(self, "model_runner", None)
        snapshot = getattr(self, "init_snapshot", None)
        figures = {
            "weights_bytes": getattr(runner, "model_memory_usage", None),
            "kv_available_bytes": getattr(self, "available_kv_cache_memory_bytes", None),
            "requested_bytes": getattr(self, "requested_memory", None),
            "total_bytes": getattr(snapshot, "total_memory", None),
            "peak_activation_bytes": getattr(self, "peak_activation_memory", None),
            "cudagraph_bytes": getattr(self, "cudagraph_memory_estimate", None),
        }
        # The CPU runner keeps no figure, and its parameters cannot give one: it repacks the
        # linear weights into oneDNN buffers and leaves the parameters empty (measured, 0.32).
        report = {key: int(value) for key, value in figures.items() if value is not None}
        caches = getattr(runner, "kv_caches", None)
        if caches:
            storages: dict[int, int] = {}
            for tensor in caches:
                storage = getattr(tensor, "untyped_storage", None)
                if storage is not None:
                    s = storage()
                    storages[s.data_ptr()] = s.nbytes()
            if storages:
                report["kv_allocated_bytes"] = sum(storages.values())
        return report


def device_total_bytes() -> int | None:
    """Total memory of the engine's device, from NVML/amdsmi via vLLM (no CUDA context here)."""
    try:
        from vllm.platforms import current_platform

        return int(current_platform.get_device_total_memory(0))
    except Exception:
        pass
    try:
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)
    except Exception:
        return None
