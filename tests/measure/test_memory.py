"""Memory measurement against known allocations; GPU paths run only where torch sees a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from numpy.typing import NDArray

from harness.measure import memory
from harness.measure.memory import PhaseMemory, RssPeakSampler, device_total_mib, measure_phase
from harness.units import MIB


def _touched_block(n_mib: int) -> NDArray[np.float64]:
    return np.ones(n_mib * MIB // 8, dtype=np.float64)  # np.ones writes every page


def _until(condition: Any, timeout_s: float = 5.0) -> None:
    """Wait for the sampler thread: on a loaded 2-core machine it may not run for a while."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)


def in_fresh_process(check: str) -> None:
    """Run a check of this module in a new interpreter. RSS only grows on an allocation the
    allocator cannot serve from memory the process already holds, and earlier tests in the same
    session (a 2 GB model built and freed) leave such memory behind."""
    # loaded by its file path: an installed package may ship a top-level `tests` (gpuhunt does)
    code = (
        "import importlib.util as u; "
        f"s = u.spec_from_file_location('memory_checks', {str(Path(__file__).resolve())!r}); "
        f"m = u.module_from_spec(s); s.loader.exec_module(m); m.{check}()"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def check_sampler_sees_256_mib_and_keeps_the_peak() -> None:
    with RssPeakSampler(interval_s=0.005) as sampler:
        block = _touched_block(256)
        seen = sampler.samples
        _until(lambda: sampler.samples >= seen + 4)  # only the thread samples while it lives
        del block
        time.sleep(0.02)
    rss_now = psutil.Process().memory_info().rss
    assert sampler.peak_bytes - sampler.start_bytes >= 200 * MIB
    assert sampler.peak_bytes - rss_now >= 100 * MIB  # freed, yet the peak stays
    assert sampler.samples >= 4


def test_rss_sampler_sees_a_256_mib_allocation_and_keeps_the_peak_after_free() -> None:
    in_fresh_process("check_sampler_sees_256_mib_and_keeps_the_peak")


def test_rss_sampler_rejects_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        RssPeakSampler(interval_s=0)


def check_measure_phase_reports_the_rss_peak() -> None:
    baseline_mib = psutil.Process().memory_info().rss / MIB
    with measure_phase("cpu") as phase:
        block = _touched_block(128)
        time.sleep(0.3)  # the phase's sampler (5 ms) runs while the block lives, even under load
        del block
    result = phase.result
    assert result.source == "rss-sampler"
    assert result.rss_peak_mib is not None and result.rss_peak_mib >= baseline_mib + 100
    assert result.peak_allocated_mib == result.rss_peak_mib
    assert result.peak_reserved_mib is None and result.device_used_mib is None
    assert result.global_fallback is False


def test_measure_phase_on_cpu_reports_the_rss_peak_as_the_point_cost() -> None:
    in_fresh_process("check_measure_phase_reports_the_rss_peak")


def test_measure_phase_result_is_unreadable_inside_the_block() -> None:
    with measure_phase("cpu") as phase, pytest.raises(RuntimeError, match="after the with-block"):
        _ = phase.result


def test_measure_phase_keeps_the_result_when_the_block_raises() -> None:
    before_mib = psutil.Process().memory_info().rss / 2**20
    held = None
    with pytest.raises(KeyError), measure_phase("cpu") as phase:
        held = bytearray(64 * 2**20)  # 64 MiB, zero-filled (touched), alive past the block
        raise KeyError("out of memory, say")
    assert held is not None
    result = phase.result
    assert result.source == "rss-sampler" and result.peak_reserved_mib is None
    # the exit sample sees the 64 MiB the block left: at least the RSS before + 64 MiB, less a
    # few MiB the rest of the process may have handed back meanwhile
    assert result.rss_peak_mib >= before_mib + 64 - 4


def test_measure_phase_names_the_accepted_devices() -> None:
    with pytest.raises(ValueError, match="'cpu', 'cuda' or 'cuda:N'"), measure_phase("mps"):
        pass


def test_phase_memory_forbids_unknown_fields() -> None:
    with pytest.raises(ValueError):
        PhaseMemory.model_validate(
            {
                "peak_allocated_mib": 1.0,
                "peak_reserved_mib": None,
                "device_used_mib": None,
                "rss_peak_mib": 1.0,
                "source": "rss-sampler",
                "global_fallback": False,
                "peak_mb": 1.0,
            }
        )


def test_device_total_on_cpu_is_positive_and_at_most_host_ram() -> None:
    total = device_total_mib("cpu")
    assert 0 < total <= psutil.virtual_memory().total / MIB


def test_importing_memory_does_not_import_torch() -> None:
    code = (
        "import sys, harness.measure.memory, harness.measure.timing; print('torch' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root, env=env
    )
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- NVML / amdsmi logic, faked


class _Proc:
    def __init__(self, pid: int, used: int | None) -> None:
        self.pid = pid
        self.usedGpuMemory = used


def _fake_pynvml(processes: list[_Proc], used_bytes: int) -> Any:
    fake: Any = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: None
    fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetHandleByIndex = lambda index: f"gpu{index}"
    fake.nvmlDeviceGetComputeRunningProcesses = lambda handle: processes
    fake.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(used=used_bytes)
    return fake


@pytest.fixture
def no_pci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_torch_pci_address", lambda index: None)


@pytest.mark.usefixtures("no_pci")
def test_nvml_reports_this_process_usage_when_it_can_see_the_pid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pid = os.getpid()
    procs = [_Proc(pid, 300 * MIB), _Proc(pid + 1, 999 * MIB)]
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(procs, 5000 * MIB))
    assert memory._nvml_used_mib(0) == (300.0, False)


@pytest.mark.usefixtures("no_pci")
def test_nvml_falls_back_to_the_whole_device_when_the_pid_is_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    procs = [_Proc(1, None)]  # a container's PID namespace: NVML lists host PIDs only
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(procs, 5000 * MIB))
    assert memory._nvml_used_mib(0) == (5000.0, True)


def test_nvml_failing_to_start_gives_no_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    fake: Any = _fake_pynvml([], 0)

    def no_driver() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    fake.nvmlInit = no_driver
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert memory._nvml_used_mib(0) is None


def test_amdsmi_reports_whole_device_vram_in_mib_matched_by_pci_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake: Any = types.ModuleType("amdsmi")
    fake.amdsmi_init = lambda: None
    fake.amdsmi_shut_down = lambda: None
    fake.amdsmi_get_processor_handles = lambda: ["a", "b"]
    fake.amdsmi_get_gpu_device_bdf = lambda h: {"a": "0000:03:00.0", "b": "0000:c1:00.0"}[h]
    fake.amdsmi_get_gpu_vram_usage = lambda h: {"vram_used": {"a": 10, "b": 2048}[h]}
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    monkeypatch.setattr(memory, "_torch_pci_address", lambda index: (0, 0xC1, 0))
    assert memory._amdsmi_used_mib(0) == (2048.0, True)


# ---------------------------------------------------------------- real GPU


def _cuda_torch() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA/ROCm device")
    return torch


@pytest.mark.engine
def test_measure_phase_on_cpu_only_torch_says_no_gpu_is_visible() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(RuntimeError, match=r"is_available\(\) is False"), measure_phase("cuda"):
        pass


@pytest.mark.gpu
def test_measure_phase_on_cuda_sees_a_256_mib_tensor() -> None:
    torch = _cuda_torch()
    with measure_phase("cuda") as phase:
        block = torch.ones(256 * MIB // 4, dtype=torch.float32, device="cuda")
        del block
    result = phase.result
    assert result.source.startswith("torch.cuda")
    assert result.peak_allocated_mib is not None and result.peak_allocated_mib >= 256
    assert result.peak_reserved_mib is not None
    assert result.peak_reserved_mib >= result.peak_allocated_mib
    assert device_total_mib("cuda") > result.peak_allocated_mib
