"""scripts/serving_vs_offline.py pairs serving level c=B with the offline point at batch B of the
same configuration, and only those (rows written as a run would write them)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.row import ResultRow
from tests.factories import row, write_run

REPO = Path(__file__).resolve().parents[2]
GROUP = "tiny-llama|vllm|fp32|kv=auto|cpu"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "serving_vs_offline", REPO / "scripts" / "serving_vs_offline.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def offline(batch: int, decode: float) -> ResultRow:
    return row(
        group=GROUP, backend="vllm", batch=batch, context=128, output_tokens=64,
        decode_tok_s=decode, generated_tokens=64 * batch, e2e_ms_p50=1000.0,
    )  # fmt: skip


def serving(concurrency: int, tok_s: float, status: str = "ok") -> ResultRow:
    return row(
        mode="serving", group=GROUP, backend="vllm", batch=concurrency, concurrency=concurrency,
        status=status, output_tok_s=tok_s, decode_tok_s=None,
    )  # fmt: skip


def test_each_concurrency_is_paired_with_the_offline_batch_of_the_same_size(
    tmp_path: Path,
) -> None:
    run = write_run(
        tmp_path / "run",
        [
            offline(1, 100.0),
            offline(4, 400.0),
            serving(1, 80.0),
            serving(4, 200.0),
            serving(8, 1.0),
        ],
    )
    table = script().pairs(run)
    assert [t["B"] for t in table] == [1, 4]  # c=8 has no offline batch 8
    assert table[0]["ratio_to_decode"] == pytest.approx(0.8)
    assert table[1]["ratio_to_decode"] == pytest.approx(0.5)
    assert table[1]["offline_e2e_output_tok_s"] == pytest.approx(256.0)
    assert table[1]["ratio_to_e2e"] == pytest.approx(200.0 / 256.0)
    text = script().markdown(table)
    assert "| 4 | 400.0 | 256.0 | 200.0 | 0.50 | 0.78 |" in text


def test_a_failed_serving_level_has_no_ratio(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [offline(1, 100.0), serving(1, 80.0, status="error")])
    (pair,) = script().pairs(run)
    assert pair["serving_output_tok_s"] is None and pair["ratio_to_decode"] is None
