"""A run whose stdout and stderr are a pipe (`make bench > log 2>&1`, nohup, CI): one progress
line per point and per finished group, each with done / total, elapsed, the remaining-time
estimate and the status counts; at the end "planned …, took …" and the phases recorded in the
history the next plan is calibrated from."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCENARIO = {
    "name": "piped", "models": [{"id": "tiny-llama"}], "backend": ["transformers"],
    "quantization": ["none"], "kv_cache_dtype": ["auto"], "batch": [1, 2], "context": [16],
    "output_tokens": 4, "targets": ["cpu"], "repeats": 1, "warmups": 1,
    "quality": {"window_tokens": 32, "max_windows": 2, "arc_items": 2, "bootstrap_samples": 50},
}  # fmt: skip


def harness(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    return done.stdout


@pytest.mark.slow
def test_a_piped_run_logs_progress_with_an_eta_and_calibrates_the_next_plan(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "piped.yaml"
    scenario.write_text(json.dumps(SCENARIO))
    path = tmp_path / "history.jsonl"
    env = {**os.environ, "HARNESS_HISTORY": str(path), "RAY_USAGE_STATS_ENABLED": "0"}
    log = harness("measure", str(scenario), "--out", str(tmp_path / "run"), env=env)
    lines = log.splitlines()
    eta = r"elapsed \d[\dmhs ]* · ETA \d[\dmhs ]* \(planned \d[\dmhs ]*\)"
    points = [line for line in lines if re.search(rf"\] [12]/2 points · {eta} · ", line)]
    assert len(points) == 2, log[-3000:]
    assert points[-1].endswith("|cpu: 2/2 (2 ok)")
    groups = [line for line in lines if "group 1/1 done:" in line]
    assert len(groups) == 1 and re.search(rf": 2 ok · 2/2 points · {eta}$", groups[0]), groups
    assert re.search(r"^planned \d[\dms ]*, took \d[\dms ]* \([+-]\d+ %\)", log, re.M), log[-2000:]
    (run,) = [json.loads(line) for line in path.read_text().splitlines()]
    took = {p["phase"]: p["took_s"] for p in run["phases"]}
    assert {"startup", "load", "quality", "measured"} <= set(took)
    assert all(s > 0 for s in took.values())
    assert sum(took.values()) == pytest.approx(run["wall_s"], rel=1e-6)

    plan = harness("plan", str(scenario), env=env)
    assert f"calibrated from {path}: " in plan, plan[-600:]
    assert "1 run of tiny-llama/" in plan, plan[-600:]
