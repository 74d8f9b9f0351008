"""The optimum-benchmark 0.6.0 grid runner: runs inside optimum-benchmark's own venv, never here.

`harness.peers.optimum` copies this file into $OB_HOME and runs it with that venv's Python (it
imports nothing of the harness: the venv has none). The grid goes through optimum-benchmark's
Python API, one launcher per invocation (ProcessConfig switches multiprocessing to spawn for the
rest of the process, hence the main guard). Writes OUT/<point>/benchmark_{config,report}.json and
OUT/summary.json (launcher, import time, grid-loop time, one record per point).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import multiprocessing
import os
import time
from typing import Any

T0 = time.perf_counter()
QUANTS: dict[str, dict[str, Any]] = {
    "none": {},
    "bnb-int8": {"quantization_scheme": "bnb", "quantization_config": {"load_in_8bit": True}},
    "bnb-nf4": {
        "quantization_scheme": "bnb",
        "quantization_config": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
    },
}


def lat(report: dict[str, Any], target: str) -> dict[str, Any] | None:
    x = (report.get(target) or {}).get("latency")
    return None if x is None else {k: x[k] for k in ("count", "total", "mean")}


def run_point(
    name: str, qname: str, bs: int, seq: int, grid: dict[str, Any], model: str, launcher: str
) -> dict[str, Any]:
    """One point through `Benchmark.launch` (config and report saved into the cwd); its record,
    with the error instead of the figures when it failed (a sweep keeps going)."""
    from optimum_benchmark import (
        Benchmark,
        BenchmarkConfig,
        InferenceConfig,
        InlineConfig,
        ProcessConfig,
        PyTorchConfig,
    )

    rec: dict[str, Any] = {"name": name, "ok": False}
    try:
        backend = PyTorchConfig(model=model, device="cpu", torch_dtype="float32", **QUANTS[qname])
        scenario = InferenceConfig(
            latency=True, memory=True, energy=False,
            warmup_runs=grid["warmups"], iterations=grid["iterations"], duration=0,
            input_shapes={"batch_size": bs, "sequence_length": seq},
            generate_kwargs={
                "max_new_tokens": grid["new_tokens"],
                "min_new_tokens": grid["new_tokens"],
            },
        )  # fmt: skip
        chosen = ProcessConfig() if launcher == "process" else InlineConfig()
        config = BenchmarkConfig(name=name, backend=backend, scenario=scenario, launcher=chosen)
        saved = copy.deepcopy(config)  # inline launch mutates generate_kwargs
        report = Benchmark.launch(config)
        for child in multiprocessing.active_children():  # it does not join
            child.join()
        saved.save_json("benchmark_config.json")
        report.save_json("benchmark_report.json")
        r = report.to_dict()
        rec.update(
            ok=True,
            load_model=lat(r, "load_model"),
            generate=lat(r, "generate"),
            prefill=lat(r, "prefill"),
            decode=lat(r, "decode"),
            decode_tok_s=(r["decode"]["throughput"] or {}).get("value"),
        )
    except Exception as exc:  # keep going, like a sweep would
        rec["error"] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
    return rec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", choices=["process", "inline"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--grid", required=True, help="JSON: batches, contexts, new_tokens, ...")
    args = ap.parse_args()
    grid = json.loads(args.grid)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    import optimum_benchmark  # noqa: F401  (timed: the import is part of the tool's start)
    from optimum_benchmark.logging_utils import setup_logging

    import_s = time.perf_counter() - T0
    points = []
    loop0 = time.perf_counter()
    for qname in grid["quants"]:
        for bs in grid["batches"]:
            for seq in grid["contexts"]:
                name = f"{qname}_bs{bs}_seq{seq}"
                pdir = os.path.join(out, name)
                os.makedirs(pdir, exist_ok=True)
                os.chdir(pdir)  # it writes benchmark.log into the cwd, like its CLI
                setup_logging(level="INFO", to_file=True, prefix="MAIN-PROCESS")
                t0 = time.perf_counter()
                rec = run_point(name, qname, bs, seq, grid, args.model, args.launcher)
                rec["wall_s"] = time.perf_counter() - t0
                logging.getLogger("grid").info("point %s done in %.2f s", name, rec["wall_s"])
                points.append(rec)
                os.chdir(out)
    summary = {
        "launcher": args.launcher,
        "import_s": import_s,
        "grid_loop_s": time.perf_counter() - loop0,
        "points": points,
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
