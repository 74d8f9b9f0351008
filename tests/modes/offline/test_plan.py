"""harness.modes.offline.plan: an offline point's plan is the inference plan, its seconds the
warm-ups and repeats of one prefill at peak FLOP/s and the decode at the roofline."""

from __future__ import annotations

import pytest

from harness import plan as planner
from harness.modes.offline.plan import plan_offline_point
from harness.spec import catalog
from harness.spec.scenario import Point

LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"
H100 = catalog.gpu("H100-SXM-80GB")  # 79.65 GiB, 3,350 GB/s, 989.4 bf16 TFLOP/s
ARCH = catalog.model(LLAMA8B)


def point(**kw: object) -> Point:
    return Point.model_validate(
        {
            "model": LLAMA8B, "backend": "transformers", "quantization": "bf16",
            "kv_cache_dtype": "auto", "batch": 1, "context": 1024, "output_tokens": 128,
            "target": "cuda", **kw,
        }
    )  # fmt: skip


def offline(p: Point, *, utilisation: float = 0.9, warmups: int = 1) -> planner.PointPlan:
    return plan_offline_point(p, H100, ARCH, planner.PlanOptions(utilisation, warmups))


def test_the_memory_and_the_roofline_of_llama_8b_bf16_on_an_h100_by_hand() -> None:
    found = offline(point())
    # 8,030,261,248 parameters × 2 bytes = 16,060,522,496 B = 14.9575 GiB
    assert found.weights_gib == pytest.approx(14.957527, rel=1e-6)
    # bytes a decode step reads: the weights less the untied embedding (a lookup):
    # 16,060,522,496 − 525,336,576 × 2 = 15,009,849,344; the KV at the mean context
    # 1,024 + 128 / 2 = 1,088 tokens × 131,072 B = 142,606,336; 3,350e9 / 15,152,455,680
    assert found.roofline_decode_tok_s == pytest.approx(221.08628, rel=1e-6)
    assert found.fits and found.capacity_gib == pytest.approx(79.65)  # transformers: whole card


def test_the_seconds_are_warmups_plus_repeats_runs_at_the_cuda_efficiency() -> None:
    # prefill: 2 × (6,979,321,856 linear + 525,336,576 embedding) × 1 × 1,024 tokens
    # ÷ 989.4e12 FLOP/s = 0.0155342 s; decode: 128 tokens ÷ 221.08628 tok/s = 0.5789595 s;
    # (1 warm-up + 5 repeats) × 0.5945 s ÷ 0.6 = 5.944937 s
    assert offline(point()).est_seconds == pytest.approx(5.944937, rel=1e-6)
    # 3 warm-ups: (3 + 5) runs instead of 6, the same per run
    assert offline(point(), warmups=3).est_seconds == pytest.approx(7.926583, rel=1e-6)


def test_vllm_on_a_gpu_is_planned_in_its_share_of_the_card_and_transformers_is_not() -> None:
    # vLLM pre-allocates gpu_memory_utilization of the card: 79.65 × 0.5 = 39.825 GiB
    assert offline(point(backend="vllm"), utilisation=0.5).capacity_gib == pytest.approx(39.825)
    assert offline(point(), utilisation=0.5).capacity_gib == pytest.approx(79.65)


def test_a_point_larger_than_its_share_does_not_fit_and_names_the_binding_term() -> None:
    # 14.96 GiB of weights alone exceed 0.1 × 79.65 = 7.965 GiB
    found = offline(point(backend="vllm"), utilisation=0.1)
    assert not found.fits
    assert (
        "weights 15 GiB exceed the card" in found.reason and "binding term: weights" in found.reason
    )
