"""The same 12-point grid with optimum-benchmark 0.6.0 and with `harness run`, alternating.

`make side-by-side`; what it measures and how: harness.peers.side_by_side (optimum-benchmark's
venv and model: harness.peers.optimum). Usage:
python scripts/side_by_side.py [--reps N] [--max-load L] [--keep DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.peers.side_by_side import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1, help="repetitions of the 4-run cycle")
    parser.add_argument("--max-load", type=float, default=2.5, help="wait while 1-min load > L")
    parser.add_argument("--max-wait", type=float, default=120.0, help="wait at most this, s")
    parser.add_argument("--keep", type=Path, default=None, help="keep run folders here")
    args = parser.parse_args()
    run(args.reps, args.max_load, args.max_wait, args.keep)


if __name__ == "__main__":
    main()
