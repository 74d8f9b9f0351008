"""The result row: one measured (or skipped, or failed) point. Versioned; used to write and read.

Units are in the names: *_tok_s tokens per second, *_ms milliseconds, *_mib MiB (2**20 bytes),
ppl and nll in nats per token. A figure that could not be measured is None, never a guess.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.row.tasks import TaskScore, legacy_arc_task

SCHEMA_VERSION = 1

Status = Literal["ok", "oom", "error", "skipped", "node_lost"]
# The mode that measured a row: a name in the modes' registry (harness.modes.REGISTRY, which says
# what each is); a row file naming another is unreadable (harness.run.store.row_problem).
MODE_NAME = r"^[a-z][a-z0-9-]{0,31}$"
# which process measured a group: a child forked from its node's pre-imported host
# (harness.run.host), a fresh Ray actor process, or the `harness measure` process itself
ProcessPath = Literal["forkserver", "fresh", "in-process"]


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
    load_generator: str | None = None  # serving rows: the load generator and its version
    adapter_path: str | None = None  # the LoRA folder loaded on the model (harness.spec.adapters)
    adapter_sha256: str | None = None  # sha256 over the adapter's weight files
    adapter_base: str | None = None  # its recorded base: id@revision (commit), weights sha256
    # the files the point read, by content: "what=sha256 prefix" pairs, comma-separated, as in
    # its key (harness.spec.inputs): adapter weights, task files, trace
    inputs_sha256: str | None = None
    process: ProcessPath | None = None  # which process measured it (ProcessPath)
    # a layout over several cards (the row's `layout`): the processes its ranks ran in, what
    # started them (vLLM's distributed_executor_backend: mp, ray) and what each was bound to
    # (VLLM_CPU_OMP_THREADS_BIND's cores per rank, or the visible cards); None on one card
    ranks: int | None = None
    executor: str | None = None
    binding: str | None = None


class Part(BaseModel):
    """A typed part of a row: built with keyword arguments (checked by mypy --strict through the
    pydantic plugin), merged into a ResultRow by ``ResultRow.compose``. Parts share no field."""

    model_config = ConfigDict(extra="forbid")


class Header(Part):
    schema_version: int = SCHEMA_VERSION
    key: str
    run: str | None = None
    mode: str = Field("offline", pattern=MODE_NAME)
    status: Status
    error: str | None = None
    group: str | None = None


class PointColumns(Part):
    """The point (harness.spec.scenario.Point, without its run settings) and its card."""

    model: str
    revision: str = "main"
    weights: Literal["checkpoint", "random"] = "checkpoint"  # random: speed and memory only
    adapter: str | None = None  # the LoRA folder on the model, as the scenario names it
    layout: str | None = None  # tensor / pipeline / expert ranks (tp=2, ...); None: one card
    # speculative decoding, its label (ngram:k=4,lookup=2-4; harness.spec.speculative); None: none
    speculative: str | None = None
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
    # the card orchestration planned the point on, where the device that measured it planned it
    # again on its own card (the row's gpu); None: the figures are the plan the work carried
    replanned_from: str | None = None


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
    # the paired statistics the equal-quality verdict reads (harness.measure.verdict): the
    # one-sided 95 % bounds of ΔNLL (the two-sided 90 % bootstrap interval) and its per-window
    # standard deviation (nats/token); the tasks' paired figures are in their parts (Tasks)
    dnll_ci90_low: float | None = None
    dnll_ci90_high: float | None = None
    dnll_sd: float | None = None
    kl_vs_ref: float | None = None  # nats/token
    top1_agree: float | None = None  # fraction of positions
    quality_windows: int | None = None
    window_tokens: int | None = None
    quality_s: float | None = None


class Tasks(Part):
    """The scenario's tasks (``quality: {tasks: [...]}``, and ARC-Easy as ``arc-easy``), once per
    group, copied onto each of its points."""

    tasks: list[TaskScore] | None = None


class Roofline(Part):
    roofline_decode_tok_s: float | None = None
    roofline_fraction: float | None = None


class Serving(Part):
    """A load level against a real server (mode: serving). The latency figures shared with
    offline rows (ttft_ms_p50, tpot_ms_p50, itl_ms_p99, e2e_ms_p50) are Speed's columns.
    Semantics of the SLO figures: harness.modes.serving.slo."""

    concurrency: int | None = None  # closed-loop clients, or
    request_rate: float | None = None  # open-loop Poisson arrivals per second
    requests_sent: int | None = None
    requests_ok: int | None = None
    requests_failed: int | None = None  # requests_ok + requests_failed = requests_sent
    serving_duration_s: float | None = None
    request_throughput: float | None = None  # successful requests per second
    output_tok_s: float | None = None  # output tokens of successful requests per second
    ttft_ms_p90: float | None = None
    ttft_ms_p99: float | None = None
    tpot_ms_p90: float | None = None
    tpot_ms_p99: float | None = None
    e2e_ms_p99: float | None = None
    slo_ttft_ms: float | None = None  # the targets each request is held to
    slo_tpot_ms: float | None = None
    slo_attainment_target: float | None = None  # the scenario's `attainment`
    slo_attainment: float | None = None  # requests meeting every SLO / requests sent
    goodput_rps: float | None = None  # requests meeting every SLO per second
    generator_goodput_rps: float | None = None  # the generator's own figure (cross-check)
    saturated: bool | None = None  # throughput stopped rising while latency grew
    server_start_s: float | None = None
    server_log: str | None = None  # path of the server's log in the run folder
    server_log_tail: list[str] | None = None  # its last lines, on a failed level
    # the server's prefix cache over the level (harness.modes.serving.device.loadgen: its
    # /metrics counters before and after): prompt tokens looked up and found, found / looked up
    prefix_caching: bool | None = None  # the server's --enable-prefix-caching (None: off, no axis)
    prefix_cache_queried_tokens: int | None = None
    prefix_cache_hit_tokens: int | None = None
    prefix_cache_hit_rate: float | None = None  # share of the prompt tokens looked up
    # interactivity (harness.modes.serving.price): the TPOT percentile of tok/s/user, the bands
    interactivity_tpot: str | None = None  # p50 | p90
    interactivity_bands: str | None = None  # tok/s/user, space-separated ("10 30 100")
    # a search for the highest load meeting the SLO (harness.modes.serving.search): a probe row
    # has its index; the search's own row has no load and holds the outcome
    search_axis: str | None = None  # request_rate | concurrency
    search_probe: int | None = None  # the probe's index in its search (0: LOW, 1: HIGH, ...)
    max_rate_at_slo: float | None = None  # the passing end: req/s or clients (search_axis)
    search_bracket_low: float | None = None  # = max_rate_at_slo; None: even LOW missed the SLO
    search_bracket_high: float | None = None  # the lowest failing load; None: HIGH met it
    search_probes: int | None = None  # probes the search ran
    search_stop: str | None = None  # why it stopped (harness.modes.serving.search.Stop)


class Training(Part):
    """A fine-tuning run of one configuration (mode: training; harness.modes.training). The
    point's batch is the micro-batch and its context the sequence length; kv_cache_dtype "auto" and
    output_tokens 0 (nothing is generated). Memory per phase of one steady-state step (the
    last) next to the plan's; losses in nats per predicted token."""

    train_method: str | None = None  # full | lora | qlora
    micro_batch: int | None = None
    grad_accum: int | None = None
    seq_len: int | None = None
    gradient_checkpointing: bool | None = None
    optimizer: str | None = None  # adamw | adamw-8bit
    train_steps: int | None = None  # optimizer steps run
    lr: float | None = None
    trainable_params: int | None = None
    total_params: int | None = None
    tokens_per_step: int | None = None  # micro_batch × grad_accum × seq_len
    train_peak_mib_forward: float | None = None
    train_peak_mib_backward: float | None = None
    train_peak_mib_optimizer: float | None = None
    predicted_train_mib_forward: float | None = None
    predicted_train_mib_backward: float | None = None
    predicted_train_mib_optimizer: float | None = None
    predicted_gradients_mib: float | None = None
    predicted_optimizer_mib: float | None = None
    train_peak_gap_pct: float | None = None  # (measured − planned) / planned, the largest phase
    # CUDA/ROCm: the allocator's peak per phase (tensors only; None on the CPU), and its gap to
    # the plan's tensors (the plan's largest phase less its runtime context)
    train_alloc_mib_forward: float | None = None
    train_alloc_mib_backward: float | None = None
    train_alloc_mib_optimizer: float | None = None
    predicted_train_tensors_mib: float | None = None
    train_alloc_gap_pct: float | None = None
    step_s: float | None = None  # median optimizer step (warm-up and the memory step left out)
    train_tok_s: float | None = None  # tokens_per_step / step_s
    train_s: float | None = None  # wall time of the whole run (steps + evaluations)
    loss_first: float | None = None
    loss_last: float | None = None
    loss_curve: list[float] | None = None  # every step's training loss
    grad_norm_median: float | None = None  # global L2 norm before clipping, median over steps
    grad_norm_last: float | None = None
    eval_loss_start: float | None = None  # held-out loss before the first step
    eval_loss: float | None = None  # held-out loss after the last step
    eval_loss_ci_low: float | None = None  # 95 % bootstrap over eval windows
    eval_loss_ci_high: float | None = None
    eval_curve: list[list[float]] | None = None  # [steps done, held-out loss] pairs
    eval_window_nll: list[float] | None = None  # per eval window, nats/token (paired CI)
    eval_windows: int | None = None
    target_eval_loss: float | None = None
    steps_to_target: int | None = None  # first evaluated step at or below the target
    train_data: str | None = None
    train_data_hash: str | None = None
    train_tokens: int | None = None  # tokens in the train block
    eval_tokens: int | None = None  # tokens in the eval block


class Energy(Part):
    """From the device's cumulative energy counter (harness.measure.energy), never from TDP:
    joules per prefill pass, per generation's decode steps, per decoded token; mean decode power
    in watts; the group's quality scoring in joules (once per group). Serving rows: the joules
    of the level's load window (first request sent to the generator's end), per output token,
    mean power. Training rows: joules per optimizer step and per training token, mean power,
    over extra steps after the measured ones. None: with the reason."""

    energy_j_prefill: float | None = None
    energy_j_decode: float | None = None
    energy_j_quality: float | None = None
    j_per_token_decode: float | None = None
    avg_power_w_decode: float | None = None
    energy_j_serving: float | None = None
    j_per_token_serving: float | None = None
    avg_power_w_serving: float | None = None
    energy_j_train_step: float | None = None
    j_per_token_train: float | None = None
    avg_power_w_train: float | None = None
    energy_source: str | None = None  # "nvml" | "amdsmi" | "rapl-package"
    energy_unavailable_reason: str | None = None


class HarnessTime(Part):
    """Time the harness itself spent."""

    measured_s: float | None = None  # wall time inside measurement (timing + quality share)
    load_s: float | None = None


class Speculation(Part):
    """Speculative decoding's acceptance, read from the engine's counters around a pass
    (harness.measure.speculation), each figure with the workload it was read on: the point's
    timed passes (``spec_*``) and the scenario's extract tasks' generations (``spec_tasks_*``).
    The greedy digests (every vLLM offline row: the plain configuration is the comparison) say
    what each generation produced, item by item (harness.results.speculation)."""

    spec_workload: str | None = None  # the text the acceptance below was read on
    spec_drafts: int | None = None  # steps that proposed draft tokens
    spec_draft_tokens: int | None = None
    spec_accepted_tokens: int | None = None
    spec_acceptance_rate_pct: float | None = None  # accepted / draft tokens
    spec_acceptance_length_tokens: float | None = None  # 1 + accepted / drafts (bonus included)
    spec_acceptance_per_pos_pct: str | None = None  # per draft position, comma-separated
    spec_tasks_workload: str | None = None
    spec_tasks_drafts: int | None = None
    spec_tasks_acceptance_rate_pct: float | None = None
    spec_tasks_acceptance_length_tokens: float | None = None
    spec_tasks_acceptance_per_pos_pct: str | None = None
    # a replay through vLLM's synthetic rejection sampler: the acceptance length it was told
    spec_synthetic_length_tokens: float | None = None
    # greedy outputs, one short sha256 per item (harness.measure.speculation.item_digest),
    # comma-separated: the point's sequences, and the extract tasks' items
    greedy_sequences_sha: str | None = None
    greedy_tasks_sha: str | None = None


# Field order (the JSON keys' and the CSV columns' order) is the parts' order: pydantic collects
# inherited fields from the last base to the first.
class ResultRow(Speculation, Training, Energy, HarnessTime, Serving, Roofline, Tasks, Quality,
                Preallocation, Prediction, Memory, Speed, PointColumns, Header):  # fmt: skip
    """One row: the parts above, then where it came from."""

    model_config = ConfigDict(extra="forbid")

    provenance: Provenance = Provenance()

    @model_validator(mode="before")
    @classmethod
    def earlier_arc_fields(cls, data: object) -> object:
        return legacy_arc_task(data)

    @property
    def is_planned_point(self) -> bool:
        """False for a search's probe rows: found as the search runs, beside its one planned
        point (progress counts planned points only)."""
        return self.search_probe is None

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
