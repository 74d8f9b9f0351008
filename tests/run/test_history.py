"""The node's run history: what each phase took, recorded per run, and the budget calibrated
from it (harness.run.history, harness.budget's phases)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness import budget
from harness.console import duration
from harness.row import HarnessTime, Quality, ResultRow
from harness.run import history, sweep
from harness.run.contracts import point_row
from harness.spec.scenario import Scenario, expand

TINY = {
    "name": "h", "models": [{"id": "tiny-llama"}], "backend": ["transformers"],
    "quantization": ["none", "bf16"], "kv_cache_dtype": ["auto"], "batch": [1, 4],
    "context": [128], "output_tokens": 8, "targets": ["cpu"],
    "quality": {"max_windows": 8, "arc_items": 10},
}  # fmt: skip


def tiny_plan(**options: object) -> budget.Plan:
    return budget.plan_grid(expand(Scenario.model_validate(TINY)), **options)  # type: ignore[arg-type]


def rows_for(plan: budget.Plan, load_s: float, quality_s: float, work_s: float) -> list[ResultRow]:
    """Rows as a run writes them: per group one load and one quality phase, each point carrying
    its share of the quality time in measured_s."""
    rows = []
    for p in plan.points:
        group = [q for q in plan.points if q.point.group == p.point.group]
        share = quality_s / len(group)
        rows.append(
            point_row(
                p.point,
                HarnessTime(load_s=load_s, measured_s=work_s + share),
                Quality(quality_s=quality_s),
                run="r",
                corpus_hash="c",
                status="ok",
            )
        )
    return rows


def test_each_phase_took_what_the_rows_say_and_startup_is_the_rest_of_the_wall() -> None:
    plan = tiny_plan()
    rows = rows_for(plan, load_s=3.0, quality_s=5.0, work_s=1.5)
    took = history.took_phases(plan.phases, rows, wall_s=100.0, cluster_s=4.0)
    by = {(t.group, t.phase): t.seconds for t in took}
    groups = {p.point.group.label for p in plan.points}
    assert len(groups) == 2
    for g in groups:
        assert by[(g, "load")] == pytest.approx(3.0)
        assert by[(g, "quality")] == pytest.approx(5.0)
        assert by[(g, "measured")] == pytest.approx(2 * 1.5)  # the quality share taken out
    assert by[("", "cluster")] == pytest.approx(4.0)
    rest = 100.0 - 4.0 - 2 * (3.0 + 5.0 + 3.0)
    assert sum(by[(g, "startup")] for g in groups) == pytest.approx(rest)
    assert sum(t.seconds for t in took) == pytest.approx(100.0)  # every second accounted for


def test_a_recorded_run_calibrates_the_next_plan_by_measured_over_default(tmp_path: Path) -> None:
    plan = tiny_plan()
    rows = rows_for(plan, load_s=3.0, quality_s=5.0, work_s=1.5)
    path = tmp_path / "history.jsonl"
    lines = history.finish(
        plan.phases, rows, run="r", scenario_hash="s1", runner="ray", wall_s=100.0,
        cluster_s=4.0, path=path,
    )  # fmt: skip
    assert lines[0].startswith(f"planned {duration(plan.budget.est_seconds)}, took 1 m 40 s")
    recorded = history.read(path)
    assert len(recorded.runs) == 1
    cal = history.calibration(recorded, "s1")
    default_load = sum(p.default_s for p in plan.phases if p.phase == "load")
    key = ("transformers", "cpu", "tiny-llama", "load")
    assert cal.factors[key] == pytest.approx(2 * 3.0 / default_load)
    assert cal.runs[key] == 1
    again = tiny_plan(calibration=cal)
    assert again.budget.est_load_seconds == pytest.approx(6.0)
    assert again.budget.est_quality_seconds == pytest.approx(10.0)
    # the whole wall is re-planned: every phase took its measured figure
    assert again.budget.est_seconds == pytest.approx(100.0)


def test_only_the_model_free_phases_borrow_another_models_ratio() -> None:
    factors = {
        ("transformers", "cpu", "other-model", "load"): 3.0,  # another model: not this one's
        ("transformers", "cpu", budget.ANY, "startup"): 2.0,  # a process start: any model's
    }
    plan = tiny_plan(calibration=budget.Calibration(factors=factors, source="h", runs_read=1))
    base = tiny_plan()
    assert plan.budget.est_load_seconds == pytest.approx(base.budget.est_load_seconds)
    startup = base.budget.est_phase_seconds["startup"]
    assert plan.budget.est_phase_seconds["startup"] == pytest.approx(2 * startup)


def test_the_same_scenarios_runs_calibrate_first_and_only_the_latest_few() -> None:
    def run(scenario: str, took: float) -> history.RunLine:
        phase = {"engine": "vllm", "device": "cpu", "model": "m", "phase": "load",
                 "planned_s": 10.0, "took_s": took}  # fmt: skip
        line = {"schema": history.SCHEMA, "scenario_hash": scenario, "phases": [phase]}
        return history.RunLine.model_validate(line)

    def cal(runs: list[history.RunLine]) -> float:
        found = history.calibration(history.History(path=Path("h"), runs=runs), "mine")
        return found.factors[("vllm", "cpu", "m", "load")]

    runs = [run("other", 50.0)] + [run("mine", 20.0)] * history.RUNS_USED
    assert cal(runs) == pytest.approx(2.0)  # "other" left out
    assert cal(runs[:2]) == pytest.approx((50 + 20) / 20)


def test_a_history_line_that_is_not_ours_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(b'not json\n\xff\xfe\n{"schema": 99}\n{"schema": 1, "phases": []}\n')
    recorded = history.read(path)
    assert len(recorded.runs) == 1 and recorded.skipped == [1, 2, 3]
    assert history.read(tmp_path / "absent.jsonl").runs == []


def test_a_history_line_with_a_key_given_twice_is_left_out_not_read_as_its_last(
    tmp_path: Path,
) -> None:
    """JSON that plain ``json.loads`` takes (the last ``schema`` wins: 1) but a strict reader
    refuses, as every input of the harness is read (``files.strict_json``)."""
    path = tmp_path / "history.jsonl"
    path.write_bytes(b'{"schema": 7, "schema": 1, "phases": []}\n{"schema": 1, "phases": []}\n')
    recorded = history.read(path)
    assert len(recorded.runs) == 1 and recorded.skipped == [1]


def test_the_end_of_run_line_names_each_phase_that_differs() -> None:
    plan = tiny_plan()
    rows = rows_for(plan, load_s=30.0, quality_s=0.5, work_s=0.01)
    took = history.took_phases(plan.phases, rows, wall_s=90.0, cluster_s=None)
    lines = history.summary_lines(plan.phases, took, 90.0)
    assert lines[0].startswith("planned ") and "took 1 m 30 s" in lines[0]
    named = " ".join(lines[1:])
    assert "model load + engine start: planned" in named  # 60 s against ≈ 7 s
    assert all(" %)" in line for line in lines)


def test_plan_says_whether_its_budget_is_calibrated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.cli.main import app

    path = tmp_path / "history.jsonl"
    monkeypatch.setenv(history.HISTORY_ENV, str(path))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps(TINY))
    first = CliRunner().invoke(app, ["plan", str(scenario)])
    assert first.exit_code == 0, first.output
    assert f"defaults (no history yet at {path})" in first.output
    plan = tiny_plan()
    history.finish(
        plan.phases, rows_for(plan, 3.0, 5.0, 1.5), run="r", runner="ray", wall_s=100.0,
        scenario_hash=sweep.scenario_hash(scenario),
        cluster_s=4.0,
    )  # fmt: skip
    second = CliRunner().invoke(app, ["plan", str(scenario)])
    words = second.output
    assert f"calibrated from {path}: " in words
    assert "model load + engine start, quality scoring, measured work: 1 run of " in words
    assert "≈ 1 m 40 s in all" in second.output


def test_the_budget_pays_every_phase_and_prices_the_wall_time_on_a_gpu() -> None:
    ray = tiny_plan()
    phases = {(p.group != "", p.phase) for p in ray.phases}
    assert phases == {(False, "cluster"), (True, "startup"), (True, "load"), (True, "quality"),
                      (True, "measured")}  # fmt: skip
    assert ray.budget.est_seconds == pytest.approx(sum(p.seconds for p in ray.phases))
    one_process = tiny_plan(runner="in-process")
    assert {p.phase for p in one_process.phases if not p.group} == {"startup"}  # imports once
    assert not any(p.phase == "startup" for p in one_process.phases if p.group)
    assert ray.budget.est_gpu_hours == 0.0  # a CPU sweep rents no GPU
    gpu = budget.plan_grid(
        expand(Scenario.model_validate({**TINY, "targets": ["cuda"]})), hourly_usd=2.0
    )
    assert gpu.budget.est_gpu_hours == pytest.approx(gpu.budget.est_seconds / 3600)
    assert gpu.budget.est_cost_usd == pytest.approx(2.0 * gpu.budget.est_seconds / 3600)


def test_a_history_it_cannot_write_ends_the_run_with_a_line_not_an_error(tmp_path: Path) -> None:
    plan = tiny_plan()
    blocked = tmp_path / "file"
    blocked.write_text("")
    lines = history.finish(
        plan.phases, rows_for(plan, 3.0, 5.0, 1.5), run="r", scenario_hash="s", runner="ray",
        wall_s=100.0, cluster_s=4.0, path=blocked / "history.jsonl",
    )  # fmt: skip
    assert lines[0].startswith("planned ")
    assert lines[-1].startswith(f"phase times not recorded in {blocked / 'history.jsonl'}")
