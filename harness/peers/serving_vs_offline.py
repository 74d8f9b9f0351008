"""Serving at concurrency B against offline at batch B, same configuration, on this machine.

Runs `harness measure` on the scenario (resumable: rows already measured ok are kept), whose
serving block sends fixed-length requests of the offline points' shape (prompt = context,
output = output_tokens, sd 0), then pairs each closed-loop serving level (concurrency B) with the
offline point at batch B and prints, per B:

- offline decode_tok_s: B × (O − 1) / (e2e − TTFT) of one batch, decode steps only;
- offline e2e output tok/s: B × O / e2e (prefill included: `generated_tokens` / e2e);
- serving output_tok_s: output tokens of every successful request / the level's wall time;
- the ratios serving ÷ decode and serving ÷ e2e.

Which should be lower, and why: serving. The offline decode figure times only the decode steps
of B sequences that start together and run in lockstep. A serving level at concurrency B also
spends its wall time on each request's prefill (interleaved with other requests' decode steps by
vLLM's scheduler, so the running batch is often below B), the HTTP round trip, tokenization and
detokenization in the API server, the gap between a request finishing and its client's next
one, and the ramp-up and drain at the level's start and end when fewer than B requests are in
flight. The offline end-to-end rate includes prefill, so it is the closer comparator; the stated
tolerance (``TOLERANCE``): serving output_tok_s ≥ 50 % of offline decode tok/s and ≤ 105 % of it
(above would mean the server decodes faster than the engine alone: a measurement error).

Same compute on both sides: vLLM's server runs its CPU engine in its own process bound to all
cores but one (the one left is reserved for the API server and scheduler); the in-process offline
engine takes torch's threads, so it is given as many (``--threads``, default cores − 1; on this
2-core machine 1). With two unbound threads on a machine that other processes load, the offline
engine's OpenMP team waits at every barrier for a preempted thread, and it ran 10-20× slower than
the single bound thread of the server in the same minutes (see the README).

Writes DIR/serving_vs_offline.json and prints a Markdown table (the README's is one such run).
Entry point: scripts/serving_vs_offline.py (`make serving-vs-offline`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import modes
from harness.peers.machine import REPO

DEFAULT_SCENARIO = REPO / "scenarios" / "serving.yaml"
DEFAULT_OUT = REPO / "results" / "serving-vs-offline"
TOLERANCE = (0.50, 1.05)  # serving output_tok_s ÷ offline decode_tok_s, expected inside


def engine_threads() -> int:
    """The cores vLLM's server gives its CPU engine: all but one, reserved for the API process
    (vllm.utils.ompmultiprocessing); the offline engine gets as many, so both compute alike."""
    return max(1, (os.cpu_count() or 1) - 1)


def measure(scenario: Path, out: Path, threads: int) -> float:
    """`harness measure` on the scenario into `out` (resumed), the offline engine on `threads`
    torch threads; its wall time."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["OMP_NUM_THREADS"] = str(threads)  # the in-process offline engine's torch threads
    started = time.perf_counter()
    argv = [sys.executable, "-m", "harness.cli", "measure", str(scenario), "--out", str(out)]
    proc = subprocess.run(argv, env=env, check=False)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"harness measure failed with exit code {proc.returncode}")
    return time.perf_counter() - started


def pairs(out: Path) -> list[dict[str, Any]]:
    """Each serving level c=B of the run beside the ok offline point at batch B of its group,
    with both rates and their ratios (None where a side has no figure)."""
    from harness.run import store

    rows, _ = store.read_rows(out)
    in_process = modes.without_payload()  # the offline mode: a point without a payload
    offline = {(r.group, r.batch): r for r in rows if r.mode == in_process and r.status == "ok"}
    table = []
    for r in sorted(rows, key=lambda r: (r.group or "", r.concurrency or 0)):
        if not modes.get(r.mode).facts.levels or r.concurrency is None:  # a serving load level
            continue
        base = offline.get((r.group, r.concurrency))
        if base is None:
            continue
        e2e_out = (
            base.generated_tokens / (base.e2e_ms_p50 / 1000.0)
            if base.generated_tokens and base.e2e_ms_p50
            else None
        )
        served = r.output_tok_s if r.status == "ok" else None
        table.append(
            {
                "group": r.group,
                "B": r.concurrency,
                "prompt_tokens": base.context,
                "output_tokens": base.output_tokens,
                "offline_decode_tok_s": base.decode_tok_s,
                "offline_e2e_output_tok_s": e2e_out,
                "serving_output_tok_s": served,
                "serving_status": r.status,
                "serving_ttft_ms_p50": r.ttft_ms_p50,
                "serving_tpot_ms_p50": r.tpot_ms_p50,
                "offline_tpot_ms_p50": base.tpot_ms_p50,
                "ratio_to_decode": (served / base.decode_tok_s)
                if served and base.decode_tok_s
                else None,
                "ratio_to_e2e": (served / e2e_out) if served and e2e_out else None,
                "load_average": r.provenance.load_average,
            }
        )
    return table


def fmt(value: Any, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def markdown(table: list[dict[str, Any]]) -> str:
    low, high = TOLERANCE
    lines = [
        "| B | offline decode tok/s | offline e2e output tok/s | serving output tok/s (c=B) "
        "| serving ÷ decode | serving ÷ e2e | TPOT p50 ms offline / serving | within "
        f"[{low:.2f}, {high:.2f}] |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in table:
        ratio = t["ratio_to_decode"]
        inside = "" if ratio is None else ("yes" if low <= ratio <= high else "no")
        lines.append(
            f"| {t['B']} | {fmt(t['offline_decode_tok_s'])} | {fmt(t['offline_e2e_output_tok_s'])} "
            f"| {fmt(t['serving_output_tok_s'])} | {fmt(ratio, 2)} | {fmt(t['ratio_to_e2e'], 2)} "
            f"| {fmt(t['offline_tpot_ms_p50'])} / {fmt(t['serving_tpot_ms_p50'])} | {inside} |"
        )
    return "\n".join(lines)


def run(scenario: Path, out: Path, threads: int, no_measure: bool) -> dict[str, Any]:
    """Measure (unless `no_measure`), pair, write DIR/serving_vs_offline.json, print the table;
    the report. Exits with a message when the run has no (batch B, concurrency B) pair."""
    wall = None if no_measure else measure(scenario, out, threads)
    table = pairs(out)
    if not table:
        raise SystemExit(f"no (offline batch B, serving concurrency B) pair in {out}")
    report = {
        "scenario": str(scenario),
        "wall_s": wall,
        "offline_threads": threads,
        "tolerance": TOLERANCE,
        "pairs": table,
    }
    path = out / "serving_vs_offline.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(table))
    print(
        "\nexpected: serving lower than offline decode (prefill, HTTP, (de)tokenization, client "
        "gaps and ramp-up/drain are in its wall time, not in the decode steps'); "
        f"tolerance: serving ÷ decode in [{TOLERANCE[0]:.2f}, {TOLERANCE[1]:.2f}]"
    )
    print(f"written: {path}" + (f" (measured in {wall:.0f} s)" if wall else ""))
    return report
