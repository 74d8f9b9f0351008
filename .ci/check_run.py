"""Check a run folder that .ci/images.sh produced in a container (run with the host's venv).

    python .ci/check_run.py RUN_DIR SCENARIO [--all-ok] [--node-loss] [--image NAME]

Always: the manifest reads as a harness manifest and its last run ended; every point the scenario
plans has exactly one row (none lost, none extra, every file readable); every row carries the
image's name and a git SHA; where vLLM measured, the manifest names its version (packages.vllm).
--all-ok: every measured row is `ok`. --node-loss: every row is `ok` or
`node_lost`, the worker (hostname "worker") measured at least one, and the manifest records the
failure that made the driver retry or give up. One line per check run; exit 1 on the first failure.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import NoReturn

from harness import corpus
from harness.run import store, sweep


def fail(text: str) -> NoReturn:
    print(f"check_run: FAIL: {text}", file=sys.stderr)
    raise SystemExit(1)


def check(run_dir: Path, scenario: Path, *, all_ok: bool, node_loss: bool, image: str) -> str:
    manifest = store.read_manifest(run_dir)
    runs = manifest.get("runs")
    if not runs:
        fail(f"{run_dir}: no manifest runs")
    last = runs[-1]
    if "ended" not in last:
        fail(f"{run_dir}: the manifest's last run never ended")
    plan = sweep.prepare(scenario, run_dir)
    corpus_hash = corpus.corpus_hash()
    planned = [p.key(corpus_hash) for w in plan.work for p in w.points]
    planned += [p.key(corpus_hash) for p, _ in plan.skipped]
    rows, bad = store.read_rows(run_dir)  # two files of one key raise here
    if bad:
        fail(f"unreadable rows: {bad}")
    keys = Counter(r.key for r in rows)
    if sorted(keys) != sorted(planned) or len(planned) != len(set(planned)):
        lost = sorted(set(planned) - set(keys))
        extra = sorted(set(keys) - set(planned))
        fail(f"rows do not match the plan: lost {lost}, extra {extra}")
    if last.get("points") != sum(len(w.points) for w in plan.work):
        fail(f"manifest points {last.get('points')} != planned {len(planned)}")
    measured = [r for r in rows if r.status != "skipped"]
    allowed = {"ok"} if all_ok else {"ok", "node_lost"}
    wrong = [(r.key, r.status, r.error) for r in measured if r.status not in allowed]
    if wrong:
        fail(f"rows not in {sorted(allowed)}: {wrong}")
    ok = [r for r in measured if r.status == "ok"]
    for row in ok:
        if row.provenance.container_image != image or not row.provenance.git_sha:
            fail(
                f"{row.key}: provenance container_image={row.provenance.container_image!r} "
                f"git_sha={row.provenance.git_sha!r}, expected {image!r} and a SHA"
            )
    vllm_rows = [r for r in ok if r.backend == "vllm"]
    if vllm_rows and not (last.get("packages") or {}).get("vllm"):
        fail(
            f"vLLM rows ({vllm_rows[0].provenance.vllm}) but the manifest's packages.vllm is empty"
        )
    hosts = Counter(r.provenance.hostname for r in ok)
    if node_loss:
        if not hosts.get("worker"):
            fail(f"the worker measured no row: {dict(hosts)}")
        if not last.get("failures"):
            fail("the manifest records no failure: the worker was never lost mid-group")
    statuses = Counter(r.status for r in rows)
    failures = len(last.get("failures") or [])
    return (
        f"{len(rows)}/{len(planned)} points, {dict(statuses)}, ok rows by host {dict(hosts)}, "
        f"{failures} failure(s) in the manifest, image {image}, git_sha {ok[0].provenance.git_sha}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--all-ok", action="store_true")
    parser.add_argument("--node-loss", action="store_true")
    parser.add_argument("--image", required=True)
    args = parser.parse_args()
    line = check(
        args.run_dir, args.scenario, all_ok=args.all_ok, node_loss=args.node_loss, image=args.image
    )
    print(f"check_run: ok: {args.run_dir.name}: {line}")


if __name__ == "__main__":
    main()
