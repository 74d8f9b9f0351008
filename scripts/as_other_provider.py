"""Copy a run folder as if another node had measured it: every row's provenance (hostname, device
name, and optionally the corpus hash, also in the manifest) rewritten through harness.run.store.

For trying `harness site` (and its refusals) with one machine's runs; never for publishing.

Usage: python scripts/as_other_provider.py RUN OUT --hostname H --device D [--corpus-hash X]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.run import store  # noqa: E402


def rewrite(run: Path, **provenance: str) -> int:
    """Every readable row's provenance updated in place; the number of rows rewritten."""
    rows, bad = store.read_rows(run)
    if bad or not rows:
        raise SystemExit(f"{run}: {len(rows)} readable rows, {len(bad)} unreadable")
    for row in rows:
        update = row.provenance.model_copy(update=provenance)
        store.write_row(run, row.model_copy(update={"provenance": update}))
    if "corpus_hash" in provenance:
        manifest = store.read_manifest(run)
        for entry in manifest.get("runs", []):
            entry["corpus_hash"] = provenance["corpus_hash"]
        store.write_manifest(run, manifest)
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--corpus-hash")
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists")
    shutil.copytree(args.run, args.out, ignore=shutil.ignore_patterns("published"))
    fields = {"hostname": args.hostname, "device_name": args.device}
    if args.corpus_hash:
        fields["corpus_hash"] = args.corpus_hash
    print(f"{args.out}: {rewrite(args.out, **fields)} rows as {args.hostname} ({args.device})")


if __name__ == "__main__":
    main()
