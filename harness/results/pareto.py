"""The Pareto fronts: configurations no other beats on both of two figures.

- ``pareto_cost_quality``: per (model, package length), output $/Mtok (min) against ppl (min);
- ``pareto_throughput_latency``: per (model, device), decode tok/s (max) against TPOT p50 (min),
  over the rows that may be priced (``cost_eligible``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.results.columns import CONFIGURATION, PACKAGE
from harness.results.frame import Array, Codes, column_codes, joint_key
from harness.results.pricing import cost_table, gpus_used, package_pairs, priceable


def pareto_mask(group: Array, x: Array, y: Array, *, maximise_y: bool = False) -> Array:
    """True for the rows on the front of their group: x minimal, y minimal (or maximal).

    Sort by (group, x); rows of equal (group, x) form a run whose best y alone can count. A run
    is on the front when its best y beats every earlier run of its group: y is turned into a
    dense rank offset by the group's ordinal, so one running maximum never crosses groups.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    mask = np.zeros(len(x), dtype=bool)
    idx = np.flatnonzero(~np.isnan(x) & ~np.isnan(y) & (np.asarray(group) >= 0))
    if idx.size == 0:
        return mask
    xs, gs = x[idx], np.asarray(group)[idx]
    good = y[idx] if maximise_y else -y[idx]  # larger is better
    gs = np.asarray(pd.factorize(gs)[0])
    small = gs.astype(np.int16) if gs.max() < np.iinfo(np.int16).max else gs
    order = np.argsort(xs)
    order = order[np.argsort(small[order], kind="stable")]  # by group, then x
    xs, gs, good = xs[order], gs[order], good[order]
    new_run = np.concatenate(([True], (gs[1:] != gs[:-1]) | (xs[1:] != xs[:-1])))
    starts = np.flatnonzero(new_run)
    run_of = np.cumsum(new_run) - 1
    run_best = np.maximum.reduceat(good, starts)
    rank = np.unique(run_best, return_inverse=True)[1].astype(np.int64)
    ordinal = np.cumsum(np.concatenate(([True], gs[starts][1:] != gs[starts][:-1]))) - 1
    score = rank + ordinal.astype(np.int64) * (int(rank.max()) + 2)
    before = np.concatenate(([-1], np.maximum.accumulate(score)[:-1]))
    run_on_front = score > before
    on_front = run_on_front[run_of] & (good == run_best[run_of])
    mask[idx[order]] = on_front
    return mask


def pareto_cost_quality(
    points: pd.DataFrame,
    packages: pd.DataFrame,
    utilisation: float,
    codes: Codes | None = None,
) -> pd.DataFrame:
    """Per (model, package length): configurations no other beats on both $/Mtok out and ppl.

    On one package a row's cost is a constant × gpus_used ÷ decode tok/s, so a row beaten on
    both decode tok/s and ppl by another of the same (model, GPU, gpus_used) is beaten on every
    package: only that front is priced, then the front of each (model, package length) is taken.
    """
    columns = [
        "model",
        *PACKAGE,
        *CONFIGURATION,
        "target",
        "usd_per_mtok_output",
        "ppl",
        "quality_class",
        "dnll_ci_low",
        "dnll_ci_high",
        "point_index",
    ]
    ppl = points["ppl"].to_numpy(dtype=np.float64)
    rows = np.flatnonzero(priceable(points, packages) & ~np.isnan(ppl))
    if rows.size == 0:
        return pd.DataFrame(columns=columns)
    codes = codes or Codes(points)
    model = codes("model")
    used = gpus_used(points)
    key = joint_key(model[rows], codes("gpu")[rows], column_codes(used[rows]))
    efficiency = (points["decode_tok_s"].to_numpy(dtype=np.float64) / used)[rows]
    rows = rows[pareto_mask(key, -efficiency, ppl[rows])]
    row, package, usd = package_pairs(points, packages, utilisation, rows)
    days = column_codes(packages["package_days"].to_numpy())
    mask = pareto_mask(joint_key(model[row], days[package]), usd, ppl[row])
    if not mask.any():
        return pd.DataFrame(columns=columns)
    cost = cost_table(points, packages, utilisation, np.unique(row[mask]))
    wanted = pd.DataFrame({"point_index": row[mask], "package_index": package[mask]})
    cost = cost.merge(wanted, on=["point_index", "package_index"], how="inner")
    return (
        cost[columns]
        .sort_values(["model", "package_days", "usd_per_mtok_output"])
        .reset_index(drop=True)
    )


def pareto_throughput_latency(points: pd.DataFrame, codes: Codes | None = None) -> pd.DataFrame:
    """Per (model, device): points no other beats on both decode tok/s (max) and TPOT (min)."""
    columns = ["model", "device", *CONFIGURATION, "decode_tok_s", "tpot_ms_p50", "key"]
    codes = codes or Codes(points)
    group = joint_key(codes("model"), codes("device"))
    group = np.where(points["cost_eligible"].to_numpy(dtype=bool), group, -1)
    mask = pareto_mask(
        group,
        points["tpot_ms_p50"].to_numpy(dtype=np.float64),
        points["decode_tok_s"].to_numpy(dtype=np.float64),
        maximise_y=True,
    )
    front = points.loc[mask, columns]
    return front.sort_values(["model", "device", "tpot_ms_p50"]).reset_index(drop=True)
