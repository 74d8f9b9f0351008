"""Speculative decoding on both pages (written once, through the page's ``Page``): the greedy-
identity check beside "engines agree", the acceptance table per workload, and speculation
against plain decoding per interactivity band; and the headline's lines when speculation wins.
The figures and verdicts: ``harness.results.speculation``; the bands:
``harness.modes.serving.price.speculation_bands``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.modes.base import Column
from harness.results import speculation as sp
from harness.results.columns import table_columns

if TYPE_CHECKING:
    from harness.results.aggregate import Aggregate
    from harness.results.publish.analysis import Page

TITLE = "Speculative decoding: greedy identity and acceptance per workload"
ACCEPTANCE: list[Column] = table_columns(sp.ACCEPTANCE_COLUMNS)
RULE = (
    "Greedy identity: a speculative configuration's greedy outputs, item by item (the timed "
    "sequences and the extract tasks' items), must equal the same configuration's without "
    "speculation in the same run; only 'identical' is priced. A serving row inherits its "
    "group's offline verdict. Acceptance rate = accepted ÷ draft tokens; acceptance length = "
    "1 + accepted ÷ drafts (tokens per target step, the bonus token included); per position = "
    "accepted at position i ÷ drafts; each read from the engine's own counters around the pass "
    "or load level, on the workload named (never one figure for mixed text). Synthetic "
    "replays are left out of this table."
)
BANDS_LEAD = (
    "Against plain decoding per interactivity band (the cheapest passing level with tok/s/user "
    "≥ the band on the same card, package and configuration)"
)


def has_speculation(result: Aggregate) -> bool:
    """Whether any offline or serving row of the run speculates."""
    return bool(sp.speculative_rows(result.points).any()) or bool(
        not result.table("serving").empty and sp.speculative_rows(result.table("serving")).any()
    )


def headline_lines(result: Aggregate, quality_class: str) -> list[str]:
    """Where speculation wins, in words: the offline cheapest configurations that speculate
    and the serving series where it is cheaper at some interactivity band (none: [])."""
    bands = [
        text
        for wins, text in sp.band_lines(result.table("speculation_bands"), quality_class)
        if wins
    ]
    return [*sp.offline_wins(result.cheapest, quality_class), *bands]


def headline_note(result: Aggregate, quality_class: str, page: Page) -> list[str]:
    """The lines under the headline table that name speculation when it wins."""
    lines = headline_lines(result, quality_class)
    return page.listing("Speculative decoding wins", lines) if lines else []


def speculation_section(result: Aggregate, quality_class: str, page: Page) -> list[str]:
    """The section (nothing when no row speculates)."""
    if not has_speculation(result):
        return []
    points = result.points
    serving = result.table("serving") if not result.table("serving").empty else None
    rows = points[sp.speculative_rows(points)]
    out = [
        page.heading(2, TITLE),
        page.paragraph(RULE),
        *page.listing("Greedy identity with and without speculation", sp.identity_lines(rows)),
        page.table(sp.acceptance_table(points, serving), ACCEPTANCE, "speculation-acceptance"),
    ]
    lines = [text for _, text in sp.band_lines(result.table("speculation_bands"), quality_class)]
    if lines:
        out += page.listing(f"{BANDS_LEAD}, class {quality_class}", lines)
    return out
