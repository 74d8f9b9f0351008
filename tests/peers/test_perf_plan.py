"""harness.peers.perf_plan: `harness plan` timed as a person runs it, each run a fresh process."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.peers import perf_plan


def test_the_line_counts_points_and_skips_from_the_plans_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        calls.append(argv)
        plan: dict[str, list[object]] = {"points": [{}, {}, {}], "skipped": [{}]}
        return subprocess.CompletedProcess(argv, 0, json.dumps(plan).encode(), b"")

    monkeypatch.setattr(subprocess, "run", fake_run)
    line = perf_plan.time_plan(Path("grid.yaml"), "H100-SXM-80GB", runs=2)
    assert re.fullmatch(
        r"plan: 3 points \(\+1 skipped\) in \d+\.\d\d s \(median of 2 runs, whole command\)", line
    ), line
    assert len(calls) == 2  # one fresh process per run
    assert calls[0][1:] == [
        "-m", "harness.cli", "plan", "grid.yaml", "--gpu", "H100-SXM-80GB", "--json",
    ]  # fmt: skip
