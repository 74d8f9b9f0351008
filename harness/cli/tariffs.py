"""`harness tariffs`: import a price feed as a tariff file; check a verdict across tariff files;
write the dated price history per card. Registered on the app by ``harness.cli.main``."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.console import console, shown
from harness.errors import UserInputError

if TYPE_CHECKING:
    from harness.prices.build import SpotTerms

tariffs_app = typer.Typer(
    no_args_is_help=True, help="Tariff files from price feeds; verdicts across feeds."
)

UTC_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?Z$")


def check_observed_at(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        if not UTC_TIME.match(value):
            raise ValueError
        dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UserInputError(
            f"{value!r} is not a UTC time (expected 2026-12-07T09:00:00Z)", field="--observed-at"
        ) from None
    return value


def import_cmd(
    feed: Annotated[str, typer.Argument(help="gpuhunt (live API), gpuhunt-csv or skypilot-csv")],
    path: Annotated[
        Path | None, typer.Argument(help="the snapshot file (none for the live gpuhunt feed)")
    ] = None,
    out: Annotated[Path, typer.Option(help="the tariff YAML to write")] = Path("tariffs.yaml"),
    provider: Annotated[
        str | None, typer.Option(help="the provider of a file that does not say it")
    ] = None,
    feed_version: Annotated[
        str | None,
        typer.Option(help="catalog version or commit (pins the live gpuhunt catalog)"),
    ] = None,
    observed_at: Annotated[
        str | None, typer.Option(help="when a snapshot was read, UTC: 2026-12-07T09:00:00Z")
    ] = None,
    card: Annotated[list[str] | None, typer.Option(help="keep this catalog card (repeat)")] = None,
    only_provider: Annotated[
        list[str] | None, typer.Option("--only-provider", help="keep this provider (repeat)")
    ] = None,
    region: Annotated[list[str] | None, typer.Option(help="keep this region (repeat)")] = None,
    min_cards: Annotated[int, typer.Option(help="keep nodes of at least this many cards")] = 1,
    rules: Annotated[
        Path | None, typer.Option(help="package rules YAML (default tariffs/package-rules.yaml)")
    ] = None,
    interruptions_per_day: Annotated[
        float | None, typer.Option(help="spot interruptions per day (default 1, stated)")
    ] = None,
    restart_s: Annotated[
        float | None,
        typer.Option(help="seconds one spot restart costs: pull + load + engine (default 600)"),
    ] = None,
    stale_after_days: Annotated[
        int, typer.Option(help="flag prices older than this many days")
    ] = 7,
    strict: Annotated[
        bool, typer.Option("--strict", help="an unknown card is an error, not skipped")
    ] = False,
    example: Annotated[
        bool, typer.Option("--example", help="mark every row an example, not a quote")
    ] = False,
) -> None:
    """Read a price feed and write a tariff file `aggregate`, `report` and `rent` price as is."""
    from harness.prices import build, feeds, rules as package_rules
    from harness.prices.cards import wanted_cards

    if min_cards < 1:
        raise UserInputError(f"--min-cards must be 1 or more, got {min_cards}", field="--min-cards")
    read = feeds.reader(feed)
    spot = spot_terms(interruptions_per_day, restart_s)
    filters = build.Filters(
        cards=frozenset(wanted_cards(card or [])),
        providers=frozenset(p.lower() for p in only_provider or []),
        regions=frozenset(region or []),
        min_cards=min_cards,
    )
    table_rules = package_rules.load_rules(rules)
    request = feeds.FeedRequest(
        path, provider, feed_version, check_observed_at(observed_at), strict,
        tuple(p.lower() for p in only_provider or []),
    )  # fmt: skip
    got = read(request)
    imported = build.build_table(got, table_rules, filters, spot, example, stale_after_days)
    header = (
        f"Imported by `harness tariffs import {feed}` from {got.source}\n"
        f"feed version {got.version}, read {got.observed_at}"
        + ("\nEXAMPLE: illustrative, not quotes." if example else "")
    )
    build.write_tariff_file(out, build.tariff_yaml(imported.table, header))
    console.print(
        f"wrote {shown(out)}: {len(imported.table.tariffs)} tariffs from {imported.offers} offers "
        f"({got.feed} {got.version}, read {got.observed_at})",
        highlight=False,
    )
    for reason, n in sorted(imported.left_out.items()):
        console.print(f"  left out: {n} × {reason}", highlight=False)


def spot_terms(interruptions_per_day: float | None, restart_s: float | None) -> SpotTerms:
    from harness.prices.build import DEFAULT_INTERRUPTIONS_PER_DAY, DEFAULT_RESTART_S, SpotTerms

    if interruptions_per_day is not None and not 0 <= interruptions_per_day <= 1000:
        raise UserInputError(
            f"--interruptions-per-day must be in [0, 1000], got {interruptions_per_day!r}",
            field="--interruptions-per-day",
        )
    if restart_s is not None and not 0 < restart_s <= 86_400:
        raise UserInputError(
            f"--restart-s must be in (0, 86400] seconds, got {restart_s!r}", field="--restart-s"
        )
    given = interruptions_per_day is not None or restart_s is not None
    return SpotTerms(
        interruptions_per_day=(
            DEFAULT_INTERRUPTIONS_PER_DAY if interruptions_per_day is None else interruptions_per_day
        ),
        restart_s=DEFAULT_RESTART_S if restart_s is None else restart_s,
        stated="given on the command line" if given else "stated defaults: 1 per day, 600 s",
    )
