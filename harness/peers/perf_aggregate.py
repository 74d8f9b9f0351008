"""Aggregate a million synthetic result rows with the real aggregate functions, and time it.

The rows are built directly as a DataFrame with the columns the aggregation reads (a million
pydantic objects would measure pydantic, not the aggregation), then normalised untimed: every other
ResultRow column added, as ``load_run`` hands a run's rows over. Prices come from
tariffs/example.yaml. Only ``aggregate()`` is timed. The last line printed is the contract:

    aggregate: <rows> rows in <seconds> s (<rows/s> rows/s)

Usage, from the repository root:
    python scripts/perf_aggregate.py [--rows N] [--seed S] [--tariffs FILE]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from harness.results.aggregate import aggregate
from harness.results.frame import normalise
from harness.spec.tariffs import load_tariffs

MODELS = ("tiny-llama", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct")
DEVICES = {  # catalog GPU → (target, HBM GB/s for a plausible roofline)
    "H100-SXM-80GB": ("cuda", 3350.0),
    "H200-141GB": ("cuda", 4800.0),
    "A100-SXM-80GB": ("cuda", 2039.0),
    "L40S": ("cuda", 864.0),
    "MI300X": ("rocm", 5300.0),
    "RTX-4090": ("cuda", 1008.0),
}
QUANTS = ("none", "bf16", "bnb-int8", "bnb-nf4", "bnb-fp4", "gptq-int4", "quanto-int4", "fp8")
QUANT_BITS = np.array([16, 16, 8, 4, 4, 4, 4, 8], dtype=np.float64)
QUANT_PPL = np.array([1.0, 1.0, 1.0005, 1.004, 1.012, 1.006, 1.02, 1.003])
KVS = ("auto", "fp8", "int8", "int4")
KV_PPL = np.array([1.0, 1.002, 1.003, 1.015])
BATCHES = np.array([1, 2, 4, 8, 16, 32])
CONTEXTS = np.array([128, 512, 1024, 2048, 4096, 8192])


def synthetic_frame(rows: int, seed: int = 0) -> pd.DataFrame:
    """``rows`` ResultRow-shaped rows: random cells of a complete grid, plausible figures."""
    rng = np.random.default_rng(seed)
    m = rng.integers(0, len(MODELS), rows)
    d = rng.integers(0, len(DEVICES), rows)
    q = rng.integers(0, len(QUANTS), rows)
    k = rng.integers(0, len(KVS), rows)
    b = BATCHES[rng.integers(0, len(BATCHES), rows)]
    c = CONTEXTS[rng.integers(0, len(CONTEXTS), rows)]
    names = np.array(list(DEVICES))
    bandwidth = np.array([v[1] for v in DEVICES.values()])[d]
    weights_gb = np.array([0.01, 16.0, 15.2])[m] * QUANT_BITS[q] / 16
    roofline = bandwidth * b / weights_gb
    decode = roofline * rng.uniform(0.2, 0.95, rows)
    decode[rng.random(rows) < 0.001] *= 2.0  # a few impossible rows (above the roofline)
    status = np.where(rng.random(rows) < 0.02, "oom", "ok")
    is_reference = (q == 0) & (k == 0)
    base_ppl = np.array([260.0, 7.2, 7.6])[m]
    # quality is measured once per (model, quantization, KV dtype, device) and copied onto points
    jitter = rng.normal(1.0, 0.0005, (len(MODELS), len(QUANTS), len(KVS), len(DEVICES)))
    ppl = base_ppl * QUANT_PPL[q] * KV_PPL[k] * jitter[m, q, k, d].clip(0.999, 1.001)
    ppl[is_reference] = base_ppl[is_reference]
    dnll = np.log(ppl / base_ppl)
    predicted = weights_gb * 953.7 + b * c * 0.125
    return pd.DataFrame(
        {
            "schema_version": 1,
            "key": pd.Series(np.arange(rows)).map("k{:09d}".format),
            "run": "perf",
            "status": status,
            "model": np.array(MODELS, dtype=object)[m],
            "revision": "main",
            "backend": "transformers",
            "quantization": np.array(QUANTS, dtype=object)[q],
            "kv_cache_dtype": np.array(KVS, dtype=object)[k],
            "batch": b,
            "context": c,
            "output_tokens": 128,
            "target": np.array([v[0] for v in DEVICES.values()], dtype=object)[d],
            "repeats": 5,
            "is_reference": is_reference,
            "gpu": names[d].astype(object),
            "decode_tok_s": np.where(status == "ok", decode, np.nan),
            "total_tok_s": np.where(status == "ok", decode * (1 + c / 128), np.nan),
            "tpot_ms_p50": np.where(status == "ok", 1000 * b / decode, np.nan),
            "peak_mib_decode": np.where(
                status == "ok", predicted * rng.uniform(0.9, 1.1, rows), np.nan
            ),
            "predicted_peak_mib": predicted,
            "ppl": ppl,
            "ppl_ci_low": ppl * 0.99,
            "ppl_ci_high": ppl * 1.01,
            "dnll_vs_ref": dnll,
            "dnll_ci_low": dnll - 0.0002,
            "dnll_ci_high": dnll + 0.0002,
            "roofline_decode_tok_s": roofline,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tariffs", type=Path, default=Path("tariffs/example.yaml"))
    args = parser.parse_args()
    # As load_run hands rows over: every schema column present (frame_from_rows normalises);
    # the synthetic frame alone lacks most of the ~200 columns a real row carries.
    frame = normalise(synthetic_frame(args.rows, args.seed))
    tariffs = load_tariffs(args.tariffs)
    start = time.perf_counter()
    result = aggregate(frame, tariffs, utilisation=0.8)
    seconds = time.perf_counter() - start
    print(
        f"priced rows {result.counts['priced_rows']} x {len(result.packages)} packages, "
        f"cheapest {len(result.cheapest)}, "
        f"pareto {len(result.pareto_cost_quality)}/{len(result.pareto_throughput_latency)}, "
        f"effects {len(result.main_effects)}, interactions {len(result.interactions)}, "
        f"above roofline {result.counts['flagged_above_roofline']}"
    )
    print(f"aggregate: {args.rows} rows in {seconds:.2f} s ({args.rows / seconds:.0f} rows/s)")


if __name__ == "__main__":
    main()
