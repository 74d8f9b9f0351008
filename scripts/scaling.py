"""Ray overhead and scaling on one machine: the same sweep on 1 and on 2 simulated worker nodes.

What it measures and its last line: harness.peers.scaling. Usage:
python scripts/scaling.py [--reps N] [--max-load L] [--max-wait S]
"""

from __future__ import annotations

import argparse

from harness.peers.scaling import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1, help="repetitions of (1 node, 2 nodes)")
    parser.add_argument("--max-load", type=float, default=2.5, help="wait while 1-min load > L")
    parser.add_argument("--max-wait", type=float, default=120.0, help="wait at most this, s")
    args = parser.parse_args()
    run(args.reps, args.max_load, args.max_wait)


if __name__ == "__main__":
    main()
