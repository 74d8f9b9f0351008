"""The plan's budget against the H200 runs recorded in results/example/: planned vs took, per phase.

A lent GPU is rare, so the budget's CUDA defaults cannot be checked on every change. What can be
checked is the budget the plan gives today, with its defaults (an empty history, as on a fresh
node), against what each recorded H200 run took, phase by phase, read from its rows the way the
node's history reads them (`harness.run.history.row_seconds`): model load + engine start, quality
scoring, measured work, and for the Ray run its wall time (the Ray start and the actors' process
start + imports are the rest of the wall).

Each recorded run is planned from the scenario file it ran, on the H200 of the catalog. A run
whose scenario now plans another number of points is reported as drifted, not compared.

The CUDA defaults were derived from these same runs (see the defaults' comments in the budget),
so this is an in-sample check: it shows that the budget adds its phases up the way the runs spent
them, not that it predicts a new run. `scenarios/gpu-default.yaml` has no recorded run; its
budget is printed with its phases, each resting on the defaults this check covers.

Entry point: scripts/budget_vs_runs.py [--out FILE.json].
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.atomic import atomic_write_json
from harness.row import ResultRow
from harness.run.history import HISTORY_ENV, row_seconds

ROOT = Path(__file__).resolve().parents[2]
GPU = "H200-141GB"
EXAMPLE = ROOT / "results/example/h200-2026-11-29"
ROW_PHASES = ("load", "quality", "measured")  # the phases a row records
WALL = "wall"  # the whole run: every phase, Ray start and process starts included


@dataclass(frozen=True)
class Recorded:
    name: str
    scenario: Path
    rows: Path
    manifest: Path | None = None  # a `harness run` manifest: its wall time


RECORDED = (
    Recorded("gpu-check", ROOT / "scenarios/gpu-check.yaml", EXAMPLE / "gpu_rows.json"),
    Recorded("gpu-bnb", ROOT / "scenarios/gpu-bnb.yaml", EXAMPLE / "gpu_bnb_rows.json"),
    Recorded(
        "gpu-ray",
        ROOT / "scenarios/gpu-ray.yaml",
        EXAMPLE / "gpu_ray_rows.json",
        EXAMPLE / "ray_manifest.json",
    ),
)
UNRECORDED = ROOT / "scenarios/gpu-default.yaml"


def planned_budget(scenario: Path) -> dict[str, Any]:
    """`harness plan SCENARIO --gpu H200 --json`'s budget, with an empty history (the defaults)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, HISTORY_ENV: str(Path(tmp) / "history.jsonl")}
        argv = [sys.executable, "-m", "harness.cli", "plan", str(scenario), "--gpu", GPU, "--json"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    budget: dict[str, Any] = json.loads(done.stdout)["budget"]
    return budget


def recorded_rows(path: Path) -> list[ResultRow]:
    return [ResultRow.model_validate(r) for r in json.loads(path.read_text())]


def took_seconds(rows: Sequence[ResultRow]) -> dict[str, float]:
    """Seconds per row phase, summed over the run's groups (`row_seconds` per group)."""
    groups: dict[str, list[ResultRow]] = {}
    for row in rows:
        groups.setdefault(row.group or "", []).append(row)
    took: dict[str, float] = {}
    for phase in ROW_PHASES:
        figures = [row_seconds(phase, g) for g in groups.values()]
        took[phase] = sum(f for f in figures if f is not None)
    return took


def manifest_wall_s(path: Path) -> float:
    return float(json.loads(path.read_text())["runs"][0]["wall_s"])


def compare_run(run: Recorded) -> dict[str, Any]:
    """One recorded run: planned and took per phase (s), or why it is not compared."""
    budget = planned_budget(run.scenario)
    rows = recorded_rows(run.rows)
    out: dict[str, Any] = {"run": run.name, "scenario": str(run.scenario.relative_to(ROOT))}
    if budget["points"] != len(rows):
        out["drifted"] = f"plans {budget['points']} points, the run recorded {len(rows)} rows"
        return out
    planned = budget["est_phase_seconds"]
    took = took_seconds(rows)
    phases = [
        {"phase": p, "planned_s": float(planned.get(p, 0.0)), "took_s": took[p]} for p in ROW_PHASES
    ]
    if run.manifest is not None:
        phases.append(
            {"phase": WALL, "planned_s": float(budget["est_seconds"]),
             "took_s": manifest_wall_s(run.manifest)}
        )  # fmt: skip
    out["phases"] = phases
    return out


def gap_pct(planned_s: float, took_s: float) -> float | None:
    """(planned − took) ÷ took, %: the budget's error against what the run took."""
    return None if took_s <= 0 else 100.0 * (planned_s - took_s) / took_s


def markdown(runs: Sequence[dict[str, Any]], unrecorded: dict[str, Any]) -> str:
    lines = [
        "| run | phase | planned (s) | took (s) | planned vs took |",
        "|---|---|---:|---:|---:|",
    ]
    for run in runs:
        if "drifted" in run:
            lines.append(f"| {run['run']} | — | — | — | not compared: {run['drifted']} |")
            continue
        for p in run["phases"]:
            gap = gap_pct(p["planned_s"], p["took_s"])
            shown = "—" if gap is None else f"{gap:+.0f} %"
            lines.append(
                f"| {run['run']} | {p['phase']} | {p['planned_s']:.1f} | {p['took_s']:.1f} "
                f"| {shown} |"
            )
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in unrecorded["est_phase_seconds"].items())
    lines += [
        "",
        f"{UNRECORDED.relative_to(ROOT)} (no recorded run): {unrecorded['points']} points in "
        f"{unrecorded['groups']} groups, planned {unrecorded['est_seconds']:.0f} s ({phases}).",
    ]
    return "\n".join(lines)


def run(out: Path | None) -> str:
    runs = [compare_run(r) for r in RECORDED]
    unrecorded = planned_budget(UNRECORDED)
    text = markdown(runs, unrecorded)
    if out is not None:
        unrecorded_part = {"scenario": UNRECORDED.name, "budget": unrecorded}
        atomic_write_json(out, {"gpu": GPU, "runs": runs, "unrecorded": unrecorded_part})
    return text
