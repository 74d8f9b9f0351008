"""Before you rent, shown: the sections `harness report` adds to its README.md and report.html,
and `harness site` to its index and each run's page.

- per model and package, the ranking drawn (``svg_ranking``: one bar per tariff's card at its
  central $/Mtok, whiskers for [low, high], measured filled, projected hatched, the cards not
  priced listed with their reason), its table and its verdict; the projected configurations;
- the error ledger that sets the bands, per cell (phase, dense or MoE, vendor direction) and
  card class (MAPE, the pure roofline's beside it, the band and its coverage held out a card at
  a time against the stated one, Kendall τ), drawn per
  phase and tabled with its sources: the ledgers the project ships, and your own runs' where a
  configuration was measured on two or more cards.

Projected figures are labelled and hatched, and never enter a measured table.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from harness.modes.base import Column
from harness.projection import book, ledger, rent, text
from harness.results.aggregate import Aggregate
from harness.results.publish.files import Extra, Extras
from harness.results.publish.format import escape, md_escape, number
from harness.results.publish.html import html_table
from harness.results.publish.markdown import md_table
from harness.results.publish.svg import RankBar, svg_bars, svg_ranking
from harness.spec.tariffs import TariffTable

NEVER_MEASURED = (
    "Projected figures are labelled, drawn hatched, and never enter the measured tables or the "
    "measured headline of this report."
)
# How each shipped ledger is fitted, and what it is used for (its rows name the data's source).
SHIPPED_HOW = {
    "shipped Argonne": "every card of the extract, fitted per (phase, dense or MoE, vendor "
    "direction) and checked by leaving a card out (`harness ledger`); Argonne "
    "LLM-Inference-Bench (BSD-3-Clause), its extract in harness/data/external/argonne/results.csv "
    "(that folder's README says what was kept and which card each name is)",
}
CHART_CLASSES = {"same vendor": "same vendor", "cross vendor": "cross vendor", "all": "all cards"}
ROOFLINE_SERIES = "pure roofline, all cards"


# --- the ranking --------------------------------------------------------------------------------


def card_label(line: rent.RankLine) -> str:
    return f"{line.card}×{line.gpus_per_node} ({line.provider})"


def ranking_bars(lines: Sequence[rent.RankLine]) -> tuple[list[RankBar], list[tuple[str, str]]]:
    """One bar per priced line, in the ranking's order; (card, reason) for the others."""
    bars: list[RankBar] = []
    missing: list[tuple[str, str]] = []
    for x in lines:
        if x.usd_per_mtok is None:
            missing.append((card_label(x), x.note or "not priced"))
            continue
        span = (
            f"[${x.usd_low:.4g}, ${x.usd_high:.4g}]"
            if x.usd_low is not None and x.usd_high is not None
            else "no validated band (no whiskers)"
        )
        tip = (
            f"{card_label(x)}, {x.label}: ${x.usd_per_mtok:.4g} per Mtok out {span}; "
            f"{x.configuration}" + (f"; band: {x.band_source}" if x.band_source else "")
        )
        low = x.usd_per_mtok if x.usd_low is None else x.usd_low
        high = x.usd_per_mtok if x.usd_high is None else x.usd_high
        bars.append(RankBar(card_label(x), x.usd_per_mtok, low, high, x.measured, tip))
    return bars, missing


def ranking_chart(model: str, days: int, lines: Sequence[rent.RankLine]) -> str:
    bars, missing = ranking_bars(lines)
    return svg_ranking(
        f"{model}, {days}-day package: each tariff's card at its cheapest configuration",
        f"$ per Mtok of output tokens ({days}-day package)",
        bars,
        missing,
        projected="projected (from the measured card)",
        band="[low, high]: the ledger's band",
    )


def text_table(rows: Sequence[dict[str, str]], table_id: str) -> str:
    """Rows of text cells as the report's sortable table."""
    if not rows:
        return '<p class="note">(no rows)</p>'
    columns: list[Column] = [(name, name, None) for name in rows[0]]
    return html_table(pd.DataFrame(list(rows)), columns, table_id)


def ranking_html(ahead: rent.BeforeYouRent, quality_class: str) -> list[str]:
    """Per model and package: the chart, the table and the verdict; then the projected
    configurations."""
    out = [
        f"<h2>Before you rent: every tariff's card, class {escape(quality_class)}</h2>",
        '<p class="note">Measured rows are carried to every tariff\'s card at their measured '
        "share of the roofline (decode by bandwidth, prefill by the format's tensor peak); each "
        "projected figure carries the band the error ledger below validates by leaving a card "
        f"out, or says '{book.NO_BAND}' (drawn without whiskers). $/Mtok of output tokens at "
        "the centre (re-centred on the band's median); [low, high] from the decode band. "
        + escape(NEVER_MEASURED) + " " + escape(text.SERVING_NOTE) + "</p>",
    ]  # fmt: skip
    for i, ((model, days), lines) in enumerate(ahead.ranking.items()):
        rows = text.ranking_rows(lines)
        if rows:
            out += [
                f"<h3>{escape(model)}, {escape(days)}-day package</h3>",
                ranking_chart(model, days, lines),
                text_table(rows, f"rent-{i}"),
            ]
        found = ahead.verdicts.get((model, days))
        if found is not None:
            out.append(
                f'<p class="verdict">{escape(model)}, {escape(days)} days: {escape(found.text)}</p>'
            )
    for model in dict.fromkeys(m for m, _ in ahead.ranking):
        missing = text.unpriced_line(
            [x for (m, _), v in ahead.ranking.items() if m == model for x in v]
        )
        if missing:
            out.append(f'<p class="note">{escape(model)}: {escape(missing)}</p>')
    rows = text.projection_rows(ahead.projections)
    if rows:
        out += [
            "<h3>Projected configurations (never in the measured tables)</h3>",
            text_table(rows, "projected"),
        ]
    return out


# --- the ledger ---------------------------------------------------------------------------------


class PublishedLedger(BaseModel):
    """One ledger as published: its lines, where its data comes from and how it was made."""

    model_config = ConfigDict(frozen=True)
    name: str
    lines: list[ledger.LedgerLine]
    source: str
    how: str


def shipped() -> list[PublishedLedger]:
    """The ledgers the project ships (``book.SHIPPED_LEDGERS``), in their order."""
    return [
        PublishedLedger(
            name=x.name,
            lines=_shipped_lines(x.name),
            source=x.source,
            how=f"{SHIPPED_HOW.get(x.name, x.name)}; data {x.source}; the range of its data "
            f"(a projection outside it gets no band): {fitted.scope_text()}",
        )
        for x, fitted in zip(book.shipped_data(), book.shipped_books(), strict=True)
    ]


@cache
def _shipped_lines(name: str) -> list[ledger.LedgerLine]:
    return ledger.ledger(next(x.measured for x in book.shipped_data() if x.name == name))


def own(points: pd.DataFrame, quality_class: str) -> PublishedLedger | None:
    """Your runs' ledger: the passing configurations measured on two or more cards (None when
    there are none)."""
    measured = book.own_measured(rent.candidates(points, quality_class))
    lines = ledger.ledger(measured)
    if not lines:
        return None
    cards = sorted({m.card for m in measured})
    source = f"your runs: {len(measured)} figures on {', '.join(cards)}"
    how = f"the rows of this publication passing class {quality_class}, each card left out in turn"
    return PublishedLedger(name="your runs", lines=lines, source=source, how=how)


def ledgers(points: pd.DataFrame, quality_class: str) -> list[PublishedLedger]:
    mine = own(points, quality_class)
    return [*([] if mine is None else [mine]), *shipped()]


def _pct(value: Any) -> str:
    v = number(value)
    return "—" if v is None else f"{v:.1f}"


def _tau(value: Any) -> str:
    v = number(value)
    return "—" if v is None else f"{v:.3f}"


def _count(value: Any) -> str:
    v = number(value)
    return "—" if v is None else f"{v:.0f}"


LEDGER_COLUMNS: list[Column] = [
    ("ledger", "ledger", None),
    ("phase", "phase", None),
    ("klass", "direction, or all of a class", None),
    ("arch", "dense or MoE", None),
    ("pairs", "pairs (source → held-out card)", _count),
    ("keys", "keys", _count),
    ("mape_pct", "MAPE (%)", _pct),
    ("mape_same_keys_pct", "MAPE on the roofline's keys (%)", _pct),
    ("roofline_mape_pct", "pure-roofline MAPE (%)", _pct),
    ("band", "band, measured ÷ projected", None),
    ("held_out_coverage_pct", "held-out coverage, a card left out (%)", _pct),
    ("held_out_pairs", "pairs scored held out", _count),
    ("unbanded_pairs", "pairs no band could score", _count),
    ("held_out_by_card", "held out per card: coverage", None),
    ("stated_coverage_pct", "stated coverage (%)", _pct),
    ("tau", "Kendall τ", _tau),
    ("roofline_tau", "pure-roofline τ", _tau),
    ("tau_keys", "τ keys (≥ 3 cards)", _count),
    ("source", "source", None),
]


def ledger_frame(books: Sequence[PublishedLedger]) -> pd.DataFrame:
    """One row per (ledger, phase, class): the line's figures, its band as text, its source."""
    rows = [
        {
            **line.model_dump(),
            "ledger": book.name,
            "band": ledger.band_text(line),
            "source": book.source,
        }
        for book in books
        for line in book.lines
    ]
    return pd.DataFrame(rows, columns=[name for name, _, _ in LEDGER_COLUMNS])


def ledger_chart(book: PublishedLedger) -> str:
    """MAPE per phase: one bar per card class, and the pure roofline's over all cards."""
    phases = list(dict.fromkeys(line.phase for line in book.lines))
    value: dict[tuple[str, str], float] = {}
    for line in book.lines:
        if line.klass not in CHART_CLASSES:
            continue  # a cell: the table shows it
        value[(line.phase, CHART_CLASSES[line.klass])] = line.mape_pct
        if line.klass == "all" and line.roofline_mape_pct is not None:
            value[(line.phase, ROOFLINE_SERIES)] = line.roofline_mape_pct
    series = [*CHART_CLASSES.values(), ROOFLINE_SERIES]
    return svg_bars(
        f"{book.name}: leave-one-card-out error per phase",
        "MAPE (%)",
        phases,
        [s for s in series if any(k[1] == s for k in value)],
        value,
        x_label="phase",
        tip=lambda s, phase, v: f"{phase}, {s}: MAPE {v:.1f} %",
        value_labels=lambda v: f"{v:.0f}",
    )


LEDGER_LEAD = (
    "Each card of a configuration measured on two or more cards is projected from each of the "
    "others: MAPE is the mean |projected − measured| ÷ measured. A band is fitted per cell "
    "(phase, dense or MoE, and the vendors' direction: nvidia → amd is not amd → nvidia) as "
    "measured ÷ projected between the split-conformal ranks of its n pairs (the k-th largest and "
    "k-th smallest, k = ⌈(n + 1) × (1 + stated coverage) ÷ 2⌉; stated coverage "
    f"{float(ledger.STATED_COVERAGE):.0%}), its median re-centring the projection. Its held-out "
    "coverage leaves a card out: the band fitted on the pairs that do not touch the card, scored "
    "on the pairs projected onto it. A cell whose held-out coverage is more than "
    f"{ledger.TOLERANCE_POINTS:.0f} points below the stated level is not validated and lends no "
    'band ("no validated band: measure it"); the same, same-vendor, cross-vendor and all lines '
    "pool their cells' held-out pairs. Kendall τ compares the cards' projected and measured "
    "order over the keys with three or more cards. The pure roofline (the card's ceiling taken "
    "as the prediction) is scored on the keys whose model is in the catalog."
)


def ledger_html(books: Sequence[PublishedLedger]) -> list[str]:
    """The ledger: what it measures, one chart per ledger, the table, the sources."""
    return [
        "<h2>The error ledger: how wrong a projection is, per phase and card class</h2>",
        f'<p class="note">{escape(LEDGER_LEAD)}</p>',
        *(ledger_chart(book) for book in books),
        html_table(ledger_frame(books), LEDGER_COLUMNS, "ledger"),
        '<p class="note">Sources:</p><ul>',
        *(f"<li><b>{escape(b.name)}</b>: {escape(b.how)}</li>" for b in books),
        "</ul>",
    ]


def ledger_markdown(books: Sequence[PublishedLedger]) -> list[str]:
    frame = ledger_frame(books)
    rows = [
        {label: fmt(r[name]) if fmt else str(r[name]) for name, label, fmt in LEDGER_COLUMNS}
        for r in frame.astype("object").to_dict(orient="records")
    ]
    return [
        "\n## The error ledger: how wrong a projection is, per phase and card class\n",
        LEDGER_LEAD + "\n",
        md_table(rows),
        "Sources:\n",
        *(f"- **{md_escape(b.name)}**: {md_escape(b.how)}" for b in books),
    ]


# --- the sections -------------------------------------------------------------------------------


def sections(
    points: pd.DataFrame,
    tariffs: TariffTable | None,
    quality_class: str,
    utilisation: float,
    ahead: rent.BeforeYouRent | None = None,
) -> Extra:
    """README.md's and report.html's sections: the ranking where tariffs are given (``ahead``,
    computed here unless given), and the ledger always."""
    if ahead is None and tariffs is not None:
        ahead = rent.before_you_rent(points, tariffs, quality_class, utilisation)
    books = ledgers(points, quality_class)
    markdown = [] if ahead is None else text.markdown(ahead, quality_class, md_table)
    html = [] if ahead is None else ranking_html(ahead, quality_class)
    return Extra(markdown=[*markdown, *ledger_markdown(books)], html=[*html, *ledger_html(books)])


def extras(tariffs: TariffTable | None, quality_class: str) -> Extras:
    """``sections`` of any aggregate (a site's runs, its index)."""

    def of(result: Aggregate) -> Extra:
        return sections(result.points, tariffs, quality_class, result.utilisation)

    return of
