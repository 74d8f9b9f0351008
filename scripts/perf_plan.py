"""Speed of `harness plan` on a real-model grid, the whole command as a person runs it.

Prints `plan: <points> points (+<skipped> skipped) in <s> s (median of N runs, whole command)`;
the target (issue 2) is under 3 s without a GPU. How: harness.peers.perf_plan.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.peers.perf_plan import GPU, GRID, RUNS, time_plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=Path, default=GRID, help="the scenario to plan")
    parser.add_argument("--gpu", default=GPU)
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()
    print(time_plan(args.grid, args.gpu, args.runs))


if __name__ == "__main__":
    main()
