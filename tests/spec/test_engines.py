"""The engine table (harness.spec.engines): one row per backend, read by the planner, the
budget and the process path."""

from __future__ import annotations

import pytest

from harness import budget, modes
from harness import plan as planner
from harness.backends.base import REGISTRY as BACKENDS
from harness.spec.capabilities import BACKENDS as BACKEND_NAMES
from harness.spec.engines import ENGINES, device_kind, engine
from harness.units import MIB


def test_every_backend_has_one_row_and_every_row_a_backend() -> None:
    assert set(ENGINES) == set(BACKEND_NAMES) == set(BACKENDS)


def test_the_planner_reads_the_process_and_first_forward_bytes_from_the_table() -> None:
    # transformers on the CPU: 375 MiB its process + 36 MiB bitsandbytes
    assert planner.runtime_context_bytes("cpu", "transformers", "bnb-nf4") == (375 + 36) * MIB
    assert planner.runtime_context_bytes("cpu", "vllm", "none") == 800 * MIB
    # the GPU's context, whatever the engine
    assert planner.runtime_context_bytes("cuda", "vllm", "none") == 700 * MIB


def test_rocm_reads_the_cuda_figures() -> None:
    assert device_kind("rocm") == "cuda"
    assert engine("vllm").start_s.on(device_kind("rocm")) == 51.0


def test_an_unknown_engine_is_named() -> None:
    with pytest.raises(KeyError, match="no engine 'sglang'"):
        engine("sglang")


@pytest.mark.parametrize(
    ("backend", "names", "forks"),
    [
        ("transformers", {"offline"}, True),
        ("transformers", {"offline", "training"}, True),
        ("transformers", {"offline", "serving"}, False),  # the server is a process of its own
        ("vllm", {"offline"}, False),  # its engine core is a process of its own
    ],
)
def test_a_group_forks_from_the_host_only_without_processes_of_its_own(
    backend: str, names: set[str], forks: bool
) -> None:
    assert modes.forks_from_host(backend, names) is forks


def test_the_budget_phases_keep_their_order_with_the_modes_phases() -> None:
    assert list(budget.PHASES) == [
        "cluster", "startup", "load", "quality", "measured", "server_start", "serving",
        "training",
    ]  # fmt: skip
