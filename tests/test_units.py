"""harness.units: MiB and GiB are binary (2**20, 2**30 bytes), said once."""

from __future__ import annotations

from harness.units import GIB, MIB, to_gib, to_mib


def test_a_mib_is_two_to_the_twenty_bytes_and_a_gib_two_to_the_thirty() -> None:
    assert MIB == 1_048_576  # 1024 * 1024
    assert GIB == 1_073_741_824  # 1024 * 1024 * 1024


def test_bytes_convert_to_binary_mib_and_gib_not_to_decimal_megabytes() -> None:
    assert to_mib(3 * 1_048_576) == 3.0
    assert to_mib(524_288) == 0.5  # half of 1_048_576
    assert to_mib(1_000_000) == 1_000_000 / 1_048_576  # a decimal MB is ~0.954 MiB, not 1
    assert to_gib(80 * 1_073_741_824) == 80.0
    assert to_gib(536_870_912) == 0.5  # half of 1_073_741_824
    assert to_mib(0) == 0.0
