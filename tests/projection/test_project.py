"""The projection formulas, with expected values worked by hand from the catalog's peaks."""

from __future__ import annotations

import pytest

from harness.projection import project
from harness.spec import catalog

H100 = catalog.gpu("H100-SXM-80GB")  # 3350 GB/s, 989.4 / 1978.9 TFLOP/s
H200 = catalog.gpu("H200-141GB")  # 4800 GB/s, 989.4 / 1978.9
A100 = catalog.gpu("A100-SXM-80GB")  # 2039 GB/s, 312 bf16, no fp8
MI300X = catalog.gpu("MI300X")  # 5300 GB/s, 1307.4 / 2614.9


def test_a_card_projected_onto_itself_gives_the_measured_figure_exactly() -> None:
    measured = 1234.567891234
    assert project.project_decode(measured, H200, H200) == measured
    assert project.project_prefill(measured, H200, H200, "bf16") == measured
    assert project.project_prefill(measured, MI300X, MI300X, "fp8") == measured


def test_decode_carries_the_share_of_the_bandwidth_roofline() -> None:
    # 1000 tok/s on an H100 (3350 GB/s) → H200 (4800 GB/s): 1000 × 4800 / 3350 = 1432.8358…
    assert project.project_decode(1000.0, H100, H200) == pytest.approx(1432.8358209, rel=1e-9)
    # two cards each: the same ratio (6700 → 9600)
    assert project.project_decode(1000.0, H100, H200, gpus=2) == pytest.approx(1432.8358209)


def test_prefill_carries_the_share_of_the_compute_roofline_for_the_format() -> None:
    # bf16: 10 000 tok/s on an A100 (312) → H100 (989.4): 10 000 × 989.4 / 312 = 31 711.538…
    assert project.project_prefill(10_000.0, A100, H100, "bf16") == pytest.approx(31711.538461)
    # fp8 weights: H100 (1978.9) → MI300X (2614.9): 10 000 × 2614.9 / 1978.9 = 13 213.88…
    assert project.project_prefill(10_000.0, H100, MI300X, "fp8") == pytest.approx(13213.90166)


def test_fp8_weights_on_a_card_without_fp8_units_are_skipped_with_the_reason() -> None:
    assert project.project_prefill(10_000.0, H100, A100, "fp8") is None
    reason = project.cannot_run(A100, "fp8")
    assert reason is not None and "A100-SXM-80GB" in reason and "fp8" in reason
    assert project.cannot_run(A100, "bf16") is None


def test_fp8_between_vendors_is_flagged_e4m3fn_against_e4m3fnuz() -> None:
    flag = project.fp8_flag(H100, MI300X, "fp8", "auto")
    assert "e4m3fn on H100-SXM-80GB" in flag and "e4m3fnuz on MI300X" in flag
    assert project.fp8_flag(H100, H200, "fp8", "fp8") == ""  # same layout
    assert project.fp8_flag(H100, MI300X, "bf16", "auto") == ""  # no fp8 at all
    assert project.fp8_flag(H100, MI300X, "bf16", "fp8") != ""  # an fp8 KV cache


def test_the_pure_prefill_roofline_is_the_peak_over_two_flops_per_active_parameter() -> None:
    arch = catalog.model("meta-llama/Llama-2-7b-hf")
    # linears per layer: q,k,v,o 4 × 4096² = 67 108 864; MLP 3 × 4096 × 11008 = 135 266 304;
    # × 32 layers = 6 476 005 376; 989.4e12 / (2 × 6 476 005 376) = 76 389.1… tok/s
    assert project.prefill_roofline_tok_s(H100, arch, "fp16") == pytest.approx(76389.07, rel=1e-5)


def test_the_pure_decode_roofline_reads_the_planners_bytes_per_step() -> None:
    arch = catalog.model("meta-llama/Llama-2-7b-hf")
    # weights: 6 738 415 616 params × 2 B = 13 476 831 232 B, less the untied input embedding
    # (a lookup, not a read): 32 000 × 4 096 × 2 B = 262 144 000 B → 13 214 687 232 B a step;
    # KV per token: 2 × 32 layers × 32 heads × 128 × 2 B = 524 288 B; mean context 128 + 128/2
    # = 192 → 100 663 296 B; 3350e9 × 1 / (13 214 687 232 + 100 663 296) = 251.589 tok/s
    got = project.decode_roofline_tok_s(H100, arch, "fp16", 1, 128, 128)
    assert got == pytest.approx(251.589, rel=1e-5)
