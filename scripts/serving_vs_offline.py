"""Serving at concurrency B against offline at batch B, same configuration, on this machine.

    python scripts/serving_vs_offline.py [--scenario scenarios/serving.yaml] [--out DIR]

`make serving-vs-offline`; what is compared, and the tolerance: harness.peers.serving_vs_offline.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.peers.serving_vs_offline import DEFAULT_OUT, DEFAULT_SCENARIO, engine_threads, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-measure", action="store_true", help="only compare existing rows")
    parser.add_argument(
        "--threads", type=int, default=engine_threads(),
        help="offline engine threads (default: the server engine's cores, all but one)",
    )  # fmt: skip
    args = parser.parse_args()
    run(args.scenario, args.out, args.threads, args.no_measure)


if __name__ == "__main__":
    main()
