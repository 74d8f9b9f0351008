"""The node's run history is input like any other (harness.run.history): a hostile line is left
out and counted in one warning, never a traceback nor a negative or non-finite budget; runs that
end at once keep every line; a failed group records no time; and a plan is calibrated only from
runs that match it (engine, device kind and model; any model for the Ray and process starts),
saying which."""

from __future__ import annotations

import json
import math
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harness import budget
from harness.cli.main import app
from harness.row import HarnessTime, Quality, ResultRow
from harness.run import history
from harness.run.contracts import point_row
from harness.spec.scenario import Scenario, expand

TINY: dict[str, Any] = {
    "name": "h", "models": [{"id": "tiny-llama"}], "backend": ["transformers"],
    "quantization": ["none"], "kv_cache_dtype": ["auto"], "batch": [1], "context": [128],
    "output_tokens": 8, "targets": ["cpu"], "quality": {"max_windows": 8, "arc_items": 10},
}  # fmt: skip
GPU = {**TINY, "targets": ["cuda"]}
TARIFFS = Path(__file__).parents[2] / "tariffs" / "example.yaml"


def phase(model: str = "tiny-llama", device: str = "cpu", **figures: Any) -> dict[str, Any]:
    return {"engine": "transformers", "device": device, "model": model, "phase": "load",
            "planned_s": 10.0, "took_s": 30.0, **figures}  # fmt: skip


def line(*phases: dict[str, Any], **fields: Any) -> str:
    return json.dumps({"schema": 1, "scenario_hash": "x", "phases": list(phases), **fields})


def plan_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, history_text: bytes | None,
    scenario: dict[str, Any] = TINY, *extra: str,
) -> tuple[int, str, str]:  # fmt: skip
    path = tmp_path / "history.jsonl"
    if history_text is not None:
        path.write_bytes(history_text)
    monkeypatch.setenv(history.HISTORY_ENV, str(path))
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(json.dumps(scenario))
    result = CliRunner().invoke(app, ["plan", str(scenario_file), *extra])
    return result.exit_code, result.stdout, result.stderr


def json_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: bytes | None,
                scenario: dict[str, Any] = GPU) -> tuple[dict[str, Any], str]:  # fmt: skip
    code, out, err = plan_cli(
        tmp_path, monkeypatch, text, scenario, "--json", "--tariffs", str(TARIFFS)
    )
    assert code == 0, out + err
    found: dict[str, Any] = json.loads(out)["budget"]
    return found, err


def default_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The GPU plan's budget with no history (its defaults)."""
    (tmp_path / "none").mkdir()
    return json_budget(tmp_path / "none", monkeypatch, None)[0]


def assert_sane(found: dict[str, Any]) -> None:
    for name in ("est_seconds", "est_load_seconds", "est_gpu_hours", "est_cost_usd"):
        assert math.isfinite(found[name]) and found[name] >= 0, (name, found[name])
    assert all(math.isfinite(s) and s >= 0 for s in found["est_phase_seconds"].values())


HOSTILE_LINES = {
    "negative took_s": line(phase(device="cuda", took_s=-1e6)).encode(),
    "negative planned_s": line(phase(device="cuda", planned_s=-10.0)).encode(),
    "NaN": line(phase(device="cuda")).replace("30.0", "NaN").encode(),
    "Infinity": line(phase(device="cuda")).replace("30.0", "Infinity").encode(),
    "-Infinity": line(phase(device="cuda")).replace("30.0", "-Infinity").encode(),
    "1e999": line(phase(device="cuda")).replace("30.0", "1e999").encode(),
    "phases null": b'{"schema": 1, "phases": null}',
    "phases a string": b'{"schema": 1, "phases": "load"}',
    "a phase not an object": b'{"schema": 1, "phases": [7]}',
    "took_s a string": line(phase(device="cuda")).replace("30.0", '"30"').encode(),
    "took_s a boolean": line(phase(device="cuda")).replace("30.0", "true").encode(),
    "a huge integer": line(phase(device="cuda")).replace("30.0", "9" * 5000).encode(),
    "deeply nested": b'{"schema": 1, "phases": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
    "not UTF-8": b'{"schema": 1, "phases": [], "run": "\xff\xfe"}',
    "a JSON list": b"[1, 2, 3]",
    "schema as a string": b'{"schema": "1", "phases": []}',
}


@pytest.mark.parametrize("bad", HOSTILE_LINES.values(), ids=HOSTILE_LINES.keys())
def test_a_hostile_line_is_left_out_with_one_warning_and_the_budget_stays_sane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: bytes
) -> None:
    good = line(phase(device="cuda")).encode()
    found, err = json_budget(tmp_path, monkeypatch, good + b"\n" + bad + b"\n" + good + b"\n")
    assert_sane(found)
    assert err.count("warning") == 1, err
    assert f"{tmp_path / 'history.jsonl'}: line 2 left out" in err
    # lines 1 and 3 calibrate the load: (30 + 30) / (10 + 10) = 3 × the default
    defaults = default_budget(tmp_path, monkeypatch)
    assert found["est_load_seconds"] == pytest.approx(3 * defaults["est_load_seconds"])


def test_a_negative_phase_never_makes_a_negative_price(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the audit's case: a phase that "took" -10⁶ s, alone in the history
    negative = line(phase(device="cuda", took_s=-1e6)).encode()
    found, _ = json_budget(tmp_path, monkeypatch, negative)
    assert_sane(found)
    assert found["est_cost_usd"] > 0
    assert "defaults" in found["calibrated_from"]


def test_the_lines_left_out_are_listed_once_and_cut_after_a_few(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = b"\n".join([b"garbage"] * 12 + [line(phase()).encode()]) + b"\n"
    code, out, err = plan_cli(tmp_path, monkeypatch, text)
    assert code == 0, out + err
    # 12 bad lines: the first 8 shown, "and 4 more" (12 - 8)
    assert "lines 1, 2, 3, 4, 5, 6, 7, 8 and 4 more left out" in err
    assert err.count("warning") == 1


def test_a_history_that_is_a_folder_gives_the_defaults_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "history.jsonl").mkdir()
    code, out, err = plan_cli(tmp_path, monkeypatch, None)
    assert code == 0, out + err
    assert "not read" in err and "defaults used" in err


def test_a_calibration_that_overflows_gives_the_defaults_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # planned 10⁻³⁰⁰ s, took 3 × 10⁷ s: a ratio of 3 × 10³⁰⁷, × the default load (> 1 s) = inf
    overflow = line(phase(device="cuda", planned_s=1e-300, took_s=3e7)).encode()
    found, _ = json_budget(tmp_path, monkeypatch, overflow)
    assert_sane(found)
    assert found["calibrated_from"].startswith("warning: ")
    assert "defaults are shown" in found["calibrated_from"]


@pytest.mark.parametrize("factor", [-3.0, math.nan, math.inf])
def test_the_seam_refuses_a_budget_that_is_negative_or_not_finite(factor: float) -> None:
    grid = expand(Scenario.model_validate(GPU))
    factors = {("transformers", "cuda", "tiny-llama", "load"): factor}
    cal = budget.Calibration(factors=factors, runs={}, source="h.jsonl", runs_read=1)
    found = budget.plan_grid(grid, hourly_usd=3.0, calibration=cal).budget
    assert_sane(found.model_dump())
    assert found == budget.plan_grid(grid, hourly_usd=3.0).budget.model_copy(
        update={"calibrated_from": found.calibrated_from}
    )
    assert (found.calibrated_from or "").startswith("warning: the history at h.jsonl")


# -- what calibrates what ----------------------------------------------------------------------
def test_cpu_runs_do_not_calibrate_a_gpu_plan_and_the_console_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu_run = line(phase(device="cpu", took_s=500.0)).encode() + b"\n"
    found, _ = json_budget(tmp_path, monkeypatch, cpu_run * 3)
    defaults = default_budget(tmp_path, monkeypatch)
    assert found["est_seconds"] == pytest.approx(defaults["est_seconds"])
    path = tmp_path / "history.jsonl"
    assert found["calibrated_from"] == f"defaults: no matching runs among the 3 at {path}"


def test_another_models_run_on_the_same_card_kind_does_not_scale_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another model took 50 × its planned load on cuda: before, every model's load × 50
    other = line(phase(model="other-model", device="cuda", took_s=500.0)).encode()
    found, _ = json_budget(tmp_path, monkeypatch, other)
    defaults = default_budget(tmp_path, monkeypatch)
    assert found["est_load_seconds"] == pytest.approx(defaults["est_load_seconds"])
    assert found["calibrated_from"].startswith("defaults: no matching runs")


def test_the_console_says_which_runs_calibrated_which_phase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = line(phase(device="cuda")).encode() + b"\n"
    startup = {**phase(model=budget.ANY, device="cuda"), "phase": "startup"}
    runs += line(startup).encode() + b"\n"
    found, _ = json_budget(tmp_path, monkeypatch, runs)
    note = found["calibrated_from"]
    assert note.startswith(f"calibrated from {tmp_path / 'history.jsonl'}: ")
    assert "model load + engine start: 1 run of tiny-llama/transformers on cuda" in note
    assert "process start + imports: 1 run of any model/transformers on cuda" in note
    assert "defaults (no matching runs): Ray start, quality scoring, measured work" in note


def test_the_plan_line_shows_the_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = plan_cli(tmp_path, monkeypatch, line(phase(device="cuda")).encode(), GPU)
    assert code == 0, out + err
    words = out
    assert "model load + engine start: 1 run of tiny-llama/transformers on cuda" in words
    assert "-" not in words.split("GPU-h")[0].rsplit("in all", 1)[-1].split("(")[0]


# -- writing -----------------------------------------------------------------------------------
def append_many(path: str, writer: int, count: int) -> None:
    for i in range(count):
        history.record(Path(path), {"schema": 1, "phases": [], "run": f"w{writer}-{i}"})


def test_runs_that_end_at_once_keep_every_line(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=append_many, args=(str(path), w, 40)) for w in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
        assert w.exitcode == 0
    read = history.read(path)
    assert read.skipped == []
    assert len(read.runs) == 4 * 40  # 4 writers × 40 lines, none lost
    names = [json.loads(raw)["run"] for raw in path.read_text().splitlines()]
    assert sorted(names) == sorted(f"w{w}-{i}" for w in range(4) for i in range(40))


def test_a_non_utf8_history_takes_the_next_run_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"\xff\xfe not ours")  # no newline at the end either
    history.record(path, {"schema": 1, "phases": []})
    read = history.read(path)
    assert len(read.runs) == 1 and read.skipped == [1]  # the new run on a line of its own


def test_a_fifo_where_the_history_goes_is_a_line_not_a_hang(tmp_path: Path) -> None:
    import os

    path = tmp_path / "history.jsonl"
    os.mkfifo(path)
    with pytest.raises(OSError):
        history.record(path, {"schema": 1, "phases": []})


# -- a failed group ----------------------------------------------------------------------------
def rows(plan: budget.Plan, status: str) -> list[ResultRow]:
    out = []
    for p in plan.points:
        measured = 1.5 if status == "ok" else None
        time = HarnessTime(load_s=3.0, measured_s=measured)
        out.append(point_row(p.point, time, Quality(quality_s=None), run="r", corpus_hash="c",
                             status=status))  # type: ignore[arg-type]  # fmt: skip
    return out


def two_groups() -> budget.Plan:
    scenario = {**TINY, "quantization": ["none", "bf16"], "quality": {"max_windows": 1}}
    return budget.plan_grid(expand(Scenario.model_validate(scenario)))


def test_a_failed_group_contributes_no_time_not_zero_seconds() -> None:
    plan = two_groups()
    groups = sorted({p.point.group.label for p in plan.points})
    assert len(groups) == 2
    ok = rows(plan, "ok")
    failed = [r.model_copy(update={"status": "error", "measured_s": None})
              for r in ok if r.group == groups[1]]  # fmt: skip
    mixed = [r for r in ok if r.group == groups[0]] + failed
    took = history.took_phases(plan.phases, mixed, wall_s=100.0, cluster_s=4.0)
    by = {(t.group, t.phase): t.seconds for t in took}
    assert by[(groups[0], "measured")] == pytest.approx(1.5)  # one ok point of 1.5 s
    assert (groups[1], "measured") not in by  # before: 0 s, scaling the next plan to nothing
    # its time is somewhere in the wall: no startup share can be told apart
    assert not any(phase == "startup" for _, phase in by)


def test_a_zero_second_figure_in_an_old_history_calibrates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text(line(phase(took_s=0.0)) + "\n")
    cal = history.calibration(history.read(path))
    assert cal.factors == {}
