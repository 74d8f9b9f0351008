"""vLLM's own benchmark and the harness on the same points, side by side, in one run here.

`make side-by-side-vllm`; what it measures and how: harness.peers.side_by_side_vllm.
Usage: python scripts/side_by_side_vllm.py [--out DIR] [--scenario YAML] [--reps N]
[--throughput-runs N] [--mp-point B:C | --mp-point none] [--max-load L] [--points B:C,...]
[--no-explain]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.peers.side_by_side_vllm.run import DEFAULT_OUT, DEFAULT_SCENARIO, Options, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    parser.add_argument("--reps", type=int, default=1, help="passes over the points")
    parser.add_argument("--throughput-runs", type=int, default=3)
    parser.add_argument("--mp-point", default="first", help="B:C, 'first' or 'none'")
    parser.add_argument("--max-load", type=float, default=1.5, help="wait while 1-min load > L")
    parser.add_argument("--max-wait", type=float, default=20.0, help="wait at most this, s")
    parser.add_argument(
        "--max-foreign", type=float, default=0.25,
        help="measure a point again when others used more than this share of the machine",
    )  # fmt: skip
    parser.add_argument("--retries", type=int, default=1, help="per point, at most")
    parser.add_argument(
        "--budget-s", type=float, default=240.0,
        help="no waiting and no retry started after this many seconds",
    )  # fmt: skip
    parser.add_argument(
        "--points", default=None,
        help="B:C,B:C: only these of the scenario's points (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--no-explain", dest="explain", action="store_false",
        help="skip the one-engine pass that measures why the figures differ (the 'why' column)",
    )  # fmt: skip
    run(Options(**vars(parser.parse_args())))


if __name__ == "__main__":
    main()
