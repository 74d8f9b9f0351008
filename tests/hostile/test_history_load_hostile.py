"""A run made beside other work took longer for it (issue 43: two quiet `harness bench` runs were
planned 43 % short after one loaded run). Each history line records the foreign load the run
began under; calibration reads quiet runs first, and a key only loaded runs hold is calibrated
from them and said to be noisy (harness.run.history, harness.budget)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import budget
from harness.run import history


def phase(took_s: float, model: str = "tiny-llama") -> dict[str, Any]:
    return {"engine": "transformers", "device": "cuda", "model": model, "phase": "load",
            "planned_s": 10.0, "took_s": took_s}  # fmt: skip


def line(*phases: dict[str, Any], **fields: Any) -> str:
    return json.dumps({"schema": 1, "scenario_hash": "x", "phases": list(phases), **fields})


def calibrated(tmp_path: Path, *lines: str) -> budget.Calibration:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(f"{text}\n" for text in lines))
    return history.calibration(history.read(path), "x")


KEY = budget.calibration_key("transformers", "cuda", "tiny-llama", "load")


def test_a_loaded_run_does_not_calibrate_a_key_a_quiet_run_holds(tmp_path: Path) -> None:
    quiet = line(phase(30.0), foreign_load=0.1)
    loaded = line(phase(100.0), foreign_load=1.8)  # newer, and made beside other work
    found = calibrated(tmp_path, quiet, loaded)
    # the quiet run alone: 30 / 10 = 3 (both: (30 + 100) / (10 + 10) = 6.5)
    assert found.factors[KEY] == pytest.approx(3.0)
    assert found.runs[KEY] == 1 and KEY not in found.noisy


def test_a_key_only_loaded_runs_hold_is_calibrated_from_them_and_said_noisy(
    tmp_path: Path,
) -> None:
    found = calibrated(tmp_path, line(phase(100.0), foreign_load=1.8))
    assert found.factors[KEY] == pytest.approx(10.0)  # 100 / 10
    assert found.noisy == [KEY]
    phases = [budget.PhaseSeconds(phase="load", group="g", engine="transformers", device="cuda",
                                  model="tiny-llama", default_s=10.0, seconds=10.0)]  # fmt: skip
    note = budget.calibration_note(budget.calibrate(phases, found), found)
    assert "1 run of tiny-llama/transformers on cuda made beside other load (noisy)" in note


def test_lines_older_than_the_field_count_as_quiet(tmp_path: Path) -> None:
    found = calibrated(tmp_path, line(phase(30.0)), line(phase(100.0), foreign_load=3.0))
    assert found.factors[KEY] == pytest.approx(3.0) and found.noisy == []


@pytest.mark.parametrize("load", [-1.0, "high", None])
def test_a_hostile_load_leaves_the_line_out(tmp_path: Path, load: object) -> None:
    text = json.dumps({"schema": 1, "phases": [phase(30.0)], "foreign_load": load})
    path = tmp_path / "history.jsonl"
    path.write_text(text + "\n")
    read = history.read(path)
    assert (read.skipped, len(read.runs)) == (([], 1) if load is None else ([1], 0))


def test_the_line_of_a_run_records_the_load_it_began_under(tmp_path: Path) -> None:
    planned = [budget.PhaseSeconds(phase="load", group="g", engine="transformers", device="cuda",
                                   model="tiny-llama", default_s=10.0, seconds=12.0)]  # fmt: skip
    entry = history.entry(planned, planned, run="r", scenario_hash="x", runner="ray",
                          wall_s=12.0, load=1.23456)  # fmt: skip
    assert entry["foreign_load"] == 1.235  # rounded to 3 places
    assert history.foreign_load() is None or history.foreign_load() >= 0  # type: ignore[operator]
