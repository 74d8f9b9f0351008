"""The shipped tiny model on transformers (CPU), loaded once for every kind's real-engine test
here (each such test is marked ``engine``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.backends.base import BackendOptions
from harness.spec.scenario import GroupKey

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="package")
def tiny_backend() -> Iterator[Any]:
    from harness.backends.transformers.backend import TransformersBackend

    group = GroupKey(target="cpu", model="tiny-llama", revision="main", backend="transformers",
                     quantization="none", kv_cache_dtype="auto")  # fmt: skip
    tiny = ROOT / "harness" / "data" / "tiny-llama"
    loaded = TransformersBackend(group, BackendOptions(device="cpu", model_path=str(tiny)))
    loaded.load()
    yield loaded
    loaded.close()
