"""The report's memory chart: its caption states the measured − predicted gap per phase, and
where a phase is more than 10 % off, which points and (on the CPU) the term that explains it."""

from __future__ import annotations

import re
from pathlib import Path

from harness.results.aggregate import aggregate_run
from harness.results.publish import html
from harness.row import ResultRow
from tests import factories as F


def cpu_row(predicted: float, prefill: float, decode: float, **kw: object) -> ResultRow:
    return F.row(
        target="cpu", gpu=None, predicted_peak_mib=predicted, peak_mib_prefill=prefill,
        peak_mib_decode=decode, **kw,
    )  # fmt: skip


def caption(tmp_path: Path, rows: list[ResultRow]) -> str:
    F.write_run(tmp_path / "run", rows)
    result = aggregate_run(tmp_path / "run")
    notes = [part for part in html.memory_chart(result) if part.startswith('<p class="note">')]
    assert len(notes) == 1
    return re.sub(r"<[^>]+>", "", notes[0])


def test_points_within_ten_percent_get_each_phases_range_and_no_excuse(tmp_path: Path) -> None:
    """Gaps (measured − 1,000) / 1,000: prefill −5.0 and +8.0 %, decode −2.0 and +9.0 %."""
    text = caption(tmp_path, [
        cpu_row(1000.0, 950.0, 980.0, batch=1),
        cpu_row(1000.0, 1080.0, 1090.0, batch=4),
    ])  # fmt: skip
    assert "prefill -5.0 % to +8.0 % over 2 points" in text
    assert "decode -2.0 % to +9.0 % over 2 points" in text
    assert "more than 10 % off" not in text and "Why" not in text


def test_a_phase_off_by_more_than_ten_percent_names_its_points_and_the_term(
    tmp_path: Path,
) -> None:
    """Decode of the batch-4 point: (1,150 − 1,000) / 1,000 = +15.0 %; prefill stays at +4.0 %."""
    text = caption(tmp_path, [
        cpu_row(1000.0, 1000.0, 1000.0, batch=1),
        cpu_row(1000.0, 1040.0, 1150.0, batch=4),
    ])  # fmt: skip
    assert "prefill +0.0 % to +4.0 % over 2 points" in text
    decode = text.split("decode", 1)[1]
    assert "+0.0 % to +15.0 % over 2 points; 1 more than 10 % off (" in decode
    assert "b=4" in decode and "+15.0 %" in decode and "b=1" not in decode
    assert "Why, cpu:" in text and "bitsandbytes int8&#x27;s matmul buffers" in text


def test_a_gpu_point_off_by_more_than_ten_percent_gets_no_cpu_excuse(tmp_path: Path) -> None:
    text = caption(tmp_path, [F.row(predicted_peak_mib=1000.0, peak_mib_decode=800.0)])
    assert "decode -20.0 % to -20.0 % over 1 point; 1 more than 10 % off" in text
    assert "Why" not in text
