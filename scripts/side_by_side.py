"""The same 12-point grid with optimum-benchmark 0.6.0 and with `harness run`, alternating.

Grid (both tools): the shipped tiny model (harness/data/tiny-llama) × quantization {none,
bnb-int8, bnb-nf4} × batch {1, 4} × context {128, 512}; 32 new tokens (min = max); 2 warm-ups;
5 timed iterations; memory and latency on. The harness also measures quality (perplexity with
its CI, paired ΔNLL / KL / top-1 against the reference, ARC-Easy) with its default quick settings
(window_tokens 256, max_windows 64, arc_items 100); optimum-benchmark measures no quality.

Order per repetition: optimum-benchmark with its process launcher, harness, optimum-benchmark
with its inline launcher, harness (``--reps N``, default 1). Each run is its own subprocess; its
wall time is ``time.perf_counter()`` around the subprocess (interpreter start, imports, Ray start
and exit included).

Measured work, the share of wall time it takes:
- optimum-benchmark: Σ over the 12 points of the report's ``generate.latency.total`` (its 5 timed
  ``generate()`` calls), ÷ wall — the method of ../shared/peers/optimum-benchmark/run_grid.py and
  analyze.py (which divide by the grid loop; the loop share is printed too).
- harness: Σ ``measured_s`` over the rows ÷ wall. A row's ``measured_s`` is the point's time
  inside measurement (memory passes, warm-ups, timed repeats) plus its share of the group's
  quality time (the worker spreads a group's ``quality_s`` over its points). Model loading is not
  measured work: Σ ``load_s`` once per group is printed separately. For a like-for-like figure the
  harness's timed repeats alone (Σ repeats_done × e2e_ms_p50) are printed as well.

optimum-benchmark needs its own venv (transformers < 5, bitsandbytes 0.48.2): it is built under
``$OB_HOME`` (default ``~/.cache/harness/optimum-benchmark``) when missing, never in the repo;
exit code 2 with a message when it cannot be built. The model is copied to ``$OB_HOME`` and its
config adapted to transformers 4.x when needed.

The last line printed is the contract:

    side-by-side: optimum-benchmark process <s> s, inline <s> s, harness <s> s;
    ratio process/harness <x>, inline/harness <y>; harness measured share <p> %

(on one line; harness figures are means over its runs). Usage:
python scripts/side_by_side.py [--reps N] [--max-load L] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / "harness" / "data" / "tiny-llama"
OB_HOME = Path(os.environ.get("OB_HOME") or Path.home() / ".cache/harness/optimum-benchmark")
OB_PINS = [
    "torch==2.13.0",
    "optimum-benchmark[bitsandbytes]==0.6.0",
    "transformers<5",
    "huggingface-hub<1.0",
    "bitsandbytes==0.48.2",
]
MARKER = "HARNESS_SIDE_BY_SIDE_RUN"  # marks every process of one timed run
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "GPTQMODEL_CPU_WORKERS": "2",
    "RAY_USAGE_STATS_ENABLED": "0",
    "TOKENIZERS_PARALLELISM": "false",
}
QUANTS = ["none", "bnb-int8", "bnb-nf4"]
BATCHES = [1, 4]
CONTEXTS = [128, 512]
NEW_TOKENS = 32
WARMUPS = 2
ITERATIONS = 5

SCENARIO = f"""\
# written by scripts/side_by_side.py: the optimum-benchmark grid, quality on (quick defaults)
name: side-by-side
models: [tiny-llama]
backend: [transformers]
quantization: [{", ".join(QUANTS)}]
kv_cache_dtype: [auto]
batch: [{", ".join(map(str, BATCHES))}]
context: [{", ".join(map(str, CONTEXTS))}]
output_tokens: {NEW_TOKENS}
targets: [cpu]
repeats: {ITERATIONS}
warmups: {WARMUPS}
reference: {{quantization: none, kv_cache_dtype: auto}}
quality: {{window_tokens: 256, max_windows: 64, arc_items: 100}}
"""

# Runs inside the optimum-benchmark venv: the grid through its Python API, one launcher per
# invocation (ProcessConfig switches multiprocessing to spawn for the rest of the process).
OB_RUNNER = textwrap.dedent(
    '''\
    """optimum-benchmark 0.6.0 grid runner written by harness scripts/side_by_side.py."""
    import argparse, copy, json, logging, multiprocessing, os, time

    T0 = time.perf_counter()
    QUANTS = {
        "none": {},
        "bnb-int8": {"quantization_scheme": "bnb", "quantization_config": {"load_in_8bit": True}},
        "bnb-nf4": {
            "quantization_scheme": "bnb",
            "quantization_config": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
        },
    }


    def lat(report, target):
        x = (report.get(target) or {}).get("latency")
        return None if x is None else {k: x[k] for k in ("count", "total", "mean")}


    def main():
        ap = argparse.ArgumentParser()
        ap.add_argument("--launcher", choices=["process", "inline"], required=True)
        ap.add_argument("--out", required=True)
        ap.add_argument("--model", required=True)
        ap.add_argument("--grid", required=True, help="JSON: batches, contexts, new_tokens, ...")
        args = ap.parse_args()
        grid = json.loads(args.grid)
        out = os.path.abspath(args.out)
        os.makedirs(out, exist_ok=True)
        from optimum_benchmark import (
            Benchmark, BenchmarkConfig, InferenceConfig, InlineConfig, ProcessConfig, PyTorchConfig,
        )
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
                    rec = {"name": name, "ok": False}
                    t0 = time.perf_counter()
                    try:
                        backend = PyTorchConfig(
                            model=args.model, device="cpu", torch_dtype="float32", **QUANTS[qname]
                        )
                        scenario = InferenceConfig(
                            latency=True, memory=True, energy=False,
                            warmup_runs=grid["warmups"], iterations=grid["iterations"], duration=0,
                            input_shapes={"batch_size": bs, "sequence_length": seq},
                            generate_kwargs={
                                "max_new_tokens": grid["new_tokens"],
                                "min_new_tokens": grid["new_tokens"],
                            },
                        )
                        launcher = ProcessConfig() if args.launcher == "process" else InlineConfig()
                        config = BenchmarkConfig(
                            name=name, backend=backend, scenario=scenario, launcher=launcher
                        )
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
    '''
)


def fail(message: str) -> None:
    print(f"side-by-side: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def log(message: str) -> None:
    print(message, flush=True)


def load1() -> float:
    return os.getloadavg()[0]


def wait_for_quiet(max_load: float, max_wait_s: float) -> None:
    """Start a timed run only when the machine is quiet (1-min load ≤ max_load), or give up."""
    deadline = time.monotonic() + max_wait_s
    while load1() > max_load and time.monotonic() < deadline:
        log(f"  waiting: 1-min load average {load1():.2f} > {max_load}")
        time.sleep(15)


# --- the optimum-benchmark environment ---------------------------------------------------------


def base_python() -> str:
    """The interpreter the harness venv was made from (a venv is not made from a venv)."""
    return getattr(sys, "_base_executable", None) or shutil.which("python3") or sys.executable


def ob_python() -> Path:
    return OB_HOME / "venv" / "bin" / "python"


def ensure_ob_venv() -> None:
    """Build $OB_HOME/venv with the pins of the peer recipe, once; exit 2 if that fails."""
    stamp = OB_HOME / "venv" / ".side-by-side-installed"
    if stamp.is_file() and ob_python().is_file():
        return
    OB_HOME.mkdir(parents=True, exist_ok=True)
    constraints = OB_HOME / "constraints.txt"
    constraints.write_text("torch==2.13.0\n")
    log(f"building the optimum-benchmark venv in {OB_HOME / 'venv'} (once; needs a registry)")
    started = time.perf_counter()
    steps = [
        [base_python(), "-m", "venv", str(OB_HOME / "venv")],
        [str(ob_python()), "-m", "pip", "install", "-q", "-c", str(constraints), *OB_PINS],
    ]
    pip_log = OB_HOME / "pip-install.log"
    with pip_log.open("w") as out:
        for argv in steps:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
            if done.returncode != 0:
                tail = pip_log.read_text(errors="replace").strip().splitlines()[-5:]
                fail(
                    "cannot build the optimum-benchmark venv "
                    f"({' '.join(argv[:4])} … exited {done.returncode}; no registry access?). "
                    f"Log: {pip_log}. Last lines: " + " | ".join(tail)
                )
    check = subprocess.run(
        [str(ob_python()), "-c", "import optimum_benchmark, transformers, bitsandbytes"],
        capture_output=True,
        text=True,
        env=child_env(),
        check=False,
    )
    if check.returncode != 0:
        fail(f"the optimum-benchmark venv does not import: {check.stderr.strip()[-500:]}")
    stamp.write_text(" ".join(OB_PINS) + "\n")
    log(f"optimum-benchmark venv ready in {time.perf_counter() - started:.0f} s")


def ob_model() -> Path:
    """Our tiny model, copied to $OB_HOME and its config made readable by transformers 4.x."""
    if not (MODEL_DIR / "config.json").is_file() or not (MODEL_DIR / "model.safetensors").is_file():
        fail(f"{MODEL_DIR} has no config.json / model.safetensors (train it first)")
    dest = OB_HOME / "tiny-llama-harness"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(MODEL_DIR, dest)
    config_path = dest / "config.json"
    config = json.loads(config_path.read_text())
    # transformers 5 writes `dtype` and nests RoPE in `rope_parameters`; 4.57 reads the old keys.
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" not in config:
        config["rope_theta"] = rope.get("rope_theta", 10000.0)
        if rope.get("rope_type", "default") == "default":
            config.setdefault("rope_scaling", None)
        else:
            config.setdefault("rope_scaling", rope)
    if "dtype" in config and "torch_dtype" not in config:
        config["torch_dtype"] = config["dtype"]
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    probe = textwrap.dedent(
        f"""
        import torch, transformers
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        path = {str(dest)!r}
        cfg = AutoConfig.from_pretrained(path)
        m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
        AutoTokenizer.from_pretrained(path)
        out = m.generate(torch.tensor([[1, 5, 6, 7]]), max_new_tokens=2, min_new_tokens=2)
        print(transformers.__version__, type(m).__name__, cfg.tie_word_embeddings,
              cfg.intermediate_size, tuple(out.shape))
        """
    )
    done = subprocess.run(
        [str(ob_python()), "-c", probe], capture_output=True, text=True, env=child_env()
    )
    if done.returncode != 0:
        fail(f"the model does not load in the optimum-benchmark venv: {done.stderr[-800:]}")
    log(f"model for optimum-benchmark: {dest} (transformers, class, tied, inter, out: "
        f"{done.stdout.strip()})")  # fmt: skip
    return dest


# --- runs ---------------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    for key, value in ENV.items():
        env.setdefault(key, value)
    return env


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine, all cores (/proc/stat)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class RunCpu:
    """CPU seconds of every process of one run, found by an environment marker the run's
    processes inherit (Ray's raylet and workers too, which no parent of ours reaps), sampled
    every 0.5 s from a side thread of this (idle) process."""

    def __init__(self, marker: str) -> None:
        self.marker = f"{MARKER}={marker}".encode()
        self.seen: dict[str, bool] = {}
        self.cpu: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while not self.stop.wait(0.5):
            self.scan()

    def scan(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ident = f"{pid}:{fields[19]}"  # pid + start time: a reused pid is a new process
                if ident not in self.seen:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        self.seen[ident] = self.marker in f.read().split(b"\0")
                if self.seen[ident]:
                    self.cpu[ident] = (int(fields[11]) + int(fields[12])) / tick
            except (OSError, IndexError, ValueError):
                continue

    def __enter__(self) -> RunCpu:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    @property
    def total_s(self) -> float:
        return sum(self.cpu.values())


def timed(argv: list[str], logfile: Path, tag: str) -> tuple[float, int, float]:
    """Wall time of one subprocess, and the CPU seconds used meanwhile by anything else:
    machine busy time (/proc/stat) − this run's CPU (the larger of its reaped process tree's
    rusage and the marker-sampled total, which misses < 0.5 s per process and processes that
    live < 0.5 s). An estimate, meant to flag a run that shared the cores with something else."""
    env = {**child_env(), MARKER: tag}
    with logfile.open("w") as out, RunCpu(tag) as sampled:
        busy0, own0 = machine_busy_s(), children_cpu_s()
        started = time.perf_counter()
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
        wall = time.perf_counter() - started
        busy, own = machine_busy_s() - busy0, children_cpu_s() - own0
    return wall, code, max(busy - max(own, sampled.total_s), 0.0)


def run_ob(launcher: str, model: Path, work: Path, tag: str) -> dict[str, Any]:
    runner = OB_HOME / "side_by_side_ob_grid.py"
    runner.write_text(OB_RUNNER)
    out = work / tag
    grid = {
        "quants": QUANTS,
        "batches": BATCHES,
        "contexts": CONTEXTS,
        "new_tokens": NEW_TOKENS,
        "warmups": WARMUPS,
        "iterations": ITERATIONS,
    }
    argv = [str(ob_python()), str(runner), "--launcher", launcher, "--out", str(out)]
    argv += ["--model", str(model), "--grid", json.dumps(grid)]
    la0 = load1()
    wall, code, foreign = timed(argv, work / f"{tag}.log", tag)
    la1 = load1()
    summary_path = out / "summary.json"
    if code != 0 or not summary_path.is_file():
        tail = (work / f"{tag}.log").read_text(errors="replace")[-1500:]
        fail(f"optimum-benchmark ({launcher}) exited {code}; log {work / f'{tag}.log'}:\n{tail}")
    summary = json.loads(summary_path.read_text())
    ok = [p for p in summary["points"] if p["ok"]]
    for p in summary["points"]:
        if not p["ok"]:
            log(f"  ! {tag} {p['name']}: {p['error'][:300]}")
    measured = sum(p["generate"]["total"] for p in ok)
    load = sum(p["load_model"]["total"] for p in ok if p["load_model"])
    return {
        "tool": f"ob-{launcher}",
        "tag": tag,
        "wall_s": wall,
        "points_ok": len(ok),
        "points": len(summary["points"]),
        "measured_s": measured,
        "load_s": load,
        "loop_s": summary["grid_loop_s"],
        "import_s": summary["import_s"],
        "load_before": la0,
        "load_after": la1,
        "foreign_cpu_s": foreign,
        "decode": {p["name"]: p.get("decode_tok_s") for p in ok},
    }


def run_harness(scenario: Path, work: Path, tag: str) -> dict[str, Any]:
    out = work / tag
    argv = [sys.executable, "-m", "harness.cli", "run", str(scenario), "--out", str(out)]
    la0 = load1()
    wall, code, foreign = timed(argv, work / f"{tag}.log", tag)
    la1 = load1()
    if code != 0:
        tail = (work / f"{tag}.log").read_text(errors="replace")[-3000:]
        fail(f"harness run exited {code}; log {work / f'{tag}.log'}:\n{tail}")
    rows = [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]
    manifest = json.loads((out / "manifest.json").read_text())
    ok = [r for r in rows if r["status"] == "ok"]
    for r in rows:
        if r["status"] != "ok":
            log(f"  ! {tag} {r['group']} b{r['batch']} c{r['context']}: {r['status']} {r['error']}")
    groups: dict[str, dict[str, Any]] = {}
    for r in ok:
        groups.setdefault(r["group"], r)
    measured = sum(r["measured_s"] or 0.0 for r in ok)
    quality = sum(g["quality_s"] or 0.0 for g in groups.values())
    repeats = sum((r["repeats_done"] or 0) * (r["e2e_ms_p50"] or 0.0) / 1e3 for r in ok)
    return {
        "tool": "harness",
        "tag": tag,
        "wall_s": wall,
        "points_ok": len(ok),
        "points": len(rows),
        "measured_s": measured,
        "quality_s": quality,
        "timing_s": measured - quality,
        "repeats_s": repeats,
        "load_s": sum(g["load_s"] or 0.0 for g in groups.values()),
        "sweep_s": manifest["runs"][-1].get("wall_s"),
        "load_before": la0,
        "load_after": la1,
        "foreign_cpu_s": foreign,
        "decode": {
            f"{r['quantization']}_bs{r['batch']}_seq{r['context']}": r["decode_tok_s"] for r in ok
        },
        "ppl": {g["quantization"]: g["ppl"] for g in groups.values()},
    }


def describe(r: dict[str, Any]) -> str:
    wall = r["wall_s"]
    head = (
        f"  {r['tag']:<16} wall {wall:7.1f} s  points ok {r['points_ok']}/{r['points']}  "
        f"measured {r['measured_s']:6.1f} s ({100 * r['measured_s'] / wall:4.1f} %)  "
        f"load {r['load_s']:5.1f} s  1-min load avg {r['load_before']:.2f} → {r['load_after']:.2f}"
        f"\n{'':20}foreign CPU ≈ {r['foreign_cpu_s']:.0f} CPU-s "
        f"({100 * r['foreign_cpu_s'] / (wall * (os.cpu_count() or 1)):.0f} % of the machine)"
    )
    if r["tool"] == "harness":
        rest = wall - r["measured_s"] - r["load_s"]
        sweep = r["sweep_s"] or float("nan")
        head += (
            f"\n{'':20}measured = timing {r['timing_s']:.1f} s + quality {r['quality_s']:.1f} s; "
            f"timed repeats alone {r['repeats_s']:.1f} s ({100 * r['repeats_s'] / wall:.1f} %, "
            f"optimum-benchmark's definition); rest {rest:.1f} s (process start, imports, Ray, "
            f"actors, plan; sweep inside the process {sweep:.1f} s)"
        )
    else:
        head += (
            f"\n{'':20}grid loop {r['loop_s']:.1f} s (measured share of loop "
            f"{100 * r['measured_s'] / r['loop_s']:.1f} %); imports {r['import_s']:.1f} s; "
            f"rest {wall - r['measured_s'] - r['load_s']:.1f} s"
        )
    return head


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1, help="repetitions of the 4-run cycle")
    parser.add_argument("--max-load", type=float, default=2.5, help="wait while 1-min load > L")
    parser.add_argument("--max-wait", type=float, default=120.0, help="wait at most this, s")
    parser.add_argument("--keep", type=Path, default=None, help="keep run folders here")
    args = parser.parse_args()

    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    ensure_ob_venv()
    model = ob_model()
    work = args.keep or Path(tempfile.mkdtemp(prefix="side-by-side-"))
    work.mkdir(parents=True, exist_ok=True)
    scenario = work / "side-by-side.yaml"
    scenario.write_text(SCENARIO)
    log(f"work folder: {work}; cores: {os.cpu_count()}; 1-min load avg {load1():.2f}")
    log(
        f"grid: {len(QUANTS) * len(BATCHES) * len(CONTEXTS)} points = {QUANTS} × batch "
        f"{BATCHES} × context {CONTEXTS}; {NEW_TOKENS} new tokens; {WARMUPS} warm-ups; "
        f"{ITERATIONS} iterations"
    )
    results: list[dict[str, Any]] = []
    for rep in range(1, args.reps + 1):
        cycle = [
            ("process", f"ob-process-{rep}"),
            ("harness", f"harness-{rep}a"),
            ("inline", f"ob-inline-{rep}"),
            ("harness", f"harness-{rep}b"),
        ]
        for kind, tag in cycle:
            wait_for_quiet(args.max_load, args.max_wait)
            log(f"run {tag} …")
            if kind == "harness":
                r = run_harness(scenario, work, tag)
            else:
                r = run_ob(kind, model, work, tag)
            results.append(r)
            log(describe(r))

    def mean(tool: str, field: str = "wall_s") -> float:
        return statistics.fmean(r[field] for r in results if r["tool"] == tool)

    process, inline, harness = mean("ob-process"), mean("ob-inline"), mean("harness")
    share = statistics.fmean(
        r["measured_s"] / r["wall_s"] for r in results if r["tool"] == "harness"
    )
    log("")
    log("decode tok/s (batch aggregate), first run of each tool:")
    firsts = {
        t: next(r for r in results if r["tool"] == t)
        for t in ("ob-process", "ob-inline", "harness")
    }
    for name in firsts["harness"]["decode"]:
        cells = [firsts[t]["decode"].get(name) for t in firsts]
        log(f"  {name:<20}" + "".join(f"{c:10.1f}" if c else f"{'-':>10}" for c in cells)
            + "   (ob-process, ob-inline, harness)")  # fmt: skip
    log(f"harness perplexity per quantization: {firsts['harness']['ppl']}")
    for r in results:
        if r["tool"] != "harness":
            continue
        log(f"{r['tag']}: measured share {100 * r['measured_s'] / r['wall_s']:.1f} % "
            f"(Σ measured_s {r['measured_s']:.1f} s / wall {r['wall_s']:.1f} s), "
            f"load {r['load_s']:.1f} s")  # fmt: skip
    for r in results:
        if r["tool"] != "harness":
            share_ob = 100 * r["measured_s"] / r["wall_s"]
            log(f"{r['tag']}: measured share {share_ob:.1f} % (Σ generate.latency.total "
                f"{r['measured_s']:.1f} s / wall {r['wall_s']:.1f} s)")  # fmt: skip
    for ob_run, h_run in zip(results[0::2], results[1::2], strict=True):
        log(f"pair {ob_run['tag']} / {h_run['tag']}: {ob_run['wall_s'] / h_run['wall_s']:.2f}")
    log(f"harness wall: mean of {sum(r['tool'] == 'harness' for r in results)} runs")
    log(
        f"side-by-side: optimum-benchmark process {process:.1f} s, inline {inline:.1f} s, "
        f"harness {harness:.1f} s; ratio process/harness {process / harness:.2f}, "
        f"inline/harness {inline / harness:.2f}; harness measured share {100 * share:.1f} %"
    )


if __name__ == "__main__":
    main()
