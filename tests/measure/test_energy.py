"""Energy from cumulative counters: RAPL sysfs (wraparound), NVML and amdsmi through their raw
readers, and the per-phase arithmetic, on recorded counter sequences."""

from __future__ import annotations

import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.measure import energy, memory
from harness.measure.energy import (
    CounterError,
    EnergyMeter,
    Span,
    amdsmi_joules,
    amdsmi_reading,
    decode_energy,
    nvml_joules,
    rapl_joules,
)


def nvml_over(readings: list[int], times: list[float]) -> EnergyMeter[int]:
    """An NVML meter whose reader returns the recorded counter values, at the recorded times."""
    reads: Iterator[int] = iter(readings)
    clock: Iterator[float] = iter(times)
    return EnergyMeter("nvml", lambda: next(reads), nvml_joules, clock=lambda: next(clock))


# --------------------------------------------------------------------------- RAPL sysfs


def rapl_tree(root: Path, domains: dict[str, tuple[str, int, int]]) -> Path:
    """A /sys/class/powercap copy: folder → (name, energy_uj, max_energy_range_uj)."""
    for folder, (name, uj, top) in domains.items():
        (root / folder).mkdir(parents=True)
        (root / folder / "name").write_text(name + "\n")
        (root / folder / "energy_uj").write_text(f"{uj}\n")
        (root / folder / "max_energy_range_uj").write_text(f"{top}\n")
    return root


# Recorded on a two-socket Xeon (cat of each file): the range is 2^32 energy units of 61.035 µJ.
RANGE_UJ = 262143328850


def test_rapl_adds_the_packages_unwraps_a_wrapped_counter_and_skips_overlapping_domains(
    tmp_path: Path,
) -> None:
    root = rapl_tree(tmp_path / "powercap", {
        "intel-rapl:0": ("package-0", 262_143_000_000, RANGE_UJ),
        "intel-rapl:0:0": ("core", 5_000_000, RANGE_UJ),  # inside package-0: not added
        "intel-rapl:1": ("package-1", 10_000_000, RANGE_UJ),
        "intel-rapl:2": ("psys", 7_000_000, RANGE_UJ),  # the platform, packages included
    })  # fmt: skip
    clock = iter([100.0, 102.0])
    domains, why = energy.rapl_domains(root)
    assert why is None and [d.name for d in domains] == ["intel-rapl:0", "intel-rapl:1"]
    meter = EnergyMeter(
        "rapl-package", lambda: energy.read_rapl(domains), rapl_joules, clock=lambda: next(clock)
    )
    mark = meter.start()
    (root / "intel-rapl:0" / "energy_uj").write_text("500000\n")  # wrapped past the range
    (root / "intel-rapl:0:0" / "energy_uj").write_text("999000000\n")
    (root / "intel-rapl:1" / "energy_uj").write_text("40000000\n")
    (root / "intel-rapl:2" / "energy_uj").write_text("999000000\n")
    span = meter.stop(mark)
    # package-0: 500,000 + 262,143,328,850 − 262,143,000,000 = 828,850 µJ; package-1: 30 J
    assert span.joules == pytest.approx(0.82885 + 30.0)
    assert span.seconds == 2.0 and span.reason is None


def test_rapl_without_powercap_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    meter = energy.open_meter("cpu", powercap=tmp_path / "absent")
    assert not meter.available and meter.source is None
    assert meter.unavailable_reason is not None
    assert "does not exist" in meter.unavailable_reason
    span = meter.stop(meter.start())
    assert span.joules is None and span.reason == meter.unavailable_reason


def test_rapl_with_no_package_domain_says_so(tmp_path: Path) -> None:
    root = rapl_tree(tmp_path / "powercap", {"intel-rapl:0:0": ("core", 1, RANGE_UJ)})
    meter = energy.open_rapl(root)
    assert meter.unavailable_reason is not None and "no intel-rapl:N package" in (
        meter.unavailable_reason
    )


def test_open_rapl_reads_a_readable_tree(tmp_path: Path) -> None:
    root = rapl_tree(tmp_path / "powercap", {"intel-rapl:0": ("package-0", 1000, RANGE_UJ)})
    meter = energy.open_rapl(root)
    assert meter.available and meter.source == "rapl-package"


def test_this_machine_without_powercap_gives_null_energy_with_a_reason() -> None:
    if energy.POWERCAP.exists():
        pytest.skip("this machine has /sys/class/powercap")
    meter = energy.open_meter("cpu")
    assert meter.unavailable_reason == (
        "rapl: /sys/class/powercap does not exist (no powercap driver, or a container)"
    )


def test_rapl_domains_that_change_between_readings_are_refused() -> None:
    with pytest.raises(CounterError):
        rapl_joules(((1, RANGE_UJ),), ((1, RANGE_UJ), (2, RANGE_UJ)))


# --------------------------------------------------------------------------- NVML


# nvmlDeviceGetTotalEnergyConsumption (mJ) read four times around a decode on an H100 SXM.
NVML_SEQUENCE = [183_749_220_125, 183_749_551_349, 183_749_551_349, 183_749_551_349]


def test_nvml_joules_are_millijoules_apart() -> None:
    assert nvml_joules(NVML_SEQUENCE[0], NVML_SEQUENCE[1]) == pytest.approx(331.224)


def test_an_nvml_meter_over_a_recorded_sequence() -> None:
    meter = nvml_over(NVML_SEQUENCE, [0.0, 0.5, 1.0, 1.01])
    span = meter.stop(meter.start(), calls=4)
    assert span.joules == pytest.approx(331.224) and span.seconds == 0.5
    assert span.joules_per_call == pytest.approx(82.806)
    # the counter did not advance in 10 ms (NVML refreshes every 20-100 ms): None with why
    short = meter.stop(meter.start())
    assert short.joules is None and short.reason is not None
    assert "did not advance in 0.010 s" in short.reason


def test_an_nvml_counter_that_goes_back_is_none_with_the_reason() -> None:
    meter = nvml_over([5000, 1000], [0.0, 1.0])
    span = meter.stop(meter.start())
    assert span.joules is None and span.reason is not None and "went back" in span.reason


def test_a_reader_that_fails_mid_run_gives_none_with_the_error() -> None:
    calls = iter([1000])

    def read() -> int:
        return next(calls)  # the second read raises StopIteration

    meter = energy.nvml_meter(read)
    span = meter.stop(meter.start())
    assert span.joules is None and span.reason is not None and "StopIteration" in span.reason


def _fake_pynvml(readings_mj: list[int], closed: list[str]) -> Any:
    fake: Any = types.ModuleType("pynvml")
    reads = iter(readings_mj)
    fake.nvmlInit = lambda: None
    fake.nvmlShutdown = lambda: closed.append("nvml")
    fake.nvmlDeviceGetHandleByIndex = lambda index: f"gpu{index}"
    fake.nvmlDeviceGetTotalEnergyConsumption = lambda handle: next(reads)
    return fake


def test_an_nvml_counter_opens_through_the_library_and_shuts_it_down_on_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([1000, 1000, 4000], closed))
    monkeypatch.setattr(memory, "_torch_pci_address", lambda index: None)
    meter = energy.open_counter("nvml", 0)  # the first reading is the probe
    assert meter.available and meter.source == "nvml"
    mark = meter.start()
    assert meter.joules_between(mark, meter.start()) == pytest.approx(3.0)
    meter.close()
    assert closed == ["nvml"]


def test_an_nvml_counter_that_cannot_be_read_is_unavailable_and_shut_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed: list[str] = []
    fake = _fake_pynvml([], closed)  # no reading: the probe raises StopIteration
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(memory, "_torch_pci_address", lambda index: None)
    meter = energy.open_counter("nvml", 0)
    assert meter.unavailable_reason == "nvml: nvmlDeviceGetTotalEnergyConsumption unreadable ()"
    assert closed == ["nvml"]


def test_a_missing_or_failing_library_says_which(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import amdsmi raises ImportError
    missing = energy.open_counter("amdsmi", 0)
    assert missing.unavailable_reason == "amdsmi: the amdsmi package is not installed"
    fake = _fake_pynvml([], [])

    def no_driver() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    fake.nvmlInit = no_driver
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    failing = energy.open_counter("nvml", 0)
    assert failing.unavailable_reason == ("nvml: nvmlInit failed (NVML Shared Library Not Found)")


# --------------------------------------------------------------------------- amdsmi


def test_amdsmi_is_ticks_times_the_resolution_in_microjoules() -> None:
    # amdsmi_get_energy_count on an MI300X (ROCm 6.2 key names), 2 s apart
    before = amdsmi_reading({"energy_accumulator": 1_874_002_113, "counter_resolution": 15.3,
                             "timestamp": 1_726_000_000_000})  # fmt: skip
    after = amdsmi_reading({"energy_accumulator": 1_874_080_545, "counter_resolution": 15.3,
                            "timestamp": 1_726_002_000_000})  # fmt: skip
    assert amdsmi_joules(before, after) == pytest.approx(78_432 * 15.3e-6)
    # older bindings call the accumulator "power"
    assert amdsmi_reading({"power": 7, "counter_resolution": 15.3}) == (7, 15.3)


def test_an_amdsmi_dict_without_a_counter_is_refused() -> None:
    with pytest.raises(CounterError):
        amdsmi_reading({"counter_resolution": 15.3})


def test_an_amdsmi_meter_over_a_recorded_sequence() -> None:
    reads = iter([(100, 15.3), (100 + 65_359, 15.3)])
    meter = energy.amdsmi_meter(lambda: next(reads))
    span = meter.stop(meter.start())
    assert span.joules == pytest.approx(65_359 * 15.3e-6)


# --------------------------------------------------------------------------- per phase


def test_decode_energy_by_hand() -> None:
    prefill = Span(joules=2.0, seconds=0.4, calls=4)  # 0.5 J and 0.1 s per pass
    generation = Span(joules=30.0, seconds=3.3, calls=3)  # 10 J and 1.1 s per generation
    got = decode_energy(prefill, generation, decoded_tokens=95)
    assert got.energy_j_prefill == pytest.approx(0.5)
    assert got.energy_j_decode == pytest.approx(9.5)
    assert got.avg_power_w_decode == pytest.approx(9.5)  # 9.5 J over 1.0 s
    assert got.j_per_token_decode == pytest.approx(0.1)
    assert got.reason is None


def test_decode_energy_that_is_not_positive_is_none_with_the_reason() -> None:
    got = decode_energy(Span(5.0, 0.5), Span(4.0, 1.0), decoded_tokens=10)
    assert got.energy_j_decode is None and got.j_per_token_decode is None
    assert got.reason is not None and "not positive" in got.reason
    missing = decode_energy(Span(None, 0.5, reason="nvml: x"), Span(4.0, 1.0), 10)
    assert missing.energy_j_prefill is None and missing.reason == "nvml: x"


def test_point_energy_meters_prefill_then_generation() -> None:
    """Counter readings (mJ): prefill span 1000 → 1600 over one pass; generation 1600 → 9600."""
    meter = nvml_over([1000, 1600, 1600, 9600], [0.0, 0.2, 0.2, 1.2])
    calls: list[str] = []

    def generate() -> int:
        calls.append("generate")
        return 40

    got = energy.point_energy(meter, lambda: calls.append("prefill"), generate, min_duration_s=0.0)
    assert calls == ["prefill", "generate"]
    assert got.energy_j_prefill == pytest.approx(0.6)
    assert got.energy_j_decode == pytest.approx(8.0 - 0.6)
    assert got.avg_power_w_decode == pytest.approx(7.4 / 0.8)
    assert got.j_per_token_decode == pytest.approx(7.4 / 40)


def test_an_unavailable_meter_runs_no_extra_pass() -> None:
    calls: list[str] = []
    got = energy.point_energy(
        EnergyMeter.unavailable("rapl: none"), lambda: calls.append("p"), lambda: 1
    )
    assert calls == [] and got.reason == "rapl: none" and got.energy_j_decode is None


# --------------------------------------------------------------------------- a traced window


def traced(meter: EnergyMeter[int], samples: int) -> energy.CounterTrace[int]:
    """A trace of ``samples`` readings taken by hand (the thread's job), no thread started."""
    trace = energy.CounterTrace(meter)
    for _ in range(samples):
        trace.sample()
    return trace


def test_a_window_between_readings_is_interpolated_on_the_counter() -> None:
    """Readings (mJ) at 0, 1, 2, 3 s: 0, 100000, 300000, 300000 (100 W, then 200 W, then idle).
    The window 0.5-2.5 s: half of the first second (50 J), all the second (200 J), half of the
    idle third (0 J)."""
    trace = traced(nvml_over([0, 100_000, 300_000, 300_000], [0.0, 1.0, 2.0, 3.0]), 4)
    span = trace.span(0.5, 2.5)
    assert span.reason is None and span.seconds == 2.0
    assert span.joules == pytest.approx(250.0)
    assert trace.span(1.0, 2.0).joules == pytest.approx(200.0)  # readings at both ends: exact


def test_a_window_outside_the_trace_or_too_short_is_none_with_why() -> None:
    trace = traced(nvml_over([0, 100_000, 200_000], [10.0, 11.0, 12.0]), 3)
    before = trace.span(9.0, 11.5)
    assert before.joules is None and "not inside the trace (10.000-12.000 s)" in str(before.reason)
    short = trace.span(10.2, 10.9)
    assert short.joules is None and "shorter than 1 s" in str(short.reason)
    idle = traced(nvml_over([5, 5, 5], [0.0, 1.0, 2.0]), 3).span(0.0, 2.0)
    assert idle.joules is None and "did not advance" in str(idle.reason)


def test_a_trace_unwraps_each_step_so_it_may_outlast_a_rapl_wrap() -> None:
    """A package counter with a range of 1,000,000 µJ rising 600,000 µJ a second wraps twice in
    3 s; each step is unwrapped on its own: 1.8 J in all."""
    top = 1_000_000
    reads = iter([((0, top),), ((600_000, top),), ((200_000, top),), ((800_000, top),)])
    clock = iter([0.0, 1.0, 2.0, 3.0])
    meter = EnergyMeter("rapl-package", lambda: next(reads), rapl_joules, clock=lambda: next(clock))
    trace = energy.CounterTrace(meter)
    for _ in range(4):
        trace.sample()
    assert trace.span(0.0, 3.0).joules == pytest.approx(1.8)


def test_a_failed_reading_in_the_trace_makes_the_window_none_with_the_error() -> None:
    values = iter([0, 1000])
    clock = iter([0.0, 1.0, 2.0])

    def read() -> int:
        value = next(values, None)
        if value is None:
            raise RuntimeError("GPU is lost")
        return value

    trace = traced(EnergyMeter("nvml", read, nvml_joules, clock=lambda: next(clock)), 3)
    span = trace.span(0.0, 2.0)
    assert span.joules is None and span.reason == "nvml: RuntimeError: GPU is lost"


def test_an_unavailable_meter_traces_nothing_and_says_why() -> None:
    with energy.CounterTrace(EnergyMeter.unavailable("rapl: none")) as trace:
        pass
    assert trace.marks == [] and trace.span(0.0, 2.0).reason == "rapl: none"


def test_the_thread_traces_a_counter_rising_at_a_known_power() -> None:
    """A counter that rises at exactly 40 W (µJ = W × µs of perf_counter): a 1 s window
    inside a traced 1.3 s reads 40 J within the interpolation's error."""
    watts = 40.0
    meter = energy.rapl_meter(lambda: ((int(time.perf_counter() * 1e6 * watts) % 2**50, 2**50),))
    with energy.CounterTrace(meter, interval_s=0.02) as trace:
        start = time.perf_counter()
        time.sleep(1.3)
    span = trace.span(start + 0.1, start + 1.1)
    assert len(trace.marks) > 20
    assert span.joules == pytest.approx(watts * 1.0, rel=0.01)


def test_perf_counter_is_one_clock_for_every_process() -> None:
    """The load generator stamps its requests with time.perf_counter() in its own process; the
    trace reads the counter on this process's: on Linux both are CLOCK_MONOTONIC."""
    before = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", "import time; print(repr(time.perf_counter()))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    after = time.perf_counter()
    assert before < float(out.stdout) < after


def test_harness_powercap_names_the_rapl_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = rapl_tree(tmp_path / "pc", {"intel-rapl:0": ("package-0", 5, RANGE_UJ)})
    monkeypatch.setenv(energy.POWERCAP_ENV, str(tree))
    meter = energy.open_meter("cpu")
    assert meter.source == "rapl-package" and meter.unavailable_reason is None
