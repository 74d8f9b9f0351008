"""Ray overhead and scaling on one machine: the same sweep on 1 and on 2 simulated worker nodes.

A `ray.cluster_utils.Cluster` (real Ray, one raylet per node): a head with num_cpus=1 and no
accelerator resource (nothing can be placed there), plus 1 or 2 worker nodes advertising
``{"accel:cpu": 1}`` with labels ``{"vendor": "cpu"}`` and num_cpus=1 each, exactly what
`harness node start` advertises on a CPU machine. The sweep is run in this process with
``harness.run.session.run_sweep(scenario, cluster.address, out_dir, True, None)``: the tiny model,
quantization {none, bnb-int8, bnb-nf4, bnb-fp4} × batch {1} × context {128}; 32 new tokens;
repeats 3; quality max_windows 32, arc_items 20. Four groups of one point: the reference group
(none) runs first, alone; the three others then share the worker nodes.

Reported, per cluster size:
- sweep wall time: ``time.perf_counter()`` around ``run_sweep`` (Ray connect, actors, streaming,
  writing rows; the cluster's own start-up is printed separately);
- Ray overhead per point = (wall − Σ measured_s − Σ load_s per group) / points, in ms: what is
  neither measurement (timing + quality; the worker puts a group's quality time into its points'
  ``measured_s``) nor model loading — actor start-up, imports in the actor, placement, transfers;
- measured share = Σ measured_s / wall.
With 2 nodes the groups overlap, so these sums are no longer a partition of the wall time: the
overhead and share of the final line are the 1-node figures (the 2-node ones are printed above
it). Each actor sizes torch's thread pool from its CPU affinity (2 here), so two actors at once
on this 2-core machine compete for the same cores: the 2-node speed-up is bounded by that.

Last line: ``scaling: 1 node <s> s, 2 nodes <s> s, ratio <x>; ray overhead <ms> ms/point;
measured share <p> %`` (ratio = 2 nodes ÷ 1 node). Entry point: scripts/scaling.py [--reps N].
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.peers.machine import (
    CORES,
    load1,
    log,
    machine_busy_s,
    row_sums,
    run_rows,
    set_default_env,
    wait_for_quiet,
)

SCENARIO = """\
# written by scripts/scaling.py
name: scaling
models: [tiny-llama]
backend: [transformers]
quantization: [none, bnb-int8, bnb-nf4, bnb-fp4]
kv_cache_dtype: [auto]
batch: [1]
context: [128]
output_tokens: 32
targets: [cpu]
repeats: 3
reference: {quantization: none, kv_cache_dtype: auto}
quality: {window_tokens: 256, max_windows: 32, arc_items: 20}
"""


def sweep_figures(rows: Sequence[Mapping[str, Any]], wall: float) -> dict[str, Any]:
    """A sweep's figures from its rows (RUN/points/*.json) and wall time: Σ measured_s over the
    ok rows, load and quality once per group, the Ray overhead per point, the measured share,
    the nodes used, and per group (load, quality, measured, decode tok/s)."""
    sums = row_sums(rows)
    groups = sums.groups.values()
    return {
        "points": len(rows),
        "points_ok": len(sums.ok),
        "measured_s": sums.measured_s,
        "quality_s": sums.quality_s,
        "load_s": sums.load_s,
        "overhead_ms": 1e3 * (wall - sums.measured_s - sums.load_s) / max(len(rows), 1),
        "share": sums.measured_s / wall,
        "nodes_used": len({r["provenance"]["node_id"] for r in sums.ok}),
        "per_group": {
            g["quantization"]: (g["load_s"], g["quality_s"], g["measured_s"], g["decode_tok_s"])
            for g in groups
        },
    }


def sweep_on(
    workers: int, scenario: Path, out: Path, max_load: float, max_wait: float
) -> dict[str, Any]:
    """The sweep on a fresh cluster of `workers` CPU worker nodes (started and stopped here)."""
    import ray
    from ray.cluster_utils import Cluster

    from harness.run.session import run_sweep

    started = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(workers):
        cluster.add_node(num_cpus=1, resources={"accel:cpu": 1}, labels={"vendor": "cpu"})
    cluster.wait_for_nodes()
    cluster_s = time.perf_counter() - started
    try:
        wait_for_quiet(max_load, max_wait)
        la0, busy0 = load1(), machine_busy_s()
        started = time.perf_counter()
        outcome = run_sweep(scenario, cluster.address, out, True, None)
        wall = time.perf_counter() - started
        la1, busy = load1(), machine_busy_s() - busy0
        for line in outcome.lines:  # planned against took (harness.run.history)
            log(line)
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]  # Ray's test cluster is untyped
    rows = run_rows(out)
    for r in rows:
        if r["status"] != "ok":
            log(f"  ! {r['group']}: {r['status']} {r['error']}")
    return {
        "workers": workers,
        "cluster_s": cluster_s,
        "wall_s": wall,
        **sweep_figures(rows, wall),
        "load_before": la0,
        "load_after": la1,
        "machine_busy": busy / (wall * CORES),
    }


def describe(r: Mapping[str, Any]) -> str:
    lines = [
        f"  {r['workers']} worker node(s): sweep wall {r['wall_s']:.1f} s (cluster start "
        f"{r['cluster_s']:.1f} s, not counted); points ok {r['points_ok']}/{r['points']} on "
        f"{r['nodes_used']} node(s); Σ measured_s {r['measured_s']:.1f} s (quality "
        f"{r['quality_s']:.1f} s of it), Σ load_s {r['load_s']:.1f} s; overhead "
        f"{r['overhead_ms']:.0f} ms/point; measured share {100 * r['share']:.1f} %; "
        f"1-min load avg {r['load_before']:.2f} → {r['load_after']:.2f}; machine busy "
        f"{100 * r['machine_busy']:.0f} % of all cores (this sweep and anything else)"
    ]
    for quant, (load, quality, measured, decode) in r["per_group"].items():
        lines.append(
            f"      {quant:<9} load {load:5.2f} s  quality {quality:5.2f} s  "
            f"measured {measured:5.2f} s  decode {decode or float('nan'):6.1f} tok/s"
        )
    return "\n".join(lines)


def summary_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The 2-node figures, the definitions, and last the contract line."""

    def mean(workers: int, field: str) -> float:
        return statistics.fmean(r[field] for r in results if r["workers"] == workers)

    one, two = mean(1, "wall_s"), mean(2, "wall_s")
    return [
        f"2 nodes: overhead {mean(2, 'overhead_ms'):.0f} ms/point and measured share "
        f"{100 * mean(2, 'share'):.1f} % (sums over overlapping groups; not a partition of wall)",
        "definitions: ray overhead = (wall − Σ measured_s − Σ load_s per group) / points; "
        "measured share = Σ measured_s / wall; both from the 1-node sweep; "
        "ratio = 2 nodes / 1 node",
        f"scaling: 1 node {one:.1f} s, 2 nodes {two:.1f} s, ratio {two / one:.2f}; "
        f"ray overhead {mean(1, 'overhead_ms'):.0f} ms/point; "
        f"measured share {100 * mean(1, 'share'):.1f} %",
    ]


def run(reps: int, max_load: float, max_wait: float) -> list[dict[str, Any]]:
    """`reps` × (1 node, 2 nodes), each printed, then the summary; the sweeps' figures."""
    set_default_env()
    work = Path(tempfile.mkdtemp(prefix="scaling-"))
    scenario = work / "scaling.yaml"
    scenario.write_text(SCENARIO)
    log(f"work folder: {work}; cores: {CORES}; 1-min load avg {load1():.2f}")
    log(
        "note: each Ray actor sets torch's thread count from its CPU affinity "
        f"({len(os.sched_getaffinity(0))} cores here); with 2 worker nodes two actors run at once "
        "and compete for the same cores, so the 2-node run cannot be 2× faster on this machine."
    )
    results: list[dict[str, Any]] = []
    for rep in range(1, reps + 1):
        for workers in (1, 2):
            log(f"sweep with {workers} worker node(s), rep {rep} …")
            r = sweep_on(workers, scenario, work / f"run-{workers}-{rep}", max_load, max_wait)
            results.append(r)
            log(describe(r))
    for line in summary_lines(results):
        log(line)
    return results
