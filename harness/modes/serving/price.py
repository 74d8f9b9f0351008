"""Serving rows (mode: serving) → throughput at the latency SLO, priced per package.

Formulas, stated once:

- Quality: a serving row inherits its configuration's verdict (``quality_class``, ``pass_99``,
  ``pass_99_9``, ``ppl``, ``dppl_pct``) from the offline rows of the same run and group (same
  model, revision, weights, backend, quantization, KV dtype and target): the server runs the
  configuration those rows measured. The equal-quality gate is the offline one, unchanged.
- At the SLO, per configuration (run, group): the level ``harness.modes.serving.slo.choose_at_slo``
  chooses against the configuration's ``slo_attainment_target`` (the scenario's ``attainment``):
  the rule is stated there, once; none when no level qualifies.
- ``usd_per_mtok_output_at_slo`` = the package's cost per hour of one card of a node
  (harness.results.pricing.package_usd_per_hour) ÷ (output_tok_s at the SLO × 3600) × 10⁶
  (harness.results.pricing.usd_per_mtok), beside the offline ``usd_per_mtok_output`` in cost.csv
  (one figure per configuration and package).
- ``j_per_mtok_output_at_slo`` = the chosen level's ``j_per_token_serving`` × 10⁶: the device's
  joules per million output tokens over that level's load window (NaN where not measured).
- ``cheapest_at_slo``: per (model, quality class, GPU, package) the configuration with the lowest
  ``usd_per_mtok_output_at_slo`` among those that pass the class
  (harness.results.pricing.cheapest_by_class).

This module is the mode's `price` part (``price``; the contract: harness.modes.base.PricePart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from harness.modes.serving import slo
from harness.results.columns import ENGINE_WEIGHTS_KV, PRICED_ON
from harness.results.pricing import (
    PASS_COLUMNS,
    VERDICT_COLUMNS,
    cheapest_by_class,
    package_hour,
    pass_column,
    usd_per_mtok,
)

QUALITY_COLUMNS = (
    "quality_class", *VERDICT_COLUMNS, *PASS_COLUMNS, "ppl", "ppl_ref", "dppl_pct",
)  # fmt: skip
CONFIG_COLUMNS = ("run", "group", "model", "weights", *ENGINE_WEIGHTS_KV, "target", "gpu", "device")
# a configuration's level at the SLO and its output tok/s there (every at-SLO table leads with them)
AT_SLO = ("level_at_slo", "output_tok_s_at_slo")
AT_SLO_COLUMNS = [
    *CONFIG_COLUMNS,
    *QUALITY_COLUMNS,
    *AT_SLO,
    "goodput_rps_at_slo",
    "slo_attainment_at_slo",
    "j_per_mtok_output_at_slo",
    "levels_measured",
    "levels_meeting_slo",
    "key_at_slo",
]
CHEAPEST_AT_SLO_COLUMNS = [
    "model",
    "quality_class",
    *PRICED_ON,
    *ENGINE_WEIGHTS_KV,
    *AT_SLO,
    "usd_per_mtok_output_at_slo",
    "j_per_mtok_output_at_slo",
    "achieved_class",
    "dppl_pct",
    "key_at_slo",
]


def level_label(concurrency: object, rate: object) -> str:
    if isinstance(concurrency, (int, float)) and not pd.isna(concurrency):
        return f"concurrency {int(concurrency)}"
    if isinstance(rate, (int, float)) and not pd.isna(rate):
        return f"{float(rate):g} requests/s"
    return ""


def inherit_quality(serving: pd.DataFrame, offline: pd.DataFrame) -> pd.DataFrame:
    """Serving rows with their configuration's quality verdict from its offline rows (same run
    and group; the first offline row with a known class, else unknown)."""
    out = serving.drop(columns=[c for c in QUALITY_COLUMNS if c in serving.columns])
    if out.empty:
        return out.copy().assign(**{c: pd.Series(dtype="object") for c in QUALITY_COLUMNS})
    have = [c for c in QUALITY_COLUMNS if c in offline.columns]
    if offline.empty or "quality_class" not in have:
        verdict = pd.DataFrame(columns=["run", "group", *have])
    else:
        known = offline[offline["quality_class"].astype("object") != "unknown"]
        verdict = known.drop_duplicates(["run", "group"])[["run", "group", *have]]
        verdict = verdict.assign(quality_class=verdict["quality_class"].astype("object"))
    merged = out.merge(verdict, on=["run", "group"], how="left", sort=False)
    for c in QUALITY_COLUMNS:
        if c not in merged.columns:
            merged[c] = np.nan
    merged["quality_class"] = merged["quality_class"].astype("object").fillna("unknown")
    for c in PASS_COLUMNS:
        merged[c] = merged[c].astype("object").fillna(False).astype(bool)
    merged["level"] = [
        level_label(c, r)
        for c, r in zip(merged["concurrency"], merged["request_rate"], strict=True)
    ]
    return merged


@dataclass(frozen=True)
class Level:
    """One serving row as the choice at the SLO reads a level (slo.LevelFigures; NaN → None)."""

    status: str
    output_tok_s: float | None
    slo_attainment: float | None
    position: int  # the row's position in its configuration's rows


def _number(value: Any) -> float | None:
    out = pd.to_numeric(value, errors="coerce")
    return None if pd.isna(out) else float(out)


def levels(rows: pd.DataFrame) -> list[Level]:
    """A configuration's serving rows as levels, in row order."""
    figures = zip(rows["status"], rows["output_tok_s"], rows["slo_attainment"], strict=True)
    return [
        Level(str(status), _number(tok_s), _number(attained), i)
        for i, (status, tok_s, attained) in enumerate(figures)
    ]


def at_slo(serving: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (run, group) with serving rows: its level at the SLO."""
    if serving.empty:
        return pd.DataFrame(columns=AT_SLO_COLUMNS)
    records = [
        _at_slo_record(rows)
        for _, rows in serving.groupby(["run", "group"], sort=False, dropna=False)
    ]
    return pd.DataFrame.from_records(records, columns=AT_SLO_COLUMNS)


def _at_slo_record(rows: pd.DataFrame) -> dict[str, Any]:
    """One configuration's AT_SLO_COLUMNS; the target attainment is the scenario's, one per
    configuration (its first row's)."""
    first = rows.iloc[0]
    record: dict[str, Any] = {c: first.get(c) for c in (*CONFIG_COLUMNS, *QUALITY_COLUMNS)}
    target = _number(first.get("slo_attainment_target"))
    target = np.nan if target is None else target
    measured = levels(rows)
    record["levels_measured"] = int((rows["status"] == "ok").sum())
    record["levels_meeting_slo"] = sum(slo.qualifies(level, target) for level in measured)
    chosen = slo.choose_at_slo(measured, target)
    if chosen is None:
        record.update(
            level_at_slo=None,
            output_tok_s_at_slo=np.nan,
            goodput_rps_at_slo=np.nan,
            slo_attainment_at_slo=np.nan,
            j_per_mtok_output_at_slo=np.nan,
            key_at_slo=None,
        )
        return record
    best = rows.iloc[chosen.position]
    record.update(
        level_at_slo=best["level"],
        output_tok_s_at_slo=float(best["output_tok_s"]),
        goodput_rps_at_slo=float(best["goodput_rps"]),
        slo_attainment_at_slo=float(best["slo_attainment"]),
        j_per_mtok_output_at_slo=per_mtok(best.get("j_per_token_serving")),
        key_at_slo=best["key"],
    )
    return record


def per_mtok(per_token: object) -> float:
    """A per-token figure × 10⁶; NaN when it is missing."""
    value = _number(per_token)
    return np.nan if value is None else value * 1e6


def chosen_keys(table: pd.DataFrame) -> set[str]:
    return {str(k) for k in table["key_at_slo"].dropna()}


def at_slo_packages(at: pd.DataFrame, packages: pd.DataFrame) -> pd.DataFrame:
    """Every configuration with a level at the SLO × each package of its GPU (``price_at_slo``
    prices them)."""
    finite: NDArray[np.bool_] = np.isfinite(at["output_tok_s_at_slo"].to_numpy(dtype=np.float64))
    rows = at.loc[finite & at["gpu"].notna().to_numpy(dtype=bool)]
    if rows.empty or packages.empty:
        return pd.DataFrame(columns=[*at.columns, *packages.columns])
    return rows.merge(packages, on="gpu", how="inner", sort=False).reset_index(drop=True)


def price_at_slo(table: pd.DataFrame, utilisation: float) -> pd.DataFrame:
    """Configurations at their SLO level × packages (``at_slo_packages``), priced with the
    pricing formulas on ``output_tok_s_at_slo`` (one replica per card: gpus_used 1)."""
    out = table.copy()
    if out.empty:
        out["usd_per_mtok_output_at_slo"] = pd.Series(dtype="float64")
        return out
    usd_per_hour = package_hour(out, utilisation, gpus_used=1.0)
    tok_s = out["output_tok_s_at_slo"].to_numpy(dtype=np.float64)
    out["usd_per_mtok_output_at_slo"] = usd_per_mtok(usd_per_hour, tok_s)
    return out


def with_cost_at_slo(
    cost: pd.DataFrame, points: pd.DataFrame, priced: pd.DataFrame
) -> pd.DataFrame:
    """cost.csv's rows (offline configuration × package) with the configuration's figures at
    the SLO on the same package, placed right after ``usd_per_mtok_output``."""
    added = [
        "usd_per_mtok_output_at_slo",
        "j_per_mtok_output_at_slo",
        "output_tok_s_at_slo",
        "level_at_slo",
    ]
    out = cost.copy()
    if out.empty or priced.empty or "point_index" not in out.columns:
        for name in added:
            out[name] = pd.Series(np.nan if name != "level_at_slo" else None, index=out.index)
    else:
        where = out["point_index"].to_numpy(dtype=np.int64)
        ident = points[["run", "group"]].iloc[where].reset_index(drop=True)
        keys = out.assign(run=ident["run"].to_numpy(), group=ident["group"].to_numpy())
        figures = priced[["run", "group", "package_index", *added]]
        merged = keys.merge(figures, on=["run", "group", "package_index"], how="left", sort=False)
        for name in added:
            out[name] = merged[name].to_numpy()
    columns = list(cost.columns)
    at = columns.index("usd_per_mtok_output") + 1 if "usd_per_mtok_output" in columns else 0
    return out[[*columns[:at], *added, *columns[at:]]]


def cheapest_at_slo(priced: pd.DataFrame) -> pd.DataFrame:
    """Per (model, class, GPU, package): the configuration cheapest at the SLO that passes."""
    if priced.empty:
        return pd.DataFrame(columns=CHEAPEST_AT_SLO_COLUMNS)
    out = cheapest_by_class(
        lambda name: priced[priced[pass_column(name)].astype(bool)],
        ("model", "gpu", "package_index"),
        "usd_per_mtok_output_at_slo",
    )
    if out.empty:
        return pd.DataFrame(columns=CHEAPEST_AT_SLO_COLUMNS)
    out = out.sort_values(["model", "quality_class", "gpu", "package_days"])
    return out.reset_index(drop=True)[CHEAPEST_AT_SLO_COLUMNS]


# --- the mode's price part (harness.modes.base.PricePart) -------------------------------------


@dataclass(frozen=True)
class ServingPriced:
    """The serving tables, named as the ``Aggregate`` fields they fill: ``serving`` (the rows
    with their configuration's quality and level label), ``at_slo``, ``priced_at_slo``,
    ``cheapest_at_slo``."""

    tables: dict[str, pd.DataFrame]
    counts: dict[str, Any]

    def with_cost(self, cost: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
        return with_cost_at_slo(cost, points, self.tables["priced_at_slo"])


def price(
    rows: pd.DataFrame, points: pd.DataFrame, packages: pd.DataFrame, utilisation: float
) -> ServingPriced:
    """The serving rows' tables (see the module docstring); ``points``: the gated offline rows."""
    served = inherit_quality(rows, points)
    at = at_slo(served)
    priced = price_at_slo(at_slo_packages(at, packages), utilisation)
    by_status = served["status"].value_counts()
    return ServingPriced(
        tables={
            "serving": served,
            "at_slo": at,
            "priced_at_slo": priced,
            "cheapest_at_slo": cheapest_at_slo(priced),
        },
        counts={
            "serving_rows": len(served),
            "serving_by_status": {str(k): int(v) for k, v in by_status.items()},
        },
    )
