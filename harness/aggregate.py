"""From result rows (and tariffs) to the tables people pay for: cost per package at equal quality.

Everything here is vectorised pandas/numpy over one frame of rows (a million rows aggregate in a
few seconds on two cores; ``make perf`` measures it). The formulas, stated once:

Equal-quality gate (MLPerf-style classes), per model against its reference row(s) of the same run
(``is_reference``; backend-independent; the reference measured on the same target is preferred,
else any reference of the model in the run; several reference rows → their median):

    class 99   ⇔  ppl ≤ ppl_ref / 0.99    and (when both are present) arc_acc ≥ 0.99 × arc_acc_ref
    class 99.9 ⇔  ppl ≤ ppl_ref / 0.999   and (when both are present) arc_acc ≥ 0.999 × arc_acc_ref

The paired bootstrap 95 % CI of the per-window NLL difference (``dnll_ci_low/high``, nats/token,
measured by the worker) is carried next to the class, also as a perplexity change in per cent:
``dppl_pct = (exp(dnll) − 1) × 100``.

Cost of one row on one tariff package (a node of ``gpus_in_package`` cards for ``days`` days at
utilisation ``u``; the row needs ``gpus_used`` cards and runs ``gpus_in_package ÷ gpus_used``
replicas)::

    usd_per_mtok = (package_price ÷ (days × 24) ÷ u) × gpus_used ÷ gpus_in_package
                   ÷ (tok_s × 3600) × 10⁶          (decode tok/s → output; total tok/s → total)
    tokens_per_package    = tok_s × 3600 × days × 24 × u × (gpus_in_package ÷ gpus_used)
    breakeven_utilisation = package_price ÷ (hourly_usd × days × 24)

Hourly billing charges only the hours used (``hourly × days × 24 × u``), so the package is the
cheaper choice exactly when ``u > breakeven_utilisation``.

Rows priced: status ``ok``, a positive ``decode_tok_s`` not above ``roofline_decode_tok_s`` (a
row above its roofline ceiling is a measurement error: flagged, counted, never priced), and only
against tariffs of the row's own ``gpu``. Every other row is counted in ``Aggregate.counts``.
"""

from __future__ import annotations

import itertools
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.errors import UserInputError
from harness.schema import ResultRow
from harness.store import read_rows
from harness.tariffs import HOURS_PER_DAY, TariffTable

QUALITY_CLASSES: dict[str, float] = {"99": 0.99, "99.9": 0.999}
POINT_FIELDS = (
    "model",
    "revision",
    "backend",
    "quantization",
    "kv_cache_dtype",
    "batch",
    "context",
    "output_tokens",
    "target",
)
AXES = ("quantization", "kv_cache_dtype", "batch", "context")
EFFECT_METRICS = ("decode_tok_s", "peak_mib_decode", "ppl")
STRATUM = ("model", "device")

COST_COLUMNS = [
    "model",
    "quality_class",
    "gpu",
    "provider",
    "package_days",
    "package_price_usd",
    "gpus_in_package",
    "gpus_used",
    "utilisation",
    "backend",
    "quantization",
    "kv_cache_dtype",
    "batch",
    "context",
    "output_tokens",
    "target",
    "decode_tok_s",
    "total_tok_s",
    "usd_per_mtok_output",
    "usd_per_mtok_total",
    "usd_per_mtok_output_hourly",
    "tokens_per_package",
    "total_tokens_per_package",
    "breakeven_utilisation",
    "package_beats_hourly",
    "hourly_usd",
    "ppl",
    "ppl_ref",
    "quality_pct",
    "dnll_vs_ref",
    "dnll_ci_low",
    "dnll_ci_high",
    "dppl_pct",
    "dppl_pct_ci_low",
    "dppl_pct_ci_high",
    "pass_99",
    "pass_99_9",
    "tpot_ms_p50",
    "peak_mib_decode",
    "package_rule",
    "tariff_example",
    "key",
]


INT_COLUMNS = ("batch", "context", "output_tokens", "repeats", "seed", "schema_version")


def _column_kinds() -> tuple[list[str], list[str]]:
    """(float, bool) columns of a ResultRow, read from the schema: an optional int is a float
    column here (NaN = not measured); the plain ints are INT_COLUMNS; the rest is text."""
    floats: list[str] = []
    bools: list[str] = []
    for name, info in ResultRow.model_fields.items():
        ann = info.annotation
        args = set(typing.get_args(ann)) if isinstance(ann, types.UnionType) else {ann}
        args.discard(type(None))
        if ann is bool:
            bools.append(name)
        elif args == {bool}:
            continue  # an optional flag keeps None (unknown) next to True/False
        elif args and args <= {float, int} and name not in INT_COLUMNS:
            floats.append(name)
    return floats, bools


FLOAT_COLUMNS, BOOL_COLUMNS = _column_kinds()


@dataclass
class Aggregate:
    """Every table of one aggregation; ``points`` keeps every row, priced or not."""

    points: pd.DataFrame
    cost: pd.DataFrame
    cheapest: pd.DataFrame
    gpu_ratios: pd.DataFrame
    pareto_cost_quality: pd.DataFrame
    pareto_throughput_latency: pd.DataFrame
    main_effects: pd.DataFrame
    interactions: pd.DataFrame
    utilisation: float
    counts: dict[str, Any] = field(default_factory=dict)
    unreadable: list[tuple[str, str]] = field(default_factory=list)


# --- rows → frame -----------------------------------------------------------------------------


def frame_from_rows(rows: Iterable[ResultRow]) -> pd.DataFrame:
    """One column per ResultRow field; provenance flattened as ``provenance_<field>``."""
    records = []
    for row in rows:
        data = row.model_dump()
        provenance = data.pop("provenance") or {}
        data.update({f"provenance_{k}": v for k, v in provenance.items()})
        records.append(data)
    return normalise(pd.DataFrame.from_records(records))


def normalise(frame: pd.DataFrame) -> pd.DataFrame:
    """Every schema column present with one dtype: floats float64, flags bool, ints int64."""
    out = frame.copy()
    n = len(out)
    for name in FLOAT_COLUMNS:
        if name not in out:
            out[name] = np.full(n, np.nan)
        elif out[name].dtype != np.float64:
            out[name] = pd.to_numeric(out[name], errors="coerce").astype(np.float64)
    for name in BOOL_COLUMNS:
        if name not in out:
            out[name] = np.zeros(n, dtype=bool)
        elif out[name].dtype != bool:
            out[name] = out[name].fillna(False).astype(bool)
    for name in INT_COLUMNS:
        if name in out and out[name].dtype != np.int64:
            out[name] = pd.to_numeric(out[name], errors="coerce").fillna(0).astype(np.int64)
    for name in (*POINT_FIELDS, "status", "gpu", "run", "key"):
        if name not in out:
            out[name] = pd.Series([None] * n, dtype="object", index=out.index)
    return out


def load_run(run_dir: Path) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """The run's rows as a frame, and every unreadable point file with why (named, skipped)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserInputError("run folder not found", file=str(run_dir))
    rows, bad = read_rows(run_dir)
    if not rows and not bad:
        raise UserInputError("no point files under points/ (is this a run folder?)", file=str(run_dir))
    return frame_from_rows(rows), [(str(path), why) for path, why in bad]


# --- the pipeline -----------------------------------------------------------------------------


def check_utilisation(utilisation: float) -> float:
    if not 0 < utilisation <= 1:
        raise UserInputError(
            f"utilisation must be in (0, 1], got {utilisation!r} (0.5 = the node is busy half of "
            "the package's hours)",
            field="utilisation",
        )
    return float(utilisation)


def aggregate(
    frame: pd.DataFrame,
    tariffs: TariffTable | None = None,
    utilisation: float = 1.0,
    unreadable: Sequence[tuple[str, str]] = (),
) -> Aggregate:
    """All tables from one frame of rows (see the module docstring for every formula)."""
    utilisation = check_utilisation(utilisation)
    points = quality_gate(flag_rows(normalise(frame)))
    cost = cost_table(points, tariffs, utilisation)
    cheapest = cheapest_passing(cost)
    counts = _counts(points, cost, unreadable)
    return Aggregate(
        points=points,
        cost=cost,
        cheapest=cheapest,
        gpu_ratios=gpu_ratios(cheapest),
        pareto_cost_quality=pareto_cost_quality(cost),
        pareto_throughput_latency=pareto_throughput_latency(points),
        main_effects=main_effects(points),
        interactions=interactions(points),
        utilisation=utilisation,
        counts=counts,
        unreadable=list(unreadable),
    )


def aggregate_run(
    run_dir: Path, tariffs: TariffTable | None = None, utilisation: float = 1.0
) -> Aggregate:
    frame, bad = load_run(run_dir)
    return aggregate(frame, tariffs, utilisation, bad)


def flag_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """``device`` (catalog GPU, else target), the roofline flag, and whether a row may be priced."""
    out = frame
    out["device"] = out["gpu"].astype("object").where(out["gpu"].notna(), out["target"])
    decode = out["decode_tok_s"].to_numpy()
    roof = out["roofline_decode_tok_s"].to_numpy()
    with np.errstate(invalid="ignore"):
        out["exceeds_roofline"] = (decode > roof) & ~np.isnan(roof)
        measured = (out["status"] == "ok").to_numpy(dtype=bool) & (decode > 0)
    out["cost_eligible"] = measured & ~out["exceeds_roofline"].to_numpy()
    return out


def _reference_values(frame: pd.DataFrame, column: str) -> np.ndarray:
    """Per row: the median ``column`` of its model's reference rows (same target preferred)."""
    refs = frame.loc[
        frame["is_reference"] & (frame["status"] == "ok") & frame[column].notna(),
        ["run", "model", "target", column],
    ]
    n = len(frame)
    if refs.empty:
        return np.full(n, np.nan)
    run = frame["run"].astype("object").fillna("")
    refs = refs.assign(run=refs["run"].astype("object").fillna(""))
    by_target = refs.groupby(["run", "model", "target"], sort=False)[column].median()
    by_model = refs.groupby(["run", "model"], sort=False)[column].median()
    idx3 = pd.MultiIndex.from_arrays([run, frame["model"], frame["target"]])
    idx2 = pd.MultiIndex.from_arrays([run, frame["model"]])
    same_target = by_target.reindex(idx3).to_numpy(dtype=np.float64)
    any_target = by_model.reindex(idx2).to_numpy(dtype=np.float64)
    return np.where(np.isnan(same_target), any_target, same_target)


def quality_gate(frame: pd.DataFrame) -> pd.DataFrame:
    """Adds ppl_ref, arc_acc_ref, quality_pct, pass_99, pass_99_9, quality_class, dppl_pct (+CI)."""
    out = frame
    ppl = out["ppl"].to_numpy()
    ppl_ref = _reference_values(out, "ppl")
    arc = out["arc_acc"].to_numpy()
    arc_ref = _reference_values(out, "arc_acc")
    out["ppl_ref"] = ppl_ref
    out["arc_acc_ref"] = arc_ref
    with np.errstate(invalid="ignore", divide="ignore"):
        out["quality_pct"] = ppl_ref / ppl * 100
        arc_known = ~np.isnan(arc) & ~np.isnan(arc_ref)
        for name, level in QUALITY_CLASSES.items():
            ppl_ok = ppl <= ppl_ref / level  # False when either is NaN
            arc_ok = ~arc_known | (arc >= level * arc_ref)
            out[f"pass_{name.replace('.', '_')}"] = ppl_ok & arc_ok
    known = ~np.isnan(ppl) & ~np.isnan(ppl_ref)
    out["quality_class"] = np.select(
        [out["pass_99_9"].to_numpy(), out["pass_99"].to_numpy(), known],
        ["99.9", "99", "below"],
        default="unknown",
    )
    for suffix in ("", "_ci_low", "_ci_high"):
        source = "dnll_vs_ref" if not suffix else f"dnll{suffix}"
        out[f"dppl_pct{suffix}"] = np.expm1(out[source].to_numpy()) * 100
    return out


def cost_table(
    points: pd.DataFrame, tariffs: TariffTable | None, utilisation: float
) -> pd.DataFrame:
    """One row per (priced row, tariff of its GPU, package); see the module docstring."""
    packages = pd.DataFrame(tariffs.package_rows() if tariffs else [])
    if packages.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in COST_COLUMNS})
    wanted = [
        c
        for c in [*COST_COLUMNS, "gpus_used"]
        if c in points.columns and (c == "gpu" or c not in packages.columns)
    ]
    eligible = points.loc[
        points["cost_eligible"] & points["gpu"].isin(packages["gpu"].unique()), wanted
    ]
    table = eligible.merge(packages, on="gpu", how="inner", sort=False)
    if "gpus_used" not in table:
        table["gpus_used"] = 1
    table = table[table["gpus_used"] <= table["gpus_in_package"]]
    hours = table["package_days"].to_numpy(dtype=np.float64) * HOURS_PER_DAY
    price = table["package_price_usd"].to_numpy(dtype=np.float64)
    share = table["gpus_used"].to_numpy(dtype=np.float64) / table["gpus_in_package"].to_numpy(
        dtype=np.float64
    )
    decode = table["decode_tok_s"].to_numpy()
    total = table["total_tok_s"].to_numpy()
    usd_per_hour = price / hours / utilisation * share
    with np.errstate(invalid="ignore", divide="ignore"):
        table["usd_per_mtok_output"] = usd_per_hour / (decode * 3600) * 1e6
        table["usd_per_mtok_total"] = np.where(total > 0, usd_per_hour / (total * 3600) * 1e6, np.nan)
        hourly = table["hourly_usd"].to_numpy()
        table["usd_per_mtok_output_hourly"] = hourly * share / (decode * 3600) * 1e6
        table["tokens_per_package"] = decode * 3600 * hours * utilisation / share
        table["total_tokens_per_package"] = total * 3600 * hours * utilisation / share
        table["breakeven_utilisation"] = price / (hourly * hours)
    table["package_beats_hourly"] = utilisation > table["breakeven_utilisation"]
    table["utilisation"] = utilisation
    return table.reset_index(drop=True)[[c for c in COST_COLUMNS if c in table]]


def cheapest_passing(cost: pd.DataFrame) -> pd.DataFrame:
    """The cheapest (decode $/Mtok) configuration per (model, class, GPU, package), with its
    ratio to the cheapest GPU of the same (model, class, package)."""
    parts = []
    keys = ["model", "gpu", "package_days"]
    for name in QUALITY_CLASSES:
        passing = cost[cost[f"pass_{name.replace('.', '_')}"].astype(bool)]
        if passing.empty:
            continue
        best = passing.loc[passing.groupby(keys, sort=False)["usd_per_mtok_output"].idxmin()]
        parts.append(best.assign(quality_class=name, achieved_class=best["quality_class"]))
    if not parts:
        return pd.DataFrame(columns=[*COST_COLUMNS, "achieved_class", "ratio_to_cheapest_gpu"])
    out = pd.concat(parts, ignore_index=True)
    floor = out.groupby(["model", "quality_class", "package_days"])["usd_per_mtok_output"]
    out["ratio_to_cheapest_gpu"] = out["usd_per_mtok_output"] / floor.transform("min")
    return out.sort_values(["model", "quality_class", "package_days", "usd_per_mtok_output"])


def gpu_ratios(cheapest: pd.DataFrame) -> pd.DataFrame:
    """Every ordered GPU pair at equal quality: cost_a ÷ cost_b (> 1: GPU a is dearer)."""
    cols = ["model", "quality_class", "package_days", "gpu", "usd_per_mtok_output"]
    if cheapest.empty:
        return pd.DataFrame(
            columns=["model", "quality_class", "package_days", "gpu_a", "gpu_b",
                     "usd_per_mtok_a", "usd_per_mtok_b", "cost_ratio_a_over_b"]
        )  # fmt: skip
    small = cheapest[cols]
    pairs = small.merge(small, on=["model", "quality_class", "package_days"], suffixes=("_a", "_b"))
    pairs = pairs[pairs["gpu_a"] != pairs["gpu_b"]].rename(
        columns={
            "usd_per_mtok_output_a": "usd_per_mtok_a",
            "usd_per_mtok_output_b": "usd_per_mtok_b",
        }
    )
    pairs["cost_ratio_a_over_b"] = pairs["usd_per_mtok_a"] / pairs["usd_per_mtok_b"]
    return pairs.reset_index(drop=True)


# --- Pareto fronts ----------------------------------------------------------------------------


def pareto_mask(
    frame: pd.DataFrame, groups: Sequence[str], x: str, y: str, *, maximise_y: bool = False
) -> np.ndarray:
    """True for the rows on the front of each group: minimal x, and minimal (or maximal) y.

    Sort by (group, x, better y first); a row is on the front when its y beats every y before
    it in its group. Done in one pass: y is turned into a dense rank offset by the group number,
    so a single running maximum never crosses a group boundary.
    """
    n = len(frame)
    if n == 0:
        return np.zeros(0, dtype=bool)
    xv = frame[x].to_numpy(dtype=np.float64)
    yv = frame[y].to_numpy(dtype=np.float64)
    valid = ~np.isnan(xv) & ~np.isnan(yv)
    codes = [pd.factorize(frame[g].astype("object").fillna(""))[0] for g in groups]
    group = np.zeros(n, dtype=np.int64)
    for c in codes:
        group = group * (int(c.max()) + 1) + c
    group = np.where(valid, group, -1)
    goodness = yv if maximise_y else -yv  # larger is better
    rank = np.unique(np.where(valid, goodness, 0), return_inverse=True)[1].astype(np.int64)
    order = np.lexsort((-rank, xv, group))  # last key sorts first
    offset = (pd.factorize(group[order])[0]).astype(np.int64) * (int(rank.max()) + 2)
    score = rank[order] + offset
    running = np.maximum.accumulate(score)
    before = np.concatenate(([-1], running[:-1]))
    on_front = score > before
    mask = np.zeros(n, dtype=bool)
    mask[order] = on_front
    return mask & valid


def pareto_cost_quality(cost: pd.DataFrame) -> pd.DataFrame:
    """Per (model, package): the configurations no other beats on both $/Mtok (out) and ppl."""
    cols = ["model", "package_days", "gpu", "provider", "backend", "quantization",
            "kv_cache_dtype", "batch", "context", "target", "usd_per_mtok_output", "ppl",
            "quality_class", "dnll_ci_low", "dnll_ci_high"]  # fmt: skip
    if cost.empty:
        return pd.DataFrame(columns=cols)
    priced = cost.loc[cost["ppl"].notna(), cols]
    mask = pareto_mask(priced, ["model", "package_days"], "usd_per_mtok_output", "ppl")
    front = priced[mask]
    return front.sort_values(["model", "package_days", "usd_per_mtok_output"]).reset_index(drop=True)


def pareto_throughput_latency(points: pd.DataFrame) -> pd.DataFrame:
    """Per (model, device): the points no other beats on both decode tok/s (max) and TPOT (min)."""
    cols = ["model", "device", "backend", "quantization", "kv_cache_dtype", "batch", "context",
            "decode_tok_s", "tpot_ms_p50", "key"]  # fmt: skip
    ok = points.loc[points["cost_eligible"] & points["tpot_ms_p50"].notna(), cols]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    mask = pareto_mask(ok, ["model", "device"], "tpot_ms_p50", "decode_tok_s", maximise_y=True)
    return ok[mask].sort_values(["model", "device", "tpot_ms_p50"]).reset_index(drop=True)


# --- factor effects ---------------------------------------------------------------------------


def _measured(points: pd.DataFrame) -> pd.DataFrame:
    ok = points["cost_eligible"] | ((points["status"] == "ok") & points["decode_tok_s"].isna())
    return points.loc[ok, [*STRATUM, *AXES, *EFFECT_METRICS]]


def main_effects(points: pd.DataFrame) -> pd.DataFrame:
    """Per (model, device) and axis: each level's mean of every metric minus the mean over the
    axis's levels (a level effect: how far that level moves the metric from the axis average)."""
    data = _measured(points)
    parts = []
    for axis in AXES:
        cells = data.groupby([*STRATUM, axis], sort=True, observed=True)[list(EFFECT_METRICS)]
        means = cells.mean()
        counts = cells.count()
        if means.empty:
            continue
        base = means.groupby(level=list(STRATUM)).transform("mean")
        effect = means - base
        levels = means.index.get_level_values(axis)
        for metric in EFFECT_METRICS:
            parts.append(
                pd.DataFrame(
                    {
                        "model": means.index.get_level_values("model"),
                        "device": means.index.get_level_values("device"),
                        "axis": axis,
                        "level": [str(v) for v in levels],
                        "metric": metric,
                        "mean": means[metric].to_numpy(),
                        "effect": effect[metric].to_numpy(),
                        "n": counts[metric].to_numpy(),
                    }
                )
            )
    cols = ["model", "device", "axis", "level", "metric", "mean", "effect", "n"]
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)
    return out[out["n"] > 0].reset_index(drop=True)


def interactions(points: pd.DataFrame) -> pd.DataFrame:
    """Two-way interactions per (model, device), only where the pair's grid is complete.

    From the cell means m[a, b] (every level pair measured): interaction = m[a, b] − m[a, ·] −
    m[·, b] + m[·, ·], the margins being means of cell means. Zero everywhere ⇔ additive effects.
    """
    data = _measured(points)
    cols = ["model", "device", "axis_a", "level_a", "axis_b", "level_b", "metric", "cell_mean",
            "interaction"]  # fmt: skip
    parts = []
    for a, b in itertools.combinations(AXES, 2):
        for metric in EFFECT_METRICS:
            cells = data.groupby([*STRATUM, a, b], sort=True, observed=True)[metric].mean().dropna()
            if cells.empty:
                continue
            frame = cells.rename("cell_mean").reset_index()
            per = frame.groupby(list(STRATUM), sort=False)
            n_a = per[a].transform("nunique")
            n_b = per[b].transform("nunique")
            n_cells = per["cell_mean"].transform("size")
            complete = (n_cells == n_a * n_b) & (n_a > 1) & (n_b > 1)
            frame = frame[complete.to_numpy()]
            if frame.empty:
                continue
            margin_a = frame.groupby([*STRATUM, a])["cell_mean"].transform("mean")
            margin_b = frame.groupby([*STRATUM, b])["cell_mean"].transform("mean")
            grand = frame.groupby(list(STRATUM))["cell_mean"].transform("mean")
            parts.append(
                pd.DataFrame(
                    {
                        "model": frame["model"].to_numpy(),
                        "device": frame["device"].to_numpy(),
                        "axis_a": a,
                        "level_a": frame[a].astype(str).to_numpy(),
                        "axis_b": b,
                        "level_b": frame[b].astype(str).to_numpy(),
                        "metric": metric,
                        "cell_mean": frame["cell_mean"].to_numpy(),
                        "interaction": (frame["cell_mean"] - margin_a - margin_b + grand).to_numpy(),
                    }
                )
            )
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)


# --- counts -----------------------------------------------------------------------------------


def _counts(
    points: pd.DataFrame, cost: pd.DataFrame, unreadable: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    status = points["status"].astype("object").fillna("unknown").value_counts()
    eligible = points["cost_eligible"].to_numpy()
    priced = eligible & points["gpu"].isin(cost["gpu"].dropna().unique()).to_numpy()
    refs = points.loc[points["is_reference"] & points["ppl"].notna(), "model"].unique()
    models = points["model"].dropna().unique()
    return {
        "rows": len(points),
        "by_status": {str(k): int(v) for k, v in status.items()},
        "excluded_not_ok": int((points["status"] != "ok").sum()),
        "flagged_above_roofline": int(points["exceeds_roofline"].sum()),
        "eligible_for_cost": int(eligible.sum()),
        "priced_rows": int(priced.sum()),
        "eligible_without_tariff": int(eligible.sum() - priced.sum()),
        "cost_rows": len(cost),
        "unreadable_files": len(unreadable),
        "models_without_reference": sorted(str(m) for m in set(models) - set(refs)),
    }
