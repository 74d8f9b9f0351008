"""Build harness/data/external/argonne/results.csv (the project's external CSV, documented in
harness/projection/external.py) from a checkout of argonne-lcf/LLM-Inference-Bench.

    git -C LLM-Inference-Bench show HEAD:Plots/All_results.csv > all.csv
    git -C LLM-Inference-Bench show HEAD:Plots/Fig_22/all_results_TTFT_ITL.csv > ttft.csv
    python scripts/extract_argonne.py all.csv ttft.csv COMMIT \
        > harness/data/external/argonne/results.csv

Kept: vLLM and TensorRT-LLM rows on the five GPU types the catalog has (A100, H100, GH200, MI250,
MI300X); the first of each duplicated key. Dropped: llama.cpp (its Throughput lacks the batch
factor, its weights' format is not stated), DeepSpeed, SambaFlow, Intel GPUs (not in the catalog).
Standard library only.
"""

from __future__ import annotations

import csv
import sys

# Argonne's hardware names → catalog cards (see the extract's README for how each SKU was read).
CARDS = {
    "Nvidia A100 GPU": "A100-SXM-80GB",
    "Nvidia H100 GPU": "H100-SXM-80GB",
    "Nvidia GH200 GPU": "GH200-96GB",
    "AMD MI250 GPU": "MI250-GCD",
    "AMD MI300X GPU": "MI300X",
}
REPO = "argonne-lcf/LLM-Inference-Bench"
ENGINES = {"vLLM": "vllm", "TensorRT-LLM": "tensorrt-llm"}
COLUMNS = (
    "gpu", "gpus", "engine", "engine_version", "model", "weights", "batch", "concurrency",
    "input_tokens", "output_tokens", "output_tok_s", "tpot_ms", "ttft_ms", "e2e_s", "source",
)  # fmt: skip


def main(all_results: str, ttft: str, commit: str) -> None:
    out = csv.DictWriter(sys.stdout, COLUMNS, lineterminator="\n")
    out.writeheader()
    seen: set[tuple[str, ...]] = set()
    with open(all_results, newline="") as handle:
        for row in csv.DictReader(handle):
            card, engine = CARDS.get(row["Hardware"]), ENGINES.get(row["Framework"])
            if card is None or engine is None:
                continue
            length = row["Input Output Length"]
            key = (card, row["Num of Hardware"], engine, row["Model"], length, row["Batch Size"])
            if key in seen:
                continue
            seen.add(key)
            out.writerow(
                {
                    "gpu": card, "gpus": row["Num of Hardware"], "engine": engine,
                    "engine_version": "unknown (2024)", "model": row["Model"], "weights": "fp16",
                    "batch": row["Batch Size"], "input_tokens": length, "output_tokens": length,
                    "e2e_s": row["Latency"],
                    "source": f"{REPO}@{commit[:12]} Plots/All_results.csv",
                }
            )  # fmt: skip
    with open(ttft, newline="") as handle:
        for row in csv.DictReader(handle):
            card = CARDS.get(row.get("Hardware") or "")
            engine = ENGINES.get(row["Framework"])
            if card is None or engine is None:
                continue
            out.writerow(
                {
                    "gpu": card, "gpus": row["Num of Hardware"], "engine": engine,
                    "engine_version": "unknown (2024)", "model": row["Model"], "weights": "fp16",
                    "batch": row["Batch Size"], "input_tokens": row["Input Length"],
                    "output_tokens": row["Output Length"],
                    "ttft_ms": f"{float(row['TTFT Latency']) * 1000:.6g}",
                    "source": (
                        f"{REPO}@{commit[:12]} Plots/Fig_22/all_results_TTFT_ITL.csv"
                    ),
                }
            )  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:4])
