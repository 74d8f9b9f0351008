"""The serving phase of a vLLM group (device side): after its offline points, the same
configuration behind a real `vllm serve`, one row per load level (mode: serving).

    <run>/serving/<group digest>/server.log        the server's output (kept; server-2.log, ...
                                                    for a server started again after a death)
    <run>/serving/<group digest>/server.json       pid / process group / port of each start
    <run>/serving/<group digest>/prompts.jsonl     the prompts (cut from the shipped corpus)
    <run>/serving/<group digest>/levels/<label>.*  the generator's JSON and its output

The server gets the group's weights, quantization and KV dtype through the offline backend's own
`engine_kwargs` (so it serves exactly what the offline rows measured), bound to 127.0.0.1 on a free
port, and is stopped with its whole process group when the levels are done (or fail). The levels
run in the order the scenario gives (concurrency levels, then rate levels); `saturated` compares
a level with the lower loads of its series run before it.

A search point (``serving: {search: ...}``) runs its probes after the fixed levels, against the
same server: each probe is one real `vllm bench serve` level with its own point key and row
(`levels/probe<i>-<load>.*`), the next load chosen by `harness.modes.serving.search` from the
probes so far; then the search's own row (its bracket, `max_rate_at_slo`). A resumed search
replays the probes already stored ok in the run folder (same rule, same loads) and measures only
the rest; when every probe is stored no server is started.

Failures never end the sweep: a server that does not start gives an `error` row per level with
its log's last lines; a server that dies during a level gives that level an `error` row (with the
requests the generator accounted for and the log's last lines), and the next level starts a fresh
server.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from harness import plan as planner
from harness.measure import energy
from harness.measure.speculation import RANDOM_WEIGHTS, Counters, acceptance
from harness.modes.serving import search, slo, workload
from harness.modes.serving.device.loadgen import (
    LevelResult,
    LevelRun,
    error_result,
    generator_version,
    mark_saturation,
    run_level,
)
from harness.modes.serving.device.server import (
    DEV_MODE_ENV,
    ServerConfig,
    ServerError,
    VllmServer,
)
from harness.modes.serving.prompts import workload_prompts, write_dataset
from harness.modes.serving.spec import ServingLevel
from harness.row import Energy, Part, ResultRow, Serving, Speculation, Speed, Status
from harness.run.contracts import WorkContext
from harness.run.device import Job, Runner, failure_text, kv_pool_bytes
from harness.spec import catalog
from harness.spec.scenario import GroupKey, Point

# KV pool (CPU) for rate levels, which have no client count: sequences it holds at once (vLLM
# queues the rest, as a real server does).
RATE_LEVEL_SEQUENCES = 16
SERVER_STARTUP_TIMEOUT_S = 900.0
LEVEL_TIMEOUT_FLOOR_S = 600.0
# The server's own engine setting, on top of `env.subprocess_env`: the in-process engine core the
# offline engine set in this process must not reach the server, whose API process talks to its
# engine core in another process.
ENGINE_CORE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}

# (point, status, error, parts) → the level's row: the job's, with its card and load generator
LevelRow = Callable[[Point, Status, str | None, list[Part]], ResultRow]


def group_dir(ctx: WorkContext, group: GroupKey) -> Path:
    digest = hashlib.sha256(group.label.encode()).hexdigest()[:16]
    return Path(ctx.run_dir) / "serving" / digest


def max_model_len(group: GroupKey, levels: Sequence[ServingLevel]) -> int:
    """The longest request any level sends (the spec refused what exceeds the model)."""
    longest = max(workload.longest_sequence(level) for level in levels)
    return min(longest, catalog.model(group.model, group.revision).max_positions)


def largest_kv_bytes(group: GroupKey, levels: Sequence[ServingLevel], max_len: int) -> float:
    """The KV cache of the most sequences in flight × the longest request (the CPU server's pool
    is `harness.run.device.kv_pool_bytes` of it, the offline pool's rule)."""
    arch = catalog.model(group.model, group.revision)
    sequences = max(level.concurrency or RATE_LEVEL_SEQUENCES for level in levels)
    return planner.kv_cache_bytes(
        arch, group.kv_cache_dtype, group.quantization, max_len, sequences
    )


def server_config(
    group: GroupKey, levels: Sequence[ServingLevel], job: Job, kv_scale: float = 1.0
) -> ServerConfig:
    """The group's engine configuration as `vllm serve` arguments (the offline backend's);
    ``kv_scale``: a speculative draft's KV entry beside the target's in the one pool
    (harness.plan.speculative_kv_scale)."""
    from harness.backends.vllm.args import engine_environment, engine_kwargs
    from harness.backends.vllm.dialect import EngineDialect

    max_len = max_model_len(group, levels)
    pool = kv_pool_bytes(largest_kv_bytes(group, levels, max_len) * kv_scale)
    options = job.backend_options(levels[0].seed, max_len, pool if job.device == "cpu" else None)
    adapted, _ = EngineDialect.detect().adapt(engine_kwargs(group, options))
    cores = sorted(os.sched_getaffinity(0))
    return ServerConfig.from_engine_kwargs(
        adapted, served_model_name="harness", lora_path=options.adapter_path,
        environment=engine_environment(group, job.device, cores),
    )  # fmt: skip


def fit_gpu_utilization(config: ServerConfig, device: str) -> tuple[ServerConfig, str | None]:
    """On a GPU, vLLM refuses to start when `gpu_memory_utilization` × the card exceeds the
    free memory; what this process still holds after closing the offline engine (its CUDA
    context, allocator leftovers) counts against it. Lowered to 95 % of what is free when
    needed, with a note (server.json) saying so; untouched otherwise and on the CPU."""
    wanted = config.gpu_memory_utilization
    if not device.startswith("cuda") or wanted is None:
        return config, None
    import torch

    free, total = (int(x) for x in torch.cuda.mem_get_info())
    if wanted * total <= free * 0.97:
        return config, None
    fitted = round(free * 0.95 / total, 3)
    note = (
        f"gpu_memory_utilization {wanted:g} -> {fitted:g}: {free / 2**30:.1f} of "
        f"{total / 2**30:.1f} GiB free when the server started"
    )
    return config.model_copy(update={"gpu_memory_utilization": fitted}), note


# A level record's figures a serving row carries under the same names: the latency columns
# offline rows share (row.Speed), and the serving part's own (row.Serving).
SPEED_FIGURES = ("ttft_ms_p50", "tpot_ms_p50", "itl_ms_p99", "e2e_ms_p50")
SERVING_FIGURES = (
    "concurrency", "request_rate", "requests_sent", "requests_ok", "requests_failed",
    "request_throughput", "output_tok_s", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_p90",
    "tpot_ms_p99", "e2e_ms_p99", "slo_attainment", "goodput_rps", "generator_goodput_rps",
    "saturated", "prefix_caching", "prefix_cache_queried_tokens", "prefix_cache_hit_tokens",
    "prefix_cache_hit_rate",
)  # fmt: skip


def level_parts(
    result: LevelResult, level: ServingLevel, server: VllmServer | None, log: Path
) -> list[Part]:
    """A level's record as row parts (Speed holds the latency columns offline rows share): the
    record's figures under their own names (SPEED_FIGURES, SERVING_FIGURES), its duration, the
    server's start and log, the level's SLO and settings."""
    speed = Speed(**{name: getattr(result, name) for name in SPEED_FIGURES})
    serving = Serving(
        **{name: getattr(result, name) for name in SERVING_FIGURES},
        serving_duration_s=result.duration_s,
        server_start_s=None if server is None else server.startup_s,
        server_log=str(log),
        server_log_tail=result.server_log_tail or None,
        **slo_fields(level),
        **level_settings(level),
    )
    return [speed, serving]


def slo_fields(level: ServingLevel) -> dict[str, float]:
    """The SLO a level (or a search) is held to, as its row states it."""
    return {
        "slo_ttft_ms": level.slo.ttft_ms_p99,
        "slo_tpot_ms": level.slo.tpot_ms_p99,
        "slo_attainment_target": level.attainment,
    }


def level_settings(level: ServingLevel) -> dict[str, Any]:
    """What a level's row states of its settings: the interactivity percentile and bands, and,
    for a probe, its search's axis and its index."""
    bands = " ".join(f"{band:g}" for band in level.interactivity.bands)
    probe: dict[str, Any] = {} if level.search is None else {"search_axis": level.search.axis}
    if level.probe is not None:
        probe["search_probe"] = level.probe
    return {"interactivity_tpot": level.interactivity.tpot, "interactivity_bands": bands, **probe}


def level_energy(trace: energy.CounterTrace[Any], result: LevelResult) -> Energy:
    """The level's energy over its load window, [first request sent, + the generator's
    duration], read from the counter traced while the generator ran (its start-up and the
    writing of its JSON left out): J, J per output token of the successful requests, mean W.
    NVML / amdsmi count the card alone; RAPL counts the whole socket, the generator's own work
    included when it runs there (a CPU target)."""
    meter = trace.meter
    out = Energy(energy_source=meter.source)
    start, seconds = result.window_start_s, result.duration_s
    if start is None or seconds is None:
        out.energy_unavailable_reason = meter.unavailable_reason or (
            "serving: the generator reported no request start times (no load window)"
        )
        return out
    span = trace.span(start, start + seconds)
    out.energy_unavailable_reason = span.reason
    if span.joules is not None:
        out.energy_j_serving = span.joules
        out.avg_power_w_serving = span.joules / span.seconds
        if result.output_tokens:
            out.j_per_token_serving = span.joules / result.output_tokens
        else:
            out.energy_unavailable_reason = "serving: no output tokens in the level"
    return out


def error_text(result: LevelResult) -> str | None:
    if result.error is None:
        return None
    tail = "\n".join(result.server_log_tail[-15:])
    text = result.error + (f"\n--- last lines of the server log ---\n{tail}" if tail else "")
    return text[-4000:]


def serve_points(group: GroupKey, points: list[Point], job: Job) -> Iterator[ResultRow]:
    """The group's serving points (the `Runner` contract): start the group's server, run each
    point's level, yield each row as it is made (the job's meter traced during each level). A
    setup that fails gives every level an `error` row with the reason."""
    levels = [p.serving for p in points if p.serving is not None]
    if not levels:
        return
    folder = group_dir(job.ctx, group)
    folder.mkdir(parents=True, exist_ok=True)
    generator = generator_version()
    card = job.card(group.target)

    def row(point: Point, status: Status, error: str | None, parts: list[Part]) -> ResultRow:
        name = card.name if card else None
        return job.row(point, status, error, parts, card=name, load_generator=generator)

    sized = sizing_levels(levels)
    try:
        arch = catalog.model(group.model, group.revision)
        config = server_config(group, sized, job, planner.speculative_kv_scale(points[0], arch))
        dataset = prompts_file(sized, job.tokenizer_dir, config, folder)
    except Exception as exc:  # a configuration the server cannot take: every level says why
        reason = failure_text(exc, "serving setup")
        for point in points:
            yield row(point, "error", reason, [])
        return
    done = earlier_levels(job.ctx, group, generator)  # a resumed run's ok levels
    stored = stored_rows(job.ctx, group)  # a resumed search's ok probes, by key
    session = Session(config, folder, job.device)
    try:
        for point, level in zip(points, levels, strict=True):
            session = caching_session(session, level, folder)
            if level.search is not None:
                measure = probe_measure(job, session, dataset, done, row)
                yield from search_rows(point, stored, job.corpus_hash, measure, row)
            else:
                yield from serve_level(point, level, job, session, dataset, done, row)
    finally:
        session.stop()


def sizing_levels(levels: Sequence[ServingLevel]) -> list[ServingLevel]:
    """The levels the server and the prompts are sized for: each fixed level, and a search's
    probes at LOW and at HIGH (the most requests and clients it may send)."""
    out = []
    for level in levels:
        if level.search is None:
            out.append(level)
            continue
        low, high = level.search.bounds
        out += [search.probe_level(level, 0, low), search.probe_level(level, 1, high)]
    return out


def prompts_file(
    levels: Sequence[ServingLevel], tokenizer_dir: str, config: ServerConfig, folder: Path
) -> Path:
    """The prompts of every level (as many as the largest level sends), built from the corpus
    as the first level's workload says (`prompts.workload_prompts`), written as the generator's
    dataset."""
    largest = max(levels, key=lambda level: level.requests)
    prompts = workload_prompts(tokenizer_dir, largest, max_model_len=config.max_model_len)
    return write_dataset(prompts, folder / "prompts.jsonl")


class Session:
    """The group's server across its levels and probes: a fresh one before the first level that
    needs it and after one that died (its log `server-<n>.log`), stopped at the end (`stop`)."""

    def __init__(self, config: ServerConfig, folder: Path, device: str) -> None:
        self.config, self.folder, self.device = config, folder, device
        self.server: VllmServer | None = None
        self.starts = 0
        self.log = folder / "server.log"

    def live(self) -> VllmServer:
        """A running server; ServerError when a fresh one does not start (`log` names its log)."""
        if self.server is not None and self.server.alive():
            return self.server
        if self.server is not None:
            self.server.stop()  # what is left of a server that died: the whole group
        self.log = self.folder / (
            "server.log" if self.starts == 0 else f"server-{self.starts + 1}.log"
        )
        self.starts += 1
        self.server = None
        self.server = start_server(self.config, self.log, self.folder, self.device)
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def caching_session(session: Session, level: ServingLevel, root: Path) -> Session:
    """The session for a level's `prefix_caching` setting: the same one, or (the setting
    changed) the previous server stopped and a new session whose server caches prefixes or
    not, in its own folder `<group>/prefix-caching-on|off/` (server log, levels)."""
    if level.prefix_caching is None:
        return session
    folder = root / f"prefix-caching-{'on' if level.prefix_caching else 'off'}"
    if session.folder == folder:
        return session
    session.stop()
    folder.mkdir(parents=True, exist_ok=True)
    config = session.config.model_copy(update={"enable_prefix_caching": level.prefix_caching})
    return Session(config, folder, session.device)


def serve_level(
    point: Point,
    level: ServingLevel,
    job: Job,
    session: Session,
    dataset: Path,
    done: list[LevelResult],
    row: LevelRow,
) -> Iterator[ResultRow]:
    """One level against a live server (`done`: the levels measured so far, a resumed run's
    first, which `saturated` compares it with); a server that does not start gives the level an
    `error` row with its log's last lines."""
    try:
        server = session.live()
    except ServerError as exc:
        yield not_started_row(point, level, exc, session.log, row)
        return
    yield measure_level(point, level, server, dataset, session.folder, done, job.meter, row)


# a probe's point → its row, and whether the search can go on (False: no server started for it)
MeasureProbe = Callable[[Point], tuple[ResultRow, bool]]


def search_rows(
    point: Point,
    stored: dict[str, ResultRow],
    corpus_hash: str,
    measure: MeasureProbe,
    row: LevelRow,
) -> Iterator[ResultRow]:
    """The search's probes, each the row of a real level (`measure`), or, on a resumed run, the
    row stored ok under the probe's key (not measured again); the next load by
    `search.next_load`; then the search's own row. A server that does not start ends the
    search: that probe's `error` row, then the search's, `error` too."""
    level = point.serving
    assert level is not None and level.search is not None
    probes: list[search.Probe] = []
    while (load := search.next_load(level.search, probes)) is not None:
        probe = search.probe_point(point, len(probes), load)
        measured = stored.get(probe.key(corpus_hash))
        if measured is None:
            measured, go_on = measure(probe)
            yield measured
            if not go_on:
                yield search_row(point, level, probes, row, f"probe {len(probes)}: not run")
                return
        probes.append(search.Probe(load, slo.qualifies(measured, level.attainment)))
    yield search_row(point, level, probes, row)


def probe_measure(
    job: Job, session: Session, dataset: Path, done: list[LevelResult], row: LevelRow
) -> MeasureProbe:
    """A probe measured as any level: a live server, then `measure_level`; a server that does
    not start gives the probe its `error` row and ends the search."""

    def measure(probe: Point) -> tuple[ResultRow, bool]:
        level = probe.serving
        assert level is not None
        try:
            server = session.live()
        except ServerError as exc:
            return not_started_row(probe, level, exc, session.log, row), False
        folder = session.folder
        return measure_level(probe, level, server, dataset, folder, done, job.meter, row), True

    return measure


def search_row(
    point: Point,
    level: ServingLevel,
    probes: Sequence[search.Probe],
    row: LevelRow,
    error: str | None = None,
) -> ResultRow:
    """The search's own row: its outcome (`search.outcome`), no load figures of its own (each
    probe's row has them); `error` when it could not finish."""
    assert level.search is not None
    state = search.outcome(level.search, probes)
    serving = Serving(
        **slo_fields(level),
        max_rate_at_slo=state.max_load,
        search_bracket_low=state.passing,
        search_bracket_high=state.failing,
        search_probes=state.probes,
        search_stop=state.stop,
        **level_settings(level),
    )
    reason = "a search's own row: each probe's row has its energy"
    status: Status = "ok" if error is None else "error"
    return row(point, status, error, [serving, Energy(energy_unavailable_reason=reason)])


def stored_rows(ctx: WorkContext, group: GroupKey) -> dict[str, ResultRow]:
    """The group's serving rows stored ok in this run folder, by key (a resumed search's
    probes); none when the folder is not on this machine."""
    from harness.run import store

    if not (Path(ctx.run_dir) / store.POINTS).is_dir():
        return {}
    rows, _ = store.read_rows(Path(ctx.run_dir))
    return {
        r.key: r
        for r in rows
        if r.mode == "serving" and r.group == group.label and r.status == "ok"
    }


def start_server(config: ServerConfig, log: Path, folder: Path, device: str) -> VllmServer:
    """A started server for the group (its GPU share fitted to what is free), recorded in
    server.json; a ServerError when it does not get ready (it is stopped by then)."""
    fitted, note = fit_gpu_utilization(config, device)
    env = {
        **ENGINE_CORE_ENV,
        **(DEV_MODE_ENV if config.enable_prefix_caching else {}),
        **config.environment,
    }
    server = VllmServer(fitted, log_path=log, startup_timeout_s=SERVER_STARTUP_TIMEOUT_S, env=env)
    server.start()
    try:
        record_start(folder / "server.json", server, note)
    except BaseException:
        server.stop()
        raise
    return server


def not_started_row(
    point: Point, level: ServingLevel, exc: ServerError, log: Path, row: LevelRow
) -> ResultRow:
    """The `error` row of a level whose server did not start: every request counted as sent."""
    result = error_result(
        level, level.slo, sent=level.requests,
        error=f"the server did not start: {exc.args[0]}", server_log_tail=exc.log_tail,
    )  # fmt: skip
    return row(point, "error", error_text(result), level_parts(result, level, None, log))


def measure_level(
    point: Point,
    level: ServingLevel,
    server: VllmServer,
    dataset: Path,
    folder: Path,
    done: list[LevelResult],
    meter: energy.EnergyMeter[Any],
    row: LevelRow,
) -> ResultRow:
    """One level through the generator, the counter traced meanwhile; `saturated` against the
    levels in `done` (this one appended)."""
    timeout_s = max(LEVEL_TIMEOUT_FLOOR_S, 10.0 * point_budget_s(point, level))
    run = LevelRun(dataset, folder / "levels", level.slo, level.requests, level.seed,
                   timeout_s=timeout_s)  # fmt: skip
    before = server.speculation_counters()
    with energy.CounterTrace(meter) as trace:
        result = run_level(server, level, run)
    after = server.speculation_counters() if before is not None else None
    done.append(result)
    result = mark_saturation(done)[-1]
    status: Status = "ok" if result.status == "ok" else "error"
    parts = [*level_parts(result, level, server, server.log_path), level_energy(trace, result)]
    parts.append(level_speculation(point, level, before, after))
    return row(point, status, error_text(result), parts)


def acceptance_workload(level: ServingLevel) -> str:
    """The text a level's acceptance is read on (acceptance depends on it): the replayed
    trace, the multi-turn conversations, or the serving prompts cut from the corpus."""
    load = level.workload
    if load is not None and load.trace is not None:
        return f"replayed trace: {Path(load.trace).name}"
    if load is not None and load.multi_turn is not None:
        turns = load.multi_turn
        return f"multi-turn: {turns.conversations} conversations x {turns.turns} turns"
    return "serving prompts: corpus slices"


def level_speculation(
    point: Point, level: ServingLevel, before: Counters | None, after: Counters | None
) -> Speculation:
    """A level's acceptance, the server's /metrics counters read before and after it (their
    difference, ``Counters.since``), labelled with the level's workload; on random weights no
    acceptance is claimed; a replay states its synthetic length."""
    spec = point.speculative
    part = Speculation()
    if spec is None:
        return part
    part.spec_synthetic_length_tokens = spec.synthetic
    if point.weights == "random":
        part.spec_workload = RANDOM_WEIGHTS
        return part
    if before is None or after is None:
        return part
    got = acceptance(after.since(before), acceptance_workload(level))
    part.spec_workload = got.workload
    part.spec_drafts, part.spec_draft_tokens = got.drafts, got.draft_tokens
    part.spec_accepted_tokens = got.accepted
    part.spec_acceptance_rate_pct = got.rate_pct
    part.spec_acceptance_length_tokens = got.mean_length_tokens
    part.spec_acceptance_per_pos_pct = got.per_pos_text()
    return part


def earlier_levels(ctx: WorkContext, group: GroupKey, generator: str) -> list[LevelResult]:
    """The group's serving levels already measured ok in this run folder (a resumed run), as
    records `saturated` compares a new level with; none when the folder is not on this machine."""
    from harness.run import store

    if not (Path(ctx.run_dir) / store.POINTS).is_dir():
        return []
    rows, _ = store.read_rows(Path(ctx.run_dir))
    out = []
    for row in rows:
        if row.mode != "serving" or row.group != group.label or row.status != "ok":
            continue
        out.append(
            LevelResult(
                status="ok",
                mode="concurrency" if row.concurrency is not None else "request_rate",
                concurrency=row.concurrency,
                request_rate=row.request_rate,
                requests_sent=row.requests_sent or 0,
                requests_ok=row.requests_ok or 0,
                requests_failed=row.requests_failed or 0,
                output_tok_s=row.output_tok_s,
                e2e_ms_p50=row.e2e_ms_p50,
                slo_ttft_ms=row.slo_ttft_ms or 0.0,
                slo_tpot_ms=row.slo_tpot_ms or 0.0,
                generator=row.provenance.load_generator or generator,
            )
        )
    return out


def point_budget_s(point: Point, level: ServingLevel) -> float:
    """A generous expectation of a level's time: requests × (prompt + output) tokens at 10 tok/s
    (a slow CPU), or the arrivals' span for a rate level, whichever is larger."""
    tokens = level.requests * (level.prompt_tokens.mean + level.output_tokens.mean)
    span = level.requests / level.request_rate if level.request_rate else 0.0
    return max(tokens / 10.0 / max(point.batch, 1), span)


def record_start(path: Path, server: VllmServer, note: str | None = None) -> None:
    """Append one server start (pid, process group, port, log, a note) to server.json."""
    starts = json.loads(path.read_text()) if path.is_file() else []
    starts.append(
        {
            "pid": server.pid,
            "pgid": server.pgid,
            "host": server.host,
            "port": server.port,
            "log": str(server.log_path),
            "startup_s": server.startup_s,
            "argv": server.argv,
            "note": note,
        }
    )
    path.write_text(json.dumps(starts, indent=2) + "\n")


_CONTRACT: Runner = serve_points  # mypy checks the runner against harness.run.device.Runner
