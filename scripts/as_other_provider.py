"""Copy a run folder as if another node had measured it: every row's provenance (hostname, device
name, and optionally the corpus hash, also in the manifest) rewritten through harness.run.store.

For trying `harness site` (and its refusals) with one machine's runs; never for publishing.

Usage: python scripts/as_other_provider.py RUN OUT --hostname H --device D [--corpus-hash X]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.peers.as_other_provider import copy_as, rewrite

__all__ = ["main", "rewrite"]  # rewrite: tests/cli/test_site_cli.py loads it from here


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--corpus-hash")
    args = parser.parse_args()
    fields = {"hostname": args.hostname, "device_name": args.device}
    if args.corpus_hash:
        fields["corpus_hash"] = args.corpus_hash
    rows = copy_as(args.run, args.out, **fields)
    print(f"{args.out}: {rows} rows as {args.hostname} ({args.device})")


if __name__ == "__main__":
    main()
