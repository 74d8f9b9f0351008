"""Tests read the CLI's lines as written: the console renders at a fixed wide width in tests
(tests/conftest.py sets ``HARNESS_LOG_WIDTH``), so a line that names a long temporary path is
never wrapped inside a phrase a test asserts (the fresh clone that failed on "1 run oftiny-llama"
where pytest's temporary folder was a few characters longer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness import console
from harness.cli.main import app
from harness.run import history

GPU = {
    "name": "h", "models": [{"id": "tiny-llama"}], "backend": ["transformers"],
    "quantization": ["none"], "kv_cache_dtype": ["auto"], "batch": [1], "context": [128],
    "output_tokens": 8, "targets": ["cuda"], "quality": {"max_windows": 8, "arc_items": 10},
}  # fmt: skip
LOAD = {"engine": "transformers", "device": "cuda", "model": "tiny-llama", "phase": "load",
        "planned_s": 10.0, "took_s": 30.0}  # fmt: skip


def test_a_history_path_longer_than_a_log_line_leaves_the_plan_note_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / ("d" * 170)  # alone longer than a 160-column log line
    folder.mkdir()
    path = folder / "history.jsonl"
    path.write_text(json.dumps({"schema": 1, "scenario_hash": "x", "phases": [LOAD]}) + "\n")
    monkeypatch.setenv(history.HISTORY_ENV, str(path))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps(GPU))
    result = CliRunner().invoke(app, ["plan", str(scenario)])
    assert result.exit_code == 0, result.output
    note = f"calibrated from {path}: model load + engine start: 1 run of tiny-llama/transformers"
    assert note in result.output, result.output[-1500:]


def test_the_consoles_of_a_test_session_render_at_the_fixed_width() -> None:
    assert console.console.width == console.err_console.width == 1000  # tests/conftest.py


@pytest.mark.parametrize(("named", "width"), [("", 160), ("0", 160), ("-5", 160), ("wide", 160),
                                              ("250", 250)])  # fmt: skip
def test_a_log_width_is_a_positive_whole_number_of_columns_or_160(
    monkeypatch: pytest.MonkeyPatch, named: str, width: int
) -> None:
    monkeypatch.setenv(console.LOG_WIDTH_ENV, named)
    assert console.log_width() == width
