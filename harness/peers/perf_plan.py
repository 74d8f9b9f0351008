"""Speed of `harness plan` on a real-model grid, the whole command as a person runs it (`make
perf`, scripts/perf_plan.py): the target (issue 2) is under 3 s without a GPU."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness.peers.machine import REPO

GRID = REPO / "scenarios" / "examples" / "llama-8b-h100.yaml"
GPU = "H100-SXM-80GB"
RUNS = 3


def time_plan(grid: Path = GRID, gpu: str = GPU, runs: int = RUNS) -> str:
    """`harness plan GRID --gpu GPU --json` run `runs` times, each a fresh process; the line
    `plan: <points> points (+<skipped> skipped) in <s> s (median of N runs, whole command)`."""
    argv = [sys.executable, "-m", "harness.cli", "plan", str(grid), "--gpu", gpu]
    seconds: list[float] = []
    stdout = b""
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run([*argv, "--json"], cwd=REPO, capture_output=True, check=True)
        seconds.append(time.perf_counter() - started)
        stdout = done.stdout
    plan = json.loads(stdout)
    return (
        f"plan: {len(plan['points'])} points (+{len(plan['skipped'])} skipped) in "
        f"{statistics.median(seconds):.2f} s (median of {runs} runs, whole command)"
    )
