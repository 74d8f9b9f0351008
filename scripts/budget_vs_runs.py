"""The plan's budget (defaults) against the H200 runs recorded in results/example/, per phase.

How: harness.peers.budget_vs_runs. Usage: python scripts/budget_vs_runs.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.peers.budget_vs_runs import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON")
    print(run(parser.parse_args().out))


if __name__ == "__main__":
    main()
