"""A resumed run's serving phase compares a new level with the levels already measured ok in the
run folder, so `saturated` is the same as in a run that measured every level at once."""

from __future__ import annotations

from pathlib import Path

from harness.modes.serving.device.loadgen import LevelResult, mark_saturation
from harness.modes.serving.device.run import earlier_levels
from harness.row import ResultRow
from harness.run.contracts import WorkContext
from harness.spec.quality import QualitySettings
from harness.spec.scenario import GroupKey, Reference
from tests.factories import row, write_run

GROUP = GroupKey(
    target="cpu", model="tiny-llama", revision="main", backend="vllm", quantization="fp32",
    kv_cache_dtype="auto",
)  # fmt: skip


def context(run_dir: Path) -> WorkContext:
    return WorkContext(
        run_dir=str(run_dir), run=run_dir.name, reference=Reference(), quality=QualitySettings(),
        reference_backend="vllm",
    )  # fmt: skip


def level_row(concurrency: int, tok_s: float, e2e_ms: float, **kw: object) -> ResultRow:
    fields: dict[str, object] = {
        "mode": "serving", "group": GROUP.label, "backend": "vllm", "concurrency": concurrency,
        "batch": concurrency, "output_tok_s": tok_s, "e2e_ms_p50": e2e_ms, "requests_sent": 16,
        "requests_ok": 16, "requests_failed": 0, "slo_ttft_ms": 1000.0, "slo_tpot_ms": 50.0,
        "decode_tok_s": None,
    }  # fmt: skip
    fields.update(kw)
    return row(**fields)


def new_level(tok_s: float, e2e_ms: float) -> LevelResult:
    return LevelResult(
        status="ok", mode="concurrency", concurrency=8, requests_sent=16, requests_ok=16,
        requests_failed=0, output_tok_s=tok_s, e2e_ms_p50=e2e_ms, slo_ttft_ms=1000.0,
        slo_tpot_ms=50.0, generator="vllm bench serve test",
    )  # fmt: skip


def test_the_levels_measured_ok_before_are_read_back_and_only_those(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "run",
        [
            level_row(1, 100.0, 100.0),
            level_row(4, 300.0, 150.0),
            level_row(16, 1.0, 1.0, status="error"),  # not ok: redone, never compared with
            level_row(2, 1.0, 1.0, group="another|group"),  # another configuration
            row(group=GROUP.label, backend="vllm"),  # the group's offline row
        ],
    )
    earlier = earlier_levels(context(run), GROUP, "gen")
    assert sorted(r.concurrency or 0 for r in earlier) == [1, 4]


def test_a_resumed_level_is_flagged_saturated_against_the_earlier_ones(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [level_row(1, 100.0, 100.0), level_row(4, 300.0, 150.0)])
    stalled = new_level(305.0, 400.0)  # throughput +1.7 %, latency ×2.7 over concurrency 4
    earlier = earlier_levels(context(run), GROUP, "gen")
    assert mark_saturation([*earlier, stalled])[-1].saturated
    assert not mark_saturation([stalled])[-1].saturated  # alone it has nothing to compare with


def test_a_run_folder_on_another_machine_gives_no_earlier_levels(tmp_path: Path) -> None:
    assert earlier_levels(context(tmp_path / "absent"), GROUP, "gen") == []
