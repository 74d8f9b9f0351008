"""`harness aggregate`, `report`, `compare`, `site`: typer-annotated plain functions.

They are registered on the app by ``harness.cli.main``; `aggregate` and `report` are built by
``run_command`` from the options they share; each raises UserInputError on bad input
(the CLI turns it into one line and exit code 2) and prints rich tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape as markup_escape
from rich.table import Table

from harness import modes
from harness.cli.tariffs import print_offer_spread, print_price_notes
from harness.console import console, shown
from harness.errors import UserInputError
from harness.results.columns import COLUMNS, COMPARED
from harness.spec.labels import configuration_label

if TYPE_CHECKING:
    from harness.results.aggregate import Aggregate
    from harness.spec.tariffs import TariffTable

QUALITY_CLASS_HELP = "quality class: 99 (within 1 % of the reference) or 99.9 (within 0.1 %)"


def _tariffs(path: Path | None) -> Any:
    from harness.spec.tariffs import load_tariffs

    return None if path is None else load_tariffs(path)


def _check_run(run: Path) -> Path:
    if not run.is_dir():
        raise UserInputError("run folder not found (expected results/<run>/)", file=str(run))
    return run


def _check_class(quality_class: str) -> str:
    from harness.results.pricing import check_quality_class

    return check_quality_class(quality_class, field="--quality-class")


def _table(title: str, rows: list[dict[str, str]], numeric: set[str] | None = None) -> Table:
    """A table of data: every cell shown as text (a model folder's or a run's name may hold
    control characters or rich markup)."""
    table = Table(title=title, title_justify="left")
    if not rows:
        return table
    for column in rows[0]:
        table.add_column(shown(column), justify="right" if column in (numeric or set()) else "left")
    for row in rows:
        table.add_row(*(shown(row[c]) for c in rows[0]))
    return table


def print_headline(result: Any, quality_class: str) -> None:
    from harness.results.publish import headline_table
    from harness.results.publish.headline import NUMERIC

    rows = headline_table(result, quality_class, compact=True)
    if rows:
        title = (
            f"Cheapest configuration per GPU and package, quality class {quality_class} "
            f"(utilisation {result.utilisation:g})"
        )
        console.print(_table(title, rows, set(NUMERIC)))
    else:
        console.print(
            f"[yellow]no configuration passes class {quality_class} on a GPU with a tariff[/]"
        )
    print_verdicts(result, quality_class)


def print_verdicts(result: Any, quality_class: str) -> None:
    """The rule in one line, pass / fail / undecided counts, and what would decide the
    undecided configurations."""
    from harness.results.publish import verdicts

    counts = verdicts.verdict_counts(result)[quality_class]
    console.print(verdicts.rule_line(quality_class, result.gated), highlight=False)
    console.print(
        f"verdicts: {counts['pass']} pass, {counts['fail']} fail, {counts['undecided']} "
        f"undecided (gated on {', '.join(result.gated)})",
        highlight=False,
    )
    for r in verdicts.undecided_table(result, quality_class).to_dict("records"):
        console.print(
            f"  undecided: {shown(r['model'])} {shown(r['configuration'])} on "
            f"{shown(r['device'])}: {shown(r['to_decide'])}",
            highlight=False,
        )


def print_counts(result: Any) -> None:
    c = result.counts
    statuses = ", ".join(f"{k} {v}" for k, v in c["by_status"].items())
    console.print(
        f"offline rows {c['rows']} ({statuses}); priced {c['priced_rows']}; no tariff for their "
        f"GPU {c['eligible_without_tariff']}; above the roofline (excluded) "
        f"{c['flagged_above_roofline']}",
        highlight=False,
    )
    other = {m: c.get(f"{m}_rows", 0) for m in modes.REGISTRY if m != "offline"}
    if any(other.values()):
        console.print(
            "; ".join(f"{mode} rows {n}" for mode, n in other.items() if n), highlight=False
        )
    if c.get("mixed_scenarios"):
        console.print(
            "[yellow]rows from several scenarios, aggregated as one (--allow-mixed):[/] "
            + markup_escape(", ".join(c["mixed_scenarios"])),
            highlight=False,
        )
    if c["models_without_reference"]:
        console.print(
            "[yellow]no reference row (no quality class) for:[/] "
            + shown(", ".join(c["models_without_reference"])),
            highlight=False,
        )
    for path, why in result.unreadable:
        console.print(
            f"[yellow]unreadable, skipped:[/] {markup_escape(f'{path}: {why}')}", highlight=False
        )


RunArg = Annotated[Path, typer.Argument(help="run folder (results/<run>)")]
TariffsOpt = Annotated[Path | None, typer.Option(help="tariff YAML")]
QualityClassOpt = Annotated[str, typer.Option(help=QUALITY_CLASS_HELP)]
UtilisationOpt = Annotated[
    float, typer.Option(help="share of the package's hours the node works, in (0, 1]")
]
AllowMixedOpt = Annotated[
    bool,
    typer.Option(
        "--allow-mixed",
        help="aggregate a folder whose rows come from several scenarios or runs (each stated)",
    ),
]


@dataclass(frozen=True)
class Aggregated:
    """One run folder aggregated with the options `aggregate` and `report` share."""

    folder: Path
    tariffs: TariffTable | None
    quality_class: str
    utilisation: float
    result: Aggregate


def run_command(action: Callable[[Aggregated], None]) -> Callable[..., None]:
    """A command over one run folder with the options `aggregate` and `report` share, stated once
    here (typer reads them from this signature): it checks them, aggregates the run and hands the
    result to ``action``, whose name and docstring the command takes."""

    def command(
        run: RunArg,
        tariffs: TariffsOpt = None,
        quality_class: QualityClassOpt = "99",
        utilisation: UtilisationOpt = 1.0,
        allow_mixed: AllowMixedOpt = False,
    ) -> None:
        from harness.results.aggregate import aggregate_run
        from harness.results.pricing import check_utilisation
        from harness.run.store import run_lock

        _check_class(quality_class)
        check_utilisation(utilisation)
        folder = _check_run(run)
        table = _tariffs(tariffs)
        name = action.__name__.removesuffix("_cmd")
        with run_lock(folder, name, writes=name != "aggregate"):  # one command at a time
            result = aggregate_run(folder, table, utilisation, allow_mixed)
            action(Aggregated(folder, table, quality_class, utilisation, result))

    command.__name__ = command.__qualname__ = action.__name__
    command.__doc__ = action.__doc__
    return command


@run_command
def aggregate_cmd(aggregated: Aggregated) -> None:
    """Equal-quality gate, cost per tariff package, cheapest configurations: printed."""
    result, quality_class = aggregated.result, aggregated.quality_class
    print_counts(result)
    if aggregated.tariffs is None:
        console.print("no --tariffs given: nothing priced (try --tariffs tariffs/example.yaml)")
        return
    print_headline(result, quality_class)
    print_price_notes(aggregated.tariffs)
    ratios = result.gpu_ratios
    ratios = ratios[ratios["quality_class"] == quality_class]
    if not ratios.empty:
        rows = [
            {
                "model": str(r["model"]),
                "days": str(r["package_days"]),
                "GPU a": str(r["gpu_a"]),
                "GPU b": str(r["gpu_b"]),
                "cost a ÷ b": f"{r['cost_ratio_a_over_b']:.3g}",
            }
            for r in ratios.to_dict(orient="records")
            if r["cost_ratio_a_over_b"] >= 1
        ]
        console.print(_table("GPU against GPU at equal quality", rows, {"days", "cost a ÷ b"}))


@run_command
def report_cmd(aggregated: Aggregated) -> None:
    """Write results/<run>/published/ (CSV, Parquet, JSON, README, report.html) and print the
    headline table, then before you rent: every tariff's card, measured or projected."""
    from harness.cli.projection import print_before_you_rent
    from harness.projection import publish, rent
    from harness.results.publish import report

    result, quality_class = aggregated.result, aggregated.quality_class
    ahead = None
    if aggregated.tariffs is not None:
        ahead = rent.before_you_rent(
            result.points, aggregated.tariffs, quality_class, aggregated.utilisation
        )
    extra = publish.sections(
        result.points, aggregated.tariffs, quality_class, aggregated.utilisation, ahead
    )
    out = report(
        aggregated.folder,
        aggregated.tariffs,
        utilisation=aggregated.utilisation,
        quality_class=quality_class,
        result=result,
        extra_markdown=extra.markdown,
        extra_html=extra.html,
    )
    print_counts(result)
    print_headline(result, quality_class)
    print_price_notes(aggregated.tariffs)
    if ahead is not None and aggregated.tariffs is not None:
        print_before_you_rent(ahead, quality_class)
        print_offer_spread(aggregated.tariffs)
    console.print(f"published: {shown(out)}/ (report.html, README.md, cost.csv, points.csv, …)")


def site_cmd(
    runs: Annotated[list[Path], typer.Argument(help="run folders (results/<run>), any number")],
    out: Annotated[Path, typer.Option(help="site folder: index.html, runs/, points.csv, cost.csv")],
    tariffs: TariffsOpt = None,
    quality_class: QualityClassOpt = "99",
    utilisation: UtilisationOpt = 1.0,
    allow_mixed: Annotated[
        bool,
        typer.Option(
            help="publish runs whose corpus hash, reference or result schema differ, marked as "
            "mixed at the top of the site"
        ),
    ] = False,
    price_history: Annotated[
        list[Path] | None,
        typer.Option(
            help="an imported tariff file (any date or feed; repeatable): the site keeps the "
            "dated price history per card (price-history.csv and a table per card)"
        ),
    ] = None,
) -> None:
    """One static site across runs (nodes, providers): the cheapest configuration at equal
    quality across all of them, each run's own report, combined points.csv and cost.csv with
    every row's run and provenance."""
    from harness.projection import publish
    from harness.results.site import build_site

    _check_class(quality_class)
    refuse_out_in_a_run(out, runs)
    table = _tariffs(tariffs)
    history = _price_history(price_history or [])
    site = build_site(
        [_check_run(r) for r in runs],
        out,
        table,
        quality_class=quality_class,
        utilisation=utilisation,
        allow_mixed=allow_mixed,
        extras=publish.extras(table, quality_class),  # before you rent and the error ledger
        history=history,
    )
    for line in site.mixed:
        console.print(f"[bold yellow]mixed[/]: {markup_escape(line)}", highlight=False)
    print_counts(site.result)
    print_headline(site.result, quality_class)
    console.print(
        f"site: {shown(site.out)}/index.html ({len(site.runs)} runs: "
        f"{shown(', '.join(r.label for r in site.runs))})",
        highlight=False,
    )


def _price_history(files: Sequence[Path]) -> Any:
    """The dated price history per card of the tariff files (None where none is given)."""
    if not files:
        return None
    from harness.prices.verdicts import price_history
    from harness.spec.tariffs import load_tariffs

    return price_history([load_tariffs(path) for path in files])


def refuse_out_in_a_run(out: Path, runs: Sequence[Path]) -> None:
    """A site is never written into a run: not into a run folder given, nor anywhere inside one
    (its `points/` is read back as rows), nor inside any folder that holds a run's `points/`."""
    from harness.run.store import POINTS

    target = _resolved(out)
    if target is None:
        raise UserInputError(
            "is (or passes through) a symlink loop; choose another --out", file=str(out)
        )
    given = {_resolved(Path(r)) for r in runs}  # a run that cannot be resolved: refused later
    for folder in (target, *target.parents):
        if folder in given or (folder / POINTS).is_dir():
            raise UserInputError(
                f"is or lies inside the run folder {folder}: a site is never written into a "
                "run; choose a folder outside every run",
                file=str(out),
                field="--out",
            )


def _resolved(path: Path) -> Path | None:
    """`path` with the part that exists resolved (its links followed); None on a symlink loop
    (Python 3.11's resolve raises RuntimeError there, later ones OSError)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


# the compared metrics' labels (harness.results.columns: cheap to import, no pandas)
METRIC_LABELS = {m: COLUMNS[m].label for m in COMPARED}


def _change(r: dict[str, Any]) -> str:
    """'+1.23 [+0.5, +2.0]' (change in % of A, 95 % CI), or the change alone without a CI."""
    pct, low, high = r["diff_pct"], r["ci_low_pct"], r["ci_high_pct"]
    if pct != pct:  # NaN
        return "–"
    if low != low or high != high:
        return f"{pct:+.2f}"
    return f"{pct:+.2f} [{low:+.2f}, {high:+.2f}]"


def compare_cmd(
    run_a: Annotated[Path, typer.Argument(help="baseline run folder")],
    run_b: Annotated[Path, typer.Argument(help="run folder compared with the baseline")],
    threshold_pct: Annotated[
        float, typer.Option(help="smallest change worth acting on, in % of the baseline")
    ] = 2.0,
) -> None:
    """Per-configuration differences (decode tok/s, ppl, peak memory) with 95 % CIs and a
    verdict against the threshold."""
    from harness.results.compare import MATCH_FIELDS, compare

    result = compare(_check_run(run_a), _check_run(run_b), threshold_pct)
    rows: dict[tuple[Any, ...], dict[str, str]] = {}
    for record in result.table.to_dict(orient="records"):
        r = {str(k): v for k, v in record.items()}
        config = (*(r[f] for f in MATCH_FIELDS), r["gpu_a"], r["gpu_b"])
        device_a, device_b = r["gpu_a"] or r["target"], r["gpu_b"] or r["target"]
        device = device_a if device_a == device_b else f"{device_a}→{device_b}"
        row = rows.setdefault(
            config,
            {
                "model": str(r["model"]),
                "config": f"{configuration_label(r)} {device}",
            },
        )
        label = METRIC_LABELS.get(str(r["metric"]), str(r["metric"]))  # task:<name>: its own
        row[f"{label} Δ %"] = _change(r)
        row[f"{label}"] = str(r["verdict"])
    title = f"B against A, useful-effect threshold ±{result.threshold_pct:g} %"
    labels = {*METRIC_LABELS.values(), *(str(m) for m in result.table["metric"].unique())}
    numeric = {f"{label} Δ %" for label in labels}
    console.print(_table(title, list(rows.values()), numeric))
    for metric, counts in result.verdicts().items():
        console.print(
            f"{shown(metric)}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
            highlight=False,
        )
    console.print(
        f"matched {len(rows)} on {', '.join(result.matched_on)}; only in A "
        f"{len(result.only_a)}; only in B {len(result.only_b)}",
        highlight=False,
    )
    for note in result.notes:  # an adapter or a task that differs: not compared
        console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
    for path, why in result.unreadable:
        console.print(
            f"[yellow]unreadable, skipped:[/] {markup_escape(f'{path}: {why}')}", highlight=False
        )
