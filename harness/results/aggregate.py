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

import dataclasses
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
from harness.spec.scenario import GATE_METRICS
from harness.spec.tariffs import TariffTable

SPEED_ONLY_COLUMNS = (
    "model", *CONFIGURATION, "output_tokens", "device", "prefill_tok_s", "decode_tok_s",
    "ttft_ms_p50", "tpot_ms_p50", *PEAK_MEMORY, "key",
)  # fmt: skip


@dataclass
class Aggregate:
    """Every table of one aggregation. ``points`` keeps every offline row, priced or not; the
    modes' tables are named fields (filled from each mode's `price` part: the part names them).
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
    # mode serving: the rows with their configuration's quality; per configuration its level at
    # the SLO; that level priced per package; the cheapest per class and package
    serving: pd.DataFrame = field(default_factory=pd.DataFrame)
    at_slo: pd.DataFrame = field(default_factory=pd.DataFrame)
    priced_at_slo: pd.DataFrame = field(default_factory=pd.DataFrame)
    cheapest_at_slo: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the highest load meeting the SLO per search (× package); $/Mtok against tok/s/user per
    # level × package; the cheapest per interactivity band (harness.modes.serving.price)
    slo_search: pd.DataFrame = field(default_factory=pd.DataFrame)
    interactivity: pd.DataFrame = field(default_factory=pd.DataFrame)
    interactivity_bands: pd.DataFrame = field(default_factory=pd.DataFrame)
    # mode training: the rows with their gate against the full fine-tune; each priced per package
    training: pd.DataFrame = field(default_factory=pd.DataFrame)
    training_cost: pd.DataFrame = field(default_factory=pd.DataFrame)
    # n-gram overlap of what the models saw with what they are scored on (the run's manifest)
    leakage: list[dict[str, Any]] = field(default_factory=list)
    # what each mode's `price` part returned, in the registry's order (cost.csv's additions)
    modes: dict[str, Priced] = field(default_factory=dict)
    # the metrics the equal-quality verdict read (harness.results.gate), as the report states
    gated: tuple[str, ...] = GATE_METRICS

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
    gated: Sequence[str] = GATE_METRICS,
) -> Aggregate:
    """All tables from one frame of rows (each module's docstring states its formulas);
    ``gated``: the metrics the equal-quality verdict reads (the scenario's ``quality.gate``)."""
    utilisation = pricing.check_utilisation(utilisation)
    parts = price_parts()
    points, by_mode = frames.split_modes(frames.flag_rows(frames.normalise(frame)), list(parts))
    codes = frames.Codes(points)
    gated = gate.measured_gates(points, gated)
    points = en.with_energy_columns(gate.quality_gate(points, codes, gated), tariffs)
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
        gated=tuple(gated),
    )
    return _with_mode_tables(result)


def _with_mode_tables(result: Aggregate) -> Aggregate:
    """Each mode's tables into the ``Aggregate`` fields they name (a name without a field is a
    mode's error: said, never dropped)."""
    names = {f.name for f in dataclasses.fields(Aggregate)}
    for mode, priced in result.modes.items():
        unknown = set(priced.tables) - names
        if unknown:
            raise ValueError(f"mode {mode!r} gives tables Aggregate has no field for: {unknown}")
        for name, table in priced.tables.items():
            setattr(result, name, table)
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


def gated_metrics(run_dir: Path) -> tuple[str, ...]:
    """The metrics the run's scenario gates on (its manifest's last run entry), every metric
    where the manifest does not say (runs of an older harness)."""
    runs = read_manifest(run_dir).get("runs") or [{}]
    named = runs[-1].get("quality_gate")
    if not isinstance(named, list) or not named:
        return GATE_METRICS
    return tuple(m for m in GATE_METRICS if m in named)


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
