"""harness.peers.gpu_check, its pure parts (the steps need a GPU: `make gpu-check`), and its
entry point's arguments."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from harness.peers import gpu_check

REPO = Path(__file__).resolve().parents[2]


def test_decode_rate_counts_the_tokens_and_time_after_the_first() -> None:
    assert gpu_check.decode_tok_s([11, 11], [10.0], 110.0) == pytest.approx(200)
    with pytest.raises(ValueError, match="no decode phase"):
        gpu_check.decode_tok_s([1], [10.0], 110.0)
    with pytest.raises(ValueError, match="no first-token time"):
        gpu_check.decode_tok_s([4], [], 110.0)


def test_above_the_roofline_or_short_of_tokens_fails() -> None:
    good = {"decode_tok_s": 200.0, "new_tokens": [128], "roofline_fraction": 0.63}
    ok, note = gpu_check.roofline_verdict({"1": good}, 128)
    assert ok and note == "batch 1: 200 tok/s = 63.0% of roofline"
    assert not gpu_check.roofline_verdict({"1": {**good, "roofline_fraction": 1.2}}, 128)[0]
    assert not gpu_check.roofline_verdict({"1": {**good, "new_tokens": [100, 128]}}, 128)[0]
    unknown_gpu = {"decode_tok_s": 200.0, "new_tokens": [128]}
    assert gpu_check.roofline_verdict({"64": unknown_gpu}, 128) == (True, "batch 64: 200 tok/s")


def test_the_8b_config_ships_with_the_catalog() -> None:
    assert gpu_check.LLAMA_8B_CONFIG.is_file()
    assert (gpu_check.TINY_MODEL / "config.json").is_file()


def test_the_entry_point_parses_into_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # any import of vllm would now fail
    spec = importlib.util.spec_from_file_location(
        "gpu_check_script", REPO / "scripts" / "gpu_check.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    options = script.parse_args(["--out", "x", "--skip-8b", "--batches", "1,8"])
    assert isinstance(options, gpu_check.Options)
    assert options.skip_8b and options.out == "x" and options.batches == "1,8"
