"""The one device loop: `iter_group` hands each mode's points to that mode's runner, in registry
order, with one job; the helpers every runner shares (OOM, memory, cards, plan gaps, KV pool)."""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import modes
from harness import plan as planner
from harness.measure.memory import PhaseMemory
from harness.modes.serving.spec import Lengths, ServingLevel, SloTargets
from harness.modes.training.spec import TrainingPoint
from harness.row import Provenance, ResultRow
from harness.run import device as dev
from harness.run import sweep, worker
from harness.run.contracts import GroupItem, WorkContext
from harness.spec import catalog
from harness.spec.quality import QualitySettings
from harness.spec.scenario import GroupKey, Point, Reference


def context(tmp_path: Path, gpu: str | None = None) -> WorkContext:
    return WorkContext(
        run_dir=str(tmp_path), run="t", reference=Reference(), quality=QualitySettings(),
        reference_backend="transformers", gpu=gpu,
    )  # fmt: skip


def point(**kw: Any) -> Point:
    base: dict[str, Any] = dict(
        model="tiny-llama", backend="transformers", quantization="none", kv_cache_dtype="auto",
        batch=1, context=16, output_tokens=4, target="cpu", repeats=1,
    )  # fmt: skip
    return Point.model_validate({**base, **kw})


SERVED = point(
    serving=ServingLevel(
        concurrency=1, requests=4, prompt_tokens=Lengths(mean=8), output_tokens=Lengths(mean=4),
        slo=SloTargets(ttft_ms_p99=1000.0, tpot_ms_p99=100.0), attainment=0.9,
    )
)  # fmt: skip
TRAINED = point(
    output_tokens=0,
    training=TrainingPoint(method="lora", micro_batch=1, grad_accum=1, seq_len=16, steps=1),
)


# --- the loop ------------------------------------------------------------------------------


def test_each_modes_points_go_to_its_runner_in_registry_order_with_one_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, list[Point], dev.Job]] = []

    def load(self: modes.Mode, part: str) -> dev.Runner:
        assert part == "run"

        def run(group: GroupKey, points: list[Point], job: dev.Job) -> Iterator[GroupItem]:
            calls.append((self.name, points, job))
            for p in points:
                yield job.row(p, "ok", None, [])

        return run

    monkeypatch.setattr(modes.Mode, "load", load)
    offline = point()
    rows = list(worker.iter_group(offline.group, [TRAINED, SERVED, offline], context(tmp_path)))
    assert (
        [name for name, _, _ in calls]
        == list(modes.REGISTRY)
        == [
            "offline",
            "serving",
            "training",
        ]
    )
    assert [points for _, points, _ in calls] == [[offline], [SERVED], [TRAINED]]
    job = calls[0][2]
    assert all(j is job for _, _, j in calls)
    assert job.device == "cpu" and job.provenance is not None and job.provenance.corpus_hash
    assert [r.mode for r in rows] == ["offline", "serving", "training"]


def test_a_mode_without_points_in_the_group_is_not_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    called: list[str] = []

    def load(self: modes.Mode, part: str) -> Any:
        called.append(self.name)
        return lambda group, points, job: iter(())

    monkeypatch.setattr(modes.Mode, "load", load)
    assert list(worker.iter_group(point().group, [point()], context(tmp_path))) == []
    assert called == ["offline"]


def test_every_registered_runner_takes_group_points_and_job() -> None:
    for mode in modes.REGISTRY.values():
        runner = mode.load("run")
        assert list(inspect.signature(runner).parameters) == ["group", "points", "job"], mode.name


def test_a_job_row_is_the_reference_only_offline_and_names_the_load_generator(
    tmp_path: Path,
) -> None:
    prov = Provenance(device_name="cpu", corpus_hash="c")
    job = dev.Job(
        ctx=context(tmp_path), device="cpu", model_path="m", tokenizer_dir="t", corpus_hash="c",
        reference_group=True, provenance=prov,
    )  # fmt: skip
    offline = job.row(point(), "ok", None, [], card="cpu")
    served = job.row(SERVED, "ok", None, [], load_generator="vllm bench serve 0.1")
    assert offline.is_reference and offline.gpu == "cpu" and offline.provenance == prov
    assert not served.is_reference
    assert served.provenance.load_generator == "vllm bench serve 0.1"
    assert prov.load_generator is None  # the group's provenance is not changed


# --- the helpers ---------------------------------------------------------------------------


class OOMError(Exception):
    pass


class OutOfMemoryError(RuntimeError):
    pass


@pytest.mark.parametrize(
    ("exc", "oom"),
    [
        (MemoryError(), True),
        (OutOfMemoryError("HIP error: hipErrorOutOfMemory"), True),
        (OOMError("could not allocate"), True),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (RuntimeError("shape mismatch"), False),
        (ValueError("memory"), False),
    ],
)
def test_an_oom_is_known_by_its_type_or_its_text(exc: BaseException, oom: bool) -> None:
    assert dev.is_oom(exc) is oom
    assert dev.failure_status(exc) == ("oom" if oom else "error")


def phase(allocated: float, used: float | None, fallback: bool = False) -> PhaseMemory:
    return PhaseMemory(
        peak_allocated_mib=allocated, peak_reserved_mib=None, device_used_mib=used,
        rss_peak_mib=None, source="test", global_fallback=fallback,
    )  # fmt: skip


def test_the_comparable_peak_is_the_device_figure_on_a_gpu_and_the_peak_elsewhere() -> None:
    assert dev.comparable_peak_mib(phase(100.0, 180.0), "cuda") == 180.0
    assert dev.comparable_peak_mib(phase(100.0, None), "cuda") == 100.0
    assert dev.comparable_peak_mib(phase(100.0, 900.0, fallback=True), "cuda") == 100.0
    assert dev.comparable_peak_mib(phase(100.0, 180.0), "cpu") == 100.0


def test_gap_pct() -> None:
    assert dev.gap_pct(110.0, 100.0) == pytest.approx(10.0)
    assert dev.gap_pct(None, 100.0) is None and dev.gap_pct(110.0, 0.0) is None


def test_the_kv_pool_has_headroom_and_a_floor() -> None:
    assert dev.kv_pool_bytes(1000 * 2**20) == int(1000 * 2**20 * dev.KV_POOL_HEADROOM)
    assert dev.kv_pool_bytes(1) == dev.KV_POOL_MIN_BYTES


def test_the_card_that_ran_the_group_and_the_card_its_plan_assumes(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    cpu = dev.card_for_device("anything", "cpu", ctx)
    assert cpu is not None and cpu.name == "cpu"
    assert dev.card_for_device("a GPU nobody knows", "cuda", ctx) is None
    named = context(tmp_path, gpu="MI300X")
    given = dev.card_for_device("a GPU nobody knows", "rocm", named)
    assert given is not None and given.name == "MI300X"  # --gpu names the card
    assert dev.plan_card(None, "cuda", ctx).name == "H100-SXM-80GB"
    assert dev.plan_card(None, "rocm", ctx).name == "MI300X"


def test_the_job_asks_for_the_card_by_the_device_name_in_its_provenance(tmp_path: Path) -> None:
    job = dev.Job(
        ctx=context(tmp_path), device="cuda", model_path="m", tokenizer_dir="t", corpus_hash="c",
        provenance=Provenance(device_name="a GPU nobody knows"),
    )  # fmt: skip
    assert job.card("cuda") is None and job.card("cpu") is not None


def test_trim_heap_hands_freed_heap_pages_back() -> None:
    """Freed C-heap blocks below the top of the heap stay in RSS until malloc_trim: 2,000 blocks
    of 64 KiB (under glibc's mmap threshold, so on the heap) are touched and freed but the last,
    which pins the top; trim_heap must give most of the 125 MiB back."""
    import ctypes

    import psutil

    from harness.run.device import trim_heap

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size, count = 64 * 1024, 2000
    blocks = [libc.malloc(size) for _ in range(count)]
    for b in blocks:
        ctypes.memset(b, 1, size)
    for b in blocks[:-1]:
        libc.free(b)
    before = psutil.Process().memory_info().rss
    assert trim_heap() is True
    after = psutil.Process().memory_info().rss
    libc.free(blocks[-1])
    assert before - after > 50 * 2**20, (before, after)


# --- the plan made once, in orchestration, carried to the device ----------------------------

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny-sweep.yaml"


def refuse_to_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device may not plan a point here: the carried plan must serve."""

    def plan_point(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the device planned a point it was handed a plan for")

    monkeypatch.setattr(planner, "plan_point", plan_point)


def job_carrying(tmp_path: Path, *plans: planner.PointPlan, gpu: str | None = None) -> dev.Job:
    return dev.Job(
        ctx=context(tmp_path, gpu=gpu), device="cuda", model_path="m", tokenizer_dir="t",
        corpus_hash="c", provenance=Provenance(device_name="a GPU nobody knows"),
        plans={p.point: p for p in plans},
    )  # fmt: skip


def test_the_device_uses_the_carried_plan_on_the_card_it_was_made_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_gpu = point(target="cuda")
    carried = planner.plan_point(on_gpu, catalog.gpu("H100-SXM-80GB"))
    refuse_to_plan(monkeypatch)
    job = job_carrying(tmp_path, carried)
    # a device the catalog does not know, no --gpu: the target's default card, the H100 planned on
    plan = job.plan(on_gpu, job.card("cuda"))
    assert plan is carried
    part = job.predicted(plan)
    assert part.replanned_from is None
    assert part.predicted_peak_mib == pytest.approx(carried.total_gib * 1024)  # GiB → MiB


def test_the_device_plans_again_on_another_card_and_the_row_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    on_gpu = point(target="cuda")
    carried = planner.plan_point(on_gpu, catalog.gpu("H100-SXM-80GB"))
    seen: list[str] = []
    real = planner.plan_point

    def plan_point(p: Point, card: Any, **kwargs: Any) -> Any:
        seen.append(card.name)
        return real(p, card, **kwargs)

    monkeypatch.setattr(planner, "plan_point", plan_point)
    job = job_carrying(tmp_path, carried, gpu="H200-141GB")  # --gpu names the card that ran it
    card = job.card("cuda")
    assert card is not None and card.name == "H200-141GB"
    plan = job.plan(on_gpu, card)
    assert seen == ["H200-141GB"] and plan.gpu == "H200-141GB"
    assert plan.capacity_gib == pytest.approx(140.4)  # the H200's (gpus.yaml), not the H100's 79.65
    row = job.row(on_gpu, "ok", None, [job.predicted(plan)], card=card.name)
    assert row.replanned_from == "H100-SXM-80GB" and row.gpu == "H200-141GB"
    assert "planned on H100-SXM-80GB, measured on H200-141GB" in capsys.readouterr().err


def test_without_a_carried_plan_the_device_plans_the_point_itself(tmp_path: Path) -> None:
    """A group measured without the sweep (harness.run.worker.measure_group) carries no plan."""
    job = dev.Job(
        ctx=context(tmp_path), device="cpu", model_path="m", tokenizer_dir="t", corpus_hash="c"
    )
    plan = job.plan(point(), catalog.gpu("cpu"))
    assert plan.gpu == "cpu" and job.predicted(plan).replanned_from is None


def test_the_sweep_attaches_each_points_plan_to_its_work_and_it_pickles(tmp_path: Path) -> None:
    """tiny-sweep: 2 quantizations × 2 batches × 2 contexts on the CPU = 2 groups of 4 points."""
    swept = sweep.prepare(FIXTURE, tmp_path / "run", runner="in-process")
    assert [len(w.plans) for w in swept.work] == [4, 4]
    for work in swept.work:
        assert [p.point for p in work.plans] == work.points
        assert {p.gpu for p in work.plans} == {"cpu"}
    again = pickle.loads(pickle.dumps(swept.work[0]))  # as a forked child or an actor gets it
    assert again == swept.work[0] and again.plans[0].total_gib == swept.work[0].plans[0].total_gib


def test_the_worker_hands_the_runners_the_plans_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs: list[dev.Job] = []

    def load(self: modes.Mode, part: str) -> dev.Runner:
        def run(group: GroupKey, points: list[Point], job: dev.Job) -> Iterator[GroupItem]:
            jobs.append(job)
            for p in points:
                yield job.row(p, "ok", None, [job.predicted(job.plan(p, catalog.gpu("cpu")))])

        return run

    offline = point()
    carried = planner.plan_point(offline, catalog.gpu("cpu"))
    monkeypatch.setattr(modes.Mode, "load", load)
    refuse_to_plan(monkeypatch)
    (row,) = worker.iter_group(offline.group, [offline], context(tmp_path), plans=[carried])
    assert jobs[0].plans == {offline: carried}
    assert isinstance(row, ResultRow) and row.replanned_from is None
    assert row.predicted_peak_mib == pytest.approx(carried.total_gib * 1024)  # GiB → MiB
