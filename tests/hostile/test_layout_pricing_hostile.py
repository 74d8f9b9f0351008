"""Layouts are priced the way they are rented (issue 43, item 3): `plan --tariffs` never prices an
8-card layout on a 4-card node; it leaves that group out of the cost and names it. (A layout that
does not divide its node pays for the idle cards: tests/results/test_pricing_layouts.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harness.cli.main import app

SCENARIO: dict[str, Any] = {
    "name": "p8", "models": [{"id": "meta-llama/Llama-3.1-8B-Instruct"}], "backend": ["vllm"],
    "quantization": ["bf16"], "kv_cache_dtype": ["auto"], "batch": [1], "context": [512],
    "output_tokens": 8, "targets": ["cuda"], "gpu": "H100-SXM-80GB",
    "parallel": {"cards": 8, "tensor": [1, 8], "pipeline": [1], "expert": [False]},
}  # fmt: skip
FOUR_CARDS = {"tariffs": [{
    "provider": "Four", "gpu": "H100-SXM-80GB", "gpus_per_node": 4, "hourly_usd": 8.0,
    "source": "by hand", "date": "2026-12", "packages": [{"days": 30, "discount_pct": 0}],
}]}  # fmt: skip


def budget(tmp_path: Path, tensor: list[int]) -> dict[str, Any]:
    scenario = tmp_path / f"s{len(tensor)}.yaml"
    scenario.write_text(json.dumps({**SCENARIO, "parallel": {**SCENARIO["parallel"],
                                                             "tensor": tensor}}))  # fmt: skip
    tariffs = tmp_path / "t.yaml"
    tariffs.write_text(json.dumps(FOUR_CARDS))
    done = CliRunner().invoke(app, ["plan", str(scenario), "--tariffs", str(tariffs), "--json"])
    assert done.exit_code == 0, done.output
    found: dict[str, Any] = json.loads(done.stdout)["budget"]
    return found


def test_an_8_card_layout_is_not_priced_on_a_4_card_node_and_is_named(tmp_path: Path) -> None:
    both = budget(tmp_path, [1, 8])
    one = budget(tmp_path, [1])
    assert "need more cards than the tariff's 4-card node" in both["unpriced"]
    assert "tp=8" in both["unpriced"] and one["unpriced"] is None
    # the cost is the tp=1 group's alone (and the sweep's own Ray start), as if tp=8 were not
    # there: priced at $8 ÷ 4 cards = $2 per card-hour either way
    assert both["est_cost_usd"] == pytest.approx(one["est_cost_usd"], rel=1e-9)
    assert both["est_gpu_hours"] > one["est_gpu_hours"]  # the 8 cards' hours are still counted


def plan_of(tmp_path: Path, tensor: list[int]) -> dict[str, Any]:
    scenario = tmp_path / f"only{len(tensor)}.yaml"
    parallel = {**SCENARIO["parallel"], "tensor": tensor}
    scenario.write_text(json.dumps({**SCENARIO, "parallel": parallel}))
    done = CliRunner().invoke(app, ["plan", str(scenario), "--json"])
    assert done.exit_code == 0, done.output
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_a_sweep_of_only_multi_card_layouts_is_told_nothing_will_be_gated(tmp_path: Path) -> None:
    (warning,) = plan_of(tmp_path, [8])["warnings"]
    assert warning.startswith("meta-llama/Llama-3.1-8B-Instruct: every point runs on several cards")
    assert "(tp=8)" in warning and "nothing of it will be gated" in warning
    assert plan_of(tmp_path, [1, 8])["warnings"] == []  # tp=1 runs on one card: the reference


def test_rent_says_in_one_line_that_passing_layout_rows_are_not_projected() -> None:
    from harness.projection import rent
    from harness.results.aggregate import aggregate
    from harness.results.frame import frame_from_rows
    from tests import factories as F

    rows = [F.reference(decode_tok_s=1000.0)] + [
        F.row(layout=layout, decode_tok_s=2000.0, **F.quality(100.0)) for layout in ("tp=2", "tp=8")
    ]
    points = aggregate(frame_from_rows(rows), F.tariffs(F.tariff()), 1.0).points
    line = rent.layouts_left_out(points, "99")
    assert line is not None and "\n" not in line
    assert line.startswith(
        "layouts are not projected: 2 passing row(s) on several cards (tp=2, tp=8)"
    )
    assert rent.layouts_left_out(points[points["layout"].isna()], "99") is None
