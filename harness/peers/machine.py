"""What the machine did while a tool measured: load average, busy CPU, the share others used.

The comparisons in `harness.peers` run on shared, noisy machines; each timed run is framed by
these figures so that a run which shared its cores with something else can be seen (and retried).
Also the environment every tool's subprocess gets (offline hub, no telemetry), the log line, how
a tool stops on an error, and the rows a timed `harness run` wrote with their sums. Linux only
(/proc); stdlib only.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

# The repository (the benchmarks read scenarios/ and tariffs/ and write results/ under it).
REPO = Path(__file__).resolve().parents[2]
# As the Makefile exports them: every tool's subprocess runs offline and quiet.
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "GPTQMODEL_CPU_WORKERS": "2",
    "RAY_USAGE_STATS_ENABLED": "0",
    "TOKENIZERS_PARALLELISM": "false",
}
CORES = os.cpu_count() or 1
MARKER = "HARNESS_SIDE_BY_SIDE_RUN"  # marks every process of one timed run (`RunCpu`)


def log(message: str) -> None:
    print(message, flush=True)


def fail(tool: str, message: str, logfile: Path | None = None, tail: int = 3000) -> NoReturn:
    """`<tool>: error: <message>` and the last `tail` characters of `logfile` on stderr; exit 2."""
    text = ""
    if logfile is not None and logfile.is_file():
        text = "\n" + logfile.read_text(errors="replace")[-tail:]
    print(f"{tool}: error: {message}{text}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def set_default_env() -> None:
    """`ENV` into this process's environment, where not already set."""
    for key, value in ENV.items():
        os.environ.setdefault(key, value)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment, `ENV` where unset, then `extra`."""
    env = dict(os.environ)
    for key, value in ENV.items():
        env.setdefault(key, value)
    env.update(extra or {})
    return env


def load1() -> float:
    return os.getloadavg()[0]


def wait_for_quiet(max_load: float, max_wait_s: float) -> None:
    """Start a timed run only when the machine is quiet (1-min load ≤ max_load), or give up."""
    deadline = time.monotonic() + max_wait_s
    while load1() > max_load and time.monotonic() < deadline:
        log(f"  waiting: 1-min load average {load1():.2f} > {max_load}")
        time.sleep(15)


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine, all cores (/proc/stat)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds of this process and its reaped children."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def children_cpu_s() -> float:
    """CPU seconds of this process's reaped children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def foreign_share(busy_cpu_s: float, own_cpu_s: float, wall_s: float, cores: int) -> float:
    """Share of the machine that something else used meanwhile: (busy − own) / (wall × cores),
    clipped to [0, 1]. An estimate (the own figure misses what the OS charges elsewhere)."""
    if wall_s <= 0 or cores < 1:
        return 0.0
    return min(max(busy_cpu_s - own_cpu_s, 0.0) / (wall_s * cores), 1.0)


class RunCpu:
    """CPU seconds of every process of one run, found by an environment marker the run's
    processes inherit (Ray's raylet and workers too, which no parent of ours reaps), sampled
    every 0.5 s from a side thread of this (idle) process."""

    def __init__(self, marker: str) -> None:
        self.marker = f"{MARKER}={marker}".encode()
        self.seen: dict[str, bool] = {}
        self.cpu: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while not self.stop.wait(0.5):
            self.scan()

    def scan(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ident = f"{pid}:{fields[19]}"  # pid + start time: a reused pid is a new process
                if ident not in self.seen:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        self.seen[ident] = self.marker in f.read().split(b"\0")
                if self.seen[ident]:
                    self.cpu[ident] = (int(fields[11]) + int(fields[12])) / tick
            except (OSError, IndexError, ValueError):
                continue

    def __enter__(self) -> RunCpu:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    @property
    def total_s(self) -> float:
        return sum(self.cpu.values())


def timed(argv: list[str], logfile: Path, tag: str) -> tuple[float, int, float]:
    """Wall time of one subprocess, its exit code, and the CPU seconds used meanwhile by anything
    else: machine busy time (/proc/stat) − this run's CPU (the larger of its reaped process
    tree's rusage and the marker-sampled total, which misses < 0.5 s per process and processes
    that live < 0.5 s). An estimate, meant to flag a run that shared the cores with something
    else."""
    env = child_env({MARKER: tag})
    with logfile.open("w") as out, RunCpu(tag) as sampled:
        busy0, own0 = machine_busy_s(), children_cpu_s()
        started = time.perf_counter()
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
        wall = time.perf_counter() - started
        busy, own = machine_busy_s() - busy0, children_cpu_s() - own0
    return wall, code, max(busy - max(own, sampled.total_s), 0.0)


def run_rows(out: Path) -> list[dict[str, Any]]:
    """The rows a `harness run` wrote under `out` (OUT/points/*.json), in file-name order."""
    return [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]


@dataclass(frozen=True)
class RowSums:
    """A run's ok rows, the first ok row of each group (a group loads and scores its quality
    once: its load_s and quality_s are on every row), Σ measured_s over the ok rows, and Σ
    load_s and Σ quality_s over the groups."""

    ok: list[Mapping[str, Any]]
    groups: dict[str, Mapping[str, Any]]
    measured_s: float
    load_s: float
    quality_s: float


def row_sums(rows: Sequence[Mapping[str, Any]]) -> RowSums:
    ok = [r for r in rows if r["status"] == "ok"]
    groups: dict[str, Mapping[str, Any]] = {}
    for r in ok:
        groups.setdefault(r["group"], r)
    return RowSums(
        ok=ok,
        groups=groups,
        measured_s=sum(r["measured_s"] or 0.0 for r in ok),
        load_s=sum(g["load_s"] or 0.0 for g in groups.values()),
        quality_s=sum(g["quality_s"] or 0.0 for g in groups.values()),
    )
