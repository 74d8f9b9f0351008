"""report.html: one self-contained page (sortable tables, inline SVG charts, no network)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from harness import __version__
from harness.modes.base import Column
from harness.results.aggregate import Aggregate
from harness.results.columns import (
    CHEAPEST_OF,
    CONFIGURATION,
    DPPL_WITH_CI,
    OFFER_SPREAD,
    PACKAGE_TERMS,
    PEAK_MEMORY,
    PRICE_READ,
    USD_PER_MTOK,
    table_columns,
)
from harness.results.engines import AGREEMENT_TOLERANCE, agreement_lines, engine_agreement
from harness.results.pricing import QUALITY_CLASSES
from harness.results.publish import verdicts
from harness.results.publish.analysis import Page, energy_section, mode_reports, regressions_html
from harness.results.publish.format import (
    escape,
    fmt_usd,
    number,
    number_or_nan,
)
from harness.results.publish.method import FORMULAS, LICENCES
from harness.results.publish.speculation import headline_note, speculation_section
from harness.results.publish.svg import svg_bars, svg_intervals, svg_scatter
from harness.results.publish.tasks import tasks_section
from harness.spec.labels import ENGINE_WEIGHTS_KV, configuration_label
from harness.spec.tariffs import TariffTable

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
.verdict{font-weight:600}
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


def html_table(
    frame: pd.DataFrame, columns: Sequence[Column], table_id: str, limit: int = 5000
) -> str:
    """A sortable table: numeric columns carry their raw value in data-v for sorting."""
    present = [c for c in columns if c[0] in frame.columns]
    head = "".join(
        f'<th data-type="{"num" if fmt else "text"}">{escape(label)}</th>'
        for _, label, fmt in present
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
                cells.append(f"<td>{escape(text)}</td>")
            else:
                raw = number(value)
                data_v = "" if raw is None else repr(raw)
                cells.append(f'<td class="n" data-v="{escape(data_v)}">{escape(fmt(value))}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = (
        f'<p class="note">showing {limit} of {len(frame)} rows; all are in the CSV files.</p>'
        if len(frame) > limit
        else ('<p class="note">(no rows)</p>' if frame.empty else "")
    )
    return (
        f'<div class="wrap"><table class="sortable" id="{escape(table_id)}"><thead><tr>{head}</tr>'
        f"</thead><tbody>{''.join(rows)}</tbody></table></div>{more}"
    )


def html_list(lead: str, items: Sequence[str]) -> list[str]:
    """A list under its lead sentence, as a note."""
    return [
        f'<p class="note">{escape(lead)}.</p><ul>',
        *(f"<li>{escape(i)}</li>" for i in items),
        "</ul>",
    ]


# how this page writes the sections it shares with the README (harness.results.publish.analysis)
HTML_PAGE = Page(
    heading=lambda level, text: f"<h{level}>{escape(text)}</h{level}>",
    paragraph=lambda text: f'<p class="note">{escape(text)}</p>',
    listing=html_list,
    table=html_table,
)

CHEAPEST_COLUMNS: list[Column] = table_columns(
    (
        *CHEAPEST_OF,
        *CONFIGURATION,
        "decode_tok_s",
        *USD_PER_MTOK,
        "usd_per_mtok_output_hourly",
        "j_per_mtok_output",
        *PACKAGE_TERMS,
        *DPPL_WITH_CI,
        *PRICE_READ,
        *OFFER_SPREAD,
    )
)
POINT_COLUMNS: list[Column] = table_columns(
    (
        "model",
        "weights",
        *CONFIGURATION,
        "device",
        "status",
        "decode_tok_s",
        "total_tok_s",
        "tpot_ms_p50",
        *PEAK_MEMORY,
        "roofline_fraction",
        "ppl",
        "dppl_pct",
        "quality_class",
        "exceeds_roofline",
        "error",
    )
)
SPEED_ONLY_COLUMNS: list[Column] = table_columns(
    ("model", *CONFIGURATION, "device", "decode_tok_s", "tpot_ms_p50", "ttft_ms_p50", *PEAK_MEMORY)
)
RATIO_COLUMNS: list[Column] = table_columns(
    ("model", "quality_class", "package_days", "gpu_a", "gpu_b", "cost_ratio_a_over_b")
)
EFFECT_COLUMNS: list[Column] = table_columns(
    ("model", "device", "axis", "level", "metric", "mean", "effect", "n")
)


def charts(result: Aggregate, quality_class: str, max_models: int = 4) -> list[str]:
    """The report's charts, in order: $/Mtok per GPU and package (per model), the two Pareto
    fronts, predicted vs measured memory, and each model's perplexity change with its CI."""
    return [
        *cost_bars(result, quality_class, max_models),
        *cost_quality_front(result, max_models),
        *throughput_latency_front(result),
        *memory_chart(result),
        *quality_intervals(result, max_models),
    ]


def cost_bars(result: Aggregate, quality_class: str, max_models: int) -> list[str]:
    """Per model (the first ``max_models``): $/Mtok out of the cheapest per GPU and package."""
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
    return out


def cost_quality_front(result: Aggregate, max_models: int) -> list[str]:
    """The cost–perplexity front of the longest package, one series per model."""
    out: list[str] = []
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
                    f"{model} {r['gpu']} {configuration_label(r)}: "
                    f"{fmt_usd(r['usd_per_mtok_output'])}, ppl {r['ppl']:.5g}",
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
    return out


def throughput_latency_front(result: Aggregate) -> list[str]:
    """The decode throughput–TPOT front, one series per (model, device), at most 8."""
    out: list[str] = []
    tl = result.pareto_throughput_latency
    if not tl.empty:
        series = []
        for (model, device), sub in list(tl.groupby(["model", "device"], sort=False))[:8]:
            pts = [
                (
                    float(r["tpot_ms_p50"]),
                    float(r["decode_tok_s"]),
                    f"{model} {device} {configuration_label(r)}",
                )
                for r in sub.to_dict(orient="records")
            ]
            series.append((f"{model} · {device}", pts, True))
        out.append(
            svg_scatter(
                "Pareto: decode throughput vs TPOT", "TPOT p50 (ms)", "decode tok/s", series
            )
        )
    return out


def memory_chart(result: Aggregate) -> list[str]:
    """Predicted against measured peak memory (decode), one series per device, at most 8."""
    out: list[str] = []
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
                    f"{r['model']} {configuration_label(r)}: predicted "
                    f"{r['predicted_peak_mib']:.0f} MiB, measured {r['peak_mib_decode']:.0f} MiB",
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
        out.append(f'<p class="note">{escape(memory_caption(mem))}</p>')
    return out


# The memory chart's caption: the gap per measured phase, and where a phase is off by more than
# MEMORY_GAP_LIMIT_PCT, why: the term the plan knows least on that device kind, with what was
# measured (harness.plan's CPU constants say where and how).
MEMORY_GAP_LIMIT_PCT = 10.0
MEMORY_PHASES = {"prefill": "peak_mib_prefill", "decode": "peak_mib_decode"}
LEAST_KNOWN_TERM = {
    "cpu": (
        "on the CPU the measured peak is the process RSS; the terms the plan does not model are "
        "bitsandbytes int8's matmul buffers, which grow with batch x context (+61 MiB over "
        "fp32's activations at 2,048 tokens on the tiny model, 2026-12-01), and a transformers "
        "group that could not fork from the node's host (its rows' provenance: process fresh), "
        "which holds about 105 MiB more from its load on"
    ),
}
MAX_NAMED_POINTS = 4  # points named per phase in the caption; the rest are counted


def memory_caption(mem: pd.DataFrame) -> str:
    """Measured − predicted peak per phase in % of the plan's peak (its largest phase, prefill or
    decode): the range over the points, the points more than MEMORY_GAP_LIMIT_PCT off, and for
    their device kinds the term that explains it (LEAST_KNOWN_TERM)."""
    parts: list[str] = []
    off_devices: set[str] = set()
    for phase, column in MEMORY_PHASES.items():
        rows = mem.loc[mem[column].notna()]
        if rows.empty:
            continue
        gaps = 100 * (rows[column] - rows["predicted_peak_mib"]) / rows["predicted_peak_mib"]
        points = f"{len(rows)} point{'s' if len(rows) != 1 else ''}"
        text = f"{phase} {gaps.min():+.1f} % to {gaps.max():+.1f} % over {points}"
        off = rows.assign(gap_pct=gaps).loc[gaps.abs() > MEMORY_GAP_LIMIT_PCT]
        if not off.empty:
            text += f"; {off_points(off)}"
            off_devices |= {str(d) for d in off["device"]}
        parts.append(text)
    why = [f"{d}: {LEAST_KNOWN_TERM[d]}" for d in sorted(off_devices) if d in LEAST_KNOWN_TERM]
    return (
        "Measured − predicted peak, in % of the plan's peak: " + "; ".join(parts) + ". The load "
        "phase is not compared here: a row carries the plan's peak, not its load figure."
        + "".join(f" Why, {w}." for w in why)
    )


def off_points(off: pd.DataFrame) -> str:
    """The points more than MEMORY_GAP_LIMIT_PCT off (each with its ``gap_pct``): how many, and
    the first MAX_NAMED_POINTS by name."""
    named = [
        f"{r['model']} {configuration_label(r)} {r['gap_pct']:+.1f} %"
        for r in off.head(MAX_NAMED_POINTS).to_dict(orient="records")
    ]
    more = len(off) - len(named)
    tail = f" and {more} more" if more > 0 else ""
    return f"{len(off)} more than {MEMORY_GAP_LIMIT_PCT:.0f} % off ({', '.join(named)}{tail})"


def quality_intervals(result: Aggregate, max_models: int) -> list[str]:
    """Per model: each configuration's perplexity change vs the reference with its paired CI,
    against the class limits."""
    out: list[str] = []
    points = result.points
    quality = points.loc[points["dppl_pct"].notna() & (points["status"] == "ok")]
    group_cols = ["model", *ENGINE_WEIGHTS_KV, "device"]
    limits = [(0.0, "reference")] + [
        ((1 / level - 1) * 100, f"class {name} limit") for name, level in QUALITY_CLASSES.items()
    ]
    for model, sub in list(quality.groupby("model", sort=False))[:max_models]:
        configs = sub.drop_duplicates(group_cols).sort_values("dppl_pct")
        items = [
            (
                f"{configuration_label(r, ENGINE_WEIGHTS_KV)} {r['device']}",
                float(r["dppl_pct"]),
                number_or_nan(r["dppl_pct_ci_low"]),
                number_or_nan(r["dppl_pct_ci_high"]),
            )
            for r in configs.to_dict(orient="records")
        ]
        out.append(
            svg_intervals(
                f"{model!s}: perplexity change vs reference, paired 95 % CI",
                "Δ perplexity (%)",
                items,
                limits,
            )
        )
    return out


def speed_only_section(result: Aggregate) -> list[str]:
    """Rows on random weights: speed and memory only, never priced (empty when there are none)."""
    if result.speed_only.empty:
        return []
    return [
        "<h2>Speed only: random weights (no quality, not priced)</h2>",
        '<p class="note">The architecture on random weights: speed and memory as measured; '
        "no perplexity, so no quality class and no price.</p>",
        html_table(result.speed_only, SPEED_ONLY_COLUMNS, "speed-only"),
    ]


def mode_sections(result: Aggregate, quality_class: str) -> list[str]:
    """Each mode's own sections, in the registry's order (its `report` part, where it has one)."""
    return [s for part in mode_reports() for s in part.html(result, quality_class, html_table)]


def report_html(
    result: Aggregate,
    tariffs: TariffTable | None,
    quality_class: str,
    extra: Sequence[str] = (),
) -> str:
    """report.html: its sections in reading order, as one list read top to bottom (long because
    it is the page's text, not logic; each table and chart is built by a function of its own);
    ``extra``: sections a later room adds (before you rent, after the GPU ratios)."""
    c = result.counts
    cheapest = result.cheapest[result.cheapest["quality_class"] == quality_class]
    sections = [
        "<h1>Cheapest tokens at equal quality</h1>",
        f'<p class="note">harness {escape(__version__)} · '
        f"utilisation {escape(f'{result.utilisation:g}')}"
        f" · quality class {escape(quality_class)} · generated "
        f"{escape(datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC'))}</p>",
        f"<h2>Cheapest configuration per GPU and package (class {escape(quality_class)})</h2>",
        html_table(cheapest, CHEAPEST_COLUMNS, "cheapest"),
        *headline_note(result, quality_class, HTML_PAGE),
        *verdicts.html_section(result, quality_class, html_table),
        "<h2>Charts</h2>",
        *charts(result, quality_class),
        "<h2>GPU against GPU at equal quality</h2>",
        html_table(result.gpu_ratios, RATIO_COLUMNS, "ratios"),
        *extra,
        *speed_only_section(result),
        *energy_section(result, tariffs, quality_class, HTML_PAGE),
        *tasks_section(result, quality_class, HTML_PAGE),
        *regressions_html(result, html_table),
        *mode_sections(result, quality_class),
        "<h2>Every point</h2>",
        html_table(result.points, POINT_COLUMNS, "points"),
        f"<h2>Engines agree (same model and dtype, within {AGREEMENT_TOLERANCE:.1%})</h2><ul>",
        *[f"<li>{escape(line)}</li>" for line in agreement_lines(engine_agreement(result.points))],
        "</ul>",
        *speculation_section(result, quality_class, HTML_PAGE),
        "<h2>Factor effects (main effects)</h2>",
        html_table(result.main_effects, EFFECT_COLUMNS, "effects", limit=2000),
        "<h2>Rows</h2><ul>",
        f"<li>rows read: {escape(c['rows'])}; by status: "
        f"{escape(', '.join(f'{k} {v}' for k, v in c['by_status'].items()))}</li>",
        f"<li>excluded from cost, not ok: {escape(c['excluded_not_ok'])}</li>",
        "<li>flagged, decode above the roofline ceiling: "
        f"{escape(c['flagged_above_roofline'])}</li>",
        f"<li>priced: {escape(c['priced_rows'])}; no tariff for their GPU: "
        f"{escape(c['eligible_without_tariff'])}</li>",
        f"<li>unreadable point files, skipped: {escape(c['unreadable_files'])}</li>",
        "<li>on random weights (speed only, never priced): "
        f"{escape(c['random_weights_not_priced'])}</li>",
        *[f'<li class="warn">{escape(f)}: {escape(why)}</li>' for f, why in result.unreadable],
        *mixed_scenarios_note(c),
        "</ul>",
        "<h2>Method and formulas</h2><ul>",
        *[f"<li>{escape(f)}</li>" for f in FORMULAS],
        "</ul>",
        "<h2>Tariffs</h2>",
    ]
    if tariffs:
        if tariffs.note:
            sections.append(f'<p class="note">{escape(tariffs.note)}</p>')
        sections.append("<ul>")
        for t in tariffs.tariffs:
            packages = "; ".join(
                f"{p.days} d {fmt_usd(t.package_price_usd(p))}" + (f" ({p.rule})" if p.rule else "")
                for p in t.packages
            )
            sections.append(
                f"<li>{escape(t.provider)} {escape(t.gpu)} × {escape(t.gpus_per_node)}: "
                f"{escape(fmt_usd(t.hourly_usd))}/node-hour{' (example)' if t.example else ''}"
                f"{escape(tariffs.read_label(t))}; "
                f"source {escape(t.source)} ({escape(t.date)}); {escape(packages)}</li>"
            )
        sections.append("</ul>")
    else:
        sections.append("<p>No tariffs given: nothing is priced.</p>")
    sections += ["<h2>Data licences</h2><ul>"]
    sections += [f"<li><b>{escape(name)}</b>: {escape(text)}</li>" for name, text in LICENCES]
    sections += ["</ul>"]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        "<title>harness report</title>"
        f"<style>{CSS}</style></head><body>{''.join(sections)}<script>{JS}</script></body></html>\n"
    )


def mixed_scenarios_note(counts: dict[str, Any]) -> list[str]:
    """A warning line when the rows come from several scenarios (aggregate --allow-mixed)."""
    hashes = counts.get("mixed_scenarios") or []
    if not hashes:
        return []
    return [
        '<li class="warn">rows from several scenarios, aggregated as one (--allow-mixed): '
        f"{escape(', '.join(hashes))}</li>"
    ]
