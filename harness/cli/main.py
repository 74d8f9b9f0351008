"""The `harness` command line: plan, measure, run, aggregate, report, compare, node, bench.

Every command turns a UserInputError into one clear line on stderr and exit code 2.
Engines are imported only by the commands that measure.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape as markup_escape
from rich.table import Table

from harness.console import console, err_console, shown
from harness.errors import UserInputError, fault_line
from harness.spec.labels import PLAN_LABEL, configuration_label

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_show_locals=False
)
node_app = typer.Typer(no_args_is_help=True, help="Start a Ray node with detected resources.")
app.add_typer(node_app, name="node")

F = TypeVar("F", bound=Callable[..., Any])


def friendly(fn: F) -> F:
    """Bad input → one line naming what was wrong and where, exit 2, nothing written."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserInputError as exc:
            err_console.print(
                f"[bold red]error[/]: {markup_escape(exc.render())}",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(2) from None
        except OSError as exc:  # a full disk, a read-only folder: one line, not a traceback
            line = fault_line(exc)
            if line is None:
                raise
            err_console.print(
                f"[bold red]error[/]: {markup_escape(line)}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def hourly_price(
    tariffs: Path | None, gpu: str
) -> tuple[float | None, str | None, int | None, str | None]:
    """Hourly $ per card of the first tariff for this card (``cpu``: a CPU node), if a tariff
    file was given: (price, the tariff's name, its node's cards, None), or (None, None, None,
    why it has none)."""
    if tariffs is None:
        return None, None, None, None
    from harness.spec.tariffs import load_tariffs

    for t in load_tariffs(tariffs).tariffs:
        if t.gpu == gpu:
            return t.hourly_usd / t.gpus_per_node, f"{t.provider} {t.gpu}", t.gpus_per_node, None
    return None, None, None, f"{tariffs} has no tariff for {gpu!r}"


@app.command()
@friendly
def plan(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML")],
    gpu: Annotated[str | None, typer.Option(help="catalog GPU to plan GPU targets on")] = None,
    tariffs: Annotated[Path | None, typer.Option(help="tariff YAML: prices the budget")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    show_skipped: Annotated[
        bool, typer.Option("--show-skipped", help="list every skipped point, not one line a reason")
    ] = False,
) -> None:
    """Every point with its memory plan and fit verdict, the skips by reason, the budget."""
    from harness import plan as planner
    from harness.spec import scenario as scen

    grid = scen.expand(scen.load(scenario), str(scenario))
    gpu_targets = [t for t in grid.scenario.targets if t != "cpu"]
    card = planner.default_card(gpu_targets[0], gpu or grid.scenario.gpu) if gpu_targets else None
    # the node the sweep rents: its GPU's, or a CPU node's for a sweep with no GPU target
    price, tariff_name, cards, unpriced = hourly_price(tariffs, card.name if card else "cpu")
    result = calibrated_plan(grid, scenario, gpu=gpu, hourly_usd=price, node_cards=cards)
    result.budget.tariff = tariff_name
    result.budget.unpriced = unpriced or result.budget.unpriced
    if as_json:
        sys.stdout.write(json.dumps(result.contract()) + "\n")
        return
    print_plan(result, show_skipped=show_skipped)


def print_skip_reasons(skipped: list[Any]) -> None:
    """One line per reason: how many points it skips and which configurations (--show-skipped
    lists every point)."""
    by_reason: dict[str, list[Any]] = {}
    for skip, _ in skipped:
        by_reason.setdefault(skip.reason, []).append(skip.point)
    table = Table(title=f"skipped: {len(skipped)} points (--show-skipped lists each)")
    for col in ("points", "configurations", "reason"):
        table.add_column(col, overflow="fold", justify="right" if col == "points" else "left")
    for reason, points in by_reason.items():
        labels = dict.fromkeys(
            configuration_label(p.model_dump(), ("backend", "quantization", "kv_cache_dtype"))
            for p in points
        )
        table.add_row(str(len(points)), shown(", ".join(labels)), shown(reason))
    console.print(table)


def print_plan(result: Any, *, show_skipped: bool = False) -> None:
    table = Table(
        title="plan: memory in GiB (2^30 bytes); KV/tok: the binding rank's KV per token, KiB; "
        "max B: the largest batch vLLM's KV pool holds; time in s"
    )
    for col in ("point", "gpu", "weights", "KV", "KV/tok KiB", "max B", "activ.", "reserve",
                "total", "est s"):  # fmt: skip
        table.add_column(
            col, overflow="fold", justify="left" if col in ("point", "gpu") else "right"
        )
    for p in result.points:
        pt = p.point
        point = configuration_label(pt.model_dump(), PLAN_LABEL, sep=" · ")
        if p.mode_note:  # a serving level, a training step's phases
            point += f" · {p.mode_note}"

        table.add_row(
            shown(point), shown(p.gpu), f"{p.weights_gib:.2f}", f"{p.kv_cache_gib:.2f}",
            f"{p.kv_per_token_bytes / 1024:.1f}",
            "" if p.largest_batch is None else str(p.largest_batch),
            f"{p.activations_gib:.2f}", f"{p.reserve_gib:.2f}", f"{p.total_gib:.2f}",
            f"{p.est_seconds:.1f}",
        )  # fmt: skip
    console.print(table)
    print_speculation_note(result)
    if result.skipped and not show_skipped:
        print_skip_reasons(result.skipped)
    elif result.skipped:
        skips = Table(title=f"skipped ({len(result.skipped)})")
        for col in ("model", "backend", "quant", "kv", "batch", "context", "target", "reason"):
            skips.add_column(col, overflow="fold")
        for skip, _ in result.skipped:
            pt = skip.point
            cells = (pt.model, pt.backend, pt.quantization, pt.kv_cache_dtype, pt.batch,
                     pt.context, pt.target, skip.reason)  # fmt: skip
            skips.add_row(*(shown(c) for c in cells))
        console.print(skips)
    for warning in result.warnings:
        console.print(f"warning: {warning}", highlight=False, markup=False)
    print_budget(result.budget)


def print_speculation_note(result: Any) -> None:
    """One line where speculative points have no plain twin: nothing of them will be priced."""
    from harness.results.speculation import unpaired_line

    line = unpaired_line([p.point for p in result.points])
    if line:
        console.print(f"note: {line}", highlight=False, markup=False, soft_wrap=True)


def calibrated_plan(grid: Any, scenario: Path, **options: Any) -> Any:
    """The plan with its budget calibrated from this node's history (harness.run.history)."""
    from harness import budget
    from harness.run import history, sweep

    calibration = history.load_calibration(sweep.scenario_hash(scenario))
    return budget.plan_grid(grid, calibration=calibration, **options)


def print_budget(b: Any) -> None:
    """The budget line: wall time by phase (harness.budget.PHASES), GPU-hours and $ (the
    package-hour price × that wall time), and what the figures were calibrated from."""
    from harness.budget import PHASES
    from harness.console import duration

    cost = f", ≈ ${b.est_cost_usd:.2f} on {b.tariff}" if b.est_cost_usd is not None else ""
    cost += f", not priced: {b.unpriced}" if b.unpriced else ""
    hours = f"{b.est_cpu_hours:.3f} CPU-h" if b.est_cpu_hours else f"{b.est_gpu_hours:.3f} GPU-h"
    parts = [f"{label} {duration(b.est_phase_seconds[phase])}"
             for phase, label in PHASES.items() if phase in b.est_phase_seconds]  # fmt: skip
    console.print(
        f"budget: {b.points} points in {b.groups} groups, {b.skipped} skipped; "
        f"≈ {duration(b.est_seconds)} in all ({', '.join(parts)}), "
        f"{hours}{cost}; {b.calibrated_from or 'defaults'}",
        highlight=False,
        markup=False,  # it names the history file: a path, never markup
    )


@app.command()
@friendly
def measure(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML")],
    out: Annotated[Path, typer.Option(help="run folder: points/ and manifest.json go here")],
    gpu: Annotated[str | None, typer.Option(help="catalog GPU, when the device is unknown")] = None,
    resume: Annotated[bool, typer.Option(help="skip points already measured ok")] = True,
) -> None:
    """Run every group in this process (no Ray): for debugging, and the driver's building block."""
    from harness.run import session

    outcome = session.measure_here(scenario, out, gpu, resume)
    print_lines(outcome.lines)
    console.print(
        f"results: {shown(out)}/points ({outcome.points} points, {outcome.skipped} skipped)"
    )
    exit_on_failed_points(out)


FAILED_STATUSES = ("error", "node_lost")  # an `oom` row is a measured outcome, not a failure
EXIT_FAILED_POINTS = 3


def status_counts(run_dir: Path) -> dict[str, int]:
    from harness.run import store

    rows, _ = store.read_rows(run_dir)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    return counts


def exit_on_failed_points(run_dir: Path, counts: dict[str, int] | None = None) -> None:
    """One line with the count per status; exit 3 when any point ended error or node_lost."""
    counts = status_counts(run_dir) if counts is None else counts
    line = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no rows"
    console.print(f"points by status: {line}", highlight=False)
    failed = sum(counts.get(s, 0) for s in FAILED_STATUSES)
    if failed:
        err_console.print(
            f"[bold red]error[/]: {failed} point(s) ended error or node_lost (see the rows' "
            f"`error` and the manifest); exit {EXIT_FAILED_POINTS}",
            highlight=False,
        )
        raise typer.Exit(EXIT_FAILED_POINTS)


@app.command()
@friendly
def run(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML")],
    address: Annotated[
        str | None, typer.Option(help="Ray cluster: auto or HOST:PORT; none starts a local node")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="run folder (default results/<name>)")] = None,
    resume: Annotated[bool, typer.Option(help="skip points already measured ok")] = True,
    gpu: Annotated[str | None, typer.Option(help="catalog GPU, when the device is unknown")] = None,
    simulate_on_cpu: Annotated[bool, typer.Option(hidden=True)] = False,
) -> None:
    """Fan the sweep out over Ray: one task (or fresh actor) per group, on a node that matches
    its target."""
    from harness.run import session

    outcome = session.run_sweep(scenario, address, out, resume, gpu, simulate_on_cpu)
    print_lines(outcome.lines)
    console.print(f"results: {shown(outcome.run_dir)}")
    exit_on_failed_points(outcome.run_dir)


def print_lines(lines: list[str]) -> None:
    """A session's lines (the history's "planned …, took …"): they name the run folder, so
    markup in them is text."""
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True, markup=False)


@app.command()
@friendly
def bench(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML")] = Path(
        "scenarios/default.yaml"
    ),
    out: Annotated[Path | None, typer.Option(help="run folder")] = None,
    tariffs: Annotated[Path, typer.Option(help="tariff YAML")] = Path("tariffs/example.yaml"),
    address: Annotated[str | None, typer.Option(help="Ray cluster address")] = None,
) -> None:
    """Plan, run (Ray), publish; print the headline cost table and where everything is."""
    from harness.run import session
    from harness.spec import scenario as scen

    result = calibrated_plan(scen.expand(scen.load(scenario), str(scenario)), scenario)
    print_plan(result)
    outcome = session.run_sweep(scenario, address, out, True, None)
    print_lines(outcome.lines)
    console.print(f"sweep wall time: {outcome.wall_s:.1f} s")
    counts = status_counts(outcome.run_dir)
    publish_run(outcome.run_dir, tariffs)  # what can be published is, failures or not
    exit_on_failed_points(outcome.run_dir, counts)


def publish_run(run_dir: Path, tariffs: Path) -> None:
    from harness.cli import results

    results.report_cmd(run_dir, tariffs=tariffs)


@node_app.command("start")
@friendly
def node_start(
    head: Annotated[bool, typer.Option("--head", help="start a new cluster here")] = False,
    address: Annotated[str | None, typer.Option(help="join the head at HOST:PORT")] = None,
    port: Annotated[int, typer.Option(help="head port")] = 6379,
    block: Annotated[bool, typer.Option(help="stay in the foreground (containers)")] = False,
    dry_run: Annotated[bool, typer.Option(help="print the ray start command only")] = False,
) -> None:
    """`ray start` with this node's detected accelerators as Ray resources and labels. A worker
    asks the head first (as `harness run --address` does; not with --dry-run, which only prints)."""
    import os
    import shlex
    import subprocess

    from harness.run import auth, node

    if head == bool(address):
        raise UserInputError("give exactly one of --head or --address HOST:PORT", field="node")
    problem = node.port_problem(port) if head else None
    if problem:  # before `ray start`, whose own refusal is a traceback
        raise UserInputError(f"{problem}; choose another (the default is 6379)", field="--port")
    if address:
        node.head_address(address)  # HOST:PORT, or one line: never printed as a command
        if not dry_run:
            node.reachable(address)  # a head that is not there: one line, not Ray's long wait
    auth.require_token_mode()
    if head and not dry_run:
        auth.ensure_token()
    if address:
        auth.require_token_to_join(address)
    inventory = node.detect()
    argv = node.start_command(head, address, inventory, port=port, block=block)
    console.print(shown(shlex.join(argv)), highlight=False, soft_wrap=True)
    if head:
        for line in auth.join_instructions(f"{node.this_host_address()}:{port}"):
            console.print(line, highlight=False, soft_wrap=True, markup=False)
    if dry_run:
        return
    if block:
        os.execvp(argv[0], argv)
    raise typer.Exit(subprocess.run(argv, check=False).returncode)


@app.command()
@friendly
def doctor() -> None:
    """What this machine offers the harness: accelerators, engines, versions."""
    import importlib.util
    import shutil

    from harness.run import node, provenance

    inventory = node.detect()
    table = Table(title="harness doctor")
    table.add_column("check")
    table.add_column("found", overflow="fold")
    table.add_row(
        "accelerator", f"{inventory.vendor} × {inventory.gpu_count} {inventory.gpu_names}"
    )
    table.add_row("catalog GPU", str(inventory.catalog_gpu))
    table.add_row("Ray resources", json.dumps(node.ray_resources(inventory)))
    for name in ("torch", "transformers", "bitsandbytes", "optimum-quanto", "gptqmodel",
                 "ray", "nvidia-ml-py", "amdsmi"):  # fmt: skip
        table.add_row(name, provenance.package_version(name) or "[yellow]not installed[/]")
    table.add_row("vLLM build", provenance.vllm_build() or "[yellow]not installed[/]")
    table.add_row("vllm importable", str(importlib.util.find_spec("vllm") is not None))
    table.add_row("chromium (browser test)", shutil.which("chromium") or "[yellow]absent[/]")
    table.add_row("git SHA", str(provenance.git_sha()))
    console.print(table)


def _register_result_commands() -> None:
    from harness.cli import results

    for name, fn in (
        ("aggregate", results.aggregate_cmd),
        ("report", results.report_cmd),
        ("compare", results.compare_cmd),
        ("site", results.site_cmd),
    ):
        app.command(name)(friendly(fn))


_register_result_commands()


def _register_pull() -> None:
    from harness.cli import pull

    app.command("pull")(friendly(pull.pull))


_register_pull()


def _register_projection() -> None:
    from harness.cli import ledger, projection

    ledger_app = typer.Typer(
        cls=ledger.LedgerGroup,
        help="The projection's error ledger: fit it on an external CSV (the default), or check "
        "a ledger's bands on held-out measurements.",
    )
    ledger_app.command(ledger.DEFAULT_COMMAND)(friendly(projection.ledger_cmd))
    ledger_app.command("check")(friendly(ledger.check_cmd))
    app.add_typer(ledger_app, name="ledger")
    app.command("rent")(friendly(projection.rent_cmd))


_register_projection()


def _register_tariffs() -> None:
    from harness.cli import tariffs

    tariffs.tariffs_app.command("import")(friendly(tariffs.import_cmd))
    tariffs.tariffs_app.command("verdicts")(friendly(tariffs.verdicts_cmd))
    tariffs.tariffs_app.command("history")(friendly(tariffs.history_cmd))
    app.add_typer(tariffs.tariffs_app, name="tariffs")


_register_tariffs()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
