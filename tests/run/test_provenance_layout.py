"""A row's provenance names its layout's ranks, executor and binding (harness.run.worker)."""

from __future__ import annotations

import pytest

from harness.run import worker
from harness.spec.capabilities import Layout
from harness.spec.scenario import GroupKey


def group(target: str, layout: Layout | None) -> GroupKey:
    return GroupKey(target=target, model="tiny-llama", revision="main", backend="vllm",
                    quantization="none", kv_cache_dtype="auto", layout=layout)  # fmt: skip


def test_a_cpu_layout_records_two_ranks_started_by_mp_on_a_core_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {1, 0})
    facts = worker.layout_facts(group("cpu", Layout(tensor=2)), "cpu")
    assert facts == {"ranks": 2, "executor": "mp", "binding": "0|1"}


def test_a_gpu_layout_records_the_cards_ray_made_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,4,5")
    facts = worker.layout_facts(group("cuda", Layout(tensor=2, pipeline=2)), "cuda")
    assert facts == {"ranks": 4, "executor": "ray", "binding": "CUDA_VISIBLE_DEVICES=2,3,4,5"}


def test_one_card_records_nothing() -> None:
    assert worker.layout_facts(group("cpu", None), "cpu") == {}
