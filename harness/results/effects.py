"""Factor effects per (model, device) over the measured rows (ok, not above the roofline).

- ``main_effects``: for each axis (quantization, KV dtype, batch, context), the mean of each
  metric (decode_tok_s, peak_mib_decode, ppl) at each level, and its effect = that mean minus the
  mean over the axis's levels;
- ``interactions``: two-way, only for axis pairs whose grid is complete in that model and device:
  interaction = m[a, b] − m[a, ·] − m[·, b] + m[·, ·] from the cell means.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from harness.results.frame import Array, Codes, group_mean, groups_of, joint_key

AXES = ("quantization", "kv_cache_dtype", "batch", "context")
EFFECT_METRICS = ("decode_tok_s", "peak_mib_decode", "ppl")


def measured_rows(points: pd.DataFrame) -> Array:
    """Rows whose figures can be averaged: ok, and not above the roofline."""
    ok = (points["status"] == "ok").to_numpy(dtype=bool)
    return np.flatnonzero(ok & ~points["exceeds_roofline"].to_numpy(dtype=bool))


class Factors:
    """The measured rows' stratum (model, device) and axis levels as integer codes, hashed once."""

    def __init__(self, points: pd.DataFrame, codes: Codes | None = None) -> None:
        self.codes = codes or Codes(points)
        self.rows = measured_rows(points)
        self.stratum = joint_key(self.codes("model")[self.rows], self.codes("device")[self.rows])
        self.levels = {axis: self.codes(axis)[self.rows] for axis in AXES}
        self.metrics = {m: points[m].to_numpy(dtype=np.float64)[self.rows] for m in EFFECT_METRICS}

    def labels(self, rep: Array) -> dict[str, Array]:
        at = self.rows[rep]
        return {"model": self.codes.labels("model", at), "device": self.codes.labels("device", at)}

    def level(self, axis: str, rep: Array) -> list[str]:
        return [str(v) for v in self.codes.labels(axis, self.rows[rep])]


def main_effects(points: pd.DataFrame, factors: Factors | None = None) -> pd.DataFrame:
    """Per (model, device) and axis: each level's mean of every metric, and its effect = that
    mean minus the mean over the axis's levels (how far the level moves the metric)."""
    columns = ["model", "device", "axis", "level", "metric", "mean", "effect", "n"]
    f = factors or Factors(points)
    if f.rows.size == 0:
        return pd.DataFrame(columns=columns)
    parts = []
    for axis in AXES:
        inverse, count, rep = groups_of(joint_key(f.stratum, f.levels[axis]))
        level = f.level(axis, rep)
        for metric in EFFECT_METRICS:
            mean, n = group_mean(inverse, count, f.metrics[metric])
            parts.append(
                pd.DataFrame(
                    {
                        **f.labels(rep),
                        "axis": axis,
                        "level": level,
                        "metric": metric,
                        "mean": mean,
                        "n": n,
                        "_stratum": f.stratum[rep],
                    }
                )
            )
    out = pd.concat(parts, ignore_index=True)
    out = out[out["n"] > 0]
    base = out.groupby(["_stratum", "axis", "metric"], sort=False)["mean"].transform("mean")
    out = out.assign(effect=out["mean"] - base)
    out = out.sort_values(["model", "device", "axis", "metric", "level"])
    return out.reset_index(drop=True)[columns]


INTERACTION_COLUMNS = [
    "model",
    "device",
    "axis_a",
    "level_a",
    "axis_b",
    "level_b",
    "metric",
    "cell_mean",
    "interaction",
]


def interactions(points: pd.DataFrame, factors: Factors | None = None) -> pd.DataFrame:
    """Two-way interactions per (model, device), only where that pair's grid is complete.

    From the cell means m[a, b] (every level pair measured): interaction = m[a, b] − m[a, ·] −
    m[·, b] + m[·, ·], the margins being means of cell means. Zero everywhere ⇔ additive effects.
    """
    f = factors or Factors(points)
    if f.rows.size == 0:
        return pd.DataFrame(columns=INTERACTION_COLUMNS)
    parts = []
    for a, b in itertools.combinations(AXES, 2):
        inverse, count, rep = groups_of(joint_key(f.stratum, f.levels[a], f.levels[b]))
        for metric in EFFECT_METRICS:
            mean, n = group_mean(inverse, count, f.metrics[metric])
            cells = _complete_cells(f, a, b, rep, mean, n)
            if cells.empty:
                continue
            at = cells["rep"].to_numpy()
            parts.append(
                pd.DataFrame(
                    {
                        **f.labels(at),
                        "axis_a": a,
                        "level_a": f.level(a, at),
                        "axis_b": b,
                        "level_b": f.level(b, at),
                        "metric": metric,
                        "cell_mean": cells["cell_mean"].to_numpy(),
                        "interaction": cells["interaction"].to_numpy(),
                    }
                )
            )
    if not parts:
        return pd.DataFrame(columns=INTERACTION_COLUMNS)
    return pd.concat(parts, ignore_index=True)[INTERACTION_COLUMNS]


def _complete_cells(f: Factors, a: str, b: str, rep: Array, mean: Array, n: Array) -> pd.DataFrame:
    """The measured cells (stratum ``s``, level ``a``, level ``b``: ``cell_mean``, its
    representative row ``rep``) of the strata whose a × b grid is complete, both axes with more
    than one level, each with its ``interaction``; empty when there is none."""
    cells = pd.DataFrame(
        {
            "s": f.stratum[rep],
            "a": f.levels[a][rep],
            "b": f.levels[b][rep],
            "cell_mean": mean,
            "rep": rep,
        }
    )[n > 0]
    if cells.empty:
        return cells
    per = cells.groupby("s", sort=False)
    n_a, n_b = per["a"].transform("nunique"), per["b"].transform("nunique")
    complete = (per["cell_mean"].transform("size") == n_a * n_b) & (n_a > 1) & (n_b > 1)
    cells = cells[complete]
    if cells.empty:
        return cells
    margin_a = cells.groupby(["s", "a"])["cell_mean"].transform("mean")
    margin_b = cells.groupby(["s", "b"])["cell_mean"].transform("mean")
    grand = cells.groupby("s")["cell_mean"].transform("mean")
    return cells.assign(interaction=cells["cell_mean"] - margin_a - margin_b + grand)
