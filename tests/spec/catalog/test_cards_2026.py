"""The 2026 cards of issue 46: each row held to its datasheet's figures, copied here by hand (per
GPU, dense; where the datasheet gives sparse or rack figures the division is written out)."""

from __future__ import annotations

import pytest

from harness.projection import project
from harness.projection.external import parse_external
from harness.spec import catalog

# name: (bandwidth GB/s, bf16, fp8, fp4 dense TFLOPS, NVLink domain)
DATASHEET = {
    # HGX B200 (8 GPUs): FP4 144 PF, FP8 72 PF, BF16 36 PF with sparsity; 64 TB/s
    "B200": (64_000 / 8, 36_000 / 8 / 2, 72_000 / 8 / 2, 144_000 / 8 / 2, 8),
    # HGX B300: FP4 108 PF dense; FP8 72, BF16 36 PF with sparsity; 8 TB/s per GPU
    "B300": (8_000, 36_000 / 8 / 2, 72_000 / 8 / 2, 108_000 / 8, 8),
    # GB200 NVL72 (72 GPUs): FP4 1,440, FP8 720, BF16 360 PF with sparsity; 576 TB/s
    "GB200": (576_000 / 72, 360_000 / 72 / 2, 720_000 / 72 / 2, 1_440_000 / 72 / 2, 72),
    # GB300 NVL72: FP4 1,080 PF dense; FP8 720, BF16 360 PF with sparsity; 576 TB/s
    "GB300": (576_000 / 72, 360_000 / 72 / 2, 720_000 / 72 / 2, 1_080_000 / 72, 72),
    # H100 NVL: 3.9 TB/s; BF16 1,671, FP8 3,341 TFLOPS with sparsity; no fp4
    "H100-NVL-94GB": (3_900, 1_671 / 2, 3_341 / 2, None, 2),
    # H200 NVL: 4.8 TB/s; same sparse figures as the H100 NVL; up to 4 cards bridged
    "H200-NVL-141GB": (4_800, 1_671 / 2, 3_341 / 2, None, 4),
    # GH200 144 GB: 4.9 TB/s; BF16 1,979, FP8 3,958 TFLOPS with sparsity
    "GH200-144GB": (4_900, 1_979 / 2, 3_958 / 2, None, 1),
    # RTX PRO 6000 Blackwell Server: 1,597 GB/s; 4 PF FP4 with sparsity
    "RTX-PRO-6000-Blackwell-Server": (1_597, 4_000 / 8, 4_000 / 4, 4_000 / 2, 1),
    # RTX 5090: 1,792 GB/s; 3,352 AI TOPS (FP4 sparse); FP16-accumulate tensor 419 dense
    "RTX-5090": (1_792, 419, 3_352 / 4, 3_352 / 2, 1),
    # L40: 864 GB/s; BF16 181.05, FP8 362.05 dense
    "L40": (864, 181.05, 362.05, None, 1),
    # A10G: 600 GB/s; 70 TFLOPS 16-bit tensor, no fp8 unit
    "A10G": (600, 70, None, None, 1),
    # H20: 4.0 TB/s; 148 BF16, 296 FP8 dense
    "H20": (4_000, 148, 296, None, 8),
    # MI355X: 8 TB/s; 256 CUs × 2.4 GHz × 4,096 / 8,192 / 16,384 FLOP per CU per clock
    "MI355X": (8_000, 256 * 2.4e9 * 4096 / 1e12, 256 * 2.4e9 * 8192 / 1e12,
               256 * 2.4e9 * 16384 / 1e12, 8),
    # MI350X: the same at 2.2 GHz
    "MI350X": (8_000, 256 * 2.2e9 * 4096 / 1e12, 256 * 2.2e9 * 8192 / 1e12,
               256 * 2.2e9 * 16384 / 1e12, 8),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_each_2026_card_holds_its_datasheet_figures(name: str) -> None:
    bandwidth, bf16, fp8, fp4, domain = DATASHEET[name]
    card = catalog.gpu(name)
    assert card.bandwidth_gb_s == pytest.approx(bandwidth, rel=1e-3)
    assert card.bf16_tflops == pytest.approx(bf16, rel=1e-3)
    assert card.fp8_tflops == (None if fp8 is None else pytest.approx(fp8, rel=1e-3))
    assert card.fp4_tflops == (None if fp4 is None else pytest.approx(fp4, rel=1e-3))
    assert card.nvlink_domain == domain


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_each_2026_card_states_its_source_date_and_derivation(name: str) -> None:
    card = catalog.gpu(name)
    assert card.source.startswith(("http", "NVIDIA"))
    assert card.read_on == "2026-12-07"
    assert card.derivation


def test_fp4_flavours_follow_the_vendor() -> None:
    # Blackwell runs NVFP4 and MXFP4; CDNA 4 runs the OCP MX formats only; Hopper has no fp4
    assert catalog.gpu("B200").fp4_flavours == ("nvfp4", "mxfp4")
    assert catalog.gpu("MI355X").fp4_flavours == ("mxfp4",)
    assert catalog.gpu("H20").fp4_flavours == ()
    assert catalog.gpu("MI355X").fp8_flavour == "e4m3fn"


@pytest.mark.parametrize(
    ("reported", "name"),
    [
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA H100 NVL", "H100-NVL-94GB"),
        ("AMD Instinct MI355X", "MI355X"),
        ("NVIDIA GeForce RTX 5090", "RTX-5090"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-Blackwell-Server"),
    ],
)
def test_what_nvidia_smi_and_amd_smi_print_finds_the_row(reported: str, name: str) -> None:
    spec = catalog.gpu_for_device_name(reported)
    assert spec is not None and spec.name == name


def test_an_external_csv_with_b200_b300_and_mi355x_rows_is_read() -> None:
    header = ("gpu,gpus,engine,engine_version,model,weights,batch,concurrency,input_tokens,"
              "output_tokens,output_tok_s,tpot_ms,ttft_ms,e2e_s,source")  # fmt: skip
    rows = [
        "B200,8,vllm,0.11,deepseek-ai/DeepSeek-R1,fp8,,64,1024,1024,9000,,,,https://x.test/a",
        "B300,8,sglang,0.5,deepseek-ai/DeepSeek-R1,nvfp4,,64,1024,1024,12000,,,,https://x.test/b",
        "MI355X,8,vllm,0.10,deepseek-ai/DeepSeek-R1,mxfp4,,64,1024,1024,8000,,,,https://x.test/c",
    ]
    read = parse_external("\n".join([header, *rows]) + "\n", "market.csv", strict=True)
    assert [r.gpu for r in read.rows] == ["B200", "B300", "MI355X"] and not read.skipped


@pytest.mark.parametrize(
    ("card", "weights", "peak"),
    [
        ("B200", "nvfp4", 9000),  # fp4 units of the NVFP4 flavour
        ("MI355X", "mxfp4", 10066.3),  # CDNA 4 runs MXFP4 on its fp4 units
        ("MI355X", "nvfp4", 2516.6),  # no NVFP4 units: dequantized, bf16 peak
        ("H200-141GB", "mxfp4", 989.4),  # Hopper has no fp4: bf16 peak (weight-only)
        ("H200-141GB", "fp8-block", 1978.9),  # fp8 units
        ("A10G", "fp8-block", None),  # no fp8 units: does not run as measured
        ("L40", "w8a8-int8", 2 * 181.05),  # int8 taken at twice the bf16 rate
        ("B300", "none", 2250),
    ],
)
def test_prefill_runs_at_the_formats_peak_fp4_only_where_the_card_has_it(
    card: str, weights: str, peak: float | None
) -> None:
    got = catalog.format_peak_tflops(catalog.gpu(card), weights)
    assert got == (None if peak is None else pytest.approx(peak))
    assert project.peak_tflops(catalog.gpu(card), weights) == got


def test_cdna4_fp8_is_ocp_e4m3fn_unlike_mi300() -> None:
    assert project.fp8_flavour(catalog.gpu("MI355X")) == "e4m3fn"
    assert project.fp8_flavour(catalog.gpu("MI300X")) == "e4m3fnuz"
