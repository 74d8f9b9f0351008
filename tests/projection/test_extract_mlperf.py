"""scripts/extract_mlperf.py on two tiny git repositories laid out like MLPerf's results (v4.1:
per-run logs and system files; v5.1: the summary table): per-accelerator figures, the median
submission per key, and what is dropped."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def extractor() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "extract_mlperf", REPO / "scripts/extract_mlperf.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def commit_all(repo: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)


def v41_system(name: str, per_node: int, nodes: int, tokens_s: float) -> dict[str, str]:
    base = f"closed/S/results/{name}/llama2-70b-99/Offline/performance/run_1/"
    measured = f"closed/S/measurements/{name}/llama2-70b-99/Offline/{name}_Offline.json"
    return {
        base + "mlperf_log_summary.txt": f"Tokens per second: {tokens_s}\nResult is : VALID\n",
        f"closed/S/systems/{name}.json": json.dumps(
            {
                "accelerator_model_name": "NVIDIA H100-SXM-80GB",
                "accelerators_per_node": per_node,
                "number_of_nodes": nodes,
                "framework": "TensorRT 10.2.0, CUDA 12.4",
            }
        ),
        measured: json.dumps(
            {"weight_data_types": "fp16", "weight_transformations": "quantization"}
        ),
    }


def test_the_extract_normalises_per_accelerator_and_keeps_the_median_submission(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v41, v51 = tmp_path / "v41", tmp_path / "v51"
    # per card: 24,000 / 8 = 3,000; 10,000 / 4 = 2,500; 44,800 / (8 × 2) = 2,800 → the median
    # of (2,500, 2,800, 3,000) is 2,800
    commit_all(v41, {**v41_system("a", 8, 1, 24000), **v41_system("b", 4, 1, 10000),
                     **v41_system("c", 8, 2, 44800)})  # fmt: skip
    entry = {
        "Model": "llama2-70b-99.9", "Category": "closed", "Scenario": "Server",
        "Performance_Units": "Tokens/s", "Accelerator": "AMD Instinct MI300X 192GB HBM3",
        "a#": 8, "Nodes": 1, "Software": "vLLM 0.6.5, ROCm 6.3", "weight_data_types": "fp8",
        "Performance_Result": 24800.0, "Location": "closed/AMD/results/x/llama2-70b-99.9/Server",
    }  # fmt: skip
    dropped = [
        {**entry, "Category": "open"},
        {**entry, "Accelerator": "AMD Instinct MI300X (x8), AMD Instinct MI325X (x8)"},
        {**entry, "Model": "mixtral-8x7b"},
    ]
    commit_all(v51, {"summary_results.json": json.dumps([entry, *dropped])})
    extractor().main(str(v41), str(v51))
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("gpu,gpus,engine,engine_version,model,weights,scenario,")
    h100, mi300x = (line.split(",") for line in rows[1:])
    assert h100[:7] == ["H100-SXM-80GB", "1", "tensorrt", "10.2",
                        "meta-llama/Llama-2-70b-chat-hf", "fp16-quantized", "offline"]  # fmt: skip
    assert float(h100[11]) == 2800 and "results/c/llama2-70b-99/Offline" in h100[15]
    assert mi300x[:7] == ["MI300X", "1", "vllm", "0.6.5", "meta-llama/Llama-2-70b-chat-hf",
                          "fp8", "server"]  # fmt: skip
    assert float(mi300x[11]) == 3100  # 24,800 / 8
    assert mi300x[15].startswith("mlcommons/inference_results_v5.1@")


def test_a_card_the_catalog_lacks_keeps_its_mlperf_name() -> None:
    module = extractor()
    assert module.card("NVIDIA B200-SXM-180GB") == "B200-SXM-180GB"
    assert module.card("NVIDIA H200-SXM-141GB") == "H200-141GB"
    assert module.card("AMD Instinct MI300X 192GB HBM3 (x32), AMD Instinct MI325X") is None
    assert module.engine("TensorRT 10.11, CUDA 12.9") == ("tensorrt", "10.11")
