"""Publish one run: CSV, Parquet, JSON, Markdown and one self-contained HTML report.

``report(run_dir, tariffs)`` writes ``run_dir/published/``:

- ``points.csv`` / ``points.parquet``: every row (ok or not) with the gate and flag columns;
- ``cost.csv``: one row per priced row × tariff package (formulas in ``harness.aggregate``);
- ``summary.json``: counts, unreadable files, the headline, cheapest configurations, ratios;
- ``README.md``: the headline table, the method, the formulas, the data licences;
- ``report.html``: the same with sortable tables and inline SVG charts. No network: no external
  script, style, font or image; every string from the data is HTML-escaped.

Everything is written into a temporary folder beside ``published/`` and renamed into place, so a
failure leaves the previous publication (or nothing), never half of one.
"""

from __future__ import annotations

import html
import io
import math
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import __version__
from harness.aggregate import QUALITY_CLASSES, Aggregate, aggregate_run
from harness.errors import UserInputError
from harness.store import atomic_write_bytes, atomic_write_json, atomic_write_text
from harness.tariffs import TariffTable

PUBLISHED = "published"
FILES = ("points.csv", "points.parquet", "cost.csv", "summary.json", "README.md", "report.html")

LICENCES = [
    (
        "WikiText-2 (raw), the perplexity corpus",
        "WikiText-2 (raw) by Stephen Merity, Caiming Xiong, James Bradbury and Richard Socher "
        '(Salesforce Research), from "Pointer Sentinel Mixture Models", arXiv:1609.07843 (2016). '
        "Text extracted from verified Good and Featured articles of the English Wikipedia, "
        "© Wikipedia contributors. Licensed under CC BY-SA 3.0 "
        "(https://creativecommons.org/licenses/by-sa/3.0/). Files redistributed unchanged.",
    ),
    (
        "ARC-Easy, the accuracy check",
        "ARC (AI2 Reasoning Challenge), Easy set, test split, by Peter Clark, Isaac Cowhey, Oren "
        "Etzioni, Tushar Khot, Ashish Sabharwal, Carissa Schoenick and Oyvind Tafjord (Allen "
        'Institute for AI), "Think you have Solved Question Answering? Try ARC, the AI2 Reasoning '
        'Challenge", arXiv:1803.05457 (2018). Licensed CC BY-SA 4.0 '
        "(https://creativecommons.org/licenses/by-sa/4.0/). Reformatted by MosaicML "
        "(mosaicml/llm-foundry); modified from the original (format only).",
    ),
]

FORMULAS = [
    "$/Mtok (package) = (package price ÷ (days × 24) ÷ utilisation) × GPUs used ÷ GPUs in the "
    "package ÷ (tok/s × 3600) × 10⁶ — decode tok/s for output tokens, total tok/s for all tokens",
    "tokens per package = tok/s × 3600 × days × 24 × utilisation × (GPUs in package ÷ GPUs used)",
    "breakeven utilisation = package price ÷ (hourly price × days × 24): above it the package "
    "costs less than hourly billing for the same hours of work",
    "package price = hourly × 24 × days × (1 − discount ÷ 100) when a tariff gives a discount",
    "class 99: ppl ≤ ppl_ref ÷ 0.99 (and ARC acc ≥ 0.99 × acc_ref when both are measured); "
    "class 99.9: ppl ≤ ppl_ref ÷ 0.999 (and acc ≥ 0.999 × acc_ref)",
    "Δppl % = (exp(ΔNLL) − 1) × 100, ΔNLL the paired per-window NLL difference against the "
    "reference, with its bootstrap 95 % CI",
]


# --- formatting -------------------------------------------------------------------------------


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) or math.isinf(out) else out


def fmt_usd(value: Any) -> str:
    v = _num(value)
    if v is None:
        return "–"
    return f"${v:,.2f}" if abs(v) >= 100 else f"${v:.4g}"


def fmt_count(value: Any) -> str:
    v = _num(value)
    if v is None:
        return "–"
    for size, unit in ((1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(v) >= size:
            return f"{v / size:.3g}{unit}"
    return f"{v:.3g}"


def fmt_float(value: Any, digits: int = 4) -> str:
    v = _num(value)
    return "–" if v is None else f"{v:.{digits}g}"


def fmt_pct_ci(est: Any, low: Any, high: Any) -> str:
    e, lo, hi = _num(est), _num(low), _num(high)
    if e is None:
        return "–"
    if lo is None or hi is None:
        return f"{e:+.3f}"
    return f"{e:+.3f} [{lo:+.3f}, {hi:+.3f}]"


# --- headline ---------------------------------------------------------------------------------


COMPACT = (
    "model",
    "days",
    "GPU",
    "config",
    "$/Mtok out",
    "$/Mtok total",
    "tokens/package",
    "× cheapest",
)


def headline_table(
    result: Aggregate,
    quality_class: str = "99",
    package_days: int | None = None,
    compact: bool = False,
) -> list[dict[str, str]]:
    """The cheapest passing configuration per (model, GPU, package) in ``quality_class``, as
    formatted strings keyed by column label, cheapest first per (model, days).
    ``compact``: the COMPACT columns only (quantization, KV, batch and context in ``config``),
    for a terminal."""
    if quality_class not in QUALITY_CLASSES:
        raise UserInputError(
            f"unknown quality class {quality_class!r}; expected one of: "
            f"{', '.join(QUALITY_CLASSES)}",
            field="quality_class",
        )
    table = result.cheapest
    table = table[table["quality_class"] == quality_class]
    if package_days is not None:
        table = table[table["package_days"] == package_days]
    out = []
    for rec in table.to_dict(orient="records"):
        out.append(
            {
                "model": str(rec["model"]),
                "class": str(rec["quality_class"]),
                "days": str(rec["package_days"]),
                "GPU": str(rec["gpu"]),
                "provider": str(rec["provider"]),
                "quant": str(rec["quantization"]),
                "KV": str(rec["kv_cache_dtype"]),
                "batch": str(rec["batch"]),
                "context": str(rec["context"]),
                "decode tok/s": fmt_float(rec["decode_tok_s"]),
                "$/Mtok out": fmt_usd(rec["usd_per_mtok_output"]),
                "$/Mtok total": fmt_usd(rec["usd_per_mtok_total"]),
                "tokens/package": fmt_count(rec["tokens_per_package"]),
                "breakeven util.": fmt_float(rec["breakeven_utilisation"], 3),
                "× cheapest": fmt_float(rec["ratio_to_cheapest_gpu"], 3),
                "Δppl % [95 % CI]": fmt_pct_ci(
                    rec["dppl_pct"], rec["dppl_pct_ci_low"], rec["dppl_pct_ci_high"]
                ),
            }
        )
    if compact:
        for row in out:
            row["config"] = f"{row['quant']} kv={row['KV']} b={row['batch']} ctx={row['context']}"
        out = [{k: row[k] for k in COMPACT} for row in out]
    return out


# --- JSON -------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """JSON-safe: NaN/inf → None, numpy scalars → Python, containers recursively."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def _records(frame: pd.DataFrame, limit: int | None = None) -> list[dict[str, Any]]:
    part = frame if limit is None else frame.head(limit)
    return [_plain(r) for r in part.astype("object").to_dict(orient="records")]


def summary(result: Aggregate, tariffs: TariffTable | None, quality_class: str) -> dict[str, Any]:
    return {
        "harness": __version__,
        "generated_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "utilisation": result.utilisation,
        "quality_class": quality_class,
        "counts": _plain(result.counts),
        "unreadable": [{"file": f, "reason": why} for f, why in result.unreadable],
        "headline": headline_table(result, quality_class),
        "cheapest": _records(result.cheapest),
        "gpu_ratios": _records(result.gpu_ratios),
        "pareto_cost_quality": _records(result.pareto_cost_quality),
        "pareto_throughput_latency": _records(result.pareto_throughput_latency, 500),
        "tariffs": [t.model_dump() for t in tariffs.tariffs] if tariffs else [],
        "tariff_note": tariffs.note if tariffs else None,
        "formulas": FORMULAS,
        "licences": [{"data": name, "attribution": text} for name, text in LICENCES],
    }


# --- Markdown ---------------------------------------------------------------------------------


def md_escape(value: Any) -> str:
    text = str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return html.escape(text, quote=False)


def _md_table(rows: Sequence[dict[str, str]]) -> str:
    if not rows:
        return "_(no configuration passes this class on a priced GPU)_\n"
    head = list(rows[0])
    lines = ["| " + " | ".join(md_escape(h) for h in head) + " |"]
    lines.append("|" + "|".join("---" for _ in head) + "|")
    lines += ["| " + " | ".join(md_escape(r[h]) for h in head) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def readme(result: Aggregate, tariffs: TariffTable | None, quality_class: str) -> str:
    c = result.counts
    parts = [
        "# Cheapest tokens at equal quality\n",
        f"Generated by harness {md_escape(__version__)}. Utilisation assumed: "
        f"{result.utilisation:g} (the share of the package's hours the node does this work).\n",
        f"## Headline: class {md_escape(quality_class)}, cheapest configuration per GPU and "
        "package\n",
        _md_table(headline_table(result, quality_class)),
        "\n## Rows\n",
        f"- rows read: {c['rows']} ({', '.join(f'{k}: {v}' for k, v in c['by_status'].items())})",
        f"- excluded from cost because not ok: {c['excluded_not_ok']}",
        f"- flagged and excluded because decode tok/s exceeds the roofline ceiling: "
        f"{c['flagged_above_roofline']}",
        f"- priced: {c['priced_rows']}; measured but no tariff for their GPU: "
        f"{c['eligible_without_tariff']}",
        f"- unreadable point files (named, skipped): {c['unreadable_files']}",
    ]
    parts += [f"  - `{md_escape(f)}`: {md_escape(why)}" for f, why in result.unreadable]
    if c["models_without_reference"]:
        names = ", ".join(md_escape(m) for m in c["models_without_reference"])
        parts.append(f"- models without a reference row (no quality class): {names}")
    parts += [
        "\n## Method\n",
        "Every configuration is measured on the same corpus in the same run as its reference "
        "(the scenario's reference quantization and KV dtype). A configuration is in a quality "
        "class when its perplexity (and ARC-Easy accuracy, when measured) stays within that "
        "share of the reference's; the paired bootstrap 95 % CI of the per-window NLL "
        "difference is published next to it (`dnll_ci_low`, `dnll_ci_high` in nats/token; "
        "`dppl_pct*` as perplexity change in %). Each row is priced only on tariffs of the GPU it "
        "ran on. The cheapest configuration of a (model, class, GPU, package) is the one with "
        "the lowest $/Mtok of output tokens.\n",
        "### Formulas\n",
        *[f"- {md_escape(f)}" for f in FORMULAS],
        "\n### Tariffs\n",
    ]
    if tariffs:
        if tariffs.note:
            parts.append(md_escape(tariffs.note) + "\n")
        for t in tariffs.tariffs:
            label = " (example)" if t.example else ""
            parts.append(
                f"- {md_escape(t.provider)} {md_escape(t.gpu)} × {t.gpus_per_node}: "
                f"${t.hourly_usd:g}/node-hour{label}; source: {md_escape(t.source)} "
                f"({md_escape(t.date)})"
            )
            for p in t.packages:
                rule = f" — {md_escape(p.rule)}" if p.rule else ""
                parts.append(f"  - {p.days} days: {fmt_usd(t.package_price_usd(p))}{rule}")
    else:
        parts.append("_No tariffs given: nothing is priced._")
    parts += [
        "\n## Files\n",
        "`points.csv` / `points.parquet` (every row), `cost.csv` (row × package), "
        "`summary.json`, `report.html` (self-contained, no network).\n",
        "## Data licences\n",
        *[f"- **{md_escape(name)}**: {md_escape(text)}" for name, text in LICENCES],
        "",
    ]
    return "\n".join(parts)


# --- SVG charts -------------------------------------------------------------------------------

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
W, H = 640, 360
ML, MR, MT, MB = 70, 170, 34, 48


def e(value: Any) -> str:
    """HTML-escape anything (quotes too: safe inside attributes)."""
    return html.escape(str(value), quote=True)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        if raw <= mult * step:
            step *= mult
            break
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step + 1e-9) + 1)]


def _range(values: Iterable[float], zero: bool = False) -> tuple[float, float]:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return 0.0, 1.0
    lo, hi = min(vals), max(vals)
    if zero:
        lo = min(lo, 0.0)
    pad = (hi - lo) * 0.06 or abs(hi) * 0.06 or 1.0
    return (lo if zero and lo == 0 else lo - pad), hi + pad


def _axes(
    title: str,
    x_label: str,
    y_label: str,
    xr: tuple[float, float],
    yr: tuple[float, float],
    x_ticks: bool = True,
) -> tuple[list[str], Callable[[float], float], Callable[[float], float]]:
    pw, ph = W - ML - MR, H - MT - MB

    def sx(v: float) -> float:
        return ML + (v - xr[0]) / (xr[1] - xr[0]) * pw

    def sy(v: float) -> float:
        return MT + ph - (v - yr[0]) / (yr[1] - yr[0]) * ph

    out = [
        f'<text class="title" x="{ML}" y="20">{e(title)}</text>',
        f'<line class="axis" x1="{ML}" y1="{MT + ph}" x2="{ML + pw}" y2="{MT + ph}"/>',
        f'<line class="axis" x1="{ML}" y1="{MT}" x2="{ML}" y2="{MT + ph}"/>',
        f'<text class="label" x="{ML + pw / 2:.1f}" y="{H - 8}" text-anchor="middle">'
        f"{e(x_label)}</text>",
        f'<text class="label" transform="translate(14,{MT + ph / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{e(y_label)}</text>',
    ]
    for t in _ticks(*xr) if x_ticks else []:
        if xr[0] <= t <= xr[1]:
            out.append(
                f'<text class="tick" x="{sx(t):.1f}" y="{MT + ph + 16}" text-anchor="middle">'
                f"{e(f'{t:.4g}')}</text>"
            )
    for t in _ticks(*yr):
        if yr[0] <= t <= yr[1]:
            out.append(
                f'<line class="grid" x1="{ML}" y1="{sy(t):.1f}" x2="{ML + pw}" y2="{sy(t):.1f}"/>'
                f'<text class="tick" x="{ML - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">'
                f"{e(f'{t:.4g}')}</text>"
            )
    return out, sx, sy


def _legend(names: Sequence[str]) -> list[str]:
    out = []
    for i, name in enumerate(names[:14]):
        y = MT + 6 + i * 18
        colour = PALETTE[i % len(PALETTE)]
        out.append(
            f'<rect x="{W - MR + 12}" y="{y - 9}" width="10" height="10" fill="{colour}"/>'
            f'<text class="tick" x="{W - MR + 28}" y="{y}">{e(_short(name, 24))}</text>'
        )
    return out


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _svg(body: list[str], label: str) -> str:
    return (
        f'<svg class="chart" role="img" aria-label="{e(label)}" viewBox="0 0 {W} {H}" '
        f'width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>"
    )


def svg_bars(
    title: str,
    y_label: str,
    groups: Sequence[str],
    series: Sequence[str],
    value: dict[tuple[str, str], float],
) -> str:
    """Grouped bars: one group per package, one bar per series (GPU)."""
    top = max([v for v in value.values() if math.isfinite(v)] or [1.0])
    body, _, sy = _axes(title, "package (days)", y_label, (0.0, 1.0), (0.0, top * 1.08), False)
    pw = W - ML - MR
    slot = pw / max(len(groups), 1)
    bar = slot * 0.8 / max(len(series), 1)
    for gi, group in enumerate(groups):
        x0 = ML + gi * slot + slot * 0.1
        body.append(
            f'<text class="tick" x="{ML + gi * slot + slot / 2:.1f}" y="{H - MB + 16}" '
            f'text-anchor="middle">{e(group)}</text>'
        )
        for si, name in enumerate(series):
            v = value.get((group, name))
            if v is None or not math.isfinite(v):
                continue
            y = sy(v)
            body.append(
                f'<rect class="bar" x="{x0 + si * bar:.1f}" y="{y:.1f}" width="{bar * 0.92:.1f}" '
                f'height="{sy(0) - y:.1f}" fill="{PALETTE[si % len(PALETTE)]}">'
                f"<title>{e(f'{name}, {group} days: {fmt_usd(v)} per Mtok')}</title></rect>"
            )
    return _svg(body + _legend(series), title)


def svg_scatter(
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[tuple[str, Sequence[tuple[float, float, str]], bool]],
    diagonal: bool = False,
) -> str:
    """Points per series (name, [(x, y, tooltip)], connect-as-a-front); optional y = x line."""
    xs = [p[0] for _, pts, _ in series for p in pts]
    ys = [p[1] for _, pts, _ in series for p in pts]
    if diagonal:
        both = _range(xs + ys)
        xr = yr = both
    else:
        xr, yr = _range(xs), _range(ys)
    body, sx, sy = _axes(title, x_label, y_label, xr, yr)
    if diagonal:
        body.append(
            f'<line class="diag" x1="{sx(xr[0]):.1f}" y1="{sy(yr[0]):.1f}" '
            f'x2="{sx(xr[1]):.1f}" y2="{sy(yr[1]):.1f}"><title>y = x</title></line>'
        )
    for si, (_, pts, connect) in enumerate(series):
        colour = PALETTE[si % len(PALETTE)]
        good = [p for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])]
        if connect and len(good) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y, _ in sorted(good))
            body.append(f'<polyline class="front" points="{path}" stroke="{colour}"/>')
        for x, y, tip in good:
            body.append(
                f'<circle class="pt" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="{colour}">'
                f"<title>{e(tip)}</title></circle>"
            )
    return _svg(body + _legend([name for name, _, _ in series]), title)


def svg_intervals(
    title: str,
    x_label: str,
    items: Sequence[tuple[str, float, float, float]],
    refs: Sequence[tuple[float, str]] = (),
) -> str:
    """Horizontal estimate + CI per item (label, estimate, low, high), with vertical ref lines."""
    items = list(items)[:24]
    values = [v for _, est, lo, hi in items for v in (est, lo, hi)] + [r for r, _ in refs]
    xr = _range(values)
    top = 36 + 12 * len(refs)  # one row of labels per reference line
    height = max(H, top + MB + 18 * len(items))
    ph = height - top - MB
    left = 270
    pw = W - left - 30

    def sx(v: float) -> float:
        return left + (v - xr[0]) / (xr[1] - xr[0]) * pw

    body = [
        f'<text class="title" x="10" y="20">{e(title)}</text>',
        f'<line class="axis" x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}"/>',
        f'<text class="label" x="{left + pw / 2:.1f}" y="{height - 8}" text-anchor="middle">'
        f"{e(x_label)}</text>",
    ]
    for t in _ticks(*xr):
        if xr[0] <= t <= xr[1]:
            body.append(
                f'<text class="tick" x="{sx(t):.1f}" y="{top + ph + 16}" text-anchor="middle">'
                f"{e(f'{t:.5g}')}</text>"
            )
    for i, (value, label) in enumerate(refs):
        body.append(
            f'<line class="ref" x1="{sx(value):.1f}" y1="{top}" x2="{sx(value):.1f}" '
            f'y2="{top + ph}"><title>{e(label)}</title></line>'
            f'<text class="tick" x="{sx(value):.1f}" y="{34 + 12 * i}" '
            f'text-anchor="{"end" if sx(value) > left + pw * 0.6 else "start"}">{e(label)}</text>'
        )
    step = ph / max(len(items), 1)
    for i, (label, est, lo, hi) in enumerate(items):
        y = top + step * (i + 0.5)
        body.append(
            f'<text class="tick" x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">'
            f"{e(_short(label, 42))}</text>"
        )
        if math.isfinite(lo) and math.isfinite(hi):
            body.append(
                f'<line class="ci" x1="{sx(lo):.1f}" y1="{y:.1f}" x2="{sx(hi):.1f}" y2="{y:.1f}"/>'
            )
        body.append(
            f'<circle class="pt" cx="{sx(est):.1f}" cy="{y:.1f}" r="4" fill="{PALETTE[0]}">'
            f"<title>{e(f'{label}: {est:.5g} [{lo:.5g}, {hi:.5g}]')}</title></circle>"
        )
    return (
        f'<svg class="chart" role="img" aria-label="{e(title)}" viewBox="0 0 {W} {height}" '
        f'width="{W}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


# --- HTML -------------------------------------------------------------------------------------

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#222;
padding:0 12px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;white-space:nowrap}
td.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f3f3f3;cursor:pointer;user-select:none}
th[aria-sort=ascending]::after{content:" ▲"}th[aria-sort=descending]::after{content:" ▼"}
.wrap{overflow-x:auto}.note{color:#666}.warn{color:#a40}
svg.chart{background:#fff;border:1px solid #eee;margin:6px 8px 6px 0}
svg .axis{stroke:#444}svg .grid{stroke:#eee}svg .diag,svg .ref{stroke:#999;stroke-dasharray:4 3}
svg .front{fill:none;stroke-width:1.5}svg .ci{stroke:#1f77b4;stroke-width:2}
svg .title{font-weight:600;font-size:13px}svg .label{font-size:12px}svg .tick{font-size:11px}
"""

# Sorting reads each cell's data-v (numbers) or its text; rows are moved, never re-parsed.
JS = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var asc = th.getAttribute('aria-sort') !== 'ascending';
      table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var num = th.getAttribute('data-type') === 'num';
      function key(row) {
        var cell = row.cells[col];
        if (!num) { return cell.textContent; }
        var v = parseFloat(cell.getAttribute('data-v'));
        return isNaN(v) ? Infinity : v;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var c = num ? (x === y ? 0 : (x < y ? -1 : 1)) : String(x).localeCompare(String(y));
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""

Column = tuple[str, str, Callable[[Any], str] | None]  # (field, header, formatter or None=text)


def html_table(
    frame: pd.DataFrame, columns: Sequence[Column], table_id: str, limit: int = 5000
) -> str:
    """A sortable table: numeric columns carry their raw value in data-v for sorting."""
    present = [c for c in columns if c[0] in frame.columns]
    head = "".join(
        f'<th data-type="{"num" if fmt else "text"}">{e(label)}</th>' for _, label, fmt in present
    )
    rows = []
    for rec in frame.head(limit).astype("object").to_dict(orient="records"):
        cells = []
        for name, _, fmt in present:
            value = rec.get(name)
            if fmt is None:
                text = (
                    ""
                    if value is None or (isinstance(value, float) and math.isnan(value))
                    else value
                )
                cells.append(f"<td>{e(text)}</td>")
            else:
                raw = _num(value)
                data_v = "" if raw is None else repr(raw)
                cells.append(f'<td class="n" data-v="{e(data_v)}">{e(fmt(value))}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = (
        f'<p class="note">showing {limit} of {len(frame)} rows; all are in the CSV files.</p>'
        if len(frame) > limit
        else ('<p class="note">(no rows)</p>' if frame.empty else "")
    )
    return (
        f'<div class="wrap"><table class="sortable" id="{e(table_id)}"><thead><tr>{head}</tr>'
        f"</thead><tbody>{''.join(rows)}</tbody></table></div>{more}"
    )


def _int(value: Any) -> str:
    v = _num(value)
    return "–" if v is None else f"{v:.0f}"


CHEAPEST_COLUMNS: list[Column] = [
    ("model", "model", None),
    ("quality_class", "class", None),
    ("package_days", "days", _int),
    ("gpu", "GPU", None),
    ("provider", "provider", None),
    ("quantization", "quant", None),
    ("kv_cache_dtype", "KV", None),
    ("batch", "batch", _int),
    ("context", "context", _int),
    ("decode_tok_s", "decode tok/s", fmt_float),
    ("usd_per_mtok_output", "$/Mtok out", fmt_usd),
    ("usd_per_mtok_total", "$/Mtok total", fmt_usd),
    ("usd_per_mtok_output_hourly", "$/Mtok out, hourly", fmt_usd),
    ("tokens_per_package", "tokens/package", fmt_count),
    ("breakeven_utilisation", "breakeven util.", fmt_float),
    ("ratio_to_cheapest_gpu", "× cheapest GPU", fmt_float),
    ("dppl_pct", "Δppl %", fmt_float),
    ("dppl_pct_ci_low", "CI low", fmt_float),
    ("dppl_pct_ci_high", "CI high", fmt_float),
]
POINT_COLUMNS: list[Column] = [
    ("model", "model", None),
    ("backend", "backend", None),
    ("quantization", "quant", None),
    ("kv_cache_dtype", "KV", None),
    ("batch", "batch", _int),
    ("context", "context", _int),
    ("device", "device", None),
    ("status", "status", None),
    ("decode_tok_s", "decode tok/s", fmt_float),
    ("total_tok_s", "total tok/s", fmt_float),
    ("tpot_ms_p50", "TPOT ms", fmt_float),
    ("peak_mib_decode", "peak MiB", fmt_float),
    ("predicted_peak_mib", "predicted MiB", fmt_float),
    ("roofline_fraction", "roofline frac.", fmt_float),
    ("ppl", "ppl", fmt_float),
    ("dppl_pct", "Δppl %", fmt_float),
    ("quality_class", "class", None),
    ("exceeds_roofline", "above roofline", None),
    ("error", "error", None),
]
RATIO_COLUMNS: list[Column] = [
    ("model", "model", None),
    ("quality_class", "class", None),
    ("package_days", "days", _int),
    ("gpu_a", "GPU a", None),
    ("gpu_b", "GPU b", None),
    ("cost_ratio_a_over_b", "cost a ÷ b", fmt_float),
]
EFFECT_COLUMNS: list[Column] = [
    ("model", "model", None),
    ("device", "device", None),
    ("axis", "axis", None),
    ("level", "level", None),
    ("metric", "metric", None),
    ("mean", "mean", fmt_float),
    ("effect", "effect", fmt_float),
    ("n", "n", _int),
]


def _charts(result: Aggregate, quality_class: str, max_models: int = 4) -> list[str]:
    out: list[str] = []
    cheapest = result.cheapest[result.cheapest["quality_class"] == quality_class]
    for model in list(dict.fromkeys(cheapest["model"]))[:max_models]:
        part = cheapest[cheapest["model"] == model]
        groups = [str(d) for d in sorted(part["package_days"].unique())]
        gpus = [str(g) for g in dict.fromkeys(part.sort_values("usd_per_mtok_output")["gpu"])]
        values = {
            (str(r["package_days"]), str(r["gpu"])): float(r["usd_per_mtok_output"])
            for r in part.to_dict(orient="records")
        }
        out.append(
            svg_bars(
                f"{model}: $/Mtok out, class {quality_class}", "$ per Mtok", groups, gpus, values
            )
        )
    front = result.pareto_cost_quality
    if not front.empty:
        longest = front["package_days"].max()
        part = front[front["package_days"] == longest]
        series = []
        for model in list(dict.fromkeys(part["model"]))[:max_models]:
            sub = part[part["model"] == model]
            pts = [
                (
                    float(r["usd_per_mtok_output"]),
                    float(r["ppl"]),
                    f"{model} {r['gpu']} {r['quantization']} kv={r['kv_cache_dtype']} "
                    f"b={r['batch']} ctx={r['context']}: {fmt_usd(r['usd_per_mtok_output'])}, "
                    f"ppl {r['ppl']:.5g}",
                )
                for r in sub.to_dict(orient="records")
            ]
            series.append((str(model), pts, True))
        out.append(
            svg_scatter(
                f"Pareto: cost vs perplexity ({longest}-day package)",
                "$ per Mtok out",
                "perplexity",
                series,
            )
        )
    tl = result.pareto_throughput_latency
    if not tl.empty:
        series = []
        for (model, device), sub in list(tl.groupby(["model", "device"], sort=False))[:8]:
            pts = [
                (
                    float(r["tpot_ms_p50"]),
                    float(r["decode_tok_s"]),
                    f"{model} {device} {r['quantization']} kv={r['kv_cache_dtype']} b={r['batch']} "
                    f"ctx={r['context']}",
                )
                for r in sub.to_dict(orient="records")
            ]
            series.append((f"{model} · {device}", pts, True))
        out.append(
            svg_scatter(
                "Pareto: decode throughput vs TPOT", "TPOT p50 (ms)", "decode tok/s", series
            )
        )
    mem = result.points.loc[
        result.points["predicted_peak_mib"].notna() & result.points["peak_mib_decode"].notna()
    ]
    if not mem.empty:
        series = []
        for device, sub in list(mem.groupby("device", sort=False))[:8]:
            pts = [
                (
                    float(r["predicted_peak_mib"]),
                    float(r["peak_mib_decode"]),
                    f"{r['model']} {r['quantization']} kv={r['kv_cache_dtype']} b={r['batch']} "
                    f"ctx={r['context']}: predicted {r['predicted_peak_mib']:.0f} MiB, measured "
                    f"{r['peak_mib_decode']:.0f} MiB",
                )
                for r in sub.head(1500).to_dict(orient="records")
            ]
            series.append((str(device), pts, False))
        out.append(
            svg_scatter(
                "Memory: predicted vs measured peak (decode)",
                "predicted MiB",
                "measured MiB",
                series,
                diagonal=True,
            )
        )
    points = result.points
    quality = points.loc[points["dppl_pct"].notna() & (points["status"] == "ok")]
    group_cols = ["model", "backend", "quantization", "kv_cache_dtype", "device"]
    limits = [(0.0, "reference")] + [
        ((1 / level - 1) * 100, f"class {name} limit") for name, level in QUALITY_CLASSES.items()
    ]
    for model, sub in list(quality.groupby("model", sort=False))[:max_models]:
        configs = sub.drop_duplicates(group_cols).sort_values("dppl_pct")
        items = [
            (
                f"{r['quantization']} kv={r['kv_cache_dtype']} {r['backend']} {r['device']}",
                float(r["dppl_pct"]),
                _nan(r["dppl_pct_ci_low"]),
                _nan(r["dppl_pct_ci_high"]),
            )
            for r in configs.to_dict(orient="records")
        ]
        out.append(
            svg_intervals(
                f"{model}: perplexity change vs reference, paired 95 % CI",
                "Δ perplexity (%)",
                items,
                limits,
            )
        )
    return out


def _nan(value: Any) -> float:
    v = _num(value)
    return float("nan") if v is None else v


def report_html(result: Aggregate, tariffs: TariffTable | None, quality_class: str) -> str:
    c = result.counts
    cheapest = result.cheapest[result.cheapest["quality_class"] == quality_class]
    sections = [
        "<h1>Cheapest tokens at equal quality</h1>",
        f'<p class="note">harness {e(__version__)} · utilisation {e(f"{result.utilisation:g}")}'
        f" · quality class {e(quality_class)} · generated "
        f"{e(datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC'))}</p>",
        f"<h2>Cheapest configuration per GPU and package (class {e(quality_class)})</h2>",
        html_table(cheapest, CHEAPEST_COLUMNS, "cheapest"),
        "<h2>Charts</h2>",
        *_charts(result, quality_class),
        "<h2>GPU against GPU at equal quality</h2>",
        html_table(result.gpu_ratios, RATIO_COLUMNS, "ratios"),
        "<h2>Every point</h2>",
        html_table(result.points, POINT_COLUMNS, "points"),
        "<h2>Factor effects (main effects)</h2>",
        html_table(result.main_effects, EFFECT_COLUMNS, "effects", limit=2000),
        "<h2>Rows</h2><ul>",
        f"<li>rows read: {e(c['rows'])}; by status: "
        f"{e(', '.join(f'{k} {v}' for k, v in c['by_status'].items()))}</li>",
        f"<li>excluded from cost, not ok: {e(c['excluded_not_ok'])}</li>",
        f"<li>flagged, decode above the roofline ceiling: {e(c['flagged_above_roofline'])}</li>",
        f"<li>priced: {e(c['priced_rows'])}; no tariff for their GPU: "
        f"{e(c['eligible_without_tariff'])}</li>",
        f"<li>unreadable point files, skipped: {e(c['unreadable_files'])}</li>",
        *[f'<li class="warn">{e(f)}: {e(why)}</li>' for f, why in result.unreadable],
        "</ul>",
        "<h2>Method and formulas</h2><ul>",
        *[f"<li>{e(f)}</li>" for f in FORMULAS],
        "</ul>",
        "<h2>Tariffs</h2>",
    ]
    if tariffs:
        if tariffs.note:
            sections.append(f'<p class="note">{e(tariffs.note)}</p>')
        sections.append("<ul>")
        for t in tariffs.tariffs:
            packages = "; ".join(
                f"{p.days} d {fmt_usd(t.package_price_usd(p))}" + (f" ({p.rule})" if p.rule else "")
                for p in t.packages
            )
            sections.append(
                f"<li>{e(t.provider)} {e(t.gpu)} × {e(t.gpus_per_node)}: "
                f"{e(fmt_usd(t.hourly_usd))}/node-hour{' (example)' if t.example else ''}; "
                f"source {e(t.source)} ({e(t.date)}); {e(packages)}</li>"
            )
        sections.append("</ul>")
    else:
        sections.append("<p>No tariffs given: nothing is priced.</p>")
    sections += ["<h2>Data licences</h2><ul>"]
    sections += [f"<li><b>{e(name)}</b>: {e(text)}</li>" for name, text in LICENCES]
    sections += ["</ul>"]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        "<title>harness report</title>"
        f"<style>{CSS}</style></head><body>{''.join(sections)}<script>{JS}</script></body></html>\n"
    )


# --- writing ----------------------------------------------------------------------------------


def _parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def _cost_for_csv(result: Aggregate) -> pd.DataFrame:
    return result.cost.drop(columns=["point_index", "package_index"], errors="ignore")


def write_published(
    result: Aggregate, out_dir: Path, tariffs: TariffTable | None, quality_class: str = "99"
) -> Path:
    """Write every file into a fresh temp folder, then swap it in as ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        atomic_write_text(tmp / "points.csv", result.points.to_csv(index=False))
        atomic_write_bytes(tmp / "points.parquet", _parquet_bytes(result.points))
        atomic_write_text(tmp / "cost.csv", _cost_for_csv(result).to_csv(index=False))
        atomic_write_json(tmp / "summary.json", _plain(summary(result, tariffs, quality_class)))
        atomic_write_text(tmp / "README.md", readme(result, tariffs, quality_class))
        atomic_write_text(tmp / "report.html", report_html(result, tariffs, quality_class))
        _swap_in(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _swap_in(new: Path, final: Path) -> None:
    """Rename ``new`` to ``final``; an older ``final`` is moved aside first, then removed."""
    if not final.exists():
        os.rename(new, final)
        return
    old = final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(final, old)
    try:
        os.rename(new, final)
    except BaseException:
        os.rename(old, final)
        raise
    shutil.rmtree(old, ignore_errors=True)


def report(
    run_dir: Path,
    tariffs: TariffTable | None,
    *,
    utilisation: float = 1.0,
    quality_class: str = "99",
    result: Aggregate | None = None,
) -> Path:
    """Aggregate ``run_dir`` (unless ``result`` is given) and publish it to run_dir/published/."""
    if quality_class not in QUALITY_CLASSES:
        raise UserInputError(
            f"unknown quality class {quality_class!r}; expected one of: "
            f"{', '.join(QUALITY_CLASSES)}",
            field="quality_class",
        )
    run_dir = Path(run_dir)
    if result is None:
        result = aggregate_run(run_dir, tariffs, utilisation)
    return write_published(result, run_dir / PUBLISHED, tariffs, quality_class)
