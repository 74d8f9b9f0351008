"""harness.peers.optimum_grid: the grid runner that runs inside optimum-benchmark's venv. Here
optimum_benchmark is a stand-in module: what each point hands its API (the quantization, the
shapes, the new tokens), its record, a failed point kept going, and summary.json of the grid."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from harness.peers import optimum_grid

GRID = {"quants": ["none", "bnb-nf4"], "batches": [1, 2], "contexts": [16], "new_tokens": 8,
        "warmups": 1, "iterations": 2}  # fmt: skip
REPORT = {
    "load_model": {"latency": {"count": 1, "total": 2.0, "mean": 2.0, "p50": 2.0}},
    "generate": {"latency": {"count": 2, "total": 1.0, "mean": 0.5}},
    "prefill": {"latency": {"count": 2, "total": 0.2, "mean": 0.1}},
    "decode": {"latency": {"count": 2, "total": 0.8, "mean": 0.4}, "throughput": {"value": 35.0}},
}


class Config:
    """A stand-in config: keeps its keyword arguments; saves them as JSON."""

    def __init__(self, **kw: Any) -> None:
        self.kw = kw

    def save_json(self, path: str) -> None:
        Path(path).write_text(json.dumps({k: str(v) for k, v in self.kw.items()}))


class Report:
    def to_dict(self) -> dict[str, Any]:
        return REPORT

    def save_json(self, path: str) -> None:
        Path(path).write_text(json.dumps(REPORT))


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Config]:
    """optimum_benchmark as a stand-in; every launched config, in order. A batch of 2 with nf4
    fails (as a point of a real sweep may)."""
    configs: list[Config] = []

    class Benchmark:
        @staticmethod
        def launch(config: Config) -> Report:
            configs.append(config)
            backend, scenario = config.kw["backend"], config.kw["scenario"]
            if (
                "quantization_scheme" in backend.kw
                and scenario.kw["input_shapes"]["batch_size"] == 2
            ):
                raise RuntimeError("CUDA out of memory")
            return Report()

    module = types.ModuleType("optimum_benchmark")
    for name in ("BenchmarkConfig", "InferenceConfig", "InlineConfig", "ProcessConfig",
                 "PyTorchConfig"):  # fmt: skip
        setattr(module, name, type(name, (Config,), {}))
    module.Benchmark = Benchmark  # type: ignore[attr-defined]
    logging_utils = types.ModuleType("optimum_benchmark.logging_utils")
    logging_utils.setup_logging = lambda **kw: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "optimum_benchmark", module)
    monkeypatch.setitem(sys.modules, "optimum_benchmark.logging_utils", logging_utils)
    monkeypatch.chdir(tmp_path)  # a point chdirs into its folder: the test's cwd comes back
    return configs


def test_lat_keeps_count_total_and_mean_or_none() -> None:
    assert optimum_grid.lat(REPORT, "load_model") == {"count": 1, "total": 2.0, "mean": 2.0}
    assert optimum_grid.lat({"decode": {}}, "decode") is None
    assert optimum_grid.lat({}, "decode") is None


def test_a_point_hands_its_shapes_and_quantization_and_records_its_figures(
    launched: list[Config],
) -> None:
    rec = optimum_grid.run_point("bnb-int8_bs1_seq16", "bnb-int8", 1, 16, GRID, "m/x", "inline")
    (config,) = launched
    backend, scenario = config.kw["backend"], config.kw["scenario"]
    assert backend.kw == {"model": "m/x", "device": "cpu", "torch_dtype": "float32",
                          "quantization_scheme": "bnb",
                          "quantization_config": {"load_in_8bit": True}}  # fmt: skip
    assert scenario.kw["input_shapes"] == {"batch_size": 1, "sequence_length": 16}
    assert scenario.kw["generate_kwargs"] == {"max_new_tokens": 8, "min_new_tokens": 8}
    assert (scenario.kw["warmup_runs"], scenario.kw["iterations"]) == (1, 2)
    assert type(config.kw["launcher"]).__name__ == "InlineConfig"
    assert rec["ok"] and rec["decode_tok_s"] == 35.0
    assert rec["decode"] == {"count": 2, "total": 0.8, "mean": 0.4}
    assert Path("benchmark_config.json").is_file() and Path("benchmark_report.json").is_file()


def test_a_failed_point_records_its_error_and_the_grid_goes_on(
    launched: list[Config], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    args = ["optimum_grid.py", "--launcher", "process", "--out", str(out), "--model", "m/x",
            "--grid", json.dumps(GRID)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", args)
    optimum_grid.main()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["launcher"] == "process"
    # 2 quantizations × 2 batches × 1 context, in that order
    names = ["none_bs1_seq16", "none_bs2_seq16", "bnb-nf4_bs1_seq16", "bnb-nf4_bs2_seq16"]
    assert [p["name"] for p in summary["points"]] == names
    assert [p["ok"] for p in summary["points"]] == [True, True, True, False]
    assert summary["points"][3]["error"] == "RuntimeError: CUDA out of memory"
    assert len(launched) == 4
    assert all(type(c.kw["launcher"]).__name__ == "ProcessConfig" for c in launched)
    assert (out / "none_bs1_seq16" / "benchmark_report.json").is_file()
    assert not (out / "bnb-nf4_bs2_seq16" / "benchmark_report.json").exists()
