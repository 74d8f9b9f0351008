"""`harness tariffs`: import a price feed as a tariff file; check a verdict across tariff files;
write the dated price history per card. Registered on the app by ``harness.cli.main``."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from harness.console import console, shown
from harness.errors import UserInputError

if TYPE_CHECKING:
    from harness.prices.build import SpotTerms
    from harness.prices.verdicts import Survival
    from harness.spec.tariffs import TariffTable

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
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="the snapshot file(s) (none for the live gpuhunt feed)"),
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
    restart_from: Annotated[
        Path | None,
        typer.Option(help="a run folder: restart = its largest measured load_s + --pull-s"),
    ] = None,
    pull_s: Annotated[
        float, typer.Option(help="with --restart-from: image pull + weights download, seconds")
    ] = 300.0,
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
    from harness.prices import build, feeds
    from harness.prices import rules as package_rules
    from harness.prices.cards import wanted_cards

    if min_cards < 1:
        raise UserInputError(f"--min-cards must be 1 or more, got {min_cards}", field="--min-cards")
    read = feeds.reader(feed)
    spot = spot_terms(interruptions_per_day, restart_s, restart_from, pull_s)
    filters = build.Filters(
        cards=frozenset(wanted_cards(card or [])),
        providers=frozenset(p.lower() for p in only_provider or []),
        regions=frozenset(region or []),
        min_cards=min_cards,
    )
    table_rules = package_rules.load_rules(rules)
    at = check_observed_at(observed_at)
    asked = tuple(p.lower() for p in only_provider or [])
    got = build.merged(
        [
            read(feeds.FeedRequest(path, provider, feed_version, at, strict, asked))
            for path in live_or(paths)
        ]
    )
    imported = build.build_table(got, table_rules, filters, spot, example, stale_after_days)
    header = (
        f"Imported by `harness tariffs import {feed}` from:\n"
        + "".join(f"  {source}\n" for source in got.source.split(", "))
        + f"feed version {got.version}, read {got.observed_at}"
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


def live_or(paths: list[Path] | None) -> list[Path | None]:
    """The snapshot files given, or one None: the live feed, read once."""
    return list(paths) if paths else [None]


def spot_terms(
    interruptions_per_day: float | None,
    restart_s: float | None,
    restart_from: Path | None = None,
    pull_s: float = 300.0,
) -> SpotTerms:
    """The spot terms of an import: given, measured from a run (--restart-from), or the
    stated defaults (1 interruption a day, 600 s)."""
    from harness.prices.build import DEFAULT_INTERRUPTIONS_PER_DAY, DEFAULT_RESTART_S, SpotTerms
    from harness.prices.spot import restart_from_run

    if interruptions_per_day is not None and not 0 <= interruptions_per_day <= 1000:
        raise UserInputError(
            f"--interruptions-per-day must be in [0, 1000], got {interruptions_per_day!r}",
            field="--interruptions-per-day",
        )
    if restart_s is not None and restart_from is not None:
        raise UserInputError("give --restart-s or --restart-from, not both", field="--restart-s")
    if not 0 <= pull_s <= 86_400:
        raise UserInputError(f"--pull-s must be in [0, 86400], got {pull_s!r}", field="--pull-s")
    stated = []
    if restart_from is not None:
        restart_s, how = restart_from_run(restart_from, pull_s)
        stated.append(how)
    if restart_s is not None and not 0 < restart_s <= 86_400:
        raise UserInputError(
            f"--restart-s must be in (0, 86400] seconds, got {restart_s!r}", field="--restart-s"
        )
    if interruptions_per_day is None:
        stated.append(f"{DEFAULT_INTERRUPTIONS_PER_DAY:g} interruption a day: stated default")
    if restart_s is None:
        stated.append(f"{DEFAULT_RESTART_S:g} s restart: stated default")
    return SpotTerms(
        interruptions_per_day=(
            DEFAULT_INTERRUPTIONS_PER_DAY
            if interruptions_per_day is None
            else interruptions_per_day
        ),
        restart_s=DEFAULT_RESTART_S if restart_s is None else restart_s,
        stated="; ".join(stated) or "given on the command line",
    )


def verdicts_cmd(
    run: Annotated[Path, typer.Argument(help="run folder (results/<run>)")],
    tariffs: Annotated[
        list[Path], typer.Option(help="tariff YAML (give two or more: feeds or dates)")
    ],
    quality_class: Annotated[str, typer.Option(help="quality class: 99 or 99.9")] = "99",
    utilisation: Annotated[
        float, typer.Option(help="share of the package's hours the node works, in (0, 1]")
    ] = 1.0,
    allow_mixed: Annotated[
        bool, typer.Option("--allow-mixed", help="aggregate rows of several scenarios")
    ] = False,
) -> None:
    """Does the verdict survive the feed: the cheapest configuration per model and package
    under each tariff file, and every flip."""
    from harness.prices import verdicts
    from harness.results.aggregate import aggregate_run
    from harness.results.pricing import check_quality_class, check_utilisation
    from harness.spec.tariffs import load_tariffs

    check_quality_class(quality_class, field="--quality-class")
    check_utilisation(utilisation)
    if len(tariffs) < 2:
        raise UserInputError("give two or more --tariffs files to compare", field="--tariffs")
    if not run.is_dir():
        raise UserInputError("run folder not found (expected results/<run>/)", file=str(run))
    tables = [load_tariffs(path) for path in tariffs]
    points = aggregate_run(run, None, utilisation, allow_mixed).points
    found = [s for s in verdicts.survival(points, tables, utilisation) if s.key[1] == quality_class]
    names = [path.name for path in tariffs]
    print_survival(found, names)
    for line in verdicts.flip_lines(found, names):
        console.print(line, highlight=False, soft_wrap=True)
    flips = sum(not s.same for s in found)
    console.print(
        f"{len(found) - flips} of {len(found)} verdicts survive the change of tariff file; "
        f"{flips} flip",
        highlight=False,
    )


def print_survival(found: list[Survival], names: list[str]) -> None:
    from rich.table import Table

    table = Table(title="Does the verdict survive the feed? (the cheapest configuration)")
    for column in ("model", "class", "days", *names, "verdict"):
        table.add_column(column, overflow="fold")
    for s in found:
        model, quality_class, days = s.key
        cells = [w.text() if w else "nothing passes" for w in s.winners]
        table.add_row(model, quality_class, str(days), *cells, "same" if s.same else "FLIP")
    console.print(table)


def history_cmd(
    files: Annotated[list[Path], typer.Argument(help="imported tariff files (any dates, feeds)")],
    out: Annotated[Path, typer.Option(help="site folder: writes price-history.csv there")],
) -> None:
    """The dated price history per card of imported tariff files: price-history.csv (date,
    feed, card, the cheapest offer's provider and basis, offers, min / median / max USD per
    card-hour, the age, STALE / EXAMPLE), as `harness site --price-history` keeps it."""
    from harness.atomic import atomic_write_text
    from harness.csvtext import csv_text
    from harness.prices.verdicts import price_history
    from harness.spec.tariffs import load_tariffs

    history = price_history([load_tariffs(path) for path in files])
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "price-history.csv", csv_text(history))
    console.print(
        f"wrote {shown(out / 'price-history.csv')}: {len(history)} rows "
        f"({history['gpu'].nunique()} cards, {len(files)} files)",
        highlight=False,
    )


def print_price_notes(table: TariffTable | None) -> None:
    """Under a priced table: stale, example and spot prices, said (harness.prices.stale)."""
    from harness.prices.stale import price_notes

    for line in price_notes(table) if table is not None else []:
        console.print(f"[yellow]{escape(line)}[/]", highlight=False, soft_wrap=True)


def print_offer_spread(table: TariffTable) -> None:
    """Per card: the cheapest offer and the spread of USD per card-hour over its offers."""
    from rich.table import Table

    out = Table(title="Offers per card: the cheapest and the spread (USD per card-hour)")
    for column in ("card", "offers", "cheapest offer", "min", "median", "max"):
        out.add_column(column, justify="left" if column in ("card", "cheapest offer") else "right")
    for card, spread in sorted(table.card_spread().items()):
        out.add_row(
            card, str(spread.offers), spread.cheapest_offer, f"{spread.usd_min:.4g}",
            f"{spread.usd_median:.4g}", f"{spread.usd_max:.4g}",
        )  # fmt: skip
    console.print(out)
