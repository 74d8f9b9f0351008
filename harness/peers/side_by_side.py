"""The same 12-point grid with optimum-benchmark 0.6.0 and with `harness run`, alternating.

Grid (both tools): the shipped tiny model (harness/data/tiny-llama) × quantization {none,
bnb-int8, bnb-nf4} × batch {1, 4} × context {128, 512}; 32 new tokens (min = max); 2 warm-ups;
5 timed iterations; memory and latency on. The harness also measures quality (perplexity with
its CI, paired ΔNLL / KL / top-1 against the reference, ARC-Easy) with its default quick settings
(window_tokens 256, max_windows 64, arc_items 100); optimum-benchmark measures no quality.

Order per repetition: optimum-benchmark with its process launcher, harness, optimum-benchmark
with its inline launcher, harness (``--reps N``, default 1). Each run is its own subprocess; its
wall time is ``time.perf_counter()`` around the subprocess (interpreter start, imports, Ray start
and exit included).

Measured work, the share of wall time it takes:
- optimum-benchmark: Σ over the 12 points of the report's ``generate.latency.total`` (its 5 timed
  ``generate()`` calls), ÷ wall — the method of ../shared/peers/optimum-benchmark/run_grid.py and
  analyze.py (which divide by the grid loop; the loop share is printed too).
- harness: Σ ``measured_s`` over the rows ÷ wall. A row's ``measured_s`` is the point's time
  inside measurement (memory passes, warm-ups, timed repeats) plus its share of the group's
  quality time (the worker spreads a group's ``quality_s`` over its points). Model loading is not
  measured work: Σ ``load_s`` once per group is printed separately. For a like-for-like figure the
  harness's timed repeats alone (Σ repeats_done × e2e_ms_p50) are printed as well.

optimum-benchmark's own venv and model copy: `harness.peers.optimum`.

The last line printed is the contract:

    side-by-side: optimum-benchmark process <s> s, inline <s> s, harness <s> s;
    ratio process/harness <x>, inline/harness <y>; harness measured share <p> %

(on one line; harness figures are means over its runs). Entry point: scripts/side_by_side.py
[--reps N] [--max-load L] [--keep DIR].
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.peers import optimum
from harness.peers.machine import (
    CORES,
    load1,
    log,
    row_sums,
    run_rows,
    set_default_env,
    timed,
    wait_for_quiet,
)

QUANTS = ["none", "bnb-int8", "bnb-nf4"]
BATCHES = [1, 4]
CONTEXTS = [128, 512]
NEW_TOKENS = 32
WARMUPS = 2
ITERATIONS = 5
GRID = {
    "quants": QUANTS,
    "batches": BATCHES,
    "contexts": CONTEXTS,
    "new_tokens": NEW_TOKENS,
    "warmups": WARMUPS,
    "iterations": ITERATIONS,
}

SCENARIO = f"""\
# written by scripts/side_by_side.py: the optimum-benchmark grid, quality on (quick defaults)
name: side-by-side
models: [tiny-llama]
backend: [transformers]
quantization: [{", ".join(QUANTS)}]
kv_cache_dtype: [auto]
batch: [{", ".join(map(str, BATCHES))}]
context: [{", ".join(map(str, CONTEXTS))}]
output_tokens: {NEW_TOKENS}
targets: [cpu]
repeats: {ITERATIONS}
warmups: {WARMUPS}
reference: {{quantization: none, kv_cache_dtype: auto}}
quality: {{window_tokens: 256, max_windows: 64, arc_items: 100}}
"""


def harness_figures(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A `harness run`'s figures from its rows (RUN/points/*.json): Σ measured_s over the ok
    rows, quality and load time once per group, the timed repeats alone (Σ repeats_done ×
    e2e_ms_p50), decode tok/s per point and perplexity per quantization."""
    sums = row_sums(rows)
    return {
        "points_ok": len(sums.ok),
        "points": len(rows),
        "measured_s": sums.measured_s,
        "quality_s": sums.quality_s,
        "timing_s": sums.measured_s - sums.quality_s,
        "repeats_s": sum(
            (r["repeats_done"] or 0) * (r["e2e_ms_p50"] or 0.0) / 1e3 for r in sums.ok
        ),
        "load_s": sums.load_s,
        "decode": {
            f"{r['quantization']}_bs{r['batch']}_seq{r['context']}": r["decode_tok_s"]
            for r in sums.ok
        },
        "ppl": {g["quantization"]: g["ppl"] for g in sums.groups.values()},
    }


def run_harness(scenario: Path, work: Path, tag: str) -> dict[str, Any]:
    """One timed `harness run` of the grid in its own subprocess; its figures."""
    out = work / tag
    argv = [sys.executable, "-m", "harness.cli", "run", str(scenario), "--out", str(out)]
    la0 = load1()
    wall, code, foreign = timed(argv, work / f"{tag}.log", tag)
    la1 = load1()
    if code != 0:
        logfile = work / f"{tag}.log"
        optimum.fail(f"harness run exited {code}; log {logfile}:", logfile)
    rows = run_rows(out)
    manifest = json.loads((out / "manifest.json").read_text())
    for r in rows:
        if r["status"] != "ok":
            log(f"  ! {tag} {r['group']} b{r['batch']} c{r['context']}: {r['status']} {r['error']}")
    return {
        "tool": "harness",
        "tag": tag,
        "wall_s": wall,
        **harness_figures(rows),
        "sweep_s": manifest["runs"][-1].get("wall_s"),
        "load_before": la0,
        "load_after": la1,
        "foreign_cpu_s": foreign,
    }


def describe(r: Mapping[str, Any], cores: int = CORES) -> str:
    """One run's figures as the indented lines printed after it."""
    wall = r["wall_s"]
    head = (
        f"  {r['tag']:<16} wall {wall:7.1f} s  points ok {r['points_ok']}/{r['points']}  "
        f"measured {r['measured_s']:6.1f} s ({100 * r['measured_s'] / wall:4.1f} %)  "
        f"load {r['load_s']:5.1f} s  1-min load avg {r['load_before']:.2f} → {r['load_after']:.2f}"
        f"\n{'':20}foreign CPU ≈ {r['foreign_cpu_s']:.0f} CPU-s "
        f"({100 * r['foreign_cpu_s'] / (wall * cores):.0f} % of the machine)"
    )
    if r["tool"] == "harness":
        rest = wall - r["measured_s"] - r["load_s"]
        sweep = r["sweep_s"] or float("nan")
        head += (
            f"\n{'':20}measured = timing {r['timing_s']:.1f} s + quality {r['quality_s']:.1f} s; "
            f"timed repeats alone {r['repeats_s']:.1f} s ({100 * r['repeats_s'] / wall:.1f} %, "
            f"optimum-benchmark's definition); rest {rest:.1f} s (process start, imports, Ray, "
            f"actors, plan; sweep inside the process {sweep:.1f} s)"
        )
    else:
        head += (
            f"\n{'':20}grid loop {r['loop_s']:.1f} s (measured share of loop "
            f"{100 * r['measured_s'] / r['loop_s']:.1f} %); imports {r['import_s']:.1f} s; "
            f"rest {wall - r['measured_s'] - r['load_s']:.1f} s"
        )
    return head


def summary_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """What is printed after the runs: decode rates of each tool's first run, each run's measured
    share, the pairs' wall-time ratios, and last the contract line."""

    def mean(tool: str, field: str = "wall_s") -> float:
        return statistics.fmean(r[field] for r in results if r["tool"] == tool)

    process, inline, harness = mean("ob-process"), mean("ob-inline"), mean("harness")
    share = statistics.fmean(
        r["measured_s"] / r["wall_s"] for r in results if r["tool"] == "harness"
    )
    lines = ["", "decode tok/s (batch aggregate), first run of each tool:"]
    firsts = {
        t: next(r for r in results if r["tool"] == t)
        for t in ("ob-process", "ob-inline", "harness")
    }
    for name in firsts["harness"]["decode"]:
        cells = [firsts[t]["decode"].get(name) for t in firsts]
        lines.append(f"  {name:<20}" + "".join(f"{c:10.1f}" if c else f"{'-':>10}" for c in cells)
                     + "   (ob-process, ob-inline, harness)")  # fmt: skip
    lines.append(f"harness perplexity per quantization: {firsts['harness']['ppl']}")
    for r in results:
        if r["tool"] == "harness":
            lines.append(f"{r['tag']}: measured share {100 * r['measured_s'] / r['wall_s']:.1f} % "
                         f"(Σ measured_s {r['measured_s']:.1f} s / wall {r['wall_s']:.1f} s), "
                         f"load {r['load_s']:.1f} s")  # fmt: skip
    for r in results:
        if r["tool"] != "harness":
            share_ob = 100 * r["measured_s"] / r["wall_s"]
            lines.append(f"{r['tag']}: measured share {share_ob:.1f} % (Σ generate.latency.total "
                         f"{r['measured_s']:.1f} s / wall {r['wall_s']:.1f} s)")  # fmt: skip
    for ob_run, h_run in zip(results[0::2], results[1::2], strict=True):
        lines.append(f"pair {ob_run['tag']} / {h_run['tag']}: "
                     f"{ob_run['wall_s'] / h_run['wall_s']:.2f}")  # fmt: skip
    lines.append(f"harness wall: mean of {sum(r['tool'] == 'harness' for r in results)} runs")
    lines.append(
        f"side-by-side: optimum-benchmark process {process:.1f} s, inline {inline:.1f} s, "
        f"harness {harness:.1f} s; ratio process/harness {process / harness:.2f}, "
        f"inline/harness {inline / harness:.2f}; harness measured share {100 * share:.1f} %"
    )
    return lines


def run(reps: int, max_load: float, max_wait: float, keep: Path | None) -> list[dict[str, Any]]:
    """The whole comparison: `reps` cycles of (optimum-benchmark process, harness,
    optimum-benchmark inline, harness), each started when the machine is quiet; prints each run
    and then the summary; returns the runs' figures."""
    set_default_env()
    optimum.ensure_ob_venv()
    model = optimum.ob_model()
    work = keep or Path(tempfile.mkdtemp(prefix="side-by-side-"))
    work.mkdir(parents=True, exist_ok=True)
    scenario = work / "side-by-side.yaml"
    scenario.write_text(SCENARIO)
    log(f"work folder: {work}; cores: {CORES}; 1-min load avg {load1():.2f}")
    log(
        f"grid: {len(QUANTS) * len(BATCHES) * len(CONTEXTS)} points = {QUANTS} × batch "
        f"{BATCHES} × context {CONTEXTS}; {NEW_TOKENS} new tokens; {WARMUPS} warm-ups; "
        f"{ITERATIONS} iterations"
    )
    results: list[dict[str, Any]] = []
    for rep in range(1, reps + 1):
        cycle = [
            ("process", f"ob-process-{rep}"),
            ("harness", f"harness-{rep}a"),
            ("inline", f"ob-inline-{rep}"),
            ("harness", f"harness-{rep}b"),
        ]
        for kind, tag in cycle:
            wait_for_quiet(max_load, max_wait)
            log(f"run {tag} …")
            if kind == "harness":
                r = run_harness(scenario, work, tag)
            else:
                r = optimum.run_ob(kind, model, work, tag, GRID)
            results.append(r)
            log(describe(r))
    for line in summary_lines(results):
        log(line)
    return results
