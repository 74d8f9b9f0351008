"""`harness ledger` (the leave-one-card-out check of projections on an external CSV) and
`harness rent` (before you rent: every tariff's card, measured or projected, and the package that
fits a traffic); ``print_before_you_rent`` is also `harness report`'s."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from harness.cli.tariffs import print_offer_spread, print_price_notes
from harness.console import console
from harness.csvtext import csv_rows

if TYPE_CHECKING:
    from harness.projection.check import KeyTau
    from harness.projection.external import ExternalFile, ExternalRow
    from harness.projection.ledger import LedgerLine, PairLine
    from harness.projection.rent import BeforeYouRent

DEFAULT_FILE = Path(__file__).resolve().parents[1] / "data/external/argonne/results.csv"
DEFAULT_TARIFFS = Path("tariffs/example.yaml")  # the repository's example (absent: no cost τ)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def ledger_cmd(
    file: Annotated[
        Path, typer.Argument(help="external CSV (harness/projection/external.py documents it)")
    ] = DEFAULT_FILE,
    exclude: Annotated[
        list[str] | None, typer.Option(help="leave a card out of the ledger (repeatable)")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="write the ledger and pair tables as CSV")
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="refuse rows on unknown cards or columns")
    ] = False,
    tariffs: Annotated[
        Path, typer.Option(help="tariff YAML: each card's cheapest price, for the cost τ")
    ] = DEFAULT_TARIFFS,
) -> None:
    """Projection error per phase and cell (dense or MoE, vendor direction): MAPE, the band
    with its stated and held-out (a card left out at a time) coverage, Kendall τ over
    throughput and cost, and the pure roofline's beside them."""
    from harness.atomic import atomic_write_text
    from harness.projection import check, ledger
    from harness.projection.external import read_external
    from harness.spec import catalog

    check_out_path(out)
    excluded = {catalog.gpu(name).name for name in exclude or []}
    prices = _prices(tariffs)
    data = read_external(file, strict)
    print_skipped(data)
    measured = [m for m in ledger.observations(data.rows) if m.card not in excluded]
    lines = ledger.ledger(measured)
    title = f"Projection ledger (leave one card out): {file.name}"
    if excluded:
        title += f", without {', '.join(sorted(excluded))}"
    table = Table(title=title, title_justify="left")
    heads = ("phase", "class", "pairs", "keys", "models", "MAPE %", "roofline MAPE %",
             "band (meas ÷ proj)", "coverage stated %", "held-out %", "τ", "roofline τ",
             "τ keys")  # fmt: skip
    for head in heads:
        table.add_column(head, justify="left" if head in ("phase", "class") else "right")
    for line in lines:
        table.add_row(
            line.phase, line.klass if line.arch == "all" else f"{line.klass} ({line.arch})",
            str(line.pairs), str(line.keys), str(line.models),
            _pct(line.mape_pct),
            _pct(line.roofline_mape_pct), ledger.band_text(line),
            _pct(line.stated_coverage_pct), _pct(line.held_out_coverage_pct), _num(line.tau),
            _num(line.roofline_tau), str(line.tau_keys),
        )  # fmt: skip
    console.print(table)
    for line in lines:
        if line.held_out_by_card:
            console.print(
                f"held out per card, {line.phase} {line.arch} {line.klass}: "
                f"{line.held_out_by_card}",
                highlight=False,
            )
    if not lines:
        console.print(
            nothing_to_compare(data.rows, excluded), highlight=False, soft_wrap=True, markup=False
        )
    else:
        for scope in check.scope_lines(file.name, data.rows, excluded):
            console.print(scope, highlight=False, soft_wrap=True, markup=False)
        console.print(
            "roofline MAPE: the pure roofline's ceiling as the prediction, on the keys whose "
            "model is in the catalog (MAPE on those same keys by this method: "
            + ", ".join(f"{x.phase} {x.klass} {_pct(x.mape_same_keys_pct)}" for x in lines)
            + ")",
            highlight=False,
        )
        errors = ledger.leave_one_card_out(measured)
        taus = check.key_taus(errors, prices)
        console.print(cost_tau_line(taus, tariffs), highlight=False, soft_wrap=True, markup=False)
    if out is not None:
        atomic_write_text(out, ledger_csv(lines, ledger.pair_table(measured), sources(data.rows)))
        console.print(f"written: {out}")


def _prices(tariffs: Path) -> dict[str, float]:
    from harness.projection.check import card_prices
    from harness.spec.tariffs import load_tariffs

    if tariffs == DEFAULT_TARIFFS and not tariffs.is_file():
        return {}  # an installed package without the repository's example tariffs: no cost τ
    return card_prices(load_tariffs(tariffs))


def check_out_path(out: Path | None) -> None:
    """An --out that is a folder: one line, before any work."""
    from harness.errors import UserInputError

    if out is not None and out.is_dir():
        raise UserInputError("is a folder: expected a file to write the CSV to", file=str(out),
                             field="--out")  # fmt: skip


def print_skipped(data: ExternalFile) -> None:
    """One line: the rows skipped and why (none: nothing)."""
    if data.skipped:
        console.print(f"{data.skipped_text()} (--strict refuses them)", highlight=False,
                      soft_wrap=True, markup=False)  # fmt: skip


def nothing_to_compare(rows: list[ExternalRow], excluded: set[str]) -> str:
    """Why a ledger has no line: no row, every card left out, or no key on two cards."""
    cards = sorted({r.gpu for r in rows})
    if not rows:
        return "no row to read: nothing to project"
    if not set(cards) - excluded:
        return f"every card is left out ({', '.join(cards)}): nothing to project"
    return (
        "no key is measured on two cards or more (cards: "
        f"{', '.join(sorted(set(cards) - excluded))}): nothing to project, no ledger"
    )


def cost_tau_line(taus: list[KeyTau], tariffs: Path) -> str:
    """τ over cost beside τ over throughput, per phase."""
    parts = []
    for phase in dict.fromkeys(t.phase for t in taus):
        mine = [t for t in taus if t.phase == phase]
        costs = [t.cost_tau for t in mine if t.cost_tau is not None]
        cost = f"{sum(costs) / len(costs):.3f} over {len(costs)} keys" if costs else "—"
        parts.append(
            f"{phase}: τ {sum(t.tau for t in mine) / len(mine):.3f} over {len(mine)} keys, "
            f"cost τ {cost}"
        )
    if not parts:
        return "ranking τ: no key on 3 cards or more"
    return (
        f"ranking τ (keys on ≥ 3 cards; cost = USD per Mtok of output at each card's cheapest "
        f"tariff in {tariffs.name}, cards with no tariff left out): " + "; ".join(parts)
    )


def sources(rows: list[ExternalRow]) -> str:
    """The distinct sources of the rows (their first word: repository@commit or URL)."""
    return "; ".join(sorted({row.source.split(" ")[0] for row in rows}))


def ledger_csv(lines: list[LedgerLine], pairs: list[PairLine], source: str) -> str:
    """The ledger's lines then its pairs, one CSV (a `table` column says which), written
    formula-safe (harness.csvtext)."""
    fields = list(type(lines[0]).model_fields) if lines else []
    pair_fields = list(type(pairs[0]).model_fields) if pairs else []
    rows: list[list[object]] = [
        ["table", *fields, *(f"pair_{f}" for f in pair_fields), "data_source"]
    ]
    for line in lines:
        rows.append(["ledger", *line.model_dump().values(), *[""] * len(pair_fields), source])
    for pair in pairs:
        rows.append(["pair", *[""] * len(fields), *pair.model_dump().values(), source])
    return csv_rows(rows)


def _rows_table(title: str, rows: list[dict[str, str]]) -> Table:
    from harness.console import shown

    table = Table(title=title, title_justify="left")
    for column in rows[0] if rows else []:
        table.add_column(shown(column))
    for row in rows:
        table.add_row(*(shown(v) for v in row.values()))
    return table


def print_before_you_rent(rent: BeforeYouRent, quality_class: str) -> None:
    """The ranking per model and package with its verdict (projected figures labelled)."""
    from harness.projection import text

    for (model, days), lines in rent.ranking.items():
        title = (
            f"Before you rent: {model}, {days}-day package, class {quality_class} "
            "($/Mtok of output; measured, or projected: centre on the band's median)"
        )
        rows = text.ranking_rows(lines)
        if rows:
            console.print(_rows_table(title, rows))
        found = rent.verdicts.get((model, days))
        if found is not None:
            console.print(f"{model}, {days} days: {found.text}", highlight=False)
    for model in dict.fromkeys(m for m, _ in rent.ranking):
        every = [x for (m, _), v in rent.ranking.items() if m == model for x in v]
        missing = text.unpriced_line(every)
        if missing:
            console.print(f"{model}: {missing}", highlight=False)
    console.print(text.SERVING_NOTE, highlight=False)


def rent_cmd(
    run: Annotated[Path, typer.Argument(help="run folder (results/<run>)")],
    tariffs: Annotated[Path, typer.Option(help="tariff YAML: every card in it is priced")],
    traffic: Annotated[
        float | None,
        typer.Option(help="output tokens a day to serve: the package that fits it (e.g. 2.5e9)"),
    ] = None,
    quality_class: Annotated[str, typer.Option(help="quality class: 99 or 99.9")] = "99",
    utilisation: Annotated[
        float, typer.Option(help="share of the package's hours the node works, in (0, 1]")
    ] = 1.0,
    allow_mixed: Annotated[
        bool, typer.Option("--allow-mixed", help="aggregate rows of several scenarios")
    ] = False,
) -> None:
    """Before you rent: the configurations that passed the gate carried to every tariff's card
    (measured or projected, with the ledger's band), the ranking and the experiment that
    decides, and with --traffic the package that fits it."""
    import math

    from rich.markup import escape

    from harness.errors import UserInputError
    from harness.projection import rent as r
    from harness.projection import text, traffic_fit
    from harness.results.aggregate import aggregate_run
    from harness.results.pricing import check_quality_class, check_utilisation
    from harness.spec.tariffs import load_tariffs

    check_quality_class(quality_class, field="--quality-class")
    check_utilisation(utilisation)
    if traffic is not None and not (math.isfinite(traffic) and 0 < traffic <= MAX_TRAFFIC):
        raise UserInputError(
            f"expected output tokens a day in (0, {MAX_TRAFFIC:.0e}], got {traffic!r}",
            field="--traffic",
        )
    if not run.is_dir():
        raise UserInputError("run folder not found (expected results/<run>/)", file=str(run))
    table = load_tariffs(tariffs)
    result = aggregate_run(run, table, utilisation, allow_mixed)
    for path, why in result.unreadable:  # named, as `harness aggregate` names them
        console.print(
            f"[yellow]unreadable, skipped:[/] {escape(f'{path}: {why}')}", highlight=False
        )
    left_out = r.layouts_left_out(result.points, quality_class)
    if left_out:
        console.print(left_out, highlight=False, markup=False)
    if r.candidates(result.points, quality_class).empty:
        console.print(
            f"no row passed the gate at class {quality_class} on one catalog card: nothing to "
            "price or carry to another card",
            highlight=False,
        )
        return
    rent = r.before_you_rent(result.points, table, quality_class, utilisation)
    print_before_you_rent(rent, quality_class)
    print_offer_spread(table)  # the cheapest offer and the spread per card (harness.prices)
    print_price_notes(table)
    projected = text.projection_rows(rent.projections)
    if projected:
        console.print(_rows_table("Projected configurations (never in measured tables)", projected))
    if traffic is None:
        return
    for model in dict.fromkeys(p.model for p in rent.projections):
        fit = traffic_fit.fit_traffic(rent.projections, table, model, traffic)
        title = f"The package that fits {traffic:.3g} output tokens a day: {model}, cheapest first"
        console.print(_rows_table(title, text.option_rows(fit.options)))
        for line in fit.not_options:
            console.print(line, highlight=False)
        console.print(text.choice_line(fit, traffic), highlight=False)


MAX_TRAFFIC = 1e15  # output tokens a day: far beyond any fleet
