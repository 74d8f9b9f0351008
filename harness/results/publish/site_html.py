"""index.html of a site across runs (``harness.results.site``): one self-contained page.

No network: no external script, style, font or image (the report's Content-Security-Policy);
links are relative (each run's page, the combined files); every string from the data is
HTML-escaped. The tables and their sorting are the report's (``publish.html``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import pandas as pd

from harness import __version__
from harness.modes.base import Column
from harness.results.columns import headers, table_columns
from harness.results.publish.format import escape, fmt_usd
from harness.results.publish.html import CHEAPEST_COLUMNS, CSS, JS, html_table
from harness.spec.tariffs import TariffTable

SITE_CSS = """
.mixed{border:3px solid #b00;background:#fff0f0;padding:8px 14px;margin:14px 0}
.mixed h2{color:#b00;border:0;margin-top:4px}
"""

RUN_COLUMNS: list[tuple[str, str]] = list(
    headers(
        (
            "run",
            "folder",
            "rows",
            "ok",
            "unreadable",
            "hostnames",
            "devices",
            "harness",
            "git_sha",
            "corpus_hash",
            "reference",
            "schema_version",
            "gated_on",
        )
    ).items()
)
PROVENANCE: list[Column] = table_columns(
    ("provenance_hostname", "provenance_device_name", "provenance_harness", "provenance_git_sha")
)


# the site's price history per card: each tariff file's date, cheapest offer and spread, age
HISTORY_COLUMNS: list[Column] = table_columns(
    (
        "date",
        "provider",
        "tariff_basis",
        "card_hour_usd_min",
        "card_hour_usd_median",
        "card_hour_usd_max",
        "card_offers",
        "feed",
        "feed_version",
        "price_read",
    )
)


def cheapest_columns() -> list[Column]:
    """The report's cheapest-table columns with the row's run after the tariff's provider and
    where it was measured at the end."""
    at = next(i for i, c in enumerate(CHEAPEST_COLUMNS) if c[0] == "provider") + 1
    return [*CHEAPEST_COLUMNS[:at], *table_columns(("run",)), *CHEAPEST_COLUMNS[at:], *PROVENANCE]


def page_link(run: str) -> str:
    """The relative link to a run's own report (run names are file-name safe; quoted anyway)."""
    return f"runs/{quote(run, safe='')}/report.html"


def runs_table(runs: pd.DataFrame) -> str:
    """The runs, each linking to its own report."""
    head = "".join(f'<th data-type="text">{escape(label)}</th>' for _, label in RUN_COLUMNS)
    body = []
    for rec in runs.astype("object").to_dict(orient="records"):
        cells = []
        for name, _ in RUN_COLUMNS:
            value = escape(rec.get(name, ""))
            if name == "run":
                value = f'<a href="{escape(page_link(str(rec["run"])))}">{value}</a>'
            cells.append(f"<td>{value}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<div class="wrap"><table class="sortable" id="runs"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def mixed_banner(mixed: Sequence[str]) -> list[str]:
    if not mixed:
        return []
    return [
        '<div class="mixed" id="mixed" role="alert">',
        "<h2>Mixed runs: not measured under the same conditions</h2>",
        "<p>Published with <code>--allow-mixed</code>. These runs differ where a comparison "
        "needs them equal, so their figures stand side by side below but are not comparable as "
        "they stand:</p><ul>",
        *[f"<li>{escape(line)}</li>" for line in mixed],
        "</ul></div>",
    ]


def differ_banner(lines: Sequence[str]) -> list[str]:
    """Rows whose verdict here is not their run's own page's (never expected: said if so)."""
    if not lines:
        return []
    return [
        '<div class="mixed" id="verdicts-differ" role="alert">',
        "<h2>Verdicts that differ from their run's own report</h2><ul>",
        *[f"<li>{escape(line)}</li>" for line in lines],
        "</ul></div>",
    ]


def history_section(history: pd.DataFrame | None) -> list[str]:
    """The dated price history per card: one table per card, its rows by date; stale and
    example prices flagged in each row and counted above the tables."""
    if history is None:
        return []
    stale = int(history["price_stale"].astype(bool).sum())
    examples = int(history["tariff_example"].astype(bool).sum())
    out = [
        "<h2>Price history per card</h2>",
        '<p class="note">Per imported tariff file (price-history.csv): the day its prices were '
        "read, the card's cheapest offer (provider, basis) and the spread of its offers in USD per "
        "card-hour (spot with its restart charge), the feed, and the price's age today, STALE past "
        "the file's threshold and EXAMPLE where the prices are not quotes.</p>",
    ]
    if stale or examples:
        out.append(
            f'<p class="warn">{escape(stale)} of {escape(len(history))} rows STALE, '
            f"{escape(examples)} EXAMPLE: not this week's market.</p>"
        )
    for card, rows in history.groupby("gpu", sort=True):
        out.append(f"<h3>{escape(card)}</h3>")
        ordered = rows.sort_values("date", kind="stable")
        out.append(html_table(ordered, HISTORY_COLUMNS, f"history-{card}"))
    return out


def index_html(
    runs: pd.DataFrame,
    cheapest: pd.DataFrame,
    mixed: Sequence[str],
    counts: dict[str, Any],
    unreadable: Sequence[tuple[str, str]],
    *,
    tariffs: TariffTable | None,
    quality_class: str,
    utilisation: float,
    files: Sequence[str],
    charts: Sequence[str] = (),
    verdicts_differ: Sequence[str] = (),
    extra: Sequence[str] = (),
    history: pd.DataFrame | None = None,
) -> str:
    """The site's index: (mixed banner), runs, cheapest per (model, class, GPU, package) across
    every run, the combined files, counts (one list in reading order: the page's text);
    ``extra``: sections a later room adds after the charts (before you rent); ``history``: the
    dated price history per card, after them."""
    title = "harness site" + (" (MIXED runs)" if mixed else "")
    by_status = ", ".join(f"{k} {v}" for k, v in counts.get("by_status", {}).items())
    sections = [
        f"<h1>One comparison across {escape(len(runs))} runs</h1>",
        *mixed_banner(mixed),
        *differ_banner(verdicts_differ),
        f'<p class="note">harness {escape(__version__)} · utilisation '
        f"{escape(f'{utilisation:g}')} · the report's quality class {escape(quality_class)} · "
        f"generated {escape(datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC'))}</p>",
        "<h2>Runs</h2>",
        '<p class="note">Each run links to its own report. Quality classes compare a row with '
        "its own run's reference, and each run is gated as its own report gates it: on the "
        "metrics its scenario names (its <em>gated on</em> column; where the scenario does not "
        "say, every metric its rows scored), so a row passes here exactly where it passes on its "
        "run's page.</p>",
        runs_table(runs),
        "<h2>Cheapest configuration at equal quality per model, class, GPU and package, across "
        "every run</h2>",
    ]
    if tariffs is None:
        sections.append("<p>No tariffs given: nothing is priced.</p>")
    else:
        sections.append(html_table(cheapest, cheapest_columns(), "cheapest"))
        sections.append(
            '<p class="note">Tariffs: '
            + escape(
                "; ".join(
                    f"{t.provider} {t.gpu} {fmt_usd(t.hourly_usd)}/node-hour"
                    + (" (example)" if t.example else "")
                    + tariffs.read_label(t)
                    for t in tariffs.tariffs
                )
            )
            + "</p>"
        )
    if charts:
        sections += [
            "<h2>Cost against interactivity across every run</h2>",
            '<p class="note">$/Mtok out against output tok/s per user (1000 / TPOT) of every '
            "serving level, per GPU and provider, with the front of the levels that pass the "
            f"class {escape(quality_class)} (each run's report has its own).</p>",
            *charts,
        ]
    sections += extra
    sections += history_section(history)
    sections += [
        "<h2>Every row, with where it came from</h2><ul>",
        *[f'<li><a href="{escape(quote(name))}">{escape(name)}</a></li>' for name in files],
        "</ul>",
        "<h2>Rows</h2><ul>",
        f"<li>rows read: {escape(counts.get('rows', 0))}; by status: {escape(by_status)}</li>",
        f"<li>priced: {escape(counts.get('priced_rows', 0))}; no tariff for their GPU: "
        f"{escape(counts.get('eligible_without_tariff', 0))}</li>",
        f"<li>unreadable point files, skipped: {escape(len(unreadable))}</li>",
        *[f'<li class="warn">{escape(f)}: {escape(why)}</li>' for f, why in unreadable],
        "</ul>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape(title)}</title>"
        f"<style>{CSS}{SITE_CSS}</style></head><body>{''.join(sections)}"
        f"<script>{JS}</script></body></html>\n"
    )
