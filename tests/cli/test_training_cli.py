"""A training scenario end to end through the command line: plan, measure (sweep → worker →
trainer), report (cost.csv and the report's training section), on the shipped tiny model."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "training.yaml"
    path.write_text(
        "\n".join(
            [
                "name: training-small",
                "models: [tiny-llama]",
                "backend: [transformers]",
                "targets: [cpu]",
                "repeats: 1",
                "training:",
                "  method: [full, lora, qlora]",
                "  micro_batch: [2]",
                "  grad_accum: [2]",
                "  seq_len: [16]",
                "  optimizer: [adamw-8bit]",
                "  steps: 3",
                "  eval_every: 2",
                "  lr: 1.0e-3",
                "  target_eval_loss: 50.0",
                "  data: {eval_windows: 4}",
            ]
        )
        + "\n"
    )
    return path


def test_plan_shows_each_training_point_with_its_phases(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["plan", str(scenario(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)["points"]
    assert [p["mode"] for p in points] == ["training"] * 3
    lora = next(p for p in points if p["training"]["method"] == "lora")
    assert lora["trainable_params"] == 57_344
    assert set(lora["training_gib"]) >= {"forward", "backward", "optimizer_step", "optimizer"}


@pytest.mark.slow
def test_measure_and_report_a_training_scenario(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["measure", str(scenario(tmp_path)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]
    assert sorted(r["train_method"] for r in rows) == ["full", "lora", "qlora"]
    for r in rows:
        assert r["status"] == "ok", r["error"]
        assert r["mode"] == "training" and r["output_tokens"] == 0
        assert r["train_steps"] == 3 and len(r["loss_curve"]) == 3
        assert r["tokens_per_step"] == 2 * 2 * 16
        assert r["train_tok_s"] == pytest.approx(64 / r["step_s"])
        for phase in ("forward", "backward", "optimizer"):
            assert r[f"train_peak_mib_{phase}"] > 0 and r[f"predicted_train_mib_{phase}"] > 0
        assert r["eval_loss_ci_low"] <= r["eval_loss"] <= r["eval_loss_ci_high"]
        assert [s for s, _ in r["eval_curve"]] == [0.0, 2.0, 3.0]
        assert r["steps_to_target"] == 0  # a target every evaluation meets
        assert len(r["eval_window_nll"]) == r["eval_windows"] == 4
    lora = next(r for r in rows if r["train_method"] == "lora")
    assert lora["trainable_params"] == 57_344 and lora["quantization"] == "none"
    assert next(r for r in rows if r["train_method"] == "qlora")["quantization"] == "bnb-nf4"
    manifest = json.loads((out / "manifest.json").read_text())
    leakage = manifest["runs"][-1]["leakage"]
    assert any("tinyshakespeare" in row["eval"] for row in leakage)

    tariffs = ROOT / "tariffs" / "example.yaml"
    result = CliRunner().invoke(app, ["report", str(out), "--tariffs", str(tariffs)])
    assert result.exit_code == 0, result.output
    assert "offline rows 0" in result.output and "training rows 3" in result.output
    published = out / "published"
    with (published / "cost.csv").open(newline="") as handle:
        cost = [c for c in csv.DictReader(handle) if c["mode"] == "training"]
    assert {c["train_method"] for c in cost} == {"full", "lora", "qlora"}
    assert all(float(c["usd_per_mtok_train"]) > 0 and float(c["usd_to_target"]) == 0 for c in cost)
    readme = (published / "README.md").read_text()
    assert "## Training: $ per 1M training tokens" in readme
    assert "## Leakage: n-gram overlap" in readme
