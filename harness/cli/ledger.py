"""`harness ledger`: a group whose default command fits the ledger on an external CSV
(`harness ledger [FILE]`, also `harness ledger fit [FILE]`, in harness/cli/projection.py), and
`harness ledger check HELDOUT.csv [--ledger NAME]`, which scores a ledger's bands on held-out
measurements."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from typer.core import TyperGroup

from harness.cli.projection import DEFAULT_TARIFFS, _num, _pct
from harness.console import console

if TYPE_CHECKING:
    from harness.projection.book import Book
    from harness.projection.check import CheckLine

DEFAULT_COMMAND = "fit"


class LedgerGroup(TyperGroup):
    """Arguments that name no subcommand go to the default one (`harness ledger FILE`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's own click Context
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)


def check_cmd(
    heldout: Annotated[
        Path, typer.Argument(help="held-out external CSV (harness/projection/external.py)")
    ],
    ledger_name: Annotated[
        str,
        typer.Option(
            "--ledger",
            help="a shipped ledger (argonne), or an external CSV to fit one on (its path)",
        ),
    ] = "argonne",
    strict: Annotated[
        bool, typer.Option("--strict", help="refuse rows on unknown cards or columns")
    ] = False,
    tariffs: Annotated[
        Path, typer.Option(help="tariff YAML: each card's cheapest price, for the cost τ")
    ] = DEFAULT_TARIFFS,
    out: Annotated[Path | None, typer.Option(help="write the check's lines as CSV")] = None,
) -> None:
    """Score a ledger's bands on held-out measurements: coverage of the pairs given a band, the
    share given none, MAPE, and the ranking τ over throughput and cost."""
    from harness.atomic import atomic_write_text
    from harness.cli.projection import _prices, check_out_path, print_skipped
    from harness.projection import check, ledger
    from harness.projection.external import read_external

    check_out_path(out)
    books, label = _books(ledger_name)
    prices = _prices(tariffs)
    data = read_external(heldout, strict)
    print_skipped(data)
    bands = check.BookBands(books, data.rows)
    lines = check.check(ledger.observations(data.rows), bands.band_of, prices)
    why = bands.unbanded_text()
    if why:
        console.print(why, highlight=False, soft_wrap=True, markup=False)
    table = Table(
        title=f"Ledger {label} checked on {heldout.name} (held out: every pair of its keys)",
        title_justify="left",
    )
    heads = ("phase", "class", "pairs", "banded", "unbanded %", "coverage %", "stated %",
             "MAPE %", "τ", "cost τ", "τ keys")  # fmt: skip
    for head in heads:
        table.add_column(head, justify="left" if head in ("phase", "class") else "right")
    stated = _pct(float(ledger.STATED_COVERAGE * 100))
    for x in lines:
        table.add_row(
            x.phase, x.klass, str(x.pairs), str(x.banded), _pct(x.unbanded_pct),
            _pct(x.coverage_pct), stated, _pct(x.mape_pct), _num(x.tau), _num(x.cost_tau),
            str(x.tau_keys),
        )  # fmt: skip
    console.print(table)
    if not lines:
        from harness.cli.projection import nothing_to_compare

        console.print(
            nothing_to_compare(data.rows, set()), highlight=False, soft_wrap=True, markup=False
        )
    if out is not None:
        atomic_write_text(out, check_csv(lines, label))
        console.print(f"written: {out}")


def check_csv(lines: list[CheckLine], label: str) -> str:
    """The check's lines, one CSV row each, the ledger named in every row (formula-safe:
    harness.csvtext)."""
    from harness.csvtext import csv_rows
    from harness.projection.check import CheckLine

    rows: list[list[object]] = [["ledger", *CheckLine.model_fields]]
    rows += [[label, *line.model_dump().values()] for line in lines]
    return csv_rows(rows)


def _books(name: str) -> tuple[dict[str, Book], str]:
    """A shipped ledger by name ('argonne' or 'shipped Argonne'), or the ledgers fitted on an
    external CSV given by path, one per scenario; and the label."""
    from harness.errors import UserInputError, did_you_mean
    from harness.projection import book, check
    from harness.projection.external import read_external

    path = Path(name)
    if path.suffix == ".csv":
        return check.books_by_scenario(path.name, read_external(path).rows), path.name
    shipped = {b.name: b for b in book.shipped_books()}
    short = {b.lower().removeprefix("shipped "): b for b in shipped}
    found = shipped.get(name) or shipped.get(short.get(name.lower(), ""))
    if found is None:
        raise UserInputError(
            f"no shipped ledger {name!r}{did_you_mean(name.lower(), short)}; known: "
            f"{', '.join(short)}, or an external CSV to fit one on",
            field="--ledger",
        )
    return {scope.regime: found for scope in found.scopes.values()}, found.name
