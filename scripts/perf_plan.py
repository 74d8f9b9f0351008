"""Speed of `harness plan` on a real-model grid, the whole command as a person runs it.

Prints `plan: <points> points (+<skipped> skipped) in <s> s (median of N runs, whole command)`;
the target (issue 2) is under 3 s without a GPU.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRID = ROOT / "scenarios" / "examples" / "llama-8b-h100.yaml"
RUNS = 3


def main() -> None:
    argv = [sys.executable, "-m", "harness.cli", "plan", str(GRID), "--gpu", "H100-SXM-80GB"]
    seconds: list[float] = []
    for _ in range(RUNS):
        started = time.perf_counter()
        done = subprocess.run([*argv, "--json"], cwd=ROOT, capture_output=True, check=True)
        seconds.append(time.perf_counter() - started)
    plan = json.loads(done.stdout)
    print(
        f"plan: {len(plan['points'])} points (+{len(plan['skipped'])} skipped) in "
        f"{statistics.median(seconds):.2f} s (median of {RUNS} runs, whole command)"
    )


if __name__ == "__main__":
    main()
