"""The report's energy and error-analysis sections (HTML and Markdown) and ``regressions.csv``.

Tables are rendered by the caller's table function (``html.html_table`` / ``markdown.md_table``),
so this module imports neither page module. Formulas: ``harness.results.energy`` and
``harness.results.regressions``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from harness.modes.base import Column, HtmlTable, MdTable
from harness.results import energy as en
from harness.results import regressions as reg
from harness.results.aggregate import Aggregate
from harness.results.columns import table_columns
from harness.results.publish.format import escape, fmt_usd
from harness.spec.tariffs import TariffTable

ENERGY_COLUMNS: list[Column] = table_columns(
    (
        "model",
        "backend",
        "quantization",
        "kv_cache_dtype",
        "batch",
        "context",
        "energy_source",
        "energy_j_prefill",
        "energy_j_decode",
        "j_per_mtok_output",
        "avg_power_w_decode",
        "energy_j_quality",
        "usd_per_mtok_electricity",
    )
)
RENT_VS_OWN_COLUMNS: list[Column] = table_columns(
    (
        "model",
        "quality_class",
        "gpu",
        "provider",
        "gpus_per_node",
        "avg_power_w_decode",
        "j_per_mtok_output",
        "usd_per_mtok_electricity",
        "usd_per_mtok_output_hourly",
        "hourly_usd",
        "own_usd_per_hour",
        "purchase_usd",
        "breakeven_hours",
        "breakeven_days",
    )
)
SUMMARY_COLUMNS: list[Column] = table_columns(
    (
        "model",
        "backend",
        "quantization",
        "kv_cache_dtype",
        "target",
        "arc_items_paired",
        "right_to_wrong",
        "wrong_to_right",
        "mcnemar_p_exact",
        "windows_paired",
        "dnll_nats_per_token",
        "worst_window",
        "worst_dnll_nats_per_token",
        "note",
    )
)
ITEM_COLUMNS: list[Column] = table_columns(
    (
        "model",
        "backend",
        "quantization",
        "kv_cache_dtype",
        "item",
        "change",
        "dnll_nats_per_token",
        "excerpt",
    )
)
ENERGY_RULES = [
    "Energy comes from the device's cumulative counter (NVML total energy on NVIDIA, amdsmi on "
    "AMD, RAPL package counters on CPUs), read around passes of their own after timing, each "
    "at least 1 s; never estimated from TDP. J / decode = J per generation − J per prefill pass; "
    "J / Mtok = that ÷ (batch × (new tokens − 1)) × 10⁶.",
    "electricity $/Mtok = J/Mtok ÷ 3.6 × 10⁶ J/kWh × electricity_usd_per_kwh; "
    "electricity $/node-hour = decode W × cards ÷ 1000 × electricity_usd_per_kwh; "
    "break-even busy hours = purchase $ ÷ (rent $/node-hour − electricity $/node-hour). Left "
    "out (so it flatters owning): host power, cooling, space, staff, financing, resale, idle "
    "power.",
]


def regressions_frame(result: Aggregate) -> pd.DataFrame:
    """``regressions.csv``: one row per flipped ARC item and per worst window."""
    return result.regressions.items if result.regressions else reg.Regressions.empty().items


def _energy_rows(result: Aggregate) -> pd.DataFrame:
    points = result.points
    if "j_per_mtok_output" not in points:
        return points.iloc[0:0]
    return points[(points["status"] == "ok") & points["j_per_mtok_output"].notna()]


def _energy_missing(result: Aggregate) -> list[str]:
    return [f"{why} ({n} rows)" for why, n in en.unavailable_reasons(result.points)]


def _rent_vs_own(result: Aggregate, tariffs: TariffTable | None, quality_class: str) -> Any:
    cheapest = result.cheapest[result.cheapest["quality_class"] == quality_class]
    return en.rent_vs_own(cheapest, tariffs, result.utilisation)


def _rent_vs_own_note(tariffs: TariffTable | None) -> str:
    if tariffs is None or tariffs.electricity_usd_per_kwh is None:
        return (
            "No electricity_usd_per_kwh in the tariff file: no energy cost and no rent-vs-own "
            "break-even."
        )
    return f"Electricity: {fmt_usd(tariffs.electricity_usd_per_kwh)} per kWh (tariff file)."


# --------------------------------------------------------------------------- HTML


def energy_html(
    result: Aggregate, tariffs: TariffTable | None, quality_class: str, table: HtmlTable
) -> list[str]:
    out = ["<h2>Energy (device counter)</h2>"]
    rows = _energy_rows(result)
    if rows.empty:
        out.append('<p class="note">No energy measured on this run.</p><ul>')
        out += [f"<li>{escape(line)}</li>" for line in _energy_missing(result)]
        out.append("</ul>")
    else:
        out.append(table(rows, ENERGY_COLUMNS, "energy"))
    out += [f'<p class="note">{escape(line)}</p>' for line in ENERGY_RULES]
    out.append(f'<p class="note">{escape(_rent_vs_own_note(tariffs))}</p>')
    rent = _rent_vs_own(result, tariffs, quality_class)
    if not rent.empty:
        out += ["<h3>Rent vs own</h3>", table(rent, RENT_VS_OWN_COLUMNS, "rent-vs-own")]
    return out


def regressions_html(result: Aggregate, table: HtmlTable) -> list[str]:
    out = ["<h2>Error analysis against the reference</h2>"]
    found = result.regressions
    if found is None or found.summary.empty:
        return [*out, '<p class="note">No configuration compared with a reference here.</p>']
    out += [
        f'<p class="note">Test on the ARC flips: {escape(reg.TEST)}. ΔNLL is configuration − '
        f"reference per predicted token. Every flipped item and the {reg.TOP_WINDOWS} windows "
        "with the largest ΔNLL per configuration are in regressions.csv.</p>",
        table(found.summary, SUMMARY_COLUMNS, "regressions"),
        "<h3>Flipped items and worst windows</h3>",
        table(found.items, ITEM_COLUMNS, "regression-items"),
    ]
    return out


# --------------------------------------------------------------------------- Markdown


def _md_rows(frame: pd.DataFrame, columns: Sequence[Column], limit: int) -> list[dict[str, str]]:
    rows = []
    for rec in frame.head(limit).astype("object").to_dict(orient="records"):
        row = {}
        for name, label, fmt in columns:
            value = rec.get(name)
            missing = value is None or (isinstance(value, float) and value != value)
            row[label] = fmt(value) if fmt else ("" if missing else str(value))
        rows.append(row)
    return rows


def energy_markdown(
    result: Aggregate, tariffs: TariffTable | None, quality_class: str, table: MdTable
) -> list[str]:
    out = ["\n## Energy (device counter)\n"]
    rows = _energy_rows(result)
    if rows.empty:
        out.append("No energy measured on this run:\n")
        out += [f"- {line}" for line in _energy_missing(result)]
        out.append("")
    else:
        out.append(table(_md_rows(rows, ENERGY_COLUMNS, 50)))
    out += [f"{line}\n" for line in ENERGY_RULES]
    out.append(_rent_vs_own_note(tariffs) + "\n")
    rent = _rent_vs_own(result, tariffs, quality_class)
    if not rent.empty:
        out += ["### Rent vs own\n", table(_md_rows(rent, RENT_VS_OWN_COLUMNS, 50))]
    return out


def regressions_markdown(result: Aggregate, table: MdTable) -> list[str]:
    out = ["\n## Error analysis against the reference\n"]
    found = result.regressions
    if found is None or found.summary.empty:
        return [*out, "_No configuration compared with a reference here._\n"]
    out += [
        f"Test on the ARC flips: {reg.TEST}. ΔNLL is configuration − reference per predicted "
        "token. Every flipped item and the worst windows are in `regressions.csv`.\n",
        table(_md_rows(found.summary, SUMMARY_COLUMNS[:-1], 50)),
    ]
    if not found.items.empty:
        out += ["### Flipped items and worst windows (first 30)\n",
                table(_md_rows(found.items, ITEM_COLUMNS, 30))]  # fmt: skip
    return out
