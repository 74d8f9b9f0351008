"""The sections both pages carry, and ``regressions.csv``.

- Energy: written once (``energy_section``) for either page, through the ``Page`` the page module
  builds (how it writes a heading, a paragraph, a list and a table).
- The error analysis against the reference, in each page's own words: per configuration its
  windows, per task its flips with McNemar's test, then the items and worst windows (the HTML page
  shows every row; the README the first ones).
- Each mode's own sections: the registry's report parts (``mode_reports``), in its order.

Tables are rendered by the caller's table function (``html.html_table`` / ``markdown.md_table``),
so this module imports neither page module. Formulas: ``harness.results.energy`` and
``harness.results.regressions``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness import modes
from harness.modes.base import Column, HtmlTable, MdTable, ReportPart
from harness.results import energy as en
from harness.results import regressions as reg
from harness.results.aggregate import Aggregate
from harness.results.columns import CONFIGURATION, ENGINE_WEIGHTS_KV, table_columns
from harness.results.publish.format import escape, fmt_usd
from harness.results.tasks import FAILURES_PER_TASK
from harness.spec.tariffs import TariffTable

ENERGY_COLUMNS: list[Column] = table_columns(
    (
        "model",
        *CONFIGURATION,
        "energy_source",
        "energy_j_prefill",
        "energy_j_decode",
        "j_per_mtok_output",
        "avg_power_w_decode",
        "energy_j_quality",
        "usd_per_mtok_electricity",
    )
)
# every column of the rent-vs-own frame but the utilisation (the page's header says it) and the
# counter (the energy table shows it)
RENT_VS_OWN_COLUMNS: list[Column] = table_columns(
    c for c in en.RENT_VS_OWN_COLUMNS if c not in ("utilisation", "energy_source")
)
SUMMARY_COLUMNS: list[Column] = table_columns(
    (
        "model",
        *ENGINE_WEIGHTS_KV,
        "target",
        "windows_paired",
        "dnll_nats_per_token",
        "worst_window",
        "worst_dnll_nats_per_token",
        "note",
    )
)
FLIPS_COLUMNS: list[Column] = table_columns(
    (
        "model",
        *ENGINE_WEIGHTS_KV,
        "target",
        "task",
        "units_paired",
        "right_to_wrong",
        "wrong_to_right",
        "mcnemar_p_exact",
    )
)
ITEM_COLUMNS: list[Column] = table_columns(
    ("model", *ENGINE_WEIGHTS_KV, "item", "change", "dnll_nats_per_token", "excerpt")
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
    """``regressions.csv``: one row per worst window and per item a task's kind lists."""
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


@dataclass(frozen=True)
class Page:
    """How one page writes a section's pieces (``html.HTML_PAGE``, ``markdown.MARKDOWN_PAGE``):
    a heading of a level (2, 3), a paragraph of plain text, a list under its lead sentence
    (without its final stop: the page ends it), and a table of a frame's columns (an id)."""

    heading: Callable[[int, str], str]
    paragraph: Callable[[str], str]
    listing: Callable[[str, Sequence[str]], list[str]]
    table: Callable[[pd.DataFrame, Sequence[Column], str], str]


def energy_section(
    result: Aggregate, tariffs: TariffTable | None, quality_class: str, page: Page
) -> list[str]:
    """Energy: the measured rows (or why none were measured), the rules, the electricity price
    and, where the tariff file gives one, rent vs own."""
    out = [page.heading(2, "Energy (device counter)")]
    rows = _energy_rows(result)
    if rows.empty:
        out += page.listing("No energy measured on this run", _energy_missing(result))
    else:
        out.append(page.table(rows, ENERGY_COLUMNS, "energy"))
    out += [page.paragraph(line) for line in (*ENERGY_RULES, _rent_vs_own_note(tariffs))]
    rent = _rent_vs_own(result, tariffs, quality_class)
    if not rent.empty:
        out += [
            page.heading(3, "Rent vs own"),
            page.table(rent, RENT_VS_OWN_COLUMNS, "rent-vs-own"),
        ]
    return out


def mode_reports() -> list[ReportPart[Aggregate]]:
    """Each mode's `report` part, in the registry's order (the modes that have one)."""
    return [m.load("report") for m in modes.REGISTRY.values() if m.ref("report") is not None]


# --------------------------------------------------------------------------- HTML


REGRESSIONS_TITLE = "Error analysis against the reference"
NO_REFERENCE = "No configuration compared with a reference here."
FLIPS_TITLE = "Flips per task"
FLIPPED_TITLE = "Flipped items and worst windows"


def regressions_intro(csv_name: str) -> str:
    """What the section's tables say and where the rest is (both renderings)."""
    return (
        f"Test on each task's flips: {reg.TEST}. A unit is what the task's kind pairs with the "
        f"reference (an item; extract: a gold field). ΔNLL is configuration − reference per "
        f"predicted token. The items each task lists (at most {FAILURES_PER_TASK} a task) and "
        f"the {reg.TOP_WINDOWS} windows with the largest ΔNLL per configuration are in {csv_name}."
    )


def compared(result: Aggregate) -> reg.Regressions | None:
    """The run's error analysis, None when no configuration was compared with a reference."""
    found = result.regressions
    return None if found is None or found.summary.empty else found


def regressions_html(result: Aggregate, table: HtmlTable) -> list[str]:
    heading = f"<h2>{REGRESSIONS_TITLE}</h2>"
    if (found := compared(result)) is None:
        return [heading, f'<p class="note">{NO_REFERENCE}</p>']
    out = [
        heading,
        f'<p class="note">{escape(regressions_intro("regressions.csv"))}</p>',
        table(found.summary, SUMMARY_COLUMNS, "regressions"),
    ]
    if not found.flips.empty:
        out += [f"<h3>{FLIPS_TITLE}</h3>", table(found.flips, FLIPS_COLUMNS, "regression-flips")]
    return [*out, f"<h3>{FLIPPED_TITLE}</h3>", table(found.items, ITEM_COLUMNS, "regression-items")]


# --------------------------------------------------------------------------- Markdown


def md_rows(frame: pd.DataFrame, columns: Sequence[Column], limit: int) -> list[dict[str, str]]:
    rows = []
    for rec in frame.head(limit).astype("object").to_dict(orient="records"):
        row = {}
        for name, label, fmt in columns:
            value = rec.get(name)
            missing = value is None or (isinstance(value, float) and value != value)
            row[label] = fmt(value) if fmt else ("" if missing else str(value))
        rows.append(row)
    return rows


def regressions_markdown(result: Aggregate, table: MdTable) -> list[str]:
    heading = f"\n## {REGRESSIONS_TITLE}\n"
    if (found := compared(result)) is None:
        return [heading, f"_{NO_REFERENCE}_\n"]
    out = [
        heading,
        regressions_intro("`regressions.csv`") + "\n",
        table(md_rows(found.summary, SUMMARY_COLUMNS[:-1], 50)),
    ]
    if not found.flips.empty:
        out += [f"### {FLIPS_TITLE} (first 50)\n", table(md_rows(found.flips, FLIPS_COLUMNS, 50))]
    if not found.items.empty:
        out += [f"### {FLIPPED_TITLE} (first 30)\n",
                table(md_rows(found.items, ITEM_COLUMNS, 30))]  # fmt: skip
    return out
