"""The one device loop: `iter_group` hands each mode's points to that mode's runner, in registry
order, with one job; the helpers every runner shares (OOM, memory, cards, plan gaps, KV pool)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import modes
from harness.measure.memory import PhaseMemory
from harness.modes.serving.spec import Lengths, ServingLevel, SloTargets
from harness.modes.training.spec import TrainingPoint
from harness.row import Provenance
from harness.run import device as dev
from harness.run import worker
from harness.run.contracts import GroupItem, WorkContext
from harness.spec.scenario import GroupKey, Point, QualitySettings, Reference, VllmOptions


def context(tmp_path: Path, gpu: str | None = None) -> WorkContext:
    return WorkContext(
        run_dir=str(tmp_path), run="t", reference=Reference(), quality=QualitySettings(),
        vllm=VllmOptions(), reference_backend="transformers", gpu=gpu,
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
