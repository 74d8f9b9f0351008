"""The serving part of a publication (the mode's `report` part, ``REPORT``: the contract is
harness.modes.base.ReportPart): the cheapest configuration at the latency SLO per package, each
configuration's level at the SLO, every load level, and a latency–throughput chart per
configuration (every load level, the TPOT target as a line, the level chosen at the SLO marked).
Empty when the run has no serving rows."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from harness.modes.base import Column, HtmlTable, MdTable
from harness.modes.serving.price import AT_SLO
from harness.results.aggregate import Aggregate
from harness.results.columns import CHEAPEST_OF, ENGINE_WEIGHTS_KV, headers, table_columns
from harness.results.publish.format import escape, fmt_value, md_escape
from harness.results.publish.svg import svg_scatter

MAX_CHARTS = 12


def _finite(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def latency_throughput_charts(result: Aggregate, max_charts: int = MAX_CHARTS) -> list[str]:
    """One SVG per configuration with serving rows: x output tok/s, y TPOT p99 (ms) per level."""
    served = result.serving
    if served.empty:
        return []
    chosen = {str(k) for k in result.at_slo["key_at_slo"].dropna()}
    out = []
    for (_, group), rows in list(served.groupby(["run", "group"], sort=False))[:max_charts]:
        ok = rows[rows["status"] == "ok"]
        closed: list[tuple[float, float, str]] = []  # concurrency levels
        opened: list[tuple[float, float, str]] = []  # request-rate levels
        picked = []
        for rec in ok.to_dict(orient="records"):
            x, y = _finite(rec.get("output_tok_s")), _finite(rec.get("tpot_ms_p99"))
            tip = (
                f"{rec.get('level', '')}: {x:.4g} tok/s, TPOT p99 {y:.4g} ms, TTFT p99 "
                f"{_finite(rec.get('ttft_ms_p99')):.4g} ms, attainment "
                f"{_finite(rec.get('slo_attainment')):.3g}"
                + (", saturated" if rec.get("saturated") is True else "")
            )
            rate = _finite(rec.get("request_rate"))
            (opened if math.isfinite(rate) else closed).append((x, y, tip))
            if str(rec.get("key")) in chosen:
                picked.append((x, y, "chosen at the SLO: " + tip))
        if not closed and not opened:
            continue
        slo = _finite(rows["slo_tpot_ms"].iloc[0])
        attainment = _finite(rows["slo_attainment_target"].iloc[0])
        lines = [(slo, f"TPOT target {slo:g} ms")] if math.isfinite(slo) else []
        out.append(
            svg_scatter(
                f"{group}: throughput vs latency per load level",
                "output tok/s",
                "TPOT p99 (ms)",
                [
                    ("concurrency levels", closed, True),
                    ("request-rate levels", opened, True),
                    (f"chosen, attain. ≥ {attainment:g}", picked, False),
                ],
                hlines=lines,
            )
        )
    return out


def level_table(result: Aggregate) -> pd.DataFrame:
    """Per configuration: its level at the SLO (empty when there are no serving rows)."""
    return result.at_slo


# --- the tables --------------------------------------------------------------------------------
# report.html's tables; the README's are the same less these columns
README_LEAVES_OUT = frozenset({"dppl_pct", "slo_attainment_at_slo"})
CHEAPEST_AT_SLO = (
    *CHEAPEST_OF,
    *ENGINE_WEIGHTS_KV,
    *AT_SLO,
    "usd_per_mtok_output_at_slo",
    "j_per_mtok_output_at_slo",
    "dppl_pct",
)
LEVEL_AT_SLO = (
    "model",
    *ENGINE_WEIGHTS_KV,
    "device",
    "quality_class",
    *AT_SLO,
    "goodput_rps_at_slo",
    "slo_attainment_at_slo",
    "j_per_mtok_output_at_slo",
    "levels_meeting_slo",
    "levels_measured",
)


def readme_headers(names: tuple[str, ...]) -> dict[str, str]:
    """field → header of the README's version of the page's table ``names``."""
    return headers(n for n in names if n not in README_LEAVES_OUT)


# --- README.md --------------------------------------------------------------------------------

SERVING_HEADERS = readme_headers(CHEAPEST_AT_SLO)
AT_SLO_HEADERS = readme_headers(LEVEL_AT_SLO)


def cheapest_at_slo(result: Aggregate, quality_class: str) -> pd.DataFrame:
    """The cheapest configurations at the SLO for ``quality_class`` (both pages show these)."""
    table = result.cheapest_at_slo
    return table[table["quality_class"] == quality_class]


def _cells(frame: pd.DataFrame, headers: dict[str, str]) -> list[dict[str, str]]:
    return [
        {label: fmt_value(rec.get(name)) for name, label in headers.items()}
        for rec in frame.astype("object").to_dict(orient="records")
    ]


def markdown_section(result: Aggregate, quality_class: str, md_table: MdTable) -> list[str]:
    """Serving under load: cheapest at the SLO per package, and each configuration's level."""
    if result.serving.empty:
        return []
    cheapest = cheapest_at_slo(result, quality_class)
    return [
        f"\n## Serving: cheapest at the latency SLO (class {md_escape(quality_class)})\n",
        md_table(_cells(cheapest, SERVING_HEADERS)),
        "\n### Level at the SLO per configuration\n",
        md_table(_cells(result.at_slo, AT_SLO_HEADERS)),
    ]


# --- report.html ------------------------------------------------------------------------------

CHEAPEST_AT_SLO_COLUMNS: list[Column] = table_columns(CHEAPEST_AT_SLO)
AT_SLO_COLUMNS: list[Column] = table_columns(LEVEL_AT_SLO)
SERVING_COLUMNS: list[Column] = table_columns(
    (
        "model",
        *ENGINE_WEIGHTS_KV,
        "level",
        "status",
        "requests_ok",
        "requests_failed",
        "output_tok_s",
        "j_per_token_serving",
        "request_throughput",
        "goodput_rps",
        "ttft_ms_p99",
        "tpot_ms_p99",
        "slo_attainment",
        "saturated",
        "error",
    )
)


def html_section(result: Aggregate, quality_class: str, html_table: HtmlTable) -> list[str]:
    """Serving under load (mode: serving rows); empty when the run has none."""
    if result.serving.empty:
        return []
    cheapest = cheapest_at_slo(result, quality_class)
    return [
        "<h2>Serving under load: throughput at the latency SLO</h2>",
        '<p class="note">Each configuration behind a real <code>vllm serve</code>, driven by '
        "<code>vllm bench serve</code> per load level. A request meets the SLO when its TTFT and "
        "TPOT are within the targets; a level qualifies when its share of such requests reaches "
        "the scenario's attainment; the configuration's figure is its highest output tok/s among "
        "qualifying levels. Quality is the configuration's offline verdict.</p>",
        f"<h3>Cheapest at the SLO per GPU and package (class {escape(quality_class)})</h3>",
        html_table(cheapest, CHEAPEST_AT_SLO_COLUMNS, "cheapest-at-slo"),
        "<h3>Level at the SLO per configuration</h3>",
        html_table(result.at_slo, AT_SLO_COLUMNS, "at-slo"),
        *latency_throughput_charts(result),
        "<h3>Every load level</h3>",
        html_table(result.serving, SERVING_COLUMNS, "serving"),
    ]


class Report:
    """The serving mode's report sections (harness.modes.base.ReportPart)."""

    def markdown(self, result: Aggregate, quality_class: str, table: MdTable) -> list[str]:
        return markdown_section(result, quality_class, table)

    def html(self, result: Aggregate, quality_class: str, table: HtmlTable) -> list[str]:
        return html_section(result, quality_class, table)


REPORT = Report()
