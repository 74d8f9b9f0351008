"""The worker's energy columns on the shipped tiny model: null with the reason where no counter
is readable (this machine), filled per phase where one is (a counter rising at a known power)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.measure import energy
from harness.measure.energy import EnergyMeter, RaplReading
from harness.row import Energy, ResultRow
from harness.run.contracts import point_row
from tests.run.test_worker import point, run

# Loads an engine or starts Ray: not in `make test-fast` (tests/conftest.py).
pytestmark = pytest.mark.engine

ENERGY_COLUMNS = ("energy_j_prefill", "energy_j_decode", "energy_j_quality",
                  "j_per_token_decode", "avg_power_w_decode")  # fmt: skip


def test_every_row_has_the_energy_columns() -> None:
    fields = set(ResultRow.model_fields)
    assert {*ENERGY_COLUMNS, "energy_source", "energy_unavailable_reason"} <= fields


@pytest.mark.skipif(energy.POWERCAP.exists(), reason="this machine has /sys/class/powercap")
def test_without_a_readable_counter_the_row_says_null_and_why(tmp_path: Path) -> None:
    (row,) = run(tmp_path, [point()])
    assert row.status == "ok", row.error
    assert all(getattr(row, name) is None for name in ENERGY_COLUMNS)
    assert row.energy_source is None
    assert row.energy_unavailable_reason is not None
    assert "/sys/class/powercap does not exist" in row.energy_unavailable_reason


WATTS = 10.0
WRAP_UJ = 1 << 40


def constant_power(watts: float) -> EnergyMeter[RaplReading]:
    """A package counter that rises at exactly `watts` (µJ = W × µs), wrapping as RAPL does."""

    def read() -> RaplReading:
        return ((int(time.perf_counter() * 1e6 * watts) % WRAP_UJ, WRAP_UJ),)

    return energy.rapl_meter(read)


def test_a_readable_counter_fills_every_phase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(energy, "open_meter", lambda device, powercap=None: constant_power(WATTS))
    (row,) = run(tmp_path, [point(batch=2, output_tokens=8)])
    assert row.status == "ok", row.error
    assert row.energy_source == "rapl-package" and row.energy_unavailable_reason is None
    assert row.avg_power_w_decode == pytest.approx(WATTS, rel=0.05)
    assert row.energy_j_quality is not None and row.quality_s is not None
    assert row.energy_j_quality == pytest.approx(WATTS * row.quality_s, rel=0.1)
    assert row.energy_j_prefill is not None and row.energy_j_prefill > 0
    assert row.energy_j_decode is not None and row.j_per_token_decode is not None
    # 2 sequences × (8 − 1) decoded tokens per generation
    assert row.j_per_token_decode == pytest.approx(row.energy_j_decode / 14)


def test_a_row_without_energy_says_why_whatever_its_status() -> None:
    skipped = point_row(point(), run="r", corpus_hash="c", status="skipped", error="does not fit")
    assert skipped.energy_unavailable_reason == "not measured: the point is skipped"
    lost = point_row(point(), run="r", corpus_hash="c", status="node_lost")
    assert lost.energy_unavailable_reason == "not measured: the point is node_lost"
    measured = point_row(
        point(), Energy(j_per_token_decode=0.1), run="r", corpus_hash="c", status="ok"
    )
    assert measured.energy_unavailable_reason is None and measured.j_per_token_decode == 0.1
