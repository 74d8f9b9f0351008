"""`plan --tariffs` prices what it can and names what it cannot (issue 43, item 4): the shipped
CPU scenario with the shipped CPU tariff is priced on the CPU node, not refused for a GPU it does
not use; a GPU sweep with a tariff file that has no row for its card is planned, its cost left
out with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app

ROOT = Path(__file__).parents[2]
CPU_SCENARIO = ROOT / "scenarios/examples/parallel-cpu.yaml"
CPU_TARIFFS = ROOT / "tariffs/parallel-cpu.yaml"  # one row: gpu cpu, 2 "cards", 0.1008 $/h


def plan_json(scenario: Path, tariffs: Path) -> dict[str, object]:
    result = CliRunner().invoke(app, ["plan", str(scenario), "--tariffs", str(tariffs), "--json"])
    assert result.exit_code == 0, result.output
    budget: dict[str, object] = json.loads(result.stdout)["budget"]
    return budget


def test_the_shipped_cpu_scenario_is_priced_on_the_shipped_cpu_tariff() -> None:
    budget = plan_json(CPU_SCENARIO, CPU_TARIFFS)
    hours = budget["est_cpu_hours"]
    assert isinstance(hours, float) and hours > 0 and budget["est_gpu_hours"] == 0
    # 0.1008 $ per node-hour over 2 "cards": 0.0504 $ per card-hour
    assert budget["est_cost_usd"] == pytest.approx(hours * 0.0504)
    assert budget["unpriced"] is None and "cpu" in str(budget["tariff"])


def test_a_gpu_sweep_without_its_cards_tariff_is_planned_and_says_what_is_not_priced(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "gpu.yaml"
    scenario.write_text(json.dumps({
        "name": "g", "models": [{"id": "tiny-llama"}], "backend": ["transformers"],
        "quantization": ["none"], "kv_cache_dtype": ["auto"], "batch": [1], "context": [128],
        "output_tokens": 8, "targets": ["cuda"], "quality": {"max_windows": 8, "arc_items": 10},
    }))  # fmt: skip
    result = CliRunner().invoke(app, ["plan", str(scenario), "--tariffs", str(CPU_TARIFFS)])
    assert result.exit_code == 0, result.output
    assert f"not priced: {CPU_TARIFFS} has no tariff for 'H100-SXM-80GB'" in result.output
    assert plan_json(scenario, CPU_TARIFFS)["est_cost_usd"] is None
