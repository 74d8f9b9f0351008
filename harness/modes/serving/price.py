"""Serving rows (mode: serving) → throughput at the latency SLO, priced per package.

Formulas, stated once:

- Quality: a serving row inherits its configuration's verdict (``quality_class``, ``pass_99``,
  ``pass_99_9``, ``ppl``, ``dppl_pct``) from the offline rows of the same run and group (same
  model, revision, weights, backend, quantization, KV dtype and target): the server runs the
  configuration those rows measured. The equal-quality gate is the offline one, unchanged.
- At the SLO, per configuration (run, group): the level with the highest ``output_tok_s`` among
  ``ok`` levels whose ``slo_attainment`` ≥ its ``slo_attainment_target`` (the scenario's
  ``attainment``); none when no level qualifies (harness.modes.serving.slo.choose_at_slo, same rule).
- ``usd_per_mtok_output_at_slo`` = the package's cost per hour of the row's share of a node
  (aggregate.package_usd_per_hour) ÷ (output_tok_s at the SLO × 3600) × 10⁶, beside the offline
  ``usd_per_mtok_output`` in cost.csv (one figure per configuration and package).
- ``j_per_mtok_output_at_slo`` = the chosen level's ``j_per_token_serving`` × 10⁶: the device's
  joules per million output tokens over that level's load window (NaN where not measured).
- ``cheapest_at_slo``: per (model, quality class, GPU, package) the configuration with the lowest
  ``usd_per_mtok_output_at_slo`` among those that pass the class.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import NDArray

QUALITY_COLUMNS = ("quality_class", "pass_99", "pass_99_9", "ppl", "ppl_ref", "dppl_pct")
CONFIG_COLUMNS = (
    "run",
    "group",
    "model",
    "weights",
    "backend",
    "quantization",
    "kv_cache_dtype",
    "target",
    "gpu",
    "device",
)
AT_SLO_COLUMNS = [
    *CONFIG_COLUMNS,
    *QUALITY_COLUMNS,
    "level_at_slo",
    "output_tok_s_at_slo",
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
    "gpu",
    "provider",
    "package_days",
    "package_price_usd",
    "gpus_in_package",
    "backend",
    "quantization",
    "kv_cache_dtype",
    "level_at_slo",
    "output_tok_s_at_slo",
    "usd_per_mtok_output_at_slo",
    "j_per_mtok_output_at_slo",
    "achieved_class",
    "dppl_pct",
    "key_at_slo",
]


def is_serving(frame: pd.DataFrame) -> NDArray[np.bool_]:
    """Rows with mode serving (frames without a mode column: none)."""
    if "mode" not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    serving: NDArray[np.bool_] = (frame["mode"] == "serving").to_numpy(dtype=bool)
    return serving


def split_modes(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every other row, serving rows): the offline tables never see a serving row."""
    serving = is_serving(frame)
    if not serving.any():  # the usual run: no copy of a large frame
        return frame, frame.iloc[0:0].copy()
    return (
        frame.loc[~serving].reset_index(drop=True).copy(),
        frame.loc[serving].reset_index(drop=True).copy(),
    )


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
    for c in ("pass_99", "pass_99_9"):
        merged[c] = merged[c].astype("object").fillna(False).astype(bool)
    merged["level"] = [
        level_label(c, r)
        for c, r in zip(merged["concurrency"], merged["request_rate"], strict=True)
    ]
    return merged


def at_slo(serving: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (run, group) with serving rows: its level at the SLO."""
    if serving.empty:
        return pd.DataFrame(columns=AT_SLO_COLUMNS)
    ok = (serving["status"] == "ok").to_numpy(dtype=bool)
    attained = serving["slo_attainment"].to_numpy(dtype=np.float64)
    target = serving["slo_attainment_target"].to_numpy(dtype=np.float64)
    tok_s = serving["output_tok_s"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        meets = ok & (attained >= target) & (tok_s > 0)
    frame = serving.assign(_meets=meets, _tok=np.where(meets, tok_s, -np.inf))
    records = []
    for _, rows in frame.groupby(["run", "group"], sort=False, dropna=False):
        first = rows.iloc[0]
        record = {c: first.get(c) for c in (*CONFIG_COLUMNS, *QUALITY_COLUMNS)}
        record["levels_measured"] = int((rows["status"] == "ok").sum())
        record["levels_meeting_slo"] = int(rows["_meets"].sum())
        if rows["_meets"].any():
            best = rows.loc[rows["_tok"].idxmax()]
            record.update(
                level_at_slo=best["level"],
                output_tok_s_at_slo=float(best["output_tok_s"]),
                goodput_rps_at_slo=float(best["goodput_rps"]),
                slo_attainment_at_slo=float(best["slo_attainment"]),
                j_per_mtok_output_at_slo=per_mtok(best.get("j_per_token_serving")),
                key_at_slo=best["key"],
            )
        else:
            record.update(
                level_at_slo=None,
                output_tok_s_at_slo=np.nan,
                goodput_rps_at_slo=np.nan,
                slo_attainment_at_slo=np.nan,
                j_per_mtok_output_at_slo=np.nan,
                key_at_slo=None,
            )
        records.append(record)
    return pd.DataFrame.from_records(records, columns=AT_SLO_COLUMNS)


def per_mtok(per_token: object) -> float:
    """A per-token figure × 10⁶; NaN when it is missing."""
    value = pd.to_numeric(per_token, errors="coerce")
    return float(value) * 1e6 if pd.notna(value) else np.nan


def chosen_keys(table: pd.DataFrame) -> set[str]:
    return {str(k) for k in table["key_at_slo"].dropna()}


def at_slo_packages(at: pd.DataFrame, packages: pd.DataFrame) -> pd.DataFrame:
    """Every configuration with a level at the SLO × each package of its GPU (the caller,
    aggregate.priced_at_slo, prices them with the offline formula)."""
    rows = at[np.isfinite(at["output_tok_s_at_slo"].to_numpy(dtype=np.float64))]
    rows = rows[rows["gpu"].notna()]
    if rows.empty or packages.empty:
        return pd.DataFrame(columns=[*at.columns, *packages.columns])
    return rows.merge(packages, on="gpu", how="inner", sort=False).reset_index(drop=True)


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


def cheapest_at_slo(priced: pd.DataFrame, quality_classes: dict[str, float]) -> pd.DataFrame:
    """Per (model, class, GPU, package): the configuration cheapest at the SLO that passes."""
    if priced.empty:
        return pd.DataFrame(columns=CHEAPEST_AT_SLO_COLUMNS)
    parts = []
    for name in quality_classes:
        passing = priced[priced[f"pass_{name.replace('.', '_')}"].astype(bool)]
        if passing.empty:
            continue
        pick = passing.groupby(["model", "gpu", "package_index"], sort=False)[
            "usd_per_mtok_output_at_slo"
        ].idxmin()
        chosen = passing.loc[pick.to_numpy()]
        parts.append(chosen.assign(achieved_class=chosen["quality_class"], quality_class=name))
    if not parts:
        return pd.DataFrame(columns=CHEAPEST_AT_SLO_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    out = out.sort_values(["model", "quality_class", "gpu", "package_days"])
    return out.reset_index(drop=True)[CHEAPEST_AT_SLO_COLUMNS]
