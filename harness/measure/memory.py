"""Memory per phase: torch peak stats plus NVML / amdsmi on CUDA and ROCm, sampled RSS on CPU.

Each phase (load, prefill, decode, ...) is measured in its own `measure_phase` block, so a peak
belongs to one phase only. All figures are MiB (2**20 bytes). A figure that could not be read is
None, never a guess. torch, pynvml and amdsmi are imported inside the functions that use them.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple, Self, TypeVar

import psutil
from pydantic import BaseModel, ConfigDict

from harness.measure import cuda_index, device_kind
from harness.units import to_mib

T = TypeVar("T")

_CGROUP_LIMIT_FILES = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)


class RssPeakSampler:
    """Peak resident set size (RSS) of this process while a `with` block runs.

    A daemon thread reads `psutil.Process().memory_info().rss` every `interval_s` seconds; one
    more sample is taken at enter and at exit. A spike shorter than the interval can be missed,
    so `peak_bytes` is a lower bound of the true peak. The thread costs a little CPU: measure
    memory and time in separate passes when the timing matters.
    """

    def __init__(self, interval_s: float = 0.005) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0 seconds, got {interval_s}")
        self.interval_s = interval_s
        self.start_bytes = 0
        self.peak_bytes = 0
        self.samples = 0
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def peak_mib(self) -> float:
        return to_mib(self.peak_bytes)

    def sample(self) -> int:
        """Read RSS now (bytes), fold it into the peak, and return it."""
        rss = int(self._process.memory_info().rss)
        with self._lock:
            self.peak_bytes = max(self.peak_bytes, rss)
            self.samples += 1
        return rss

    def __enter__(self) -> Self:
        self._stop.clear()
        self.peak_bytes = 0
        self.samples = 0
        self.start_bytes = self.sample()
        self._thread = threading.Thread(target=self._run, name="rss-peak-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()


class PhaseMemory(BaseModel):
    """Memory of one phase, MiB.

    On CPU, `peak_allocated_mib` is the process's RSS peak (what a CPU point costs).
    On CUDA/ROCm, `peak_allocated_mib` / `peak_reserved_mib` are torch's caching-allocator peaks
    since the phase began; `device_used_mib` is what the driver reports at the end of the phase:
    this process's usage (NVML), or the whole device's (`global_fallback=True`: NVML could not
    see this PID, e.g. in a container without `--pid host`, or ROCm's amdsmi).
    `rss_peak_mib` is the host RSS peak in every case.
    """

    model_config = ConfigDict(extra="forbid")

    peak_allocated_mib: float | None
    peak_reserved_mib: float | None
    device_used_mib: float | None
    rss_peak_mib: float | None
    source: str
    global_fallback: bool


class PhaseHandle:
    """What `measure_phase` yields; `.result` is readable once the `with` block has ended."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._result: PhaseMemory | None = None

    @property
    def done(self) -> bool:
        return self._result is not None

    @property
    def result(self) -> PhaseMemory:
        if self._result is None:
            raise RuntimeError(
                f"measure_phase({self.device!r}).result is read after the with-block ends "
                "(or the measurement failed while the block was raising)"
            )
        return self._result


@contextmanager
def measure_phase(device: str, *, interval_s: float = 0.005) -> Iterator[PhaseHandle]:
    """Measure the memory of the code in the `with` block on `device` ('cpu', 'cuda', 'cuda:N').

    CUDA/ROCm: synchronize and `reset_peak_memory_stats` before; synchronize, read
    `max_memory_allocated` / `max_memory_reserved` and the driver's used memory after.
    CPU: the RSS peak from `RssPeakSampler`. If the block raises (e.g. out of memory), the
    result is still filled when it can be read, and the exception propagates.
    """
    kind = device_kind(device)
    handle = PhaseHandle(device)
    index = _cuda_begin(device) if kind == "cuda" else None
    sampler = RssPeakSampler(interval_s)
    finished = False
    try:
        with sampler:
            yield handle
        finished = True
    finally:
        try:
            handle._result = _cpu_result(sampler) if index is None else _cuda_end(index, sampler)
        except Exception:
            if finished:
                raise  # otherwise the block's own exception is the one worth seeing


def device_total_mib(device: str) -> float:
    """Total memory, MiB: the GPU's on 'cuda[:N]'; on 'cpu' the host RAM or the cgroup limit,
    whichever is smaller (a container's limit is what a CPU point can use)."""
    if device_kind(device) == "cpu":
        total = int(psutil.virtual_memory().total)
        limit = _cgroup_limit_bytes()
        return to_mib(min(total, limit) if limit is not None else total)
    torch = _require_cuda(device)
    index = _resolve_index(torch, device)
    return to_mib(torch.cuda.get_device_properties(index).total_memory)


# ---------------------------------------------------------------- CPU


def _cpu_result(sampler: RssPeakSampler) -> PhaseMemory:
    return PhaseMemory(
        peak_allocated_mib=sampler.peak_mib,
        peak_reserved_mib=None,
        device_used_mib=None,
        rss_peak_mib=sampler.peak_mib,
        source="rss-sampler",
        global_fallback=False,
    )


def _cgroup_limit_bytes() -> int | None:
    for path in _CGROUP_LIMIT_FILES:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # v1 writes a huge number for "no limit"
            return int(text)
    return None


# ---------------------------------------------------------------- CUDA / ROCm (torch)


def _require_cuda(device: str) -> Any:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"device {device!r}: torch sees no CUDA/ROCm device (torch.cuda.is_available() is "
            f"False; torch {torch.__version__}); measure on 'cpu' or install a GPU build"
        )
    return torch


def _resolve_index(torch: Any, device: str) -> int:
    index = cuda_index(device)
    return int(torch.cuda.current_device()) if index is None else index


def _cuda_begin(device: str) -> int:
    torch = _require_cuda(device)
    index = _resolve_index(torch, device)
    torch.cuda.synchronize(index)
    torch.cuda.reset_peak_memory_stats(index)
    return index


def _cuda_end(index: int, sampler: RssPeakSampler) -> PhaseMemory:
    import torch

    torch.cuda.synchronize(index)
    allocated = to_mib(torch.cuda.max_memory_allocated(index))
    reserved = to_mib(torch.cuda.max_memory_reserved(index))
    rocm = torch.version.hip is not None
    used = _amdsmi_used_mib(index) if rocm else _nvml_used_mib(index)
    tool = "amdsmi" if rocm else "nvml"
    return PhaseMemory(
        peak_allocated_mib=allocated,
        peak_reserved_mib=reserved,
        device_used_mib=None if used is None else used[0],
        rss_peak_mib=sampler.peak_mib,
        source="torch.cuda" if used is None else f"torch.cuda+{tool}",
        global_fallback=False if used is None else used[1],
    )


def _torch_pci_address(index: int) -> tuple[int, int, int] | None:
    """(domain, bus, device) of torch's device `index`, to find the same GPU in NVML / amdsmi
    whatever CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES renumbered."""
    import torch

    props = torch.cuda.get_device_properties(index)
    names = ("pci_domain_id", "pci_bus_id", "pci_device_id")
    fields = [
        value for value in (getattr(props, name, None) for name in names) if isinstance(value, int)
    ]
    if len(fields) != len(names):
        return None
    return (fields[0], fields[1], fields[2])


def _parse_bdf(text: str) -> tuple[int, int, int] | None:
    """'0000:c1:00.0' → (0, 0xc1, 0)."""
    try:
        domain, bus, rest = text.strip().split(":")
        return (int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16))
    except ValueError:
        return None


# ---------------------------------------------------------------- the management libraries


class _Library(NamedTuple):
    package: str  # the module imported
    distribution: str  # what to install when it is missing
    init: str
    shutdown: str
    find: Callable[[ModuleType, int], Any]  # the handle of torch's device index


class DeviceLibrary(NamedTuple):
    """A GPU vendor's management library (NVML, amdsmi), initialised: its module, the handle of
    torch's device `index` in it, and `close` (its shutdown, which never raises)."""

    module: ModuleType
    library: _Library

    def handle(self, index: int) -> Any:
        return self.library.find(self.module, index)

    def close(self) -> None:
        _quietly(getattr(self.module, self.library.shutdown))


def open_library(tool: str) -> DeviceLibrary | str:
    """`tool`'s library ("nvml", "amdsmi") imported and initialised, or why it cannot be."""
    lib = _LIBRARIES[tool]
    try:
        module = importlib.import_module(lib.package)
    except ImportError:
        return f"{lib.distribution} is not installed"
    try:
        getattr(module, lib.init)()
    except Exception as exc:  # no driver, no library: the caller says so
        return f"{lib.init} failed ({exc})"
    return DeviceLibrary(module, lib)


def _read_with(tool: str, index: int, read: Callable[[Any, Any], T]) -> T | None:
    """`read(module, handle)` of torch's device `index` through `tool`'s library, shut down
    after; None when anything fails (tolerated: the figure stays None, never a guess)."""
    lib = open_library(tool)
    if isinstance(lib, str):
        return None
    try:
        return read(lib.module, lib.handle(index))
    except Exception:
        return None
    finally:
        lib.close()


# ---------------------------------------------------------------- NVML (NVIDIA)


def _nvml_used_mib(index: int) -> tuple[float, bool] | None:
    """(used MiB, global_fallback): this PID's usage, else the whole device's; None: unreadable."""
    return _read_with("nvml", index, _nvml_used)


def _nvml_used(pynvml: ModuleType, handle: Any) -> tuple[float, bool]:
    own_bytes = _nvml_process_bytes(pynvml, handle, os.getpid())
    if own_bytes is not None:
        return to_mib(own_bytes), False
    return to_mib(pynvml.nvmlDeviceGetMemoryInfo(handle).used), True


def _nvml_handle(pynvml: ModuleType, index: int) -> Any:
    address = _torch_pci_address(index)
    if address is not None:
        domain, bus, dev = address
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08X}:{bus:02X}:{dev:02X}.0")
        except Exception:
            pass
    return pynvml.nvmlDeviceGetHandleByIndex(index)  # right when CUDA_DEVICE_ORDER=PCI_BUS_ID


def _nvml_process_bytes(pynvml: ModuleType, handle: Any, pid: int) -> int | None:
    processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    used = [p.usedGpuMemory for p in processes if p.pid == pid and p.usedGpuMemory is not None]
    return int(sum(used)) if used else None


# ---------------------------------------------------------------- amdsmi (ROCm)


def _amdsmi_used_mib(index: int) -> tuple[float, bool] | None:
    """(used MiB, True): amdsmi's VRAM used is the whole device's, whole MiB."""
    return _read_with("amdsmi", index, _amdsmi_used)


def _amdsmi_used(amdsmi: ModuleType, handle: Any) -> tuple[float, bool]:
    usage = amdsmi.amdsmi_get_gpu_vram_usage(handle)
    return float(usage["vram_used"]), True  # amdsmi computes it as bytes // 2**20


def _amdsmi_handle(amdsmi: ModuleType, index: int) -> Any:
    handles = list(amdsmi.amdsmi_get_processor_handles())
    address = _torch_pci_address(index)
    if address is not None:
        for handle in handles:
            try:
                if _parse_bdf(str(amdsmi.amdsmi_get_gpu_device_bdf(handle))) == address:
                    return handle
            except Exception:
                continue
    return handles[index]


def _quietly(fn: Callable[[], object]) -> None:
    with suppress(Exception):
        fn()


_LIBRARIES = {
    "nvml": _Library("pynvml", "nvidia-ml-py", "nvmlInit", "nvmlShutdown", _nvml_handle),
    "amdsmi": _Library(
        "amdsmi", "the amdsmi package", "amdsmi_init", "amdsmi_shut_down", _amdsmi_handle
    ),
}


__all__ = [
    "DeviceLibrary",
    "PhaseHandle",
    "PhaseMemory",
    "RssPeakSampler",
    "device_total_mib",
    "measure_phase",
    "open_library",
]
