"""The result row: one measured (or skipped, or failed) point. Versioned; used to write and read.

Units are in the names: *_tok_s tokens per second, *_ms milliseconds, *_mib MiB (2**20 bytes),
ppl and nll in nats per token. A figure that could not be measured is None, never a guess.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1

Status = Literal["ok", "oom", "error", "skipped", "node_lost"]
# offline: one configuration measured in-process (batch × context); serving: the same configuration
# behind a server under a load level; training: a fine-tuning step scenario.
Mode = Literal["offline", "serving", "training"]


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
    model_commit: str | None = None  # the hub snapshot's commit SHA the weights came from
    container_image: str | None = None
    harness: str | None = None
    corpus_hash: str | None = None
    load_average: float | None = None  # 1-minute load average when the point started


class Part(BaseModel):
    """A typed part of a row: built with keyword arguments (checked by mypy --strict through the
    pydantic plugin), merged into a ResultRow by ``ResultRow.compose``. Parts share no field."""

    model_config = ConfigDict(extra="forbid")


class Header(Part):
    schema_version: int = SCHEMA_VERSION
    key: str
    run: str | None = None
    mode: Mode = "offline"
    status: Status
    error: str | None = None
    group: str | None = None


class PointColumns(Part):
    """The point (harness.spec.scenario.Point, without its run settings) and its card."""

    model: str
    revision: str = "main"
    weights: Literal["checkpoint", "random"] = "checkpoint"  # random: speed and memory only
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


class Speed(Part):
    """Throughput and latency: medians over repeats, ITL percentiles over every step."""

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


class Memory(Part):
    """Measured memory: peaks per phase, and what the engine says of its weights and KV cache."""

    peak_mib_load: float | None = None
    peak_mib_prefill: float | None = None
    peak_mib_decode: float | None = None
    reserved_mib_decode: float | None = None
    device_used_mib: float | None = None
    memory_source: str | None = None  # e.g. "torch.cuda+nvml", "rss-sampler"
    memory_global_fallback: bool | None = None
    weights_mib_measured: float | None = None
    kv_cache_mib_measured: float | None = None


class Prediction(Part):
    """The plan's memory figures for the point, and the measured figures' gaps to them."""

    predicted_weights_mib: float | None = None
    predicted_kv_cache_mib: float | None = None
    predicted_activations_mib: float | None = None
    predicted_peak_mib: float | None = None
    weights_gap_pct: float | None = None
    peak_gap_pct: float | None = None


class Preallocation(Part):
    """What an engine reserves up front (vLLM: gpu_memory_utilization × the card)."""

    engine_preallocated_mib: float | None = None


class Quality(Part):
    """Once per group, copied onto each of its points."""

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


class Roofline(Part):
    roofline_decode_tok_s: float | None = None
    roofline_fraction: float | None = None


class HarnessTime(Part):
    """Time the harness itself spent."""

    measured_s: float | None = None  # wall time inside measurement (timing + quality share)
    load_s: float | None = None


# Field order (the JSON keys' and the CSV columns' order) is the parts' order: pydantic collects
# inherited fields from the last base to the first.
class ResultRow(HarnessTime, Roofline, Quality, Preallocation, Prediction, Memory, Speed,
                PointColumns, Header):  # fmt: skip
    """One row: the parts above, then where it came from."""

    model_config = ConfigDict(extra="forbid")

    provenance: Provenance = Provenance()

    @classmethod
    def compose(cls, *parts: Part, provenance: Provenance | None = None) -> ResultRow:
        """A row from its parts (each field set by at most one of them)."""
        fields: dict[str, object] = {}
        for part in parts:
            values = part.model_dump(exclude_unset=True)
            clash = fields.keys() & values.keys()
            if clash:
                raise ValueError(f"row fields given twice: {sorted(clash)}")
            fields.update(values)
        if provenance is not None:
            fields["provenance"] = provenance
        return cls.model_validate(fields)
