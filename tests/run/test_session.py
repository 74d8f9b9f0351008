"""The sweep's session (harness.run.session) with stand-ins for Ray and the group's process.

The tiny sweep (tests/fixtures/tiny-sweep.yaml): quantization {none, bnb-int8} × batch {1, 2} ×
context {16, 32} on the CPU, so 2 groups of 2 × 2 = 4 points, 8 points in all, none skipped; the
`none` group is the reference. A stand-in driver writes an `ok` row per point and records the
waves it was given; a stand-in server records when it was started and stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from harness.errors import UserInputError
from harness.run import driver, session, store, sweep
from harness.run.contracts import GroupItem, WorkContext, point_row
from harness.run.launchers import actor, forked, inline
from harness.spec.scenario import Point

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny-sweep.yaml"
REFERENCE = "tiny-llama|transformers|none|kv=auto|cpu"
OTHER = "tiny-llama|transformers|bnb-int8|kv=auto|cpu"


class StandInDriver:
    """Writes an `ok` row per point of each wave, as a driver does (store, then on_row)."""

    made: ClassVar[list[StandInDriver]] = []

    def __init__(self, run_dir: Path, ctx: Any, launchers: list[Any], **kw: Any) -> None:
        self.run_dir, self.ctx, self.launchers = run_dir, ctx, launchers
        self.on_row, self.on_group = kw["on_row"], kw["on_group"]
        self.waves: list[list[str]] = []
        self.failures: list[dict[str, Any]] = []
        StandInDriver.made.append(self)

    def run_wave(self, works: list[tuple[sweep.Work, list[Point]]]) -> None:
        self.waves.append([w.group.label for w, _ in works])
        for work, points in works:
            self.on_group(work.group.label, "node-a")
            for point in points:
                row = point_row(point, run=self.ctx.run, corpus_hash="c", status="ok")
                store.write_row(self.run_dir, row)
                self.on_row(row, "node-a")


class StandInActorLauncher:
    path = "fresh"


class StandInServer:
    def __init__(self, events: list[str]) -> None:
        self.info = "this node's server"
        self.events = events
        events.append("server started")

    def stop(self) -> None:
        self.events.append("server stopped")


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """No Ray: the stand-in driver, connect and disconnect recorded; history in tmp_path."""
    happened: list[str] = []
    StandInDriver.made.clear()
    monkeypatch.setenv("HARNESS_HISTORY", str(tmp_path / "history.jsonl"))
    monkeypatch.setattr(driver, "Driver", StandInDriver)
    monkeypatch.setattr(driver, "connect", lambda address: happened.append("connect") or {})
    monkeypatch.setattr(driver, "node_inventory", lambda: [])
    monkeypatch.setattr(driver, "disconnect", lambda local: happened.append(f"disconnect {local}"))
    monkeypatch.setattr(actor, "ActorLauncher", StandInActorLauncher)
    monkeypatch.setattr(
        forked.ForkedLauncher, "start_own_server", lambda self: StandInServer(happened)
    )
    yield happened


def test_the_reference_group_runs_in_a_wave_before_the_others(
    events: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_FORKSERVER", "1")
    outcome = session.run_sweep(FIXTURE, None, tmp_path / "run", True, None)
    (made,) = StandInDriver.made
    assert made.waves == [[REFERENCE], [OTHER]]
    rows, bad = store.read_rows(tmp_path / "run")
    assert not bad and len(rows) == 8 and {r.status for r in rows} == {"ok"}
    assert (outcome.run_dir, outcome.points, outcome.skipped) == (tmp_path / "run", 8, 0)
    assert outcome.lines  # planned against took: the phases joined the history
    assert (tmp_path / "history.jsonl").is_file()
    assert [type(x).__name__ for x in made.launchers] == ["ForkedLauncher", "StandInActorLauncher"]


def test_a_local_run_starts_its_nodes_server_before_ray_and_hands_it_to_the_forked_launcher(
    events: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_FORKSERVER", "1")
    session.run_sweep(FIXTURE, None, tmp_path / "run", True, None)
    assert events == ["server started", "connect", "disconnect False", "server stopped"]
    (made,) = StandInDriver.made
    assert made.launchers[0].own_server == "this node's server"


def test_the_server_stops_before_ray_starts_when_no_group_will_fork(
    events: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_FORKSERVER", "1")
    monkeypatch.setattr(forked.ForkedLauncher, "forks_any", lambda self, work: False)
    session.run_sweep(FIXTURE, None, tmp_path / "run", True, None)
    assert events[:3] == ["server started", "server stopped", "connect"]
    assert StandInDriver.made[0].launchers[0].own_server is None


@pytest.mark.parametrize(("switch", "address"), [("0", None), ("1", "head:6379")])
def test_no_server_starts_with_the_switch_off_or_on_a_cluster(
    events: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str,
    address: str | None,
) -> None:  # fmt: skip
    monkeypatch.setenv("HARNESS_FORKSERVER", switch)
    session.run_sweep(FIXTURE, address, tmp_path / "run", True, None)
    assert "server started" not in events and "connect" in events


def test_a_switch_that_is_no_switch_is_refused_before_the_run_folder_exists(
    events: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_FORKSERVER", "perhaps")
    with pytest.raises(UserInputError, match="HARNESS_FORKSERVER"):
        session.run_sweep(FIXTURE, None, tmp_path / "run", True, None)
    assert not (tmp_path / "run").exists() and events == []


def stand_in_group(
    group: Any, points: list[Point], ctx: WorkContext, *, reference: Any, device_override: Any,
    plans: Any,
) -> Iterator[GroupItem]:  # fmt: skip
    """As harness.run.worker.iter_group: a row per point, `ok`, its error saying whether the
    group was handed its reference's scores; each point comes with the plan the sweep made."""
    assert [(plan.point, plan.gpu) for plan in plans] == [(p, "cpu") for p in points]
    for p in points:
        yield point_row(p, run=ctx.run, corpus_hash="c", status="ok", error=f"ref {reference}")


def test_measure_here_runs_each_group_in_this_process_and_writes_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_HISTORY", str(tmp_path / "history.jsonl"))
    monkeypatch.setattr(inline, "GROUP", f"{__name__}:stand_in_group")
    outcome = session.measure_here(FIXTURE, tmp_path / "run", None, True)
    rows, bad = store.read_rows(tmp_path / "run")
    assert not bad and len(rows) == 8 and {r.status for r in rows} == {"ok"}
    assert {(r.quantization, r.error) for r in rows} == {
        ("none", "ref None"),  # the reference group compares with nothing
        ("bnb-int8", "ref None"),  # no scores were kept by the stand-in reference
    }
    assert (outcome.points, outcome.skipped) == (8, 0) and outcome.lines
    manifest = store.read_manifest(tmp_path / "run")
    assert manifest["runs"][-1]["wall_s"] == outcome.wall_s


def test_in_one_process_the_reference_runs_first_and_speculative_groups_last() -> None:
    from harness.spec.scenario import GroupKey
    from harness.spec.speculative import Ngram

    def work(name: str, reference: bool = False, speculative: bool = False) -> sweep.Work:
        group = GroupKey(target="cpu", model="tiny-llama", revision="main", backend="vllm",
                         quantization=name, kv_cache_dtype="auto",
                         speculative=Ngram(tokens=4) if speculative else None)  # fmt: skip
        return sweep.Work(group=group, points=[], reference=reference, est_seconds=1.0)

    todo = [(work("bf16", speculative=True), []), (work("fp16"), []),
            (work("fp32", reference=True), []), (work("none"), [])]  # fmt: skip
    order = [(w.group.quantization, w.group.speculative is not None)
             for w, _ in session.in_process_order(todo)]  # fmt: skip
    assert order == [("fp32", False), ("fp16", False), ("none", False), ("bf16", True)]
