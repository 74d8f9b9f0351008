"""Build harness/data/external/mlperf/results.csv (the project's external CSV, documented in
harness/projection/external.py) from checkouts of mlcommons/inference_results_v4.1 and v5.1.

    git clone https://github.com/mlcommons/inference_results_v4.1 v41
    git clone https://github.com/mlcommons/inference_results_v5.1 v51
    python scripts/extract_mlperf.py v41 v51 > harness/data/external/mlperf/results.csv

(a bare clone or mirror works too: every file is read with `git show HEAD:path`).

Kept: llama2-70b (-99 and -99.9: the same model at two accuracy targets), closed division,
Offline and Server scenarios, valid runs, one accelerator type per system.
- v4.1 has no summary table: each run's `mlperf_log_summary.txt` (Offline "Tokens per second",
  Server "Completed tokens per second"), its system's `systems/<system>.json` (accelerator,
  accelerators per node, nodes, framework) and `measurements/…/<system>_<Scenario>.json`
  (weight_data_types).
- v5.1: its `summary_results.json` (Performance_Result in Tokens/s, a# accelerators per node,
  Nodes, Software, weight_data_types; Location says where the run's log is).
Tokens/s are normalised per accelerator: the system's figure ÷ (accelerators per node × nodes),
with gpus = 1. One row per (card, engine, engine version, weights, scenario): the median
submission (the lower of the two middle ones for an even count), with its own path, so every
figure is one that was measured. Cards the catalog lacks keep their MLPerf name (the reader
skips and counts them). Standard library only.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from collections import defaultdict

MODEL = "meta-llama/Llama-2-70b-chat-hf"  # MLPerf's llama2-70b
BENCHMARKS = ("llama2-70b-99", "llama2-70b-99.9")
SCENARIOS = {"Offline": "offline", "Server": "server"}
# MLPerf accelerator names → catalog cards (the rest keep their own name, vendor prefix cut).
CARDS = {
    "NVIDIA H100-SXM-80GB": "H100-SXM-80GB",
    "NVIDIA H200-SXM-141GB": "H200-141GB",
    "NVIDIA GH200 Grace Hopper Superchip 96GB": "GH200-96GB",
    "AMD Instinct MI300X 192GB HBM3": "MI300X",
    "AMD Instinct MI300X-NPS1-SPX-192GB-750W": "MI300X",
    "AMD MI300X-NPS1-SPX-192GB-750W": "MI300X",
    "AMD Instinct MI325X 256GB HBM3e": "MI325X",
    "NVIDIA L40S": "L40S",
}
COLUMNS = (
    "gpu", "gpus", "engine", "engine_version", "model", "weights", "scenario", "batch",
    "concurrency", "input_tokens", "output_tokens", "output_tok_s", "tpot_ms", "ttft_ms", "e2e_s",
    "source",
)  # fmt: skip


def git(repo: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", repo, *args], check=True, capture_output=True, text=True
    ).stdout


def commit(repo: str) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def card(accelerator: str) -> str | None:
    """The catalog card, else the MLPerf name without its vendor prefix; None for a system of
    several accelerator types."""
    if "," in accelerator or "(x" in accelerator:
        return None
    if accelerator in CARDS:
        return CARDS[accelerator]
    name = re.sub(r"^(NVIDIA|AMD Instinct|AMD|Intel)\s+", "", accelerator.strip())
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", name).strip("-")


def engine(software: str) -> tuple[str, str]:
    """(engine, version) from a framework / Software string."""
    found = re.search(r"vllm[ -]v?([0-9][^\s,]*)", software, re.IGNORECASE)
    if found:
        return "vllm", found.group(1)
    found = re.search(r"TensorRT[ -]([0-9]+\.[0-9]+)", software)
    if found:
        return "tensorrt", found.group(1)
    if "LLMBoost" in software:
        return "llmboost", software.strip()[:120]
    return "unknown", software.strip()[:120]


def row(
    accelerator: str, per_node: int, nodes: int, software: str, weights: str, scenario: str,
    tokens_s: float, source: str,
) -> dict[str, str] | None:  # fmt: skip
    gpu = card(accelerator)
    if gpu is None or per_node * nodes < 1 or tokens_s <= 0:
        return None
    name, version = engine(software)
    return {
        "gpu": gpu, "gpus": "1", "engine": name, "engine_version": version, "model": MODEL,
        "weights": weights.strip().lower() or "unknown", "scenario": SCENARIOS[scenario],
        "output_tok_s": f"{tokens_s / (per_node * nodes):.6g}", "source": source,
    }  # fmt: skip


def v41_weights(measurement: dict[str, str]) -> str:
    """v4.1 states the starting weights' type: 'fp16' with a 'quantization' transformation ran
    in another format, which it does not name ('fp16-quantized')."""
    weights = str(measurement.get("weight_data_types", "")).strip().lower()
    quantized = "quantization" in str(measurement.get("weight_transformations", "")).lower()
    return f"{weights}-quantized" if quantized and weights in ("fp16", "bf16", "fp32") else weights


def v41_rows(repo: str) -> list[dict[str, str]]:
    head = commit(repo)[:12]
    pattern = re.compile(
        r"closed/([^/]+)/results/([^/]+)/(llama2-70b-99(?:\.9)?)/(Offline|Server)/performance/"
        r"run_1/mlperf_log_summary\.txt"
    )
    out = []
    for path in git(repo, "ls-tree", "-r", "--name-only", "HEAD", "closed").splitlines():
        match = pattern.fullmatch(path)
        if match is None:
            continue
        submitter, system, benchmark, scenario = match.groups()
        log = git(repo, "show", f"HEAD:{path}")
        figure = re.search(r"^(?:Completed )?[Tt]okens per second\s*:\s*([0-9.]+)", log, re.M)
        if figure is None or "Result is : VALID" not in log:
            continue
        spec = json.loads(git(repo, "show", f"HEAD:closed/{submitter}/systems/{system}.json"))
        measured = f"closed/{submitter}/measurements/{system}/{benchmark}/{scenario}/"
        try:
            weights = json.loads(git(repo, "show", f"HEAD:{measured}{system}_{scenario}.json"))
        except subprocess.CalledProcessError:
            weights = {}
        found = row(
            spec["accelerator_model_name"], int(spec["accelerators_per_node"]),
            int(spec["number_of_nodes"]), spec["framework"], v41_weights(weights), scenario,
            float(figure.group(1)),
            f"mlcommons/inference_results_v4.1@{head} {path}",
        )  # fmt: skip
        if found is not None:
            out.append(found)
    return out


def v51_rows(repo: str) -> list[dict[str, str]]:
    head = commit(repo)[:12]
    out = []
    for entry in json.loads(git(repo, "show", "HEAD:summary_results.json")):
        if (
            entry["Model"] not in BENCHMARKS
            or entry["Category"] != "closed"
            or entry["Scenario"] not in SCENARIOS
            or entry["Performance_Units"] != "Tokens/s"
        ):
            continue
        path = f"{entry['Location']}/performance/run_1/mlperf_log_summary.txt"
        found = row(
            entry["Accelerator"], int(entry["a#"]), int(entry["Nodes"]), entry["Software"],
            entry["weight_data_types"], entry["Scenario"], float(entry["Performance_Result"]),
            f"mlcommons/inference_results_v5.1@{head} summary_results.json; {path}",
        )  # fmt: skip
        if found is not None:
            out.append(found)
    return out


def median_submissions(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """One row per key: the median submission (lower middle of an even count)."""
    groups: dict[tuple[str, str, str, str, str], list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        key = (r["gpu"], r["engine"], r["engine_version"], r["weights"], r["scenario"])
        groups[key].append(r)
    chosen = []
    for key in sorted(groups):
        ordered = sorted(groups[key], key=lambda r: (float(r["output_tok_s"]), r["source"]))
        chosen.append(ordered[(len(ordered) - 1) // 2])
    return chosen


def main(v41: str, v51: str) -> None:
    out = csv.DictWriter(sys.stdout, COLUMNS, lineterminator="\n")
    out.writeheader()
    for r in median_submissions(v41_rows(v41) + v51_rows(v51)):
        out.writerow(r)


if __name__ == "__main__":
    main(*sys.argv[1:])
