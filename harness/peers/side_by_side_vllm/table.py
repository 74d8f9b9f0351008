"""Each tool's figures for one point, and the ratio table (harness ÷ vLLM) as rows, Markdown,
text and the contract line. Pure functions.

What each figure is (the goal: the ratio within `TOLERANCE`):
- latency_s: vLLM = median of ``latencies`` (``time.perf_counter()`` around ``llm.generate`` of
  the batch: input processing, prefill, decode, output assembly); harness = ``e2e_ms_p50`` / 1000
  (engine timestamps: the call's start to the batch's last token).
- output_tok_s: vLLM throughput = B × O / ``elapsed_time`` (median over runs; prefill included);
  harness = ``generated_tokens`` / e2e (the same definition).
- total_tok_s: vLLM ``tokens_per_second`` = (prompt + output tokens) / ``elapsed_time``; harness
  ``total_tok_s`` = (B × context + generated) / e2e (median over repeats).
- decode_tok_s: harness ``decode_tok_s`` = B × (O − 1) / (e2e − TTFT); vLLM has no decode figure,
  so it is derived from its latency benchmark: B × (O − 1) / (latency(O) − latency(1)).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from harness.peers.side_by_side_vllm.explain import why

TOLERANCE = 0.10  # the goal: harness within 10 % of vLLM's own figure
METRICS = {
    "latency_s": "s per batch (median)",
    "output_tok_s": "output tok/s (prefill incl.)",
    "total_tok_s": "(prompt + output) tok/s",
    "decode_tok_s": "decode tok/s (prefill excl.)",
}
Figures = dict[str, float | None]


def point_label(batch: int, context: int, output: int) -> str:
    return f"b{batch} c{context} o{output}"


def vllm_figures(
    latency: Mapping[str, Any],
    latency_one: Mapping[str, Any] | None,
    throughputs: Sequence[Mapping[str, Any]],
    *,
    batch: int,
    output_len: int,
) -> Figures:
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
    values = [v for f in figures if (v := f.get(metric)) is not None]
    return statistics.median(values) if values else None


def harness_figures(row: Mapping[str, Any]) -> Figures:
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
    "within", "load", "why"}. `points` items carry "label", "vllm" and "harness" (figure dicts)
    and optionally "load" (the 1-min load averages while each tool measured the point) and
    "explained" (`explain.factors` of the point: the "why" cell)."""
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
                    "why": why(metric, point.get("explained"), r),
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
    whys = any(r.get("why", "–") != "–" for r in rows)
    lines = [
        f"| point | figure | vLLM bench | harness | ratio | within {100 * tolerance:.0f} % |"
        + (" others' CPU; load avg (vLLM / harness) |" if loads else "")
        + (" why: factors → predicted ratio; rest |" if whys else ""),
        "|---|---|---:|---:|---:|:---:|" + ("---:|" if loads else "") + ("---|" if whys else ""),
    ]
    for r in rows:
        ok = {True: "yes", False: "**no**", None: "–"}[r["within"]]
        rat = "–" if r["ratio"] is None else f"{r['ratio']:.3f}"
        lines.append(
            f"| {r['point']} | {r['what']} | {_cell(r['vllm'], r['metric'])} | "
            f"{_cell(r['harness'], r['metric'])} | {rat} | {ok} |"
            + (f" {r.get('load') or '–'} |" if loads else "")
            + (f" {r.get('why', '–')} |" if whys else "")
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
            + (f"\n{'':<14}why: {r['why']}" if r.get("why", "–") != "–" else "")
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
