"""Cost against interactivity, and speculation against plain decoding per interactivity band
(the serving mode's tables ``interactivity``, ``interactivity_bands`` and ``speculation_bands``;
the rules: ``harness.modes.serving.price``'s docstring)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from harness.modes.serving.price.common import CONFIG_COLUMNS, QUALITY_COLUMNS, cheapest_passing
from harness.results import speculation
from harness.results.columns import ENGINE_WEIGHTS_KV, PRICED_ON
from harness.results.pricing import (
    gpus_used,
    layout_shown,
    on_node,
    package_hour,
    usd_per_mtok,
)

INTERACTIVITY_COLUMNS = list(
    dict.fromkeys(
        [
            *CONFIG_COLUMNS,
            *QUALITY_COLUMNS,
            *PRICED_ON,
            "package_index",
            "level",
            "replicas_per_node",
            "interactivity_tpot",
            "tok_s_per_user",
            "output_tok_s",
            "slo_attainment",
            "usd_per_mtok_output",
            "spec_workload",
            "greedy_identical",
            "key",
        ]
    )
)
BAND_COLUMNS = [
    "model",
    "quality_class",
    "band_tok_s_user",
    *PRICED_ON,
    *ENGINE_WEIGHTS_KV,
    "layout",
    "replicas_per_node",
    "speculative",
    "level",
    "tok_s_per_user",
    "usd_per_mtok_output",
    "band_cheapest",
    "gpu_flips",
    "layout_flips",
    "achieved_class",
    "key",
]
TPOT_OF = {"p50": "tpot_ms_p50", "p90": "tpot_ms_p90"}  # interactivity_tpot → its column


def tok_s_per_user(rows: pd.DataFrame) -> NDArray[np.float64]:
    """1000 ÷ TPOT (ms) at each row's stated percentile (p50 where a row states none)."""
    stated = rows["interactivity_tpot"] if "interactivity_tpot" in rows.columns else None
    which = (
        stated.astype("object").where(stated.notna(), "p50")
        if stated is not None
        else pd.Series("p50", index=rows.index)
    )
    tpot = np.full(len(rows), np.nan)
    for name, column in TPOT_OF.items():
        pick = (which == name).to_numpy(dtype=bool)
        if pick.any() and column in rows.columns:
            tpot[pick] = pd.to_numeric(rows.loc[pick, column], errors="coerce").to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tpot > 0, 1000.0 / tpot, np.nan)


def interactivity(served: pd.DataFrame, packages: pd.DataFrame, utilisation: float) -> pd.DataFrame:
    """Every ok level with a positive output tok/s and a TPOT × each package of its GPU: its
    tok/s/user and $/Mtok out (see the module docstring)."""
    if served.empty or packages.empty:
        return pd.DataFrame(columns=INTERACTIVITY_COLUMNS)
    rows = served.assign(
        tok_s_per_user=tok_s_per_user(served),
        interactivity_tpot=served.get("interactivity_tpot", pd.Series(index=served.index))
        .astype("object")
        .fillna("p50"),
    )
    tok_s = pd.to_numeric(rows["output_tok_s"], errors="coerce").to_numpy(dtype=np.float64)
    keep = (
        (rows["status"] == "ok").to_numpy(dtype=bool)
        & (np.nan_to_num(tok_s) > 0)
        & np.isfinite(rows["tok_s_per_user"].to_numpy(dtype=np.float64))
        & rows["gpu"].notna().to_numpy(dtype=bool)
    )
    rows = rows.loc[keep]
    if rows.empty:
        return pd.DataFrame(columns=INTERACTIVITY_COLUMNS)
    merged = on_node(rows.merge(packages, on="gpu", how="inner", sort=False))
    merged = merged.reset_index(drop=True)
    usd_per_hour = package_hour(merged, utilisation, gpus_used=gpus_used(merged))
    merged["usd_per_mtok_output"] = usd_per_mtok(
        usd_per_hour, merged["output_tok_s"].to_numpy(dtype=np.float64)
    )
    table: pd.DataFrame = merged.reindex(columns=INTERACTIVITY_COLUMNS)
    return table


def bands_of(served: pd.DataFrame) -> list[float]:
    """The interactivity bands the rows state (tok/s/user), every one once, in order."""
    if served.empty or "interactivity_bands" not in served.columns:
        return []
    found = {
        float(band)
        for text in served["interactivity_bands"].dropna().astype(str)
        for band in text.split()
    }
    return sorted(found)


# one interactivity band of one model, class and package length (its layouts side by side)
BAND_OF = ["model", "quality_class", "package_days", "band_tok_s_user"]


def interactivity_bands(curve: pd.DataFrame, bands: list[float]) -> pd.DataFrame:
    """Per band, model, class, package length and layout: the cheapest level with tok/s/user ≥
    the band that passes the class (the layouts of a band side by side, cheapest first);
    ``band_cheapest``: the band's cheapest over every layout and card; on that row,
    ``gpu_flips`` / ``layout_flips``: its card / layout differs from the band below's cheapest."""
    per_band = [
        curve[curve["tok_s_per_user"].to_numpy(dtype=np.float64) >= band].assign(
            band_tok_s_user=band
        )
        for band in bands
    ]
    candidates = pd.concat(per_band, ignore_index=True) if per_band else curve.iloc[0:0]
    out = cheapest_passing(
        candidates, ("model", "band_tok_s_user", "package_days", "layout"), "usd_per_mtok_output"
    )
    if out.empty:
        return pd.DataFrame(columns=BAND_COLUMNS)
    out = out.sort_values([*BAND_OF, "usd_per_mtok_output"], kind="stable")
    out = out.reset_index(drop=True)
    out["band_cheapest"] = out.groupby(BAND_OF, sort=False).cumcount().eq(0)
    out["gpu_flips"] = out["layout_flips"] = False
    best = out.loc[out["band_cheapest"]]
    per = best.assign(shown=best["layout"].map(layout_shown)).groupby(BAND_OF[:-1], sort=False)
    below, layout_below = per["gpu"].shift(), per["shown"].shift()
    out.loc[best.index, "gpu_flips"] = below.notna() & (below != best["gpu"])
    out.loc[best.index, "layout_flips"] = layout_below.notna() & (
        layout_below != best["layout"].map(layout_shown)
    )
    table: pd.DataFrame = out[BAND_COLUMNS]
    return table


# --- speculation against plain decoding, per interactivity band ------------------------------

PLAIN = "plain"  # the arm without speculation
# what a band's speculative and plain arms are compared within: one card, package and engine
# configuration (the same run, so the same prompts), the speculation aside
SPECULATION_SERIES = (
    "run", "model", "gpu", "provider", "package_days", *ENGINE_WEIGHTS_KV, "layout", "target",
    "prefix_caching",
)  # fmt: skip
SPECULATION_BAND_COLUMNS = [
    "model", "quality_class", "band_tok_s_user", *PRICED_ON, *ENGINE_WEIGHTS_KV, "layout",
    "speculative", "spec_workload", "plain_usd_per_mtok_output", "usd_per_mtok_output",
    "speculation_saving_pct", "cheaper", "cheaper_flips", "level", "tok_s_per_user",
]  # fmt: skip


def cheaper_arm(plain: float, spec: float) -> str:
    """Which arm is cheaper per Mtok at a band: "speculation" / "plain" (ties: plain, the
    simpler server), or the one arm that reaches the band at all ("... only")."""
    if np.isnan(plain) and np.isnan(spec):
        return ""
    if np.isnan(plain):
        return "speculation only"
    if np.isnan(spec):
        return "plain only"
    return "speculation" if spec < plain else PLAIN


def speculation_bands(curve: pd.DataFrame, bands: list[float]) -> pd.DataFrame:
    """Per band B, class, series (``SPECULATION_SERIES``) and speculative configuration S: the
    cheapest level passing the class with tok/s/user ≥ B with S and without speculation, their
    $/Mtok out, ``speculation_saving_pct`` = 100 × (plain − S) ÷ plain, which is ``cheaper``,
    and ``cheaper_flips``: it differs from the band below's (both arms measured there). Empty
    when no level speculates."""
    if curve.empty or not bands or not speculation.speculative_rows(curve).any():
        return pd.DataFrame(columns=SPECULATION_BAND_COLUMNS)
    arm = curve["speculative"].astype("object").where(speculation.speculative_rows(curve), PLAIN)
    rows = curve.assign(arm=arm)
    chosen = cheapest_passing(
        pd.concat(
            [rows[rows["tok_s_per_user"] >= b].assign(band_tok_s_user=b) for b in bands],
            ignore_index=True,
        ),
        (*SPECULATION_SERIES, "band_tok_s_user", "arm"),
        "usd_per_mtok_output",
    )
    if chosen.empty:
        return pd.DataFrame(columns=SPECULATION_BAND_COLUMNS)
    measured = _labels_per_series(rows)  # a speculative arm measured but never passing: too
    records = []
    for key, arms in chosen.groupby(
        ["quality_class", *SPECULATION_SERIES], sort=False, dropna=False
    ):
        for label in measured.get(_series_key(key[1:]), []):
            records += _band_records(arms, label, bands)
    if not records:
        return pd.DataFrame(columns=SPECULATION_BAND_COLUMNS)
    out = pd.DataFrame.from_records(records)
    return out.reindex(columns=SPECULATION_BAND_COLUMNS).reset_index(drop=True)


def _series_key(values: tuple[Any, ...]) -> tuple[str, ...]:
    """A series' key as text (a missing layout or prefix-caching setting compares equal)."""
    return tuple("" if pd.isna(v) else str(v) for v in values)


def _labels_per_series(rows: pd.DataFrame) -> dict[tuple[str, ...], list[str]]:
    """Each series' speculative configurations measured (passing a class or not), by label."""
    out: dict[tuple[str, ...], set[str]] = {}
    for key, one in rows.groupby(list(SPECULATION_SERIES), sort=False, dropna=False):
        labels = {str(a) for a in one["arm"] if a != PLAIN}
        out.setdefault(_series_key(key), set()).update(labels)
    return {key: sorted(labels) for key, labels in out.items() if labels}


def _band_records(arms: pd.DataFrame, label: str, bands: list[float]) -> list[dict[str, Any]]:
    """One series' comparison of ``label`` with plain decoding, band by band (ascending)."""
    out: list[dict[str, Any]] = []
    below = ""
    for band in bands:
        at = arms[arms["band_tok_s_user"] == band]
        plain, spec = at[at["arm"] == PLAIN], at[at["arm"] == label]
        if plain.empty and spec.empty:
            continue
        first = (spec if not spec.empty else plain).iloc[0]
        plain_usd = float(plain["usd_per_mtok_output"].iloc[0]) if not plain.empty else np.nan
        spec_usd = float(spec["usd_per_mtok_output"].iloc[0]) if not spec.empty else np.nan
        cheaper = cheaper_arm(plain_usd, spec_usd)
        measured_both = cheaper in ("speculation", PLAIN)
        record = {c: first.get(c) for c in SPECULATION_BAND_COLUMNS if c in first.index}
        record.update(
            speculative=label,
            spec_workload=spec["spec_workload"].iloc[0] if not spec.empty else None,
            plain_usd_per_mtok_output=plain_usd,
            usd_per_mtok_output=spec_usd,
            speculation_saving_pct=100.0 * (plain_usd - spec_usd) / plain_usd
            if measured_both else np.nan,
            cheaper=cheaper,
            cheaper_flips=bool(measured_both and below and below != cheaper),
            level=spec["level"].iloc[0] if not spec.empty else None,
            tok_s_per_user=float(spec["tok_s_per_user"].iloc[0]) if not spec.empty else np.nan,
        )  # fmt: skip
        out.append(record)
        below = cheaper if measured_both else below
    return out
