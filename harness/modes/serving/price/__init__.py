"""Serving rows (mode: serving) → throughput at the latency SLO, priced per package.

Formulas, stated once:

- Quality: a serving row inherits its configuration's verdict (``quality_class``, ``pass_99``,
  ``pass_99_9``, ``ppl``, ``dppl_pct``) from the offline rows of the same run and group (same
  model, revision, weights, backend, quantization, KV dtype and target): the server runs the
  configuration those rows measured. The equal-quality gate is the offline one, unchanged.
- At the SLO, per configuration (run, group): the level ``harness.modes.serving.slo.choose_at_slo``
  chooses against the configuration's ``slo_attainment_target`` (the scenario's ``attainment``):
  the rule is stated there, once; none when no level qualifies.
- ``usd_per_mtok_output_at_slo`` = the package's cost per hour of the k cards of a node the
  configuration's layout occupies (harness.results.pricing.package_usd_per_hour: package $/h ×
  k ÷ n) ÷ (output_tok_s at the SLO × 3600) × 10⁶
  (harness.results.pricing.usd_per_mtok), beside the offline ``usd_per_mtok_output`` in cost.csv
  (one figure per configuration and package).
- ``j_per_mtok_output_at_slo`` = the chosen level's ``j_per_token_serving`` × 10⁶: the device's
  joules per million output tokens over that level's load window (NaN where not measured).
- ``cheapest_at_slo``: per (model, quality class, GPU, package, layout) the configuration with
  the lowest ``usd_per_mtok_output_at_slo`` among those that pass the class
  (harness.results.pricing.cheapest_by_class): the layouts of one card and package side by side.

- Search (``serving: {search: ...}``, the rule: harness.modes.serving.search): a search's own row
  holds its bracket; ``slo_search`` is one row per search × package of its GPU (one unpriced
  row where no package is): ``max_rate_at_slo`` (req/s or clients, ``search_axis``), the bracket
  (``search_bracket_low`` = max_rate_at_slo, ``search_bracket_high`` = the lowest failing load),
  and from the probe measured at ``max_rate_at_slo``: ``goodput_rps_at_max_rate``,
  ``output_tok_s_at_max_rate`` and ``usd_per_mtok_output_at_max_rate`` (the at-SLO formula on
  that probe's output tok/s). The search's own row is in no other table; its probes are levels.
- Interactivity: ``tok_s_per_user`` = 1000 ÷ TPOT (ms) at the percentile the scenario states
  (``interactivity: {tpot: p50 | p90}``, default p50; ``interactivity_tpot``). ``interactivity``
  is every ok level (fixed levels and probes, whether or not it met the SLO: the interactivity is
  the latency here) × each package of its GPU, with ``usd_per_mtok_output`` at that level's
  output tok/s (the at-SLO formula). ``interactivity_bands``: per band B of the scenario
  (``interactivity: {bands: [...]}``, tok/s/user), model, quality class and package length, the
  level with the lowest $/Mtok among those with tok_s_per_user ≥ B that pass the class
  (harness.results.pricing.cheapest_by_class), one per layout (the layouts of a band side by
  side, cheapest first; one card is ``tp=1``); ``band_cheapest``: the band's cheapest over
  every layout and GPU; on that row, ``gpu_flips`` / ``layout_flips``: its GPU / layout
  differs from the band below's cheapest (where the cheaper layout flips with the latency
  band: tok/s/user ≥ B is TPOT ≤ 1000 ÷ B ms).
- Layouts: every priced serving table holds only the packages whose node has the k cards a
  layout occupies, with ``replicas_per_node`` = ⌊n ÷ k⌋ (harness.results.pricing.on_node);
  each level is priced on its k cards.

This module is the mode's `price` part (``price``; the contract: harness.modes.base.PricePart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from harness.modes.serving import slo
from harness.modes.serving.price.bands import (
    bands_of,
    interactivity,
    interactivity_bands,
    speculation_bands,
)
from harness.modes.serving.price.common import CONFIG_COLUMNS, QUALITY_COLUMNS, cheapest_passing
from harness.results import speculation
from harness.results.columns import ENGINE_WEIGHTS_KV, PRICED_ON
from harness.results.pricing import (
    PASS_COLUMNS,
    fits_node,
    gpus_used,
    on_node,
    package_hour,
    usd_per_mtok,
)

# a configuration's level at the SLO and its output tok/s there (every at-SLO table leads with them)
AT_SLO = ("level_at_slo", "output_tok_s_at_slo")
AT_SLO_COLUMNS = [
    *CONFIG_COLUMNS,
    *QUALITY_COLUMNS,
    *AT_SLO,
    "goodput_rps_at_slo",
    "slo_attainment_at_slo",
    "j_per_mtok_output_at_slo",
    "prefix_cache_hit_rate_at_slo",
    "levels_measured",
    "levels_meeting_slo",
    "key_at_slo",
]
CHEAPEST_AT_SLO_COLUMNS = [
    "model",
    "quality_class",
    *PRICED_ON,
    *ENGINE_WEIGHTS_KV,
    "layout",
    "replicas_per_node",
    "speculative",
    "prefix_caching",
    *AT_SLO,
    "usd_per_mtok_output_at_slo",
    "j_per_mtok_output_at_slo",
    "prefix_cache_hit_rate_at_slo",
    "achieved_class",
    "dppl_pct",
    "key_at_slo",
]


# a search's outcome per configuration (and package), and cost against interactivity
# what a search found: its axis, the highest load meeting the SLO, its bracket, how it stopped,
# and the goodput and output there (the report's search table shows these)
SEARCH_OUTCOME = (
    "search_axis",
    "max_rate_at_slo",
    "search_bracket_low",
    "search_bracket_high",
    "search_probes",
    "search_stop",
    "goodput_rps_at_max_rate",
    "output_tok_s_at_max_rate",
)
SEARCH_COLUMNS = [
    *CONFIG_COLUMNS,
    *QUALITY_COLUMNS,
    *SEARCH_OUTCOME,
    "slo_attainment_at_max_rate",
    "key_at_max_rate",
    "key",
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
    return with_group_identity(merged, offline)


def with_group_identity(serving: pd.DataFrame, offline: pd.DataFrame) -> pd.DataFrame:
    """A speculative serving row's greedy identity is its group's offline verdict (a replay
    keeps its own "synthetic"; no offline row: "unchecked"); a row whose verdict is not "yes"
    passes no class, so it is never priced as equal quality (plain rows are untouched)."""
    own = serving.get("greedy_identical", pd.Series(None, index=serving.index)).astype("object")
    found = speculation.group_identity(offline).rename(columns={"greedy_identical": "of_group"})
    merged = serving.drop(columns=["greedy_identical"], errors="ignore").merge(
        found, on=["run", "group"], how="left", sort=False
    )
    spec = speculation.speculative_rows(merged)
    own = own.reset_index(drop=True)
    verdict = merged["of_group"].astype("object").fillna(speculation.UNCHECKED)
    verdict = verdict.where(own != speculation.SYNTHETIC, speculation.SYNTHETIC)
    merged["greedy_identical"] = verdict.where(spec, None)
    blocked = spec & (merged["greedy_identical"] != speculation.IDENTICAL).to_numpy(dtype=bool)
    for column in PASS_COLUMNS:
        merged[column] = merged[column].astype(bool) & ~blocked
    return merged.drop(columns=["of_group"])


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
        for _, rows in serving.groupby(
            ["run", "group", *(["prefix_caching"] if "prefix_caching" in serving else [])],
            sort=False,
            dropna=False,
        )
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
            prefix_cache_hit_rate_at_slo=np.nan,
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
        prefix_cache_hit_rate_at_slo=_number(best.get("prefix_cache_hit_rate")),
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
        return pd.DataFrame(columns=[*at.columns, *packages.columns, "replicas_per_node"])
    merged = rows.merge(packages, on="gpu", how="inner", sort=False)
    return on_node(merged).reset_index(drop=True)


def price_at_slo(table: pd.DataFrame, utilisation: float) -> pd.DataFrame:
    """Configurations at their SLO level × packages (``at_slo_packages``), priced with the
    pricing formulas on ``output_tok_s_at_slo``, each on the cards its layout occupies."""
    out = table.copy()
    if out.empty:
        out["usd_per_mtok_output_at_slo"] = pd.Series(dtype="float64")
        return out
    usd_per_hour = package_hour(out, utilisation, gpus_used=gpus_used(out))
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
        # both prefix-caching settings measured: the server without it, as the offline engine
        # runs (rows without the axis sort with it, before "on")
        if "prefix_caching" in priced:
            order = priced["prefix_caching"].astype("object").eq(True).to_numpy()
            figures = figures.iloc[np.argsort(order, kind="stable")]
        figures = figures.drop_duplicates(["run", "group", "package_index"])
        merged = keys.merge(figures, on=["run", "group", "package_index"], how="left", sort=False)
        for name in added:
            out[name] = merged[name].to_numpy()
    columns = list(cost.columns)
    at = columns.index("usd_per_mtok_output") + 1 if "usd_per_mtok_output" in columns else 0
    return out[[*columns[:at], *added, *columns[at:]]]


def cheapest_at_slo(priced: pd.DataFrame) -> pd.DataFrame:
    """Per (model, class, GPU, package, layout): the configuration cheapest at the SLO that
    passes (layouts side by side)."""
    keys = ("model", "gpu", "package_index", *(["layout"] if "layout" in priced else []))
    out = cheapest_passing(priced, keys, "usd_per_mtok_output_at_slo")
    if out.empty:
        return pd.DataFrame(columns=CHEAPEST_AT_SLO_COLUMNS)
    out = out.sort_values(["model", "quality_class", "gpu", "package_days"])
    return out.reset_index(drop=True)[CHEAPEST_AT_SLO_COLUMNS]


# --- the mode's price part (harness.modes.base.PricePart) -------------------------------------


@dataclass(frozen=True)
class ServingPriced:
    """The serving tables, named as its registry entry declares them (``Aggregate.tables``):
    ``serving`` (the rows with their configuration's quality and level label), ``at_slo``,
    ``priced_at_slo``, ``cheapest_at_slo``."""

    tables: dict[str, pd.DataFrame]
    counts: dict[str, Any]

    def with_cost(self, cost: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
        return with_cost_at_slo(cost, points, self.tables["priced_at_slo"])


def price(
    rows: pd.DataFrame, points: pd.DataFrame, packages: pd.DataFrame, utilisation: float
) -> ServingPriced:
    """The serving rows' tables (see the module docstring); ``points``: the gated offline rows."""
    everything = inherit_quality(rows, points)
    own = search_rows_mask(everything)
    served = everything.loc[~own].reset_index(drop=True)
    at = at_slo(served)
    priced = price_at_slo(at_slo_packages(at, packages), utilisation)
    by_status = everything["status"].value_counts()
    curve = interactivity(served, packages, utilisation)
    return ServingPriced(
        tables={
            "serving": served,
            "at_slo": at,
            "priced_at_slo": priced,
            "cheapest_at_slo": cheapest_at_slo(priced),
            "slo_search": slo_search(everything.loc[own], served, packages, utilisation),
            "interactivity": curve,
            "interactivity_bands": interactivity_bands(curve, bands_of(served)),
            "speculation_bands": speculation_bands(curve, bands_of(served)),
        },
        counts={
            "serving_rows": len(everything),
            "serving_search_rows": int(own.sum()),
            "serving_by_status": {str(k): int(v) for k, v in by_status.items()},
        },
    )


# --- the search (harness.modes.serving.search) -----------------------------------------------


def search_rows_mask(rows: pd.DataFrame) -> NDArray[np.bool_]:
    """The searches' own rows: a search axis and no probe index (a probe is a level)."""
    if rows.empty or "search_axis" not in rows.columns:
        return np.zeros(len(rows), dtype=bool)
    axis = rows["search_axis"].notna().to_numpy(dtype=bool)
    probe = rows["search_probe"].notna().to_numpy(dtype=bool)
    return axis & ~probe


def _load_of(rows: pd.DataFrame, axis: str) -> NDArray[np.float64]:
    return pd.to_numeric(rows[axis], errors="coerce").to_numpy(dtype=np.float64)


def search_record(search: pd.Series, served: pd.DataFrame) -> dict[str, Any]:
    """One search's SEARCH_COLUMNS: its row's bracket, and the figures of its probe at
    max_rate_at_slo (the same run and group, a probe of the same axis at that load that met
    the SLO)."""
    record: dict[str, Any] = {c: search.get(c) for c in SEARCH_COLUMNS if c in search.index}
    best = _number(search.get("max_rate_at_slo"))
    axis = str(search.get("search_axis"))
    probes = served[
        (served["run"] == search["run"])
        & (served["group"] == search["group"])
        & served["search_probe"].notna()
        & (served["search_axis"] == axis)
    ]
    target = _number(search.get("slo_attainment_target"))
    at = probes[np.isclose(_load_of(probes, axis), np.nan if best is None else best)]
    meeting = [i for i, lv in enumerate(levels(at)) if slo.qualifies(lv, target or np.nan)]
    if not meeting:
        return {**record, **dict.fromkeys(SEARCH_COLUMNS[-5:-1], np.nan)}
    probe = at.iloc[meeting[0]]
    return {
        **record,
        "goodput_rps_at_max_rate": float(probe["goodput_rps"]),
        "output_tok_s_at_max_rate": float(probe["output_tok_s"]),
        "slo_attainment_at_max_rate": float(probe["slo_attainment"]),
        "key_at_max_rate": probe["key"],
    }


def slo_search(
    searches: pd.DataFrame, served: pd.DataFrame, packages: pd.DataFrame, utilisation: float
) -> pd.DataFrame:
    """One row per search × package of its GPU (one unpriced row where none is), with
    ``usd_per_mtok_output_at_max_rate``."""
    columns = list(dict.fromkeys([*SEARCH_COLUMNS, *PRICED_ON, "usd_per_mtok_output_at_max_rate"]))
    if searches.empty:
        return pd.DataFrame(columns=columns)
    table = pd.DataFrame.from_records(
        [search_record(rec, served) for _, rec in searches.iterrows()], columns=SEARCH_COLUMNS
    )
    if packages.empty:
        return table.reindex(columns=columns)
    merged = table.merge(packages, on="gpu", how="left", sort=False)
    fits = fits_node(gpus_used(merged), merged["gpus_in_package"].to_numpy(dtype=np.float64))
    priced = merged["package_price_usd"].notna().to_numpy(dtype=bool) & fits
    usd = np.full(len(merged), np.nan)
    if priced.any():
        rows = merged.loc[priced]
        tok_s = rows["output_tok_s_at_max_rate"].to_numpy(dtype=np.float64)
        usd[priced] = usd_per_mtok(
            package_hour(rows, utilisation, gpus_used=gpus_used(rows)), tok_s
        )
    return merged.assign(usd_per_mtok_output_at_max_rate=usd)[columns]
