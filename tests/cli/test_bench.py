"""`harness bench` (what `make bench` runs) end to end on this machine: plan, the sweep on a local
Ray cluster with both engines (transformers and the real vLLM CPU engine), published tables and
report, both engines priced and gated, the cross-engine check in the report."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "tests" / "fixtures" / "bench-both-engines.yaml"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_bench_measures_both_engines_and_publishes_them_priced_and_checked(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "bench", str(SCENARIO), "--out", str(run),
         "--tariffs", str(REPO / "tariffs" / "example.yaml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    published = run / "published"
    points = pd.read_csv(published / "points.csv")
    measured = points[points["status"] == "ok"]
    assert sorted(measured["backend"].unique()) == ["transformers", "vllm"]
    cost = pd.read_csv(published / "cost.csv")
    assert {"transformers", "vllm"} <= set(cost["backend"])  # both priced (and gated) per package
    report = (published / "report.html").read_text()
    assert "Engines agree" in report and "tiny-llama fp32: transformers PPL" in report
    assert "DISAGREE" not in report
