"""From result rows (and tariffs) to the tables people pay for: cost per package at equal quality.

The pipeline; each job is its own module, where its formulas are stated:

    rows ─► frame (normalise, flag, split by mode) ─► gate (reference rule, quality classes)
         ─► energy ─► pricing (cost, cheapest, GPU ratios) ─► pareto ─► effects ─► counts
    each mode with a `price` part (harness.modes.REGISTRY) ─► its own tables, from its rows and
    the gated offline points

Everything is vectorised pandas/numpy over one frame of rows (a million rows aggregate in a few
seconds on two cores; ``make perf`` measures it). Rows counted: every row is in ``points`` or in
its mode's table, priced or not, and every reason a row is not priced is in ``Aggregate.counts``.
``cost`` (every priced row × package, with each mode's columns or rows) is built when first read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from harness import modes
from harness.modes.base import Priced, PricePart
from harness.results import effects, gate, pareto, pricing
from harness.results import energy as en
from harness.results import frame as frames
from harness.results import regressions as reg
from harness.results.columns import CONFIGURATION, PEAK_MEMORY
from harness.run.store import read_manifest
from harness.spec.quality import GATE_METRICS, gate_names
from harness.spec.tariffs import TariffTable

SPEED_ONLY_COLUMNS = (
    "model", *CONFIGURATION, "output_tokens", "device", "prefill_tok_s", "decode_tok_s",
    "ttft_ms_p50", "tpot_ms_p50", *PEAK_MEMORY, "key",
)  # fmt: skip


@dataclass
class Aggregate:
    """Every table of one aggregation. ``points`` keeps every offline row, priced or not; the
    modes' tables are in ``tables`` (filled from each mode's `price` part: the part names them,
    its registry entry declares them), read with ``table(name)``.
    ``cost`` is built on first use, as it is the one table that grows with rows × packages and
    nothing else here needs it whole."""

    points: pd.DataFrame
    packages: pd.DataFrame
    cheapest: pd.DataFrame
    gpu_ratios: pd.DataFrame
    pareto_cost_quality: pd.DataFrame
    pareto_throughput_latency: pd.DataFrame
    main_effects: pd.DataFrame
    interactions: pd.DataFrame
    utilisation: float
    counts: dict[str, Any] = field(default_factory=dict)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    # per configuration vs its reference (harness.results.regressions); None: no run folder read
    regressions: reg.Regressions | None = None
    # each mode's tables, by the names its registry entry declares (harness.modes, Facts.tables;
    # what each holds: the mode's `price` part): read with ``result.table("at_slo")``; an empty
    # table where the run has none of that mode's rows
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    # n-gram overlap of what the models saw with what they are scored on (the run's manifest)
    leakage: list[dict[str, Any]] = field(default_factory=list)
    # what each mode's `price` part returned, in the registry's order (cost.csv's additions)
    modes: dict[str, Priced] = field(default_factory=dict)
    # the metrics the equal-quality verdict read (harness.results.gate), as the report states:
    # every run's together, and per run (rows of several runs: each gated as its own run)
    gated: tuple[str, ...] = GATE_METRICS
    gated_by_run: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame:
        """A mode's table (``tables``) by the name its registry entry declares, empty where the
        run has none of its rows; a name no mode declares is a KeyError naming the known ones."""
        known = modes.tables()
        if name not in known:
            raise KeyError(f"no mode declares a table {name!r}; known: {', '.join(known)}")
        return self.tables.setdefault(name, pd.DataFrame())

    @cached_property
    def cost(self) -> pd.DataFrame:
        cost = pricing.cost_table(self.points, self.packages, self.utilisation)
        for priced in self.modes.values():
            cost = priced.with_cost(cost, self.points)
        return cost

    @cached_property
    def speed_only(self) -> pd.DataFrame:
        """Measured rows on random weights: speed and memory, no quality, never priced."""
        ok = (self.points["status"] == "ok").to_numpy(dtype=bool)
        rows = frames.random_weights(self.points) & ok
        present = [c for c in SPEED_ONLY_COLUMNS if c in self.points.columns]
        return self.points.loc[rows, present].reset_index(drop=True)


def price_parts() -> dict[str, PricePart]:
    """The modes with a `price` part (their rows get their own tables), in the registry's order."""
    return {
        name: mode.load("price")
        for name, mode in modes.REGISTRY.items()
        if mode.ref("price") is not None
    }


def aggregate(
    frame: pd.DataFrame,
    tariffs: TariffTable | None = None,
    utilisation: float = 1.0,
    unreadable: Sequence[tuple[str, str]] = (),
    gated: gate.Gates = None,
) -> Aggregate:
    """All tables from one frame of rows (each module's docstring states its formulas);
    ``gated``: the metrics the equal-quality verdict reads (the scenario's ``quality.gate``; per
    run name for rows of several runs; None: every metric the rows scored, ``gate.Gates``)."""
    utilisation = pricing.check_utilisation(utilisation)
    parts = price_parts()
    points, by_mode = frames.split_modes(frames.flag_rows(frames.normalise(frame)), list(parts))
    codes = frames.Codes(points)
    by_run = gate.gates_by_run(points, gated)
    points = en.with_energy_columns(gate.quality_gate(points, codes, by_run), tariffs)
    packages = pricing.packages_frame(tariffs)
    cheapest = pricing.cheapest_passing(points, packages, utilisation, codes)
    factors = effects.Factors(points, codes)
    priced = {
        name: part(by_mode[name], points, packages, utilisation) for name, part in parts.items()
    }
    counts = _counts(points, packages, unreadable)
    for each in priced.values():
        counts.update(each.counts)
    result = Aggregate(
        points=points,
        packages=packages,
        cheapest=cheapest,
        gpu_ratios=pricing.gpu_ratios(cheapest),
        pareto_cost_quality=pareto.pareto_cost_quality(points, packages, utilisation, codes),
        pareto_throughput_latency=pareto.pareto_throughput_latency(points, codes),
        main_effects=effects.main_effects(points, factors),
        interactions=effects.interactions(points, factors),
        utilisation=utilisation,
        counts=counts,
        unreadable=list(unreadable),
        modes=priced,
        gated=tuple(m for m in GATE_METRICS if any(m in g for g in by_run.values())),
        gated_by_run=by_run,
    )
    return _with_mode_tables(result)


def _with_mode_tables(result: Aggregate) -> Aggregate:
    """Each mode's tables into ``Aggregate.tables`` (a table its registry entry does not declare
    is the mode's error: said, never dropped)."""
    for mode, priced in result.modes.items():
        unknown = set(priced.tables) - set(modes.get(mode).facts.tables)
        if unknown:
            raise ValueError(
                f"mode {mode!r} gives tables its registry entry does not declare: {unknown}"
            )
        result.tables.update(priced.tables)
    return result


def aggregate_run(
    run_dir: Path,
    tariffs: TariffTable | None = None,
    utilisation: float = 1.0,
    allow_mixed: bool = False,
) -> Aggregate:
    """``aggregate`` of a run folder (its rows admitted by harness.results.admission: foreign
    rows refused unless ``allow_mixed``), with its scenario mix, error analysis and leakage."""
    loaded = frames.read_run(Path(run_dir), allow_mixed)
    mixed = frames.scenario_mix(Path(run_dir), allow_mixed)
    result = aggregate(
        loaded.frame, tariffs, utilisation, loaded.unreadable, gated_metrics(Path(run_dir))
    )
    # foreign rows admitted by allow_mixed: counted, and each one stated where the report and
    # the CLI state the mix (the "rows from several scenarios" note)
    result.counts["mixed_rows"] = [{"file": f, "why": why} for f, why in loaded.mixed]
    result.counts["mixed_scenarios"] = [
        *mixed,
        *(f"{Path(f).name} admitted: {why}" for f, why in loaded.mixed),
    ]
    result.regressions = reg.analyse(Path(run_dir), result.points)
    result.leakage = frames.manifest_leakage(Path(run_dir))
    return result


def gated_metrics(run_dir: Path) -> tuple[str, ...] | None:
    """The metrics the run's scenario gates on (its manifest's last run entry); None where the
    manifest does not say (runs of an older harness: every metric their rows scored); an earlier
    gate name read as today's (``gate_names``: ``arc`` is ``tasks``)."""
    runs = read_manifest(run_dir).get("runs") or [{}]
    named = runs[-1].get("quality_gate") if isinstance(runs[-1], dict) else None
    if not isinstance(named, list) or not named:
        return None
    today = gate_names(map(str, named))
    return tuple(m for m in GATE_METRICS if m in today)


def _status_label(status: object) -> str:
    """A status as counted: its text, or "unknown" where a row has none (None, NaN, NA)."""
    missing = status is None or status is pd.NA or (isinstance(status, float) and status != status)
    return "unknown" if missing else str(status)


def _counts(
    points: pd.DataFrame, packages: pd.DataFrame, unreadable: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """The offline rows counted: by status, why not priced, which models lack a reference."""
    status = points["status"].value_counts(dropna=False)
    eligible = points["cost_eligible"].to_numpy(dtype=bool)
    priced = pricing.priceable(points, packages)
    with_ref = points.loc[points["ppl_ref"].notna(), "model"].unique()
    random = frames.random_weights(points)  # rows on random weights have no quality
    models = points.loc[~random, "model"].dropna().unique()
    return {
        "rows": len(points),
        "by_status": {_status_label(k): int(v) for k, v in status.items()},
        "excluded_not_ok": int((points["status"] != "ok").sum()),
        "flagged_above_roofline": int(points["exceeds_roofline"].sum()),
        "eligible_for_cost": int(eligible.sum()),
        "priced_rows": int(priced.sum()),
        "eligible_without_tariff": int(eligible.sum() - priced.sum()),
        "unreadable_files": len(unreadable),
        "random_weights_not_priced": int(random.sum()),
        "models_without_reference": sorted(str(m) for m in set(models) - set(with_ref)),
    }
