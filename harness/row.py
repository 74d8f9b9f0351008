"""The result row: one measured (or skipped, or failed) point. Versioned; used to write and read.

Units are in the names: *_tok_s tokens per second, *_ms milliseconds, *_mib MiB (2**20 bytes),
ppl and nll in nats per token. A figure that could not be measured is None, never a guess.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1

Status = Literal["ok", "oom", "error", "skipped", "node_lost"]


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    device_name: str | None = None
    driver: str | None = None
    cuda: str | None = None
    rocm: str | None = None
    torch: str | None = None
    transformers: str | None = None
    bitsandbytes: str | None = None
    vllm: str | None = None
    python: str | None = None
    hostname: str | None = None
    node_id: str | None = None  # the Ray node that measured it, when run under Ray
    git_sha: str | None = None
    container_image: str | None = None
    harness: str | None = None
    corpus_hash: str | None = None
    load_average: float | None = None  # 1-minute load average when the point started


class ResultRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    key: str
    run: str | None = None
    status: Status
    error: str | None = None
    group: str | None = None

    # the point
    model: str
    revision: str = "main"
    backend: str
    quantization: str
    kv_cache_dtype: str
    batch: int
    context: int
    output_tokens: int
    target: str
    repeats: int
    seed: int = 0
    is_reference: bool = False
    gpu: str | None = None  # catalog name of the device, when matched

    # throughput and latency
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None  # aggregate over the batch
    total_tok_s: float | None = None  # (prompt + generated tokens) / end-to-end time
    ttft_ms_p50: float | None = None
    tpot_ms_p50: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p90: float | None = None
    itl_ms_p99: float | None = None
    e2e_ms_p50: float | None = None
    decode_cv: float | None = None  # stdev / mean of per-repeat decode tok/s
    repeats_done: int | None = None
    generated_tokens: int | None = None  # counted from the outputs, per repeat, whole batch
    timer: str | None = None  # "cuda_events" | "perf_counter"

    # memory
    peak_mib_load: float | None = None
    peak_mib_prefill: float | None = None
    peak_mib_decode: float | None = None
    reserved_mib_decode: float | None = None
    device_used_mib: float | None = None
    memory_source: str | None = None  # e.g. "torch.cuda+nvml", "rss-sampler"
    memory_global_fallback: bool | None = None
    weights_mib_measured: float | None = None
    kv_cache_mib_measured: float | None = None
    predicted_weights_mib: float | None = None
    predicted_kv_cache_mib: float | None = None
    predicted_activations_mib: float | None = None
    predicted_peak_mib: float | None = None
    weights_gap_pct: float | None = None
    peak_gap_pct: float | None = None
    engine_preallocated_mib: float | None = None  # vLLM's reservation (gpu_memory_utilization)

    # quality (once per group, copied onto each of its points)
    ppl: float | None = None
    ppl_ci_low: float | None = None
    ppl_ci_high: float | None = None
    nll_mean: float | None = None
    dnll_vs_ref: float | None = None  # mean per-window (config − reference) NLL, nats/token
    dnll_ci_low: float | None = None
    dnll_ci_high: float | None = None
    kl_vs_ref: float | None = None  # nats/token
    top1_agree: float | None = None  # fraction of positions
    arc_acc: float | None = None
    arc_acc_norm: float | None = None
    arc_items: int | None = None
    quality_windows: int | None = None
    window_tokens: int | None = None
    quality_s: float | None = None

    # roofline
    roofline_decode_tok_s: float | None = None
    roofline_fraction: float | None = None

    # timing of the harness itself
    measured_s: float | None = None  # wall time inside measurement (timing + quality share)
    load_s: float | None = None

    provenance: Provenance = Provenance()
