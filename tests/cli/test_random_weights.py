"""`weights: random` end to end: a real architecture from its shipped config.json alone (no
weights, no tokenizer), planned, measured on the CPU, and published speed-only, never priced."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.spec import models

ROOT = Path(__file__).resolve().parents[2]
QWEN = ROOT / "harness" / "spec" / "catalog" / "configs" / "qwen2.5-0.5b"


def scenario(tmp_path: Path, model: str) -> Path:
    path = tmp_path / "random.yaml"
    path.write_text(
        "\n".join(
            [
                "name: random",
                f"models: [tiny-llama, {{id: {model}, weights: random}}]",
                "backend: [transformers]",
                "quantization: [fp32]",
                "batch: [1]",
                "context: [16]",
                "output_tokens: 4",
                "targets: [cpu]",
                "repeats: 1",
                "warmups: 0",
                "reference: {quantization: fp32}",
                "quality: {window_tokens: 32, max_windows: 2, arc_items: 2, bootstrap_samples: 50}",
            ]
        )
        + "\n"
    )
    return path


def test_the_shipped_architectures_resolve_by_short_id_config_only() -> None:
    found = models.resolve("qwen2.5-0.5b", need="config")
    assert found.path == QWEN and found.source == "shipped" and not found.has_tokenizer
    assert found.config()["model_type"] == "qwen2"


def test_plan_of_random_weights_on_a_config_dir_and_a_short_id(tmp_path: Path) -> None:
    for model in (str(QWEN), "qwen2.5-0.5b"):
        result = CliRunner().invoke(app, ["plan", str(scenario(tmp_path, model)), "--json"])
        assert result.exit_code == 0, result.output
        points = json.loads(result.stdout)["points"]
        assert {p["weights"] for p in points} == {"checkpoint", "random"}


@pytest.mark.slow
def test_measure_random_weights_on_the_cpu_gives_a_speed_only_row_never_priced(
    tmp_path: Path,
) -> None:
    path = scenario(tmp_path, str(QWEN))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["measure", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]
    assert [r["status"] for r in rows] == ["ok", "ok"], [r.get("error") for r in rows]
    random = next(r for r in rows if r["model"] == str(QWEN))
    checkpoint = next(r for r in rows if r["model"] == "tiny-llama")
    assert random["weights"] == "random" and checkpoint["weights"] == "checkpoint"
    assert random["decode_tok_s"] > 0 and random["generated_tokens"] == 4
    assert random["ppl"] is None and random["tasks"] is None and not random["is_reference"]
    assert random["peak_mib_decode"] > 0 and random["predicted_peak_mib"] > 0
    assert checkpoint["ppl"] is not None

    tariffs = ROOT / "tariffs" / "example.yaml"
    result = CliRunner().invoke(app, ["report", str(out), "--tariffs", str(tariffs)])
    assert result.exit_code == 0, result.output
    published = out / "published"
    with (published / "cost.csv").open(newline="") as handle:
        cost = list(csv.DictReader(handle))
    assert cost, "the checkpoint row is priced on the CPU tariff"
    assert {c["key"] for c in cost} == {checkpoint["key"]}
    readme = (published / "README.md").read_text()
    assert "## Speed only: random weights (no quality, not priced)" in readme
    assert str(QWEN) in readme.split("## Speed only")[1]
    assert 'id="speed-only"' in (published / "report.html").read_text()
