"""The comparison itself: point by point, the harness and vLLM's benchmark back to back, retried
while others shared the machine; then the figures, the subprocess-engine point and the report
(DIR/side_by_side_vllm.json and .md). What it measures and why: the package's docstring."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.peers.machine import (
    CORES,
    REPO,
    child_env,
    load1,
    log,
    set_default_env,
    wait_for_quiet,
)
from harness.peers.side_by_side_vllm.explain import EXPLAIN_NOTE, counts_note, factors
from harness.peers.side_by_side_vllm.harness_side import model_dir, read_scenario, run_harness
from harness.peers.side_by_side_vllm.parse import engine_args_differ, engine_flags
from harness.peers.side_by_side_vllm.table import (
    METRICS,
    TOLERANCE,
    comparison_rows,
    harness_figures,
    markdown_table,
    median_of,
    point_label,
    summary_line,
    text_table,
    vllm_figures,
)
from harness.peers.side_by_side_vllm.vllm_side import (
    BenchPlan,
    Point,
    VllmWorker,
    explain_pass,
    vllm_pass,
)
from harness.row.tasks import ARC_TASK

DEFAULT_SCENARIO = REPO / "scenarios" / "examples" / "side-by-side-vllm.yaml"
DEFAULT_OUT = REPO / "results" / "side-by-side-vllm"
# The harness's engine runs in its process; vLLM's benchmark gets the same.
IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_NO_USAGE_STATS": "1"}
Run = dict[str, Any]  # one tool's measurement of one point (run_harness / vllm_pass, + "point")


@dataclass(frozen=True)
class Options:
    """The command line's settings (scripts/side_by_side_vllm.py --help)."""

    out: Path
    scenario: Path
    reps: int
    throughput_runs: int
    mp_point: str  # "B:C", "first" or "none"
    max_load: float
    max_wait: float
    max_foreign: float
    retries: int
    budget_s: float
    explain: bool = True  # the causes measured in one engine (explain), the table's "why"
    points: str | None = None  # "B:C,B:C": only these of the scenario's points


@dataclass(frozen=True)
class Setup:
    """What the scenario fixes: the model, its one weight format, the points and the timing."""

    scenario: dict[str, Any]
    quant: str
    model: Path
    vocab_size: int
    output_len: int
    batches: list[int]
    contexts: list[int]
    warmups: int
    repeats: int
    seed: int

    @classmethod
    def read(cls, path: Path) -> Setup:
        scenario = read_scenario(path)
        model = model_dir(str(scenario["models"][0]))
        return cls(
            scenario=scenario,
            quant=scenario["quantization"][0],
            model=model,
            vocab_size=int(json.loads((model / "config.json").read_text())["vocab_size"]),
            output_len=int(scenario["output_tokens"]),
            batches=[int(b) for b in scenario["batch"]],
            contexts=[int(c) for c in scenario["context"]],
            warmups=int(scenario.get("warmups", 1)),
            repeats=int(scenario.get("repeats", 5)),
            seed=int(scenario.get("seed", 0)),
        )

    @property
    def points(self) -> list[Point]:
        return [(b, c) for b in self.batches for c in self.contexts]


def chosen_points(setup: Setup, points: str | None) -> list[Point]:
    """The scenario's points, or those of `points` ("B:C,B:C"), which must be among them."""
    if not points:
        return setup.points
    chosen = [parse_point(p) for p in points.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in setup.points]
    if unknown or not chosen:
        raise SystemExit(f"--points {points}: expected B:C among the scenario's {setup.points}")
    return chosen


def parse_point(text: str) -> Point:
    batch, _, context = text.strip().partition(":")
    try:
        return int(batch), int(context)
    except ValueError:
        raise SystemExit(f"--points: {text!r} is not B:C (two integers)") from None


def shared(pair: Mapping[str, Mapping[str, Any]]) -> float:
    """The larger share of the machine others used while either tool measured the point."""
    return float(max(pair["harness"]["foreign_share"], pair["vllm"]["foreign_share"]))


class Comparison:
    """The measurements of one comparison run: each point by both tools (the cleaner attempt
    kept), the attempts, and the engine flags read from the harness's first engine."""

    def __init__(self, options: Options, setup: Setup, out: Path, started: float) -> None:
        self.options, self.setup, self.out, self.started = options, setup, out, started
        self.harness_runs: list[Run] = []
        self.vllm_runs: list[Run] = []
        self.attempts: list[dict[str, Any]] = []
        self.flags: list[str] = []
        self.points = chosen_points(setup, options.points)
        self.explained: dict[Point, dict[str, Any]] = {}

    def left_s(self) -> float:
        return self.options.budget_s - (time.perf_counter() - self.started)

    def quiet(self) -> None:
        wait_for_quiet(self.options.max_load, max(0.0, min(self.options.max_wait, self.left_s())))

    def harness_step(self, tag: str, batch: int, context: int) -> Run:
        import yaml

        self.quiet()
        stem = self.options.scenario.stem
        narrowed = self.out / "scenarios" / f"{stem}-b{batch}-c{context}.yaml"
        narrowed.parent.mkdir(exist_ok=True)
        narrowed.write_text(
            yaml.safe_dump({**self.setup.scenario, "batch": [batch], "context": [context]})
        )
        h = run_harness(narrowed, self.out / f"harness-{tag}")
        h["point"] = (batch, context)
        log(
            f"    harness measure {narrowed.name}: {h['wall_s']:.1f} s, load avg "
            f"{h['load_before']:.2f} → {h['load_after']:.2f}, others' CPU "
            f"{100 * h['foreign_share']:.0f} %"
        )
        if not self.flags:
            self.flags = engine_flags(h["engine_args"])
            log(f"    the harness's engine: {h['engine_args']}")
        return h

    def vllm_pass(
        self, worker: VllmWorker, points: list[Point], out: Path, runs: int, latency_one: bool
    ) -> Run:
        s = self.setup
        bench = BenchPlan(
            flags=[*self.flags, "--seed", str(s.seed)], output_len=s.output_len,
            warmups=s.warmups, iterations=s.repeats, throughput_runs=runs, latency_one=latency_one,
        )  # fmt: skip
        return vllm_pass(
            points, bench, worker=worker, out=out, vocab_size=s.vocab_size, seed=s.seed
        )

    def vllm_step(self, worker: VllmWorker, tag: str, batch: int, context: int) -> Run:
        self.quiet()
        runs = self.options.throughput_runs
        v = self.vllm_pass(worker, [(batch, context)], self.out / f"vllm-{tag}", runs, True)
        v["point"] = (batch, context)
        log(
            f"    vllm bench latency (O and 1) + {runs} × throughput: "
            f"{v['wall_s']:.1f} s, load avg {v['load_before']:.2f} → {v['load_after']:.2f}, "
            f"others' CPU {100 * v['foreign_share']:.0f} %"
        )
        return v

    def measure_point(
        self, worker: VllmWorker, rep: int, batch: int, context: int, harness_first: bool
    ) -> None:
        """Both tools on one point, again (both) while others used more than --max-foreign of
        the machine, up to --retries times and within the budget; the cleaner attempt kept."""
        steps: dict[str, Callable[[str, int, int], Run]] = {
            "harness": self.harness_step,
            "vllm": lambda tag, b, c: self.vllm_step(worker, tag, b, c),
        }
        tries: list[dict[str, Run]] = []
        for attempt in range(1, self.options.retries + 2):
            tag = f"{rep}-b{batch}-c{context}-{attempt}"
            log(f"[{rep}] b{batch} c{context}, attempt {attempt}:")
            order = ("harness", "vllm") if harness_first else ("vllm", "harness")
            pair = {name: steps[name](tag, batch, context) for name in order}
            tries.append(pair)
            self.attempts.append(
                {"rep": rep, "point": [batch, context], "attempt": attempt,
                 "harness_foreign_share": pair["harness"]["foreign_share"],
                 "vllm_foreign_share": pair["vllm"]["foreign_share"]}
            )  # fmt: skip
            if shared(pair) <= self.options.max_foreign or self.left_s() <= 0:
                break
            if attempt <= self.options.retries:
                log(f"    others used {100 * shared(pair):.0f} % of the machine: again")
        best = min(tries, key=shared)
        self.harness_runs.append(best["harness"])
        self.vllm_runs.append(best["vllm"])

    def measure_all(self) -> None:
        """Point by point, the two tools back to back (the harness first: its engine's arguments
        are vLLM's flags, then alternating which goes first), --reps passes over the points."""
        worker = VllmWorker(child_env(IN_PROCESS), self.out / "vllm-worker.log")
        log(f"vllm bench process ready (vLLM imported) after "
            f"{time.perf_counter() - self.started:.1f} s")  # fmt: skip
        try:
            turn = 0
            for rep in range(1, self.options.reps + 1):
                for batch, context in self.points:
                    self.measure_point(worker, rep, batch, context, harness_first=turn % 2 == 0)
                    turn += 1
            if self.options.explain:
                self.explain(worker)
        finally:
            worker.close()

    def explain(self, worker: VllmWorker) -> None:
        """The causes of the differences, measured in one engine (explain), per point."""
        s = self.setup
        log(f"explain: the harness's and vllm bench's calls in one engine, {len(self.points)} "
            f"points × {s.repeats} rounds …")  # fmt: skip
        started = time.perf_counter()
        measured = explain_pass(
            worker, self.points, self.harness_runs[0]["engine_args"], out=self.out / "explain",
            model=s.model, output_len=s.output_len, warmups=s.warmups, reps=s.repeats,
            seed=s.seed,
        )  # fmt: skip
        if "error" in measured:
            log(f"    explain failed, the table goes without its why column: {measured['error']}")
            return
        for key, calls in measured["points"].items():
            point = parse_point(key)
            self.explained[point] = {**factors(calls, point[0], s.output_len), "calls": calls}
        log(f"    {time.perf_counter() - started:.1f} s")

    def subprocess_engine(self) -> dict[str, Any] | None:
        """--mp-point with the engine core in a subprocess (vLLM's default), once, against the
        in-process run of the same point; None with --mp-point none."""
        if self.options.mp_point == "none":
            return None
        if self.options.mp_point == "first":
            b, c = self.points[0]
        else:
            b, c = (int(x) for x in self.options.mp_point.split(":"))
        self.quiet()
        log(f"vllm bench latency b{b} c{c}, engine core in a subprocess (vLLM's default) …")
        env = child_env({"VLLM_NO_USAGE_STATS": "1"})
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        worker = VllmWorker(env, self.out / "vllm-subprocess-worker.log")
        try:
            sub = self.vllm_pass(worker, [(b, c)], self.out / "vllm-subprocess", 0, False)
        finally:
            worker.close()
        inproc = next(v for v in reversed(self.vllm_runs) if v["point"] == (b, c))
        log(
            f"    {sub['wall_s']:.1f} s, load avg {sub['load_before']:.2f} → "
            f"{sub['load_after']:.2f}, others' CPU {100 * sub['foreign_share']:.0f} %"
        )
        return subprocess_figures(inproc, sub, (b, c), self.setup.output_len)


def subprocess_figures(
    inproc: Mapping[str, Any], sub: Mapping[str, Any], point: Point, output_len: int
) -> dict[str, Any]:
    """The subprocess engine's latency and command wall time against the in-process pass's."""
    in_cmd = next(
        t
        for t in inproc["timings"]
        if t["argv"][:2] == ["bench", "latency"]
        and t["argv"][t["argv"].index("--output-len") + 1] == str(output_len)
    )
    lat_in = inproc["results"][point]["latency"]["median_s"]
    lat_sub = sub["results"][point]["latency"]["median_s"]
    return {
        "point": point_label(*point, output_len),
        "latency_s_in_process": lat_in,
        "latency_s_subprocess": lat_sub,
        "latency_ratio_subprocess_in_process": lat_sub / lat_in,
        "command_wall_s_in_process": in_cmd["wall_s"],
        "command_wall_s_subprocess": sub["timings"][0]["wall_s"],
        "others_cpu_share": sub["foreign_share"],
        "load_before": sub["load_before"],
        "load_after": sub["load_after"],
    }


def point_figures(
    point: Point,
    output_len: int,
    harness_runs: Sequence[Run],
    vllm_runs: Sequence[Run],
    explained: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One point's entry of the report: both tools' figures (medians over repetitions of each
    repetition's figure), each repetition's, what the machine did meanwhile, the raw timings,
    and the causes measured in one engine (`explain.factors`, None when not measured)."""
    batch, context = point
    mine_h = [h for h in harness_runs if h["point"] == point]
    mine_vr = [v for v in vllm_runs if v["point"] == point]
    mine_v = [v["results"][point] for v in mine_vr]
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
    return {
        "label": point_label(batch, context, output_len),
        "load": f"{100 * other_v:.0f} % / {100 * other_h:.0f} %; {load_v:.1f} / {load_h:.1f}",
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
        "vllm_throughput_elapsed_s": [[t["elapsed_s"] for t in v["throughput"]] for v in mine_v],
        "harness_row_keys": [h["rows"][0]["key"] for h in mine_h],
        "explained": explained,
    }


def arc_figures(row: Mapping[str, Any]) -> dict[str, Any]:
    """ARC-Easy's accuracy and items on a harness row (its task ``arc-easy``; None where the row
    scored none)."""
    found = [t for t in row.get("tasks") or [] if t.get("name") == ARC_TASK]
    arc = found[0] if found else {}
    return {"arc_acc": arc.get("score"), "arc_items": arc.get("items")}


def notes(report: Mapping[str, Any], max_foreign: float) -> list[str]:
    """The sentences under the table: the harness's quality, the engine arguments that differ,
    what the machine did, and the subprocess engine's cost."""
    quality, differ, loads = (
        report["harness_quality"],
        report["engine_args_differ"],
        report["load_average"],
    )
    points = report["points"]
    noisy = [p["label"] for p in points if max(p["others_cpu_share"].values()) > max_foreign]
    measurements = len(points) * report["reps"]
    said = [
        f"Harness quality (same run): perplexity {quality['ppl']:.2f} "
        f"[{quality['ppl_ci_low']:.2f}, {quality['ppl_ci_high']:.2f}], ARC-Easy "
        f"{quality['arc_acc']} on {quality['arc_items']} items.",
        "Engine arguments that differ (harness, vllm bench): "
        + (", ".join(f"{k} {v[0]!r} vs {v[1]!r}" for k, v in differ.items()) or "none"),
        f"Last column: share of the {report['cores']} cores used by other processes while each "
        f"tool measured the point, and the 1-min load average then (vLLM / harness); load "
        f"average {loads['min']:.2f}–{loads['max']:.2f} over the run; "
        f"{len(report['attempts'])} attempts for {measurements} point measurements"
        + (f"; still shared with others: {', '.join(noisy)}" if noisy else "")
        + ".",
    ]
    explained = {p["label"]: p["explained"] for p in points if p.get("explained")}
    if explained:
        said += [EXPLAIN_NOTE, counts_note(explained)]
    mp = report["subprocess_engine"]
    if mp:
        said.append(
            f"Engine core in a subprocess (vLLM's default) at {mp['point']}: latency "
            f"{mp['latency_s_subprocess']:.4f} s vs {mp['latency_s_in_process']:.4f} s in-process "
            f"(× {mp['latency_ratio_subprocess_in_process']:.2f}); the command (engine start, "
            f"warm-ups, iterations) {mp['command_wall_s_subprocess']:.1f} s vs "
            f"{mp['command_wall_s_in_process']:.1f} s."
        )
    return said


def build_report(
    c: Comparison, compared: list[dict[str, Any]], mp: dict[str, Any] | None
) -> dict[str, Any]:
    """The JSON report (DIR/side_by_side_vllm.json), its last field the contract line."""
    differ: dict[str, tuple[Any, Any]] = {}
    for run in [*c.harness_runs, *c.vllm_runs]:
        differ.update(
            engine_args_differ(c.harness_runs[0]["engine_args"], run["engine_args"] or {})
        )
    table = comparison_rows(compared)
    load_end = load1()
    runs = [*c.harness_runs, *c.vllm_runs]
    loads = [x for r in runs for x in (r["load_before"], r["load_after"])]
    quality = c.harness_runs[0]["rows"][0]
    s, o = c.setup, c.options
    return {
        "scenario": str(o.scenario),
        "model": str(s.model),
        "quantization": s.quant,
        "harness_engine_args": c.harness_runs[0]["engine_args"],
        "vllm_bench_engine_args": c.vllm_runs[0]["engine_args"],
        "engine_args_differ": {k: list(v) for k, v in differ.items()},
        "vllm_bench_engine_flags": c.flags,
        "batches": s.batches,
        "contexts": s.contexts,
        "output_tokens": s.output_len,
        "warmups": s.warmups,
        "iterations": s.repeats,
        "throughput_runs": o.throughput_runs,
        "reps": o.reps,
        "cores": CORES,
        "load_average": {"min": min(loads), "max": max(loads), "end": load_end},
        "max_foreign": o.max_foreign,
        "attempts": c.attempts,
        "tolerance": TOLERANCE,
        "table": table,
        "points": compared,
        "subprocess_engine": mp,
        "harness_quality": {
            **{k: quality.get(k) for k in ("ppl", "ppl_ci_low", "ppl_ci_high", "quality_s")},
            **arc_figures(quality),
        },
        "harness_wall_s": [h["wall_s"] for h in c.harness_runs],
        "harness_load_s": [h["rows"][0]["load_s"] for h in c.harness_runs],
        "vllm_pass_wall_s": [v["wall_s"] for v in c.vllm_runs],
        "wall_s": time.perf_counter() - c.started,
        "summary": summary_line(table, max(loads)),
    }


def write_report(out: Path, report: dict[str, Any], said: list[str]) -> None:
    """DIR/side_by_side_vllm.json and .md; the table and notes printed, the contract line last."""
    (out / "side_by_side_vllm.json").write_text(json.dumps(report, indent=2) + "\n")
    md = [
        "# vLLM's own benchmark vs the harness (same points, same engine arguments)\n",
        f"Model {Path(report['model']).name}, quantization {report['quantization']}, KV auto; "
        "ratio = harness ÷ vLLM.\n",
        markdown_table(report["table"]),
        *(f"- {n}" for n in said),
        f"\n`vllm bench` engine flags: `{' '.join(report['vllm_bench_engine_flags'])}`\n",
    ]
    (out / "side_by_side_vllm.md").write_text("\n".join(md))
    log("")
    log(text_table(report["table"]))
    for note in said:
        log(note)
    log(
        f"wall {report['wall_s']:.0f} s; written {out / 'side_by_side_vllm.json'}, "
        f"{out / 'side_by_side_vllm.md'}"
    )
    log(report["summary"])


def run(options: Options) -> dict[str, Any]:
    """The whole comparison (the package's docstring says what and how); the report."""
    started = time.perf_counter()
    set_default_env()
    setup = Setup.read(options.scenario)
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log(
        f"side-by-side-vllm: {setup.model.name}, quantization {setup.quant}, kv auto, batch "
        f"{setup.batches} × context {setup.contexts}, output {setup.output_len}; warm-ups "
        f"{setup.warmups}, iterations {setup.repeats}, throughput runs "
        f"{options.throughput_runs}; {CORES} cores; 1-min load avg {load1():.2f}; out {out}"
    )
    comparison = Comparison(options, setup, out, started)
    if comparison.points != setup.points:
        labels = [point_label(b, c, setup.output_len) for b, c in comparison.points]
        log(f"--points: only {', '.join(labels)}")
    comparison.measure_all()
    compared = [
        point_figures(
            p, setup.output_len, comparison.harness_runs, comparison.vllm_runs,
            comparison.explained.get(p),
        )
        for p in comparison.points
    ]  # fmt: skip
    mp = comparison.subprocess_engine()
    report = build_report(comparison, compared, mp)
    write_report(out, report, notes(report, options.max_foreign))
    return report
