"""What each engine (backend) is to the planner and the budget, declared once: one row per engine,
beside the format tables (harness.spec.capabilities).

A row says what a group of that engine costs before its first point: the bytes its process holds
on the CPU, what its first forward leaves there, the seconds its model load and engine start take
(before any history calibrates them, harness.run.history), the floors of a decode step and of a
scored quality unit, and whether it starts processes of its own. The planner (harness.plan), the
budget (harness.budget) and the process path (harness.modes.forks_from_host) read these rows; an
engine's module (harness.backends) and one row here make a backend.

The device kinds of the seconds: ``cpu`` and ``cuda``; ``rocm`` has no figures of its own yet and
reads cuda's (``device_kind``).

API: ``ENGINES[name] -> Engine``, ``engine(name)``, ``device_kind(target)``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness.units import MIB

DeviceKind = str  # "cpu" | "cuda": the kinds a default was measured on


class PerDevice(BaseModel):
    """A figure per device kind the defaults were measured on (seconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cpu: float
    cuda: float

    def on(self, kind: DeviceKind) -> float:
        value: float = getattr(self, kind)
        return value


class Engine(BaseModel):
    """One engine's planning facts (the module docstring); each figure's source is its row's
    comment in ``ENGINES``.

    cpu_process_bytes: an inference group's process on the CPU (RSS), less the weights and the KV
      pool (harness.plan.runtime_context_bytes).
    cpu_first_forward_bytes: what its first forward leaves in a CPU process, the heap trimmed
      after the quality pass (harness.plan.first_forward_bytes); GPUs count tensors only.
    start_s: its model load's engine start, per device kind, before the weights' own seconds.
    step_floor_s: the seconds one decode step takes at least (any batch): per-call latency bounds
      a small model rather than the roofline.
    quality_unit_s: the seconds one scored quality unit (a window) takes at least.
    own_processes: it starts processes of its own (vLLM: its engine core): a group of it never
      runs in a child forked from a node's host (harness.run.host), where forking a process that
      imported it is not proven safe, but in a fresh process.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    cpu_process_bytes: float
    cpu_first_forward_bytes: float
    start_s: PerDevice
    step_floor_s: PerDevice
    quality_unit_s: PerDevice
    own_processes: bool = False


# Sources (this 2-core CPU and an H200):
# - cpu_process_bytes, measured here on 2026-12-01 with the tiny model (2 cores, other jobs
#   running), three ways: `make bench` at 7747e86 (results/bench-cpu: a fresh Ray actor per
#   group), `make bench` on the working tree of 2026-12-01 15:05 (transformers groups in a child
#   forked by the node's host, harness.run.host; vLLM groups in a fresh actor), both as
#   peak_mib_load less the plan's weights and the 64 MiB pool; and each group loaded alone in a
#   fresh process, RSS read after every step (the memory helper's probe, README "Memory"):
#   - transformers 5.19: Python and the harness 51 MiB, + torch and transformers 262, + the
#     model's modules at load 405; a fresh Ray actor 478, a forked child 374 (shared library
#     pages the child has not touched are not in its RSS): the forked child is planned; a group
#     that falls back to a fresh process measures about 105 MiB more at load;
#   - vLLM 0.32 (always a fresh actor): its import + 109 (371), its engine start (inductor,
#     OpenMP threads, buffers) and the actor 750-802 over the three benches, 796-810 in a fourth
#     on a quiet machine (16:00, with the heap trimmed between points): 800 is planned.
# - cpu_first_forward_bytes (harness.run.device.trim_heap; without the trim, 100-580 MiB of the
#   quality pass's freed pages stayed, different in every run): peak_mib_prefill - peak_mib_load
#   at the smallest point (batch 1, context 128) of `make bench`, 2026-12-01 16:00, quiet
#   machine: transformers 76 (fp32), 75 (bnb-int8), 66 (bnb-nf4) MiB; vLLM -13 to -4 (its load
#   peak, the engine's profiling run, is above its points'): 0.
# - start_s, cpu: `make bench` (scenarios/default.yaml, 6 groups) on this 2-core CPU, quiet,
#   2026-12-01 15:57 (transformers groups forked from the node's host, harness.run.host; vLLM
#   groups in fresh actors): load_s transformers 0.10-0.25 s (the host imported the engine; a
#   fresh process's first load, imports included, took 3.5-3.7 s at 09:48, results/bench-cpu,
#   and `harness measure` pays that once for its first group), vLLM 0.32 15.9-21.6 s.
#   cuda: results/example/h200-2026-11-29 (`harness run`, two transformers groups in fresh Ray
#   actors): load_s 7.0 and 8.2 s; results/example/h200-2026-11-30: vLLM 0.26's engine start
#   with CUDA graphs, 51.9 s (tiny model, with 16 windows scored) and 51.2 s (8B architecture).
# - step_floor_s and quality_unit_s, from the same runs' rows (timing = measured_s less the
#   quality share):
#   - cpu: transformers 2.3-14.1 ms a step (median 5.8, 12 rows), vLLM 1.8-9.7 ms (median 3.4);
#     quality (15:57, ARC scored with a shared prefix) 64 windows + 100 ARC items a group:
#     transformers 9.5 s over three groups (19.4 ms a unit), vLLM 22.0 s (44.6 ms a unit);
#   - cuda: transformers on the H200 (38 rows, 9 groups) 3.7-16.8 ms a step (median 7.8),
#     quality 13.4-52.5 ms a unit (median 26; before the shared-prefix ARC scoring, and vLLM's
#     assumed the same); vLLM (CUDA graphs): no small-model step recorded, the 8B
#     architecture's batch-1 step was 5.0 ms (bandwidth-bound), so 3 ms is assumed.
ENGINES: dict[str, Engine] = {
    e.name: e
    for e in [
        Engine(
            name="transformers",
            cpu_process_bytes=375 * MIB,
            cpu_first_forward_bytes=75 * MIB,
            start_s=PerDevice(cpu=0.2, cuda=7.6),
            step_floor_s=PerDevice(cpu=0.0058, cuda=0.0078),
            quality_unit_s=PerDevice(cpu=0.0194, cuda=0.026),
        ),
        Engine(
            name="vllm",
            cpu_process_bytes=800 * MIB,
            cpu_first_forward_bytes=0.0,
            start_s=PerDevice(cpu=18.8, cuda=51.0),
            step_floor_s=PerDevice(cpu=0.0034, cuda=0.003),
            quality_unit_s=PerDevice(cpu=0.0446, cuda=0.026),
            own_processes=True,
        ),
    ]
}


def engine(name: str) -> Engine:
    """The engine's row; KeyError naming the known engines."""
    try:
        return ENGINES[name]
    except KeyError:
        raise KeyError(
            f"no engine {name!r} in harness.spec.engines.ENGINES: {list(ENGINES)}"
        ) from None


def device_kind(target: str) -> DeviceKind:
    """The device kind a default was measured on: rocm has none of its own yet (cuda's)."""
    return "cuda" if target == "rocm" else target
