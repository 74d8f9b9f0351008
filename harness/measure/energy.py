"""Energy per phase from the device's own cumulative energy counter; never estimated from TDP.

Sources, in the units they count:

- ``nvml``: ``nvmlDeviceGetTotalEnergyConsumption`` (nvidia-ml-py), millijoules since the driver
  was loaded, Volta and newer. The board refreshes it every 20-100 ms, so a span shorter than
  that may read 0: such a span is None with the reason, and every metered phase runs for at least
  ``ENERGY_MIN_S``.
- ``amdsmi``: ``amdsmi_get_energy_count`` → ``energy_accumulator`` (called ``power`` in older
  bindings) × ``counter_resolution`` µJ (e.g. 15.3 µJ per tick), the whole card.
- ``rapl-package``: Linux powercap, ``/sys/class/powercap/intel-rapl:N/energy_uj`` (µJ) of every
  CPU package domain (name ``package-N``; sub-domains and ``psys`` are not added, they overlap),
  each wrapping to 0 after ``max_energy_range_uj``. It is the whole socket, other processes' work
  included. Often readable by root only (Linux ≥ 5.10, CVE-2020-8694).

The pure arithmetic (``nvml_joules``, ``amdsmi_joules``, ``rapl_joules``) takes raw counter
values; ``EnergyMeter`` wraps one *reader* (a function returning the raw counter now) and its
arithmetic. The real library calls live only in ``open_meter``'s readers, so tests drive a meter
with recorded counter sequences. A meter that cannot read says why (``unavailable_reason``), and
its spans are None with that reason.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from harness.errors import UserInputError
from harness.files import read_capped
from harness.measure import cuda_index, device_kind

T = TypeVar("T")
R = TypeVar("R")

ENERGY_MIN_S = 1.0  # a metered phase runs at least this long (NVML refreshes every 20-100 ms)
POWERCAP = Path("/sys/class/powercap")
# A container that mounts the host's sysfs elsewhere names the powercap tree here.
POWERCAP_ENV = "HARNESS_POWERCAP"


class CounterError(ValueError):
    """Two readings of a counter that give no energy (it went back: a driver reload, a reset)."""


# ---------------------------------------------------------------- arithmetic on raw counters


def nvml_joules(before_mj: int, after_mj: int) -> float:
    """Joules between two NVML readings (mJ); the counter only grows while the driver stays."""
    if after_mj < before_mj:
        raise CounterError(
            f"the NVML energy counter went back ({before_mj} → {after_mj} mJ): driver reloaded?"
        )
    return (after_mj - before_mj) / 1e3


AmdsmiReading = tuple[int, float]  # (energy accumulator ticks, µJ per tick)


def amdsmi_joules(before: AmdsmiReading, after: AmdsmiReading) -> float:
    """Joules between two amdsmi readings: Δ ticks × counter_resolution µJ (64-bit, no wrap)."""
    (ticks_0, res_0), (ticks_1, res_1) = before, after
    if not (math.isfinite(res_1) and res_1 > 0) or res_0 != res_1:
        raise CounterError(f"amdsmi counter resolution {res_0} → {res_1} µJ is not usable")
    if ticks_1 < ticks_0:
        raise CounterError(f"the amdsmi energy accumulator went back ({ticks_0} → {ticks_1})")
    return (ticks_1 - ticks_0) * res_1 / 1e6


RaplReading = tuple[tuple[int, int], ...]  # per package domain: (energy_uj, max_energy_range_uj)


def rapl_joules(before: RaplReading, after: RaplReading) -> float:
    """Joules between two readings of the package domains, each delta unwrapped once:
    after < before ⇒ the counter passed max_energy_range_uj and restarted at 0, so
    Δ = after + max_energy_range_uj − before (off by at most one RAPL energy unit, ~15-61 µJ, per
    wrap). A span must be shorter than one wrap (≥ 60 s at 1 kW for a 2^32 × 61 µJ range)."""
    if len(before) != len(after):
        raise CounterError(f"RAPL domains changed between readings ({len(before)} → {len(after)})")
    total_uj = 0
    for (uj_0, range_0), (uj_1, range_1) in zip(before, after, strict=True):
        if range_0 != range_1 or range_1 <= 0:
            raise CounterError(f"RAPL max_energy_range_uj changed ({range_0} → {range_1})")
        total_uj += uj_1 - uj_0 if uj_1 >= uj_0 else uj_1 + range_1 - uj_0
    return total_uj / 1e6


# ---------------------------------------------------------------- the meter


@dataclass(frozen=True)
class Span:
    """Energy over an interval (per call when divided by ``calls``); joules None: the reason."""

    joules: float | None
    seconds: float
    calls: int = 1
    reason: str | None = None

    @property
    def joules_per_call(self) -> float | None:
        return None if self.joules is None else self.joules / self.calls

    @property
    def seconds_per_call(self) -> float:
        return self.seconds / self.calls


@dataclass(frozen=True)
class Mark(Generic[T]):
    raw: T | None
    at_s: float
    problem: str | None = None


class EnergyMeter(Generic[T]):
    """``start()`` → mark, ``stop(mark)`` → Span. ``source`` names the counter; a meter built with
    ``unavailable(reason)`` reads nothing and gives None spans with that reason."""

    def __init__(
        self,
        source: str | None,
        read: Callable[[], T] | None,
        joules_between: Callable[[T, T], float] | None,
        *,
        unavailable_reason: str | None = None,
        close: Callable[[], object] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.source = source
        self._read = read
        self._joules_between = joules_between
        self.unavailable_reason = unavailable_reason
        self._close = close
        self._clock = clock

    @classmethod
    def unavailable(cls, reason: str) -> EnergyMeter[Any]:
        return EnergyMeter(None, None, None, unavailable_reason=reason)

    @property
    def available(self) -> bool:
        return self._read is not None

    def start(self) -> Mark[T]:
        return self._mark()

    def stop(self, mark: Mark[T], calls: int = 1) -> Span:
        end = self._mark()
        seconds = end.at_s - mark.at_s
        if self._read is None or self._joules_between is None:
            return Span(None, seconds, calls, self.unavailable_reason)
        problem = mark.problem or end.problem
        if problem is not None or mark.raw is None or end.raw is None:
            return Span(None, seconds, calls, f"{self.source}: {problem}")
        try:
            joules = self._joules_between(mark.raw, end.raw)
        except CounterError as exc:
            return Span(None, seconds, calls, f"{self.source}: {exc}")
        if joules == 0 and seconds > 0:
            return Span(None, seconds, calls,
                        f"{self.source}: the counter did not advance in {seconds:.3f} s "
                        "(refreshed less often than the phase lasted)")  # fmt: skip
        return Span(joules, seconds, calls)

    def joules_between(self, before: Mark[T], after: Mark[T]) -> float:
        """Joules between two readings of this meter (CounterError when they give none)."""
        if self._joules_between is None or before.raw is None or after.raw is None:
            raise CounterError(f"{self.source}: no readings to subtract")
        return self._joules_between(before.raw, after.raw)

    def _mark(self) -> Mark[T]:
        if self._read is None:
            return Mark(None, self._clock())
        try:
            raw = self._read()
        except Exception as exc:  # a reader that fails mid-run: this span is None, with why
            return Mark(None, self._clock(), f"{type(exc).__name__}: {exc}"[:300])
        return Mark(raw, self._clock())

    def close(self) -> None:
        if self._close is not None:
            _shutdown(self._close)  # closing a management library must not fail a group
            self._close = None


def nvml_meter(
    read_mj: Callable[[], int], close: Callable[[], object] | None = None
) -> EnergyMeter[int]:
    return EnergyMeter("nvml", read_mj, nvml_joules, close=close)


def amdsmi_meter(
    read: Callable[[], AmdsmiReading], close: Callable[[], object] | None = None
) -> EnergyMeter[AmdsmiReading]:
    return EnergyMeter("amdsmi", read, amdsmi_joules, close=close)


def rapl_meter(read: Callable[[], RaplReading]) -> EnergyMeter[RaplReading]:
    return EnergyMeter("rapl-package", read, rapl_joules)


def metered_calls(
    meter: EnergyMeter[Any], fn: Callable[[], R], *, min_duration_s: float = ENERGY_MIN_S
) -> tuple[Span, R]:
    """Call ``fn`` back to back until at least ``min_duration_s`` passed (at least once) under
    one span of the meter: (the span over its ``calls`` calls, the last call's result)."""
    mark = meter.start()
    calls = 0
    started = time.perf_counter()
    while True:
        result = fn()
        calls += 1
        if time.perf_counter() - started >= min_duration_s:
            return meter.stop(mark, calls), result


def point_energy(
    meter: EnergyMeter[Any],
    prefill: Callable[[], object],
    generate: Callable[[], int],
    *,
    min_duration_s: float = ENERGY_MIN_S,
) -> PhaseEnergy:
    """A point's energy in passes of its own, after its timing: prefill-only passes, then whole
    generations (``generate`` returns the tokens it decoded after the first of each sequence),
    each metered for at least ``min_duration_s``. An unavailable meter runs nothing."""
    if not meter.available:
        return PhaseEnergy(None, None, None, None, meter.unavailable_reason)
    prefill_span, _ = metered_calls(meter, prefill, min_duration_s=min_duration_s)
    generation_span, decoded = metered_calls(meter, generate, min_duration_s=min_duration_s)
    return decode_energy(prefill_span, generation_span, decoded)


class CounterTrace(Generic[T]):
    """The meter's counter read every ``interval_s`` on a thread while a ``with`` block runs, so
    that the energy of a window whose ends are known only afterwards (another process's clock
    marks: the load generator's first request and last response) can be read from it.

    ``span(start_s, end_s)`` takes the times on ``time.perf_counter``'s clock, which on Linux is
    CLOCK_MONOTONIC, shared by every process of the machine. Between two readings the counter
    is interpolated linearly: each end of the window is off by at most what the device drew in
    one interval (plus the counter's own refresh period, 20-100 ms for NVML), so windows shorter
    than ``ENERGY_MIN_S`` are None with the reason."""

    def __init__(self, meter: EnergyMeter[T], interval_s: float = 0.05) -> None:
        self.meter = meter
        self.interval_s = interval_s
        self.marks: list[Mark[T]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> CounterTrace[T]:
        if self.meter.available:
            self.sample()
            self._thread = threading.Thread(target=self._sampling, name="energy-trace", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.sample()

    def sample(self) -> None:
        """Read the counter now (the thread does this every ``interval_s``)."""
        self.marks.append(self.meter.start())

    def _sampling(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def span(self, start_s: float, end_s: float, *, min_s: float = ENERGY_MIN_S) -> Span:
        seconds = end_s - start_s
        if not self.meter.available:
            return Span(None, seconds, reason=self.meter.unavailable_reason)
        source = self.meter.source
        if seconds < min_s:
            return Span(None, seconds, reason=f"{source}: the window ({seconds:.3f} s) is "
                        f"shorter than {min_s:g} s, below what the counter resolves")  # fmt: skip
        marks = self.marks
        if len(marks) < 2 or not marks[0].at_s <= start_s < end_s <= marks[-1].at_s:
            covered = f"{marks[0].at_s:.3f}-{marks[-1].at_s:.3f}" if marks else "nothing"
            return Span(None, seconds, reason=f"{source}: the window {start_s:.3f}-{end_s:.3f} "
                        f"s is not inside the trace ({covered} s)")  # fmt: skip
        failed = [m.problem or "a reading failed" for m in marks if m.problem or m.raw is None]
        if failed:
            return Span(None, seconds, reason=f"{source}: {failed[0]}")
        try:
            joules = self._joules_at(end_s) - self._joules_at(start_s)
        except CounterError as exc:
            return Span(None, seconds, reason=f"{source}: {exc}")
        if joules <= 0:
            return Span(None, seconds, reason=f"{source}: the counter did not advance in "
                        f"{seconds:.3f} s")  # fmt: skip
        return Span(joules, seconds)

    def _joules_at(self, at_s: float) -> float:
        """Joules since the first reading, at ``at_s`` (linear between the readings around it);
        each step is unwrapped on its own, so a trace may outlast one RAPL wrap."""
        total = 0.0
        for before, after in zip(self.marks, self.marks[1:], strict=False):
            step = self.meter.joules_between(before, after)
            if at_s <= after.at_s:
                width = after.at_s - before.at_s
                return total + (step * (at_s - before.at_s) / width if width > 0 else step)
            total += step
        return total


# ---------------------------------------------------------------- per-phase figures


@dataclass(frozen=True)
class PhaseEnergy:
    """One point's energy: J per prefill pass, J of the decode steps of one generation, J per
    decoded token, mean decode power (W); None figures with the reasons joined."""

    energy_j_prefill: float | None
    energy_j_decode: float | None
    j_per_token_decode: float | None
    avg_power_w_decode: float | None
    reason: str | None


def decode_energy(prefill: Span, generation: Span, decoded_tokens: int) -> PhaseEnergy:
    """From a span of prefill-only passes (batch × context tokens, 1 new token each) and a span
    of whole generations of the same prompts:

        energy_j_prefill   = prefill J ÷ prefill calls
        energy_j_decode    = generation J ÷ generation calls − energy_j_prefill
        avg_power_w_decode = energy_j_decode ÷ (generation s ÷ calls − prefill s ÷ calls)
        j_per_token_decode = energy_j_decode ÷ decoded_tokens

    ``decoded_tokens``: tokens of one generation after the first of each sequence (the first
    comes out of prefill), i.e. batch × (new tokens − 1), as decode_tok_s counts them."""
    reasons = [r for r in (prefill.reason, generation.reason) if r]
    e_prefill = prefill.joules_per_call
    e_generation = generation.joules_per_call
    if e_prefill is None or e_generation is None:
        return PhaseEnergy(e_prefill, None, None, None, "; ".join(dict.fromkeys(reasons)))
    e_decode = e_generation - e_prefill
    decode_s = generation.seconds_per_call - prefill.seconds_per_call
    if e_decode <= 0 or decode_s <= 0:
        why = (f"decode energy not resolved: a generation ({e_generation:.4g} J, "
               f"{generation.seconds_per_call:.4g} s) minus a prefill pass ({e_prefill:.4g} J, "
               f"{prefill.seconds_per_call:.4g} s) is not positive")  # fmt: skip
        return PhaseEnergy(e_prefill, None, None, None, why)
    per_token = e_decode / decoded_tokens if decoded_tokens > 0 else None
    return PhaseEnergy(e_prefill, e_decode, per_token, e_decode / decode_s, None)


# ---------------------------------------------------------------- the real counters


def powercap_root() -> Path:
    """Where the RAPL tree is read: ``$HARNESS_POWERCAP``, else /sys/class/powercap."""
    return Path(os.environ.get(POWERCAP_ENV) or POWERCAP)


def open_meter(device: str, powercap: Path | None = None) -> EnergyMeter[Any]:
    """The meter of the device a group runs on: NVML on NVIDIA, amdsmi on ROCm, RAPL on the CPU
    (under ``powercap``, default ``powercap_root()``); ``EnergyMeter.unavailable(reason)`` when
    the counter cannot be read (never raises)."""
    try:
        return _open_meter(device, powercap or powercap_root())
    except Exception as exc:  # a meter that cannot open must not fail the group it meters
        return EnergyMeter.unavailable(f"energy meter for {device!r}: {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def metering(device: str, powercap: Path | None = None) -> Iterator[EnergyMeter[Any]]:
    """``open_meter`` for a ``with`` block; the management library is shut down after it."""
    meter = open_meter(device, powercap)
    try:
        yield meter
    finally:
        meter.close()


def _open_meter(device: str, powercap: Path) -> EnergyMeter[Any]:
    if device_kind(device) == "cpu":
        return open_rapl(powercap)
    try:
        import torch

        index = cuda_index(device)
        index = int(torch.cuda.current_device()) if index is None else index
        rocm = torch.version.hip is not None
    except Exception as exc:  # no GPU build, no device: the rows say so
        return EnergyMeter.unavailable(f"no GPU to meter on {device!r} ({type(exc).__name__})")
    return open_counter("amdsmi" if rocm else "nvml", index)


def amdsmi_reading(raw: dict[str, Any]) -> AmdsmiReading:
    """(ticks, µJ per tick) from ``amdsmi_get_energy_count``'s dict, old or new key names."""
    ticks = raw.get("energy_accumulator", raw.get("power"))
    resolution = raw.get("counter_resolution")
    if not isinstance(ticks, int) or not isinstance(resolution, (int, float)):
        raise CounterError(f"amdsmi_get_energy_count gave {sorted(raw)}, not a counter")
    return ticks, float(resolution)


# The cumulative energy counter of each GPU management library (harness.measure.memory's
# `open_library`): the call that reads it from a device handle, the raw reading from what the
# call returns, and the joules between two readings.
COUNTERS: dict[str, tuple[str, Callable[[Any], Any], Callable[[Any, Any], float]]] = {
    "nvml": ("nvmlDeviceGetTotalEnergyConsumption", int, nvml_joules),
    "amdsmi": ("amdsmi_get_energy_count", amdsmi_reading, amdsmi_joules),
}


def open_counter(tool: str, index: int) -> EnergyMeter[Any]:
    """The energy meter of torch's device `index` through `tool`'s library ("nvml", "amdsmi"),
    its counter read once here; unavailable with the reason when it cannot be read."""
    from harness.measure.memory import open_library

    call, reading, joules_between = COUNTERS[tool]
    lib = open_library(tool)
    if isinstance(lib, str):
        return EnergyMeter.unavailable(f"{tool}: {lib}")
    try:
        counter = getattr(lib.module, call)
        handle = lib.handle(index)

        def read() -> Any:
            return reading(counter(handle))

        read()  # NVML older than Volta, or a vGPU: NotSupported here, said once
    except Exception as exc:
        lib.close()
        return EnergyMeter.unavailable(f"{tool}: {call} unreadable ({exc})")
    return EnergyMeter(tool, read, joules_between, close=lib.close)


PACKAGE_DOMAIN = re.compile(r"^intel-rapl:\d+$")


def rapl_domains(powercap: Path = POWERCAP) -> tuple[list[Path], str | None]:
    """The package domains' folders, or why there are none to read."""
    if not powercap.is_dir():
        return [], f"rapl: {powercap} does not exist (no powercap driver, or a container)"
    try:
        found = [
            path
            for path in sorted(powercap.iterdir())
            if PACKAGE_DOMAIN.match(path.name) and _text(path / "name").startswith("package")
        ]
    except (OSError, ValueError) as exc:
        return [], f"rapl: {exc}"
    if not found:
        return [], f"rapl: no intel-rapl:N package domain under {powercap}"
    return found, None


def read_rapl(domains: Sequence[Path]) -> RaplReading:
    return tuple(
        (int(_text(d / "energy_uj")), int(_text(d / "max_energy_range_uj"))) for d in domains
    )


def open_rapl(powercap: Path = POWERCAP) -> EnergyMeter[Any]:
    domains, why = rapl_domains(powercap)
    if why is not None:
        return EnergyMeter.unavailable(why)
    try:
        read_rapl(domains)
    except (OSError, ValueError) as exc:
        hint = " (root only since Linux 5.10)" if isinstance(exc, PermissionError) else ""
        return EnergyMeter.unavailable(f"rapl: energy_uj unreadable: {exc}{hint}")
    return rapl_meter(lambda: read_rapl(domains))


MAX_COUNTER_BYTES = 256  # a sysfs counter is a number or a name on one line


def _text(path: Path) -> str:
    """A sysfs file's text ('' when it is not there); one that is not a regular file (a FIFO, a
    device) or longer than a counter is a ValueError naming it, never a hang."""
    try:
        return read_capped(path, MAX_COUNTER_BYTES, "RAPL file").decode().strip()
    except FileNotFoundError:
        return ""
    except UserInputError as exc:
        raise ValueError(str(exc)) from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not text") from None


def _shutdown(fn: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):
        fn()
