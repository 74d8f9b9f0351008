"""A group of several cards reserves them with a Ray placement group and gives them back however
it ends (harness.run.reservation, harness.run.driver). The bundles by hand, then a real local
Ray node: a tp=2 group that fails mid-group leaves no placement group behind, and the next
group, which needs the node's one CPU slot the placement group held, runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import corpus
from harness.run import driver, forking, reservation, store, sweep
from harness.run.contracts import point_row
from harness.spec.capabilities import Layout
from harness.spec.quality import QualitySettings
from harness.spec.scenario import GroupKey
from tests import factories as F

QUALITY = QualitySettings(window_tokens=64, max_windows=2, arc_items=2, bootstrap_samples=200)
CPU = {"num_cpus": 1, "num_gpus": 0, "resources": {"accel:cpu": 1.0}}  # node.actor_options("cpu")
GPU = {"num_cpus": 0, "num_gpus": 1, "resources": {"accel:nvidia": 1.0}}


def group(target: str, layout: str | None) -> GroupKey:
    return GroupKey(
        target=target, model="tiny-llama", revision="main", backend="vllm", quantization="none",
        kv_cache_dtype="auto", layout=None if layout is None else Layout.model_validate(layout),
    )  # fmt: skip


def test_one_card_reserves_nothing() -> None:
    assert not reservation.needs_reservation(group("cuda", None))
    assert reservation.total(group("cuda", None), GPU) == {"accel:nvidia": 1.0}


def test_tensor_ranks_on_one_gpu_node_are_one_bundle_of_k_cards_strictly_packed() -> None:
    tp4 = group("cuda", "tp=4")
    # one process holds all 4 cards (vLLM's "mp" executor starts a rank per card under it)
    assert reservation.bundles(tp4, GPU) == [{"accel:nvidia": 4.0, "GPU": 4.0}]
    assert reservation.strategy(tp4) == "STRICT_PACK"


def test_pipeline_stages_on_gpus_are_a_bundle_per_card_packed_across_nodes() -> None:
    pp = group("cuda", "tp=2,pp=2")
    # vLLM's Ray executor places one rank per one-card bundle, on as few nodes as hold them
    assert reservation.bundles(pp, GPU) == [{"accel:nvidia": 1.0, "GPU": 1.0}] * 4
    assert reservation.strategy(pp) == "PACK"
    assert reservation.total(pp, GPU) == {"accel:nvidia": 4.0, "GPU": 4.0}


def test_cpu_ranks_take_the_node_slot_and_a_core_each() -> None:
    tp2 = group("cpu", "tp=2")
    assert reservation.bundles(tp2, CPU) == [{"accel:cpu": 1.0, "CPU": 2.0}]
    assert reservation.strategy(tp2) == "STRICT_PACK"


# --- a real local Ray node ---------------------------------------------------------------------

ray = pytest.importorskip("ray")


class FailsAtALayout:
    """A group's actor: a tp=2 group dies mid-group (after its first message) saying which
    placement group it ran in; a one-card group writes its rows."""

    def __init__(self, simulate_on_cpu: bool = False) -> None: ...

    def measure(
        self, work: sweep.Work, points: list[Any], ctx: Any, reference: Any
    ) -> Iterator[tuple[Any, str]]:
        import ray as ray_here

        node_id = ray_here.get_runtime_context().get_node_id()
        yield forking.Started(), node_id
        current = ray_here.util.get_current_placement_group()
        if work.group.layout is not None:
            assert current is not None, "a layout's group runs inside its placement group"
            raise RuntimeError(f"engine died mid-group in placement group {current.id.hex()}")
        for point in points:
            yield (
                point_row(point, run=ctx.run, corpus_hash=corpus.corpus_hash(), status="ok"),
                node_id,
            )


@pytest.fixture
def local_node(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """One CPU node as harness.run.driver.connect starts it here: 2 cores, one accel:cpu slot."""
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        address="local", num_cpus=2, resources={"accel:cpu": 1}, include_dashboard=False,
        log_to_driver=False,
    )  # fmt: skip
    yield
    ray.shutdown()


def work_of(layout: str | None, context: int) -> sweep.Work:
    point = F.tiny_point(QUALITY, backend="vllm", context=context, layout=layout)
    return sweep.Work(group=point.group, points=[point], reference=True, est_seconds=1.0)


@pytest.mark.slow  # a local Ray node starts (about 20 s here, more under load)
def test_a_failed_layout_group_leaves_no_placement_group_and_the_next_group_runs(
    tmp_path: Path, local_node: None
) -> None:
    from harness.run.launchers.actor import ActorLauncher

    d = driver.Driver(tmp_path, F.work_context(tmp_path, QUALITY), [ActorLauncher(FailsAtALayout)])
    tp2 = work_of("tp=2", 16)
    d.run_wave([(tp2, tp2.points)])

    table = ray.util.placement_group_table()
    # the first try and two retries (driver.MAX_ATTEMPTS), each in a placement group of its own
    assert len(table) == driver.MAX_ATTEMPTS == len(d.failures)
    assert {pg["state"] for pg in table.values()} == {"REMOVED"}
    assert {next(iter(pg["bundles"].values()))["CPU"] for pg in table.values()} == {2.0}
    ran_in = {f["error"].rsplit(" ", 1)[-1] for f in d.failures}
    assert ran_in == set(table)  # each try ran inside the placement group made for it

    one = work_of(None, 32)  # needs the accel:cpu slot the placement groups held
    d.run_wave([(one, one.points)])
    rows, _ = store.read_rows(tmp_path)
    status = {r.context: r.status for r in rows}
    assert status == {16: "node_lost", 32: "ok"}
    assert len(ray.util.placement_group_table()) == driver.MAX_ATTEMPTS  # none made for one card
