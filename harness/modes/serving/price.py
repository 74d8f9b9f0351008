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
from harness.results import speculation
from harness.results.columns import ENGINE_WEIGHTS_KV, PRICED_ON
from harness.results.pricing import (
    PASS_COLUMNS,
    VERDICT_COLUMNS,
    cheapest_by_class,
    fits_node,
    gpus_used,
    layout_shown,
    on_node,
    package_hour,
    pass_column,
    usd_per_mtok,
)

QUALITY_COLUMNS = (
    "quality_class", *VERDICT_COLUMNS, *PASS_COLUMNS, "ppl", "ppl_ref", "dppl_pct",
)  # fmt: skip
# a serving configuration: its group's, and whether the server cached prefixes (None: no axis)
CONFIG_COLUMNS = (
    "run", "group", "model", "weights", *ENGINE_WEIGHTS_KV, "layout", "speculative", "target",
    "gpu", "device", "prefix_caching",
)  # fmt: skip
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


def cheapest_passing(frame: pd.DataFrame, keys: tuple[str, ...], cost: str) -> pd.DataFrame:
    """Per class and `keys`: the row of least `cost` among those that pass the class (empty
    when none does)."""
    if frame.empty:
        return frame.iloc[0:0]
    return cheapest_by_class(lambda name: frame[frame[pass_column(name)].astype(bool)], keys, cost)


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


# --- cost against interactivity --------------------------------------------------------------


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
