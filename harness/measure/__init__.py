"""Measurement primitives: memory per phase, timing, quality statistics, the equal-quality
verdict (`verdict`: pass / fail / undecided, margins, paired intervals), roofline ceilings.

Nothing here imports torch (or any engine) at module import time; the CUDA paths import it
inside the functions that need it, so planning and aggregation run where no engine is installed.

Units are in the names: *_mib MiB (2**20 bytes, `harness.units.MIB`), *_ms milliseconds,
*_s seconds, *_tok_s tokens per second, nll in nats.
"""

from __future__ import annotations

from typing import Literal

DeviceKind = Literal["cpu", "cuda"]


def device_kind(device: str) -> DeviceKind:
    """'cpu' or 'cuda' for a device string ('cpu', 'cuda', 'cuda:1'); ROCm is 'cuda' in torch."""
    name = device.strip().lower()
    if name == "cpu":
        return "cpu"
    if name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit()):
        return "cuda"
    raise ValueError(
        f"device {device!r} is not measurable here: use 'cpu', 'cuda' or 'cuda:N' "
        "(ROCm devices are 'cuda' in torch)"
    )


def cuda_index(device: str) -> int | None:
    """The N of 'cuda:N', or None for a bare 'cuda' (meaning torch's current device)."""
    name = device.strip().lower()
    return int(name[5:]) if name.startswith("cuda:") else None
