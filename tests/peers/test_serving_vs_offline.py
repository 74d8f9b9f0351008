"""harness.peers.serving_vs_offline pairs serving level c=B with the offline point at batch B of
the same configuration, and only those (rows written as a run would write them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.peers import serving_vs_offline as svo
from harness.row import ResultRow
from tests.factories import row, write_run

GROUP = "tiny-llama|vllm|fp32|kv=auto|cpu"


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
    table = svo.pairs(run)
    assert [t["B"] for t in table] == [1, 4]  # c=8 has no offline batch 8
    assert table[0]["ratio_to_decode"] == pytest.approx(0.8)
    assert table[1]["ratio_to_decode"] == pytest.approx(0.5)
    assert table[1]["offline_e2e_output_tok_s"] == pytest.approx(256.0)
    assert table[1]["ratio_to_e2e"] == pytest.approx(200.0 / 256.0)
    text = svo.markdown(table)
    assert "| 4 | 400.0 | 256.0 | 200.0 | 0.50 | 0.78 |" in text


def test_a_failed_serving_level_has_no_ratio(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [offline(1, 100.0), serving(1, 80.0, status="error")])
    (pair,) = svo.pairs(run)
    assert pair["serving_output_tok_s"] is None and pair["ratio_to_decode"] is None


def test_a_ratio_outside_the_tolerance_is_marked_no(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [offline(1, 100.0), serving(1, 110.0)])
    last = svo.markdown(svo.pairs(run)).splitlines()[-1]
    assert last.startswith("| 1 | 100.0 | 64.0 | 110.0 | 1.10 |") and last.endswith("| no |")


def test_the_offline_engine_gets_the_cores_the_server_engine_gets() -> None:
    assert svo.engine_threads() >= 1
