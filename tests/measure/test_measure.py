"""harness.measure: which kind of device a device string names, and its CUDA index."""

from __future__ import annotations

import pytest

from harness.measure import cuda_index, device_kind


@pytest.mark.parametrize(
    ("device", "kind"), [("cpu", "cpu"), (" CPU ", "cpu"), ("cuda", "cuda"), ("cuda:1", "cuda")]
)
def test_a_device_string_names_cpu_or_cuda(device: str, kind: str) -> None:
    assert device_kind(device) == kind


@pytest.mark.parametrize("device", ["mps", "cuda:", "cuda:x", "rocm", ""])
def test_a_device_that_cannot_be_measured_is_refused_saying_what_would_do(device: str) -> None:
    with pytest.raises(ValueError, match=r"use 'cpu', 'cuda' or 'cuda:N'"):
        device_kind(device)


def test_the_cuda_index_is_n_of_cuda_n_and_none_for_the_current_device() -> None:
    assert cuda_index("cuda:2") == 2
    assert cuda_index("CUDA:0") == 0
    assert cuda_index("cuda") is None
    assert cuda_index("cpu") is None
