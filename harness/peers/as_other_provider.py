"""A run folder as if another node had measured it (scripts/as_other_provider.py): every row's
provenance (hostname, device name, and optionally the corpus hash, also in the manifest)
rewritten through `harness.run.store`. For trying `harness site` (and its refusals) with one
machine's runs; never for publishing."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.run import store


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


def copy_as(run: Path, out: Path, **provenance: str) -> int:
    """`run` copied to `out` (which must not exist; its published/ left out), then rewritten;
    the number of rows rewritten."""
    if out.exists():
        raise SystemExit(f"{out} exists")
    shutil.copytree(run, out, ignore=shutil.ignore_patterns("published"))
    return rewrite(out, **provenance)
