"""The serving part of a publication (the mode's `report` part, ``REPORT``: the contract is
harness.modes.base.ReportPart): the cheapest configuration at the latency SLO per package, each
configuration's level at the SLO, every load level, and a latency–throughput chart per
configuration (every load level, the TPOT target as a line, the level chosen at the SLO marked);
the highest load meeting the SLO per search (its bracket, goodput and $/Mtok there); and cost
against interactivity: $/Mtok out against tok/s/user per model and package length (every level
per GPU, the Pareto front of the levels that pass the report's quality class), with the cheapest
configuration and card per interactivity band and layout. Where several layouts were served, in
words: the cheapest layout at the SLO per card and package, and where the cheaper layout flips
with the band. Empty when the run has no serving rows."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from harness.modes.base import Column, HtmlTable, MdTable
from harness.modes.serving.price import AT_SLO, SEARCH_OUTCOME
from harness.results.aggregate import Aggregate
from harness.results.columns import CHEAPEST_OF, ENGINE_WEIGHTS_KV, headers, table_columns
from harness.results.pareto import pareto_mask
from harness.results.pricing import layout_shown, pass_column
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
    served = result.table("serving")
    if served.empty:
        return []
    chosen = {str(k) for k in result.table("at_slo")["key_at_slo"].dropna()}
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


def _front(rows: pd.DataFrame) -> pd.Series:
    """Rows no other beats on both: lower $/Mtok out and higher tok/s/user."""
    mask = pareto_mask(
        np.zeros(len(rows), dtype=np.int64),
        rows["usd_per_mtok_output"].to_numpy(dtype=np.float64),
        rows["tok_s_per_user"].to_numpy(dtype=np.float64),
        maximise_y=True,
    )
    return pd.Series(mask, index=rows.index)


def speculation_arm(rows: pd.DataFrame) -> pd.Series:
    """Each level's speculative configuration's label ("" without speculation): the chart
    draws each as a series of its own beside the card's plain levels."""
    if "speculative" not in rows:
        return pd.Series("", index=rows.index)
    return rows["speculative"].astype("object").fillna("").astype(str)


def _tip(rec: dict[Any, Any]) -> str:
    label = rec.get("speculative")
    spec = f" spec={label}" if isinstance(label, str) and label else ""
    return (
        f"{rec.get('gpu')} {rec.get('provider')} {rec.get('package_days')} d · "
        f"{rec.get('backend')} {rec.get('quantization')} kv={rec.get('kv_cache_dtype')}{spec} · "
        f"{rec.get('level')}: {_finite(rec.get('tok_s_per_user')):.4g} tok/s/user "
        f"(TPOT {rec.get('interactivity_tpot')}), ${_finite(rec.get('usd_per_mtok_output')):.4g}"
        "/Mtok out"
    )


def cost_interactivity_charts(
    result: Aggregate, quality_class: str, max_charts: int = MAX_CHARTS
) -> list[str]:
    """One SVG per (model, package length): x tok/s/user (1000 / TPOT), y $/Mtok out; a series
    per GPU and provider (every level), and the front of the levels passing ``quality_class``."""
    curve = result.table("interactivity")
    if curve.empty:
        return []
    out = []
    for (model, days), rows in list(curve.groupby(["model", "package_days"], sort=False))[
        :max_charts
    ]:
        series: list[tuple[str, list[tuple[float, float, str]], bool]] = []
        arms = rows.assign(arm=speculation_arm(rows))
        for (gpu, provider, arm), card in arms.groupby(["gpu", "provider", "arm"], sort=False):
            points = [
                (_finite(r["tok_s_per_user"]), _finite(r["usd_per_mtok_output"]), _tip(r))
                for r in card.to_dict(orient="records")
            ]
            # the legend keeps 24 characters: a speculative series leads with its method and k
            method_k = str(arm).split(",")[0]
            name = f"{method_k} · {gpu} · {provider}" if method_k else f"{gpu} · {provider}"
            series.append((name, points, False))
        passing = rows[rows[pass_column(quality_class)].astype(bool)]
        front = passing[_front(passing)] if not passing.empty else passing
        series.append(
            (
                f"front, class {quality_class}",
                [
                    (_finite(r["tok_s_per_user"]), _finite(r["usd_per_mtok_output"]),
                     "on the front: " + _tip(r))
                    for r in front.to_dict(orient="records")
                ],
                True,
            )
        )  # fmt: skip
        tpot = ", ".join(sorted({str(t) for t in rows["interactivity_tpot"].dropna()}))
        out.append(
            svg_scatter(
                f"{model}, {days:g}-day packages: cost against interactivity",
                f"output tok/s per user (1000 / TPOT {tpot} ms)",
                "USD per 1e6 output tokens",
                series,
            )
        )
    return out


def level_table(result: Aggregate) -> pd.DataFrame:
    """Per configuration: its level at the SLO (empty when there are no serving rows)."""
    return result.table("at_slo")


# --- the tables --------------------------------------------------------------------------------
# report.html's tables; the README's are the same less these columns
README_LEAVES_OUT = frozenset({"dppl_pct", "slo_attainment_at_slo"})
CHEAPEST_AT_SLO = (
    *CHEAPEST_OF,
    *ENGINE_WEIGHTS_KV,
    "layout",
    "replicas_per_node",
    "speculative",
    "prefix_caching",
    *AT_SLO,
    "usd_per_mtok_output_at_slo",
    "prefix_cache_hit_rate_at_slo",
    "j_per_mtok_output_at_slo",
    "dppl_pct",
)
LEVEL_AT_SLO = (
    "model",
    *ENGINE_WEIGHTS_KV,
    "layout",
    "speculative",
    "device",
    "quality_class",
    "prefix_caching",
    *AT_SLO,
    "prefix_cache_hit_rate_at_slo",
    "goodput_rps_at_slo",
    "slo_attainment_at_slo",
    "j_per_mtok_output_at_slo",
    "levels_meeting_slo",
    "levels_measured",
)


SLO_SEARCH = (
    "model",
    *ENGINE_WEIGHTS_KV,
    "device",
    "quality_class",
    *SEARCH_OUTCOME,
    "gpu",
    "provider",
    "package_days",
    "usd_per_mtok_output_at_max_rate",
)
INTERACTIVITY_BANDS = (
    "band_tok_s_user",
    *CHEAPEST_OF,
    *ENGINE_WEIGHTS_KV,
    "layout",
    "replicas_per_node",
    "speculative",
    "level",
    "tok_s_per_user",
    "usd_per_mtok_output",
    "gpu_flips",
)
SPECULATION_BANDS = (
    "band_tok_s_user", "model", "gpu", "provider", "package_days", *ENGINE_WEIGHTS_KV, "layout",
    "speculative", "spec_workload", "plain_usd_per_mtok_output", "usd_per_mtok_output",
    "speculation_saving_pct", "cheaper", "cheaper_flips", "tok_s_per_user",
)  # fmt: skip


def bands_for(result: Aggregate, quality_class: str) -> pd.DataFrame:
    """The cheapest level per interactivity band for ``quality_class`` (both pages)."""
    table = result.table("interactivity_bands")
    if table.empty:
        return table
    return table[table["quality_class"] == quality_class]


# --- layouts side by side, in words ---------------------------------------------------------

LAYOUT_LEAD = "Cheapest layout at the latency SLO per card and package"
LAYOUT_BANDS_LEAD = (
    "Cheaper layout per interactivity band (the band's cheapest passing level over every "
    "layout; tok/s/user ≥ B is TPOT ≤ 1000 / B ms)"
)


def _replicas(rec: Any) -> str:
    """A row's layout and the replicas a node holds: ``tp=1 × 8 replicas per node``."""
    layout, count = layout_shown(rec["layout"]), _finite(rec.get("replicas_per_node"))
    if not math.isfinite(count):
        return layout
    return f"{layout} × {count:g} replica{'' if count == 1 else 's'} per node"


def _band_text(bands: list[float]) -> str:
    """Bands as tok/s/user and the TPOT each means: ``≥ 25, 50 tok/s/user (TPOT ≤ 40, 20 ms)``."""
    per_user = ", ".join(f"{b:g}" for b in bands)
    tpot = ", ".join(f"{1000 / b:.3g}" for b in bands)
    return f"≥ {per_user} tok/s/user (TPOT ≤ {tpot} ms)"


def several_layouts(table: pd.DataFrame) -> bool:
    """Whether a table holds more than one layout (one card counts as tp=1)."""
    return not table.empty and table["layout"].map(layout_shown).nunique() > 1


def at_slo_layout_lines(result: Aggregate, quality_class: str) -> list[str]:
    """Per model, card and package where several layouts were served: the cheapest at the SLO
    with its layout and replicas per node, and the other layouts' $/Mtok out (none: [])."""
    table = cheapest_at_slo(result, quality_class)
    out = []
    by = ["model", "gpu", "provider", "package_days"]
    for (model, gpu, provider, days), one in table.groupby(by, sort=False, dropna=False):
        if not several_layouts(one):
            continue
        ranked = one.sort_values("usd_per_mtok_output_at_slo", kind="stable").to_dict("records")
        others = ", ".join(
            f"{_replicas(r)} at ${_finite(r['usd_per_mtok_output_at_slo']):.4g}" for r in ranked[1:]
        )
        best = ranked[0]
        out.append(
            f"{model} on {gpu} ({provider}, {days:g}-day): {_replicas(best)} at "
            f"${_finite(best['usd_per_mtok_output_at_slo']):.4g}/Mtok out, then {others}"
        )
    return out


def layout_lines(bands: pd.DataFrame, quality_class: str) -> list[str]:
    """Per model and package length where several layouts reach a band: which layout is cheaper
    at which interactivity bands, and where the cheaper layout flips (the bands' cheapest:
    harness.modes.serving.price.interactivity_bands; none: [])."""
    if bands.empty:
        return []
    rows = bands[bands["quality_class"] == quality_class]
    out = []
    for (model, days), one in rows.groupby(["model", "package_days"], sort=False):
        if not several_layouts(one):
            continue
        best = one[one["band_cheapest"].astype(bool)].sort_values("band_tok_s_user")
        on_cards = best["gpu"].nunique() > 1
        parts = [
            _replicas(first)
            + (f" on {first['gpu']}" if on_cards else "")
            + (" is cheaper" if i == 0 else "")
            + f" at {_band_text(at)}"
            for i, (first, at) in enumerate(_runs(best))
        ]
        line = f"{model}, {days:g}-day packages: {', '.join(parts)}"
        flips = [float(b) for b in best.loc[best["layout_flips"].astype(bool), "band_tok_s_user"]]
        if flips:
            at = ", ".join(f"{b:g}" for b in flips)
            tpot = ", ".join(f"{1000 / b:.3g}" for b in flips)
            line += f": the cheaper layout flips at {at} tok/s/user (TPOT {tpot} ms)"
        out.append(line)
    return out


def _runs(best: pd.DataFrame) -> list[tuple[dict[str, Any], list[float]]]:
    """The bands' cheapest rows (ascending bands) as runs of one layout on one card: each run's
    first row and its bands."""
    runs: list[tuple[dict[str, Any], list[float]]] = []
    for record in best.to_dict("records"):
        rec = {str(k): v for k, v in record.items()}
        same = runs and _choice(runs[-1][0]) == _choice(rec)
        if same:
            runs[-1][1].append(float(rec["band_tok_s_user"]))
        else:
            runs.append((rec, [float(rec["band_tok_s_user"])]))
    return runs


def _choice(rec: dict[str, Any]) -> tuple[str, object]:
    return layout_shown(rec["layout"]), rec["gpu"]


SPECULATION_TITLE = "Speculation against plain decoding per interactivity band"
SPECULATION_NOTE = (
    "Per band, card, package and configuration: the cheapest level passing the class with "
    "tok/s/user ≥ the band with speculative decoding and without it (the same run, so the same "
    "prompts); saves % = 100 × (plain − speculative) ÷ plain $/Mtok out; 'cheaper flips' where "
    "the cheaper arm differs from the band below's. A speculative level whose greedy identity "
    "is not 'yes' passes no class and is not compared."
)


def speculation_for(result: Aggregate, quality_class: str) -> pd.DataFrame:
    """Speculation against plain decoding per band for ``quality_class`` (both pages)."""
    table = result.table("speculation_bands")
    if table.empty:
        return table
    return table[table["quality_class"] == quality_class]


def readme_headers(names: tuple[str, ...]) -> dict[str, str]:
    """field → header of the README's version of the page's table ``names``."""
    return headers(n for n in names if n not in README_LEAVES_OUT)


# --- README.md --------------------------------------------------------------------------------

SERVING_HEADERS = readme_headers(CHEAPEST_AT_SLO)
AT_SLO_HEADERS = readme_headers(LEVEL_AT_SLO)
SEARCH_HEADERS = readme_headers(SLO_SEARCH)
BAND_HEADERS = readme_headers(INTERACTIVITY_BANDS)
SPECULATION_HEADERS = readme_headers(SPECULATION_BANDS)


def cheapest_at_slo(result: Aggregate, quality_class: str) -> pd.DataFrame:
    """The cheapest configurations at the SLO for ``quality_class`` (both pages show these)."""
    table = result.table("cheapest_at_slo")
    return table[table["quality_class"] == quality_class]


def _cells(frame: pd.DataFrame, headers: dict[str, str]) -> list[dict[str, str]]:
    return [
        {label: fmt_value(rec.get(name)) for name, label in headers.items()}
        for rec in frame.astype("object").to_dict(orient="records")
    ]


def markdown_section(result: Aggregate, quality_class: str, md_table: MdTable) -> list[str]:
    """Serving under load: cheapest at the SLO per package, and each configuration's level."""
    if result.table("serving").empty:
        return []
    cheapest = cheapest_at_slo(result, quality_class)
    return [
        f"\n## Serving: cheapest at the latency SLO (class {md_escape(quality_class)})\n",
        *_md_listing(LAYOUT_LEAD, at_slo_layout_lines(result, quality_class)),
        md_table(_cells(cheapest, SERVING_HEADERS)),
        "\n### Level at the SLO per configuration\n",
        md_table(_cells(result.table("at_slo"), AT_SLO_HEADERS)),
        *markdown_search(result, quality_class, md_table),
    ]


def _md_listing(lead: str, lines: list[str]) -> list[str]:
    """A list under its lead sentence (nothing without lines)."""
    return [f"{lead}:\n", *(f"- {md_escape(line)}" for line in lines), ""] if lines else []


def markdown_search(result: Aggregate, quality_class: str, md_table: MdTable) -> list[str]:
    """The searches' outcome and the cheapest level per interactivity band (when there are)."""
    out = []
    if not result.table("slo_search").empty:
        out += [
            "\n### Highest load meeting the SLO (searched)\n",
            md_table(_cells(result.table("slo_search"), SEARCH_HEADERS)),
        ]
    bands = bands_for(result, quality_class)
    if not bands.empty:
        out += [
            f"\n### Cheapest per interactivity band (class {md_escape(quality_class)}; "
            "tok/s/user = 1000 / TPOT ms)\n",
            *_md_listing(LAYOUT_BANDS_LEAD, layout_lines(bands, quality_class)),
            md_table(_cells(bands, BAND_HEADERS)),
        ]
    speculating = speculation_for(result, quality_class)
    if not speculating.empty:
        out += [
            f"\n### {SPECULATION_TITLE} (class {md_escape(quality_class)})\n",
            SPECULATION_NOTE + "\n",
            md_table(_cells(speculating, SPECULATION_HEADERS)),
        ]
    return out


# --- report.html ------------------------------------------------------------------------------

CHEAPEST_AT_SLO_COLUMNS: list[Column] = table_columns(CHEAPEST_AT_SLO)
AT_SLO_COLUMNS: list[Column] = table_columns(LEVEL_AT_SLO)
SEARCH_COLUMNS: list[Column] = table_columns(SLO_SEARCH)
BAND_COLUMNS: list[Column] = table_columns(INTERACTIVITY_BANDS)
SPECULATION_COLUMNS: list[Column] = table_columns(SPECULATION_BANDS)
SERVING_COLUMNS: list[Column] = table_columns(
    (
        "model",
        *ENGINE_WEIGHTS_KV,
        "level",
        "status",
        "requests_ok",
        "requests_failed",
        "output_tok_s",
        "prefix_caching",
        "prefix_cache_hit_rate",
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
    if result.table("serving").empty:
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
        *_html_listing(LAYOUT_LEAD, at_slo_layout_lines(result, quality_class)),
        html_table(cheapest, CHEAPEST_AT_SLO_COLUMNS, "cheapest-at-slo"),
        "<h3>Level at the SLO per configuration</h3>",
        html_table(result.table("at_slo"), AT_SLO_COLUMNS, "at-slo"),
        *latency_throughput_charts(result),
        *html_search(result, quality_class, html_table),
        "<h3>Every load level</h3>",
        html_table(result.table("serving"), SERVING_COLUMNS, "serving"),
    ]


def _html_listing(lead: str, lines: list[str]) -> list[str]:
    """A list under its lead sentence (nothing without lines)."""
    if not lines:
        return []
    items = "".join(f"<li>{escape(line)}</li>" for line in lines)
    return [f'<p class="note">{escape(lead)}.</p><ul>{items}</ul>']


def html_search(result: Aggregate, quality_class: str, html_table: HtmlTable) -> list[str]:
    """The searches' outcome, cost against interactivity and the cheapest per band."""
    out = []
    if not result.table("slo_search").empty:
        out += [
            "<h3>Highest load meeting the SLO (searched)</h3>",
            '<p class="note">Bracketed, then bisected (geometric midpoint for a request rate, '
            "integer for a concurrency), each probe a real <code>vllm bench serve</code> level. "
            "max load = the highest probed load that met the SLO; the bracket's high end the "
            "lowest that missed it (empty: HIGH met it). $/Mtok out at the probe there.</p>",
            html_table(result.table("slo_search"), SEARCH_COLUMNS, "slo-search"),
        ]
    charts = cost_interactivity_charts(result, quality_class)
    bands = bands_for(result, quality_class)
    if charts or not bands.empty:
        out += [
            "<h3>Cost against interactivity</h3>",
            '<p class="note">Every measured level (fixed levels and search probes) per GPU and '
            "package: $/Mtok out at its output tok/s against tok/s per user = 1000 / TPOT (ms, "
            "the percentile stated on the axis). The front joins the levels, passing class "
            f"{escape(quality_class)}, that no other beats on both.</p>",
            *charts,
            f"<h3>Cheapest per interactivity band (class {escape(quality_class)})</h3>",
            *_html_listing(LAYOUT_BANDS_LEAD, layout_lines(bands, quality_class)),
            html_table(bands, BAND_COLUMNS, "interactivity-bands"),
        ]
    speculating = speculation_for(result, quality_class)
    if not speculating.empty:
        out += [
            f"<h3>{SPECULATION_TITLE} (class {escape(quality_class)})</h3>",
            f'<p class="note">{escape(SPECULATION_NOTE)}</p>',
            html_table(speculating, SPECULATION_COLUMNS, "speculation-bands"),
        ]
    return out


class Report:
    """The serving mode's report sections (harness.modes.base.ReportPart)."""

    def markdown(self, result: Aggregate, quality_class: str, table: MdTable) -> list[str]:
        return markdown_section(result, quality_class, table)

    def html(self, result: Aggregate, quality_class: str, table: HtmlTable) -> list[str]:
        return html_section(result, quality_class, table)

    def site_charts(self, result: Aggregate, quality_class: str) -> list[str]:
        """The charts the site draws across runs (harness.results.site)."""
        return cost_interactivity_charts(result, quality_class)

    def summary(self, result: Aggregate) -> dict[str, pd.DataFrame]:
        return {
            "serving_at_slo": result.table("at_slo"),  # per configuration: its level at the SLO
            "serving_slo_search": result.table("slo_search"),  # max_rate_at_slo, bracket, $/Mtok
            "serving_interactivity_bands": result.table("interactivity_bands"),
            "cheapest_at_slo": result.table("cheapest_at_slo"),
        }


REPORT = Report()
