"""Prices, stated once for every mode: the package hour, $ per million tokens, the quality classes
and their ``pass_<class>`` columns, and the cheapest passing configuration per group.

Cost of one row on one tariff package (a node of n = ``gpus_in_package`` cards for ``days`` days
at utilisation ``u``; the row occupies k = ``gpus_used`` cards, its layout's tensor × pipeline
ranks (``harness.spec.capabilities.Layout``; 1 without a layout), so the node holds
``replicas_per_node`` = ⌊n ÷ k⌋ copies of it)::

    usd_per_hour          = package_price ÷ (days × 24) ÷ u ÷ ⌊n ÷ k⌋   (one replica's share)
    usd_per_mtok          = usd_per_hour ÷ (tok_s × 3600) × 10⁶
                            (decode tok/s → output; total tok/s → total; a mode's own tok/s:
                            serving's output tok/s at the SLO, training's train tok/s)
    tokens_per_package    = tok_s × 3600 × days × 24 × u × ⌊n ÷ k⌋
    breakeven_utilisation = package_price ÷ (hourly_usd × days × 24)

Layouts side by side: an 8-card node runs TP 1 × 8 replicas, TP 2 × 4 or TP 8 × 1; each layout is
priced on its own k cards and the cheapest tables keep one row per layout (``layout`` column,
empty on one card), so the layouts of one card and one package stand next to each other. A
layout that does not divide the node (k = 3 on 8 cards: 2 replicas, 2 cards idle) pays for the
idle cards as rented: each replica pays 1 ÷ ⌊n ÷ k⌋ of the node (= k ÷ n when k divides n), so
package_price ÷ tokens_per_package is the printed $/Mtok (``paid_share``).

Hourly billing charges only the hours used (``hourly × days × 24 × u``), so the package is the
cheaper choice exactly when ``u > breakeven_utilisation``.

A row needing more cards than a node has (k > n) is not priced on that node (``fits_node``; the
serving tables too, through ``on_node``).

Rows priced (offline): ``cost_eligible`` (``harness.results.frame.flag_rows``) and only against
tariffs of the row's own ``gpu``. ``cheapest``: the lowest output $/Mtok per model, class, GPU
and package length among rows passing the class, with the ratio to the cheapest GPU;
``gpu_ratios``: every GPU pair at equal quality.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date

import numpy as np
import pandas as pd

from harness.errors import UserInputError
from harness.measure.verdict import QUALITY_CLASSES
from harness.results.columns import PRICED_ON
from harness.results.frame import Array, Codes, best_per_group, column_codes, joint_key
from harness.spec.capabilities import Layout
from harness.spec.scenario import CONFIGURATION_FIELDS
from harness.spec.tariffs import HOURS_PER_DAY, TariffTable

# Per card, over every offer of the tariff table: the cheapest and the spread of USD per
# card-hour (harness.spec.tariffs.CardSpread).
CARD_SPREAD = (
    "cheapest_offer",
    "card_offers",
    "card_hour_usd_min",
    "card_hour_usd_median",
    "card_hour_usd_max",
)
# Where each price came from and how old it is (harness.spec.tariffs.TariffTable.package_rows):
# on every cost row, so cost.csv says each row's feed, date, age and spot restart charge.
TARIFF_PROVENANCE = (
    "tariff_region",
    "tariff_basis",
    "tariff_feed",
    "tariff_feed_version",
    "price_age_days",
    "price_read",
    "price_stale",
    "spot_restart_usd",
    *CARD_SPREAD,
)

__all__ = ["HOURS_PER_DAY", "QUALITY_CLASSES"]  # re-exported: their one definition is there


def pass_column(quality_class: str) -> str:
    """The column that says whether a row passes a quality class: "99.9" → ``pass_99_9``."""
    return f"pass_{quality_class.replace('.', '_')}"


def verdict_column(quality_class: str) -> str:
    """The column of a row's verdict for a class (pass / fail / undecided): ``verdict_99_9``."""
    return f"verdict_{quality_class.replace('.', '_')}"


VERDICT_COLUMNS = tuple(verdict_column(name) for name in QUALITY_CLASSES)
PASS_COLUMNS = tuple(pass_column(name) for name in QUALITY_CLASSES)


def check_quality_class(name: str, field: str = "quality_class") -> str:
    """A quality class by name (QUALITY_CLASSES), or a UserInputError saying which exist."""
    if name not in QUALITY_CLASSES:
        raise UserInputError(
            f"{name!r} is not a quality class; expected one of: {', '.join(QUALITY_CLASSES)}",
            field=field,
        )
    return name


def check_utilisation(utilisation: float) -> float:
    if not 0 < utilisation <= 1:
        raise UserInputError(
            f"utilisation must be in (0, 1], got {utilisation!r} (0.5 = the node is busy half of "
            "the package's hours)",
            field="utilisation",
        )
    return float(utilisation)


# --- the formulas -----------------------------------------------------------------------------


def package_usd_per_hour(
    price: Array | float, days: Array | float, utilisation: float, share: Array | float
) -> Array:
    """What one hour of the row's work costs on a package: (package price ÷ (days × 24) ÷
    utilisation) × GPUs used ÷ GPUs in the package (``share``)."""
    return np.asarray(price / (days * HOURS_PER_DAY) / utilisation * share, dtype=np.float64)


def usd_per_mtok(usd_per_hour: Array, tok_s: Array) -> Array:
    """$ per million tokens at ``tok_s`` tokens per second: usd_per_hour ÷ (tok/s × 3600) × 10⁶."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(usd_per_hour / (tok_s * 3600) * 1e6, dtype=np.float64)


def breakeven_utilisation(
    price: Array | float, hourly_usd: Array | float, days: Array | float
) -> Array:
    """The utilisation above which a package beats hourly billing: package price ÷ (hourly ×
    days × 24)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(price / (hourly_usd * days * HOURS_PER_DAY), dtype=np.float64)


def paid_share(used: Array | float, gpus_in_package: Array | float) -> Array:
    """The share of the node one replica of k cards pays: 1 ÷ ⌊n ÷ k⌋ (its own cards and its
    part of the idle ones; k ÷ n when k divides n). NaN where k > n (not priced there)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        n = np.asarray(gpus_in_package, dtype=np.float64)
        replicas = replicas_per_node(n, np.asarray(used, dtype=np.float64))
        return np.where(replicas >= 1, 1.0 / replicas, np.nan)


def package_hour(table: pd.DataFrame, utilisation: float, gpus_used: Array | float) -> Array:
    """``package_usd_per_hour`` of every row of a (row × package) table (columns
    ``package_price_usd``, ``package_days``, ``gpus_in_package``), on its ``paid_share``."""
    share = paid_share(gpus_used, table["gpus_in_package"].to_numpy(dtype=np.float64))
    return package_usd_per_hour(
        table["package_price_usd"].to_numpy(dtype=np.float64),
        table["package_days"].to_numpy(dtype=np.float64),
        utilisation,
        share,
    )


# --- packages ---------------------------------------------------------------------------------

PACKAGE_COLUMNS = (
    "package_index",
    "tariff_index",
    "provider",
    "gpu",
    "gpus_in_package",
    "hourly_usd",
    "package_days",
    "package_price_usd",
    "package_rule",
    "tariff_source",
    "tariff_date",
    "tariff_example",
    *TARIFF_PROVENANCE,
)


def packages_frame(tariffs: TariffTable | None, today: date | None = None) -> pd.DataFrame:
    """One row per (tariff, package); empty (with its columns) when there are no tariffs.
    Each price's age is counted to ``today`` (UTC today where not given)."""
    rows = tariffs.package_rows(today) if tariffs is not None else []
    if rows:
        return pd.DataFrame(rows).assign(package_index=np.arange(len(rows)))
    return pd.DataFrame({c: pd.Series(dtype="object") for c in PACKAGE_COLUMNS})


# --- the offline cost table -------------------------------------------------------------------

COST_COLUMNS = [
    "model",
    "quality_class",
    *PRICED_ON,
    "gpus_used",
    "replicas_per_node",
    "utilisation",
    *(f for f in CONFIGURATION_FIELDS if f not in ("model", "revision")),
    "decode_tok_s",
    "total_tok_s",
    "usd_per_mtok_output",
    "j_per_mtok_output",  # energy beside cost (harness.results.energy); NaN: not measured
    "usd_per_mtok_electricity",
    "avg_power_w_decode",
    "energy_source",
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
    *PASS_COLUMNS,
    "tpot_ms_p50",
    "peak_mib_decode",
    "package_rule",
    "tariff_example",
    "tariff_date",
    *TARIFF_PROVENANCE,
    "key",
]


def priceable(points: pd.DataFrame, packages: pd.DataFrame) -> Array:
    """Rows that may be priced and have a tariff of their GPU."""
    gpus = packages["gpu"].dropna().unique()
    eligible: Array = points["cost_eligible"].to_numpy(dtype=bool)
    on_gpu: Array = points["gpu"].isin(gpus).to_numpy(dtype=bool)
    return np.logical_and(eligible, on_gpu)


def layout_cards(label: object) -> int:
    """The cards a row's layout occupies (tensor × pipeline ranks); 1 without a layout."""
    if not isinstance(label, str) or not label:
        return 1
    return Layout.model_validate(label).cards


def gpus_used(points: pd.DataFrame) -> Array:
    """k per row: the cards its layout occupies (``layout_cards``)."""
    if "layout" not in points:
        return np.ones(len(points))
    codes, labels = pd.factorize(points["layout"], use_na_sentinel=True)  # each label read once
    cards = np.array([float(layout_cards(label)) for label in labels] + [1.0])  # -1: no layout
    used: Array = cards[codes]
    return used


def layout_shown(label: object) -> str:
    """A row's layout as words name it: its label, ``tp=1`` on one card (no layout)."""
    return label if isinstance(label, str) and label else Layout().label


def replicas_per_node(gpus_in_package: Array, used: Array) -> Array:
    """⌊n ÷ k⌋: the copies of a configuration of k cards a node of n cards runs side by side."""
    return np.floor(np.asarray(gpus_in_package, dtype=np.float64) / used)


def fits_node(used: Array, gpus_in_package: Array) -> Array:
    """k ≤ n: a row needing more cards than a node has is not priced on that node."""
    return np.asarray(used, dtype=np.float64) <= np.asarray(gpus_in_package, dtype=np.float64)


def on_node(table: pd.DataFrame) -> pd.DataFrame:
    """A (row × package) table's rows whose layout fits the package's node (``fits_node``),
    with ``gpus_used`` (k) and ``replicas_per_node`` (⌊n ÷ k⌋)."""
    used = gpus_used(table)
    size = table["gpus_in_package"].to_numpy(dtype=np.float64)
    fits = fits_node(used, size)
    return table.loc[fits].assign(
        gpus_used=used[fits], replicas_per_node=replicas_per_node(size[fits], used[fits])
    )


def cost_table(
    points: pd.DataFrame,
    packages: pd.DataFrame,
    utilisation: float,
    rows: Array | None = None,
) -> pd.DataFrame:
    """One row per (priced row, tariff package of its GPU): every COST_COLUMN, formulas in the
    module docstring. ``rows`` restricts it to those positions of ``points``."""
    mask = priceable(points, packages)
    if rows is not None:
        keep = np.zeros(len(points), dtype=bool)
        keep[rows] = True
        mask &= keep
    if packages.empty or not mask.any():
        return pd.DataFrame(
            {c: pd.Series(dtype="float64") for c in [*COST_COLUMNS, "point_index", "package_index"]}
        )
    wanted = [c for c in COST_COLUMNS if c in points.columns and c not in packages.columns]
    chosen = points.loc[mask, wanted].assign(
        gpu=points.loc[mask, "gpu"].astype("object"),
        gpus_used=gpus_used(points)[mask],
        point_index=np.flatnonzero(mask),
    )
    table = chosen.merge(packages, on="gpu", how="inner", sort=False)
    fits = fits_node(table["gpus_used"].to_numpy(), table["gpus_in_package"].to_numpy())
    table = table[fits].reset_index(drop=True)
    hours = table["package_days"].to_numpy(dtype=np.float64) * HOURS_PER_DAY
    price = table["package_price_usd"].to_numpy(dtype=np.float64)
    hourly = table["hourly_usd"].to_numpy(dtype=np.float64)
    used = table["gpus_used"].to_numpy(dtype=np.float64)
    size = table["gpus_in_package"].to_numpy(dtype=np.float64)
    share = paid_share(used, size)
    replicas = replicas_per_node(size, used)
    decode = table["decode_tok_s"].to_numpy(dtype=np.float64)
    total = table["total_tok_s"].to_numpy(dtype=np.float64)
    usd_per_hour = package_usd_per_hour(
        price, table["package_days"].to_numpy(dtype=np.float64), utilisation, share
    )
    table["usd_per_mtok_output"] = usd_per_mtok(usd_per_hour, decode)
    table["usd_per_mtok_total"] = np.where(total > 0, usd_per_mtok(usd_per_hour, total), np.nan)
    table["usd_per_mtok_output_hourly"] = usd_per_mtok(hourly * share, decode)
    with np.errstate(invalid="ignore", divide="ignore"):
        table["tokens_per_package"] = decode * 3600 * hours * utilisation * replicas
        table["total_tokens_per_package"] = total * 3600 * hours * utilisation * replicas
    table["breakeven_utilisation"] = breakeven_utilisation(
        price, hourly, table["package_days"].to_numpy(dtype=np.float64)
    )
    table["package_beats_hourly"] = utilisation > table["breakeven_utilisation"]
    table["replicas_per_node"] = replicas
    table["utilisation"] = utilisation
    return table[[*COST_COLUMNS, "point_index", "package_index"]]


def package_pairs(
    points: pd.DataFrame, packages: pd.DataFrame, utilisation: float, rows: Array
) -> tuple[Array, Array, Array]:
    """(row, package, usd_per_mtok_output) for every package of each row's GPU that fits it,
    as plain arrays (the same formula as ``cost_table``, without building its frame)."""
    gpu = points["gpu"].to_numpy()[rows]
    used = gpus_used(points)[rows]
    decode = points["decode_tok_s"].to_numpy(dtype=np.float64)[rows]
    package_gpu = packages["gpu"].to_numpy()
    size = packages["gpus_in_package"].to_numpy(dtype=np.float64)
    price = packages["package_price_usd"].to_numpy(dtype=np.float64)
    days = packages["package_days"].to_numpy(dtype=np.float64)
    row_parts, package_parts, cost_parts = [], [], []
    for j in range(len(packages)):
        at = np.flatnonzero((gpu == package_gpu[j]) & (used <= size[j]))
        share = paid_share(used[at], size[j])
        usd_per_hour = package_usd_per_hour(price[j], days[j], utilisation, share)
        row_parts.append(rows[at])
        package_parts.append(np.full(at.size, j, dtype=np.int64))
        cost_parts.append(usd_per_mtok(usd_per_hour, decode[at]))
    if not row_parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    return np.concatenate(row_parts), np.concatenate(package_parts), np.concatenate(cost_parts)


# --- the cheapest passing configuration -------------------------------------------------------


def cheapest_by_class(
    candidates: Callable[[str], pd.DataFrame], by: Sequence[str], cost: str
) -> pd.DataFrame:
    """Per quality class and ``by`` group: the candidate row with the lowest ``cost`` (first on
    ties). ``candidates(name)`` gives the priced rows that pass class ``name``; each chosen row
    keeps its own class as ``achieved_class`` and gets ``quality_class`` = the class asked for.
    Empty (no columns) when no class has a candidate. The offline ``cheapest`` table and
    serving's ``cheapest_at_slo`` are both this."""
    parts = []
    for name in QUALITY_CLASSES:
        passing = candidates(name)
        if passing.empty:
            continue
        pick = passing.groupby(list(by), sort=False, dropna=False)[cost].idxmin()
        chosen = passing.loc[pick.to_numpy()]
        parts.append(chosen.assign(achieved_class=chosen["quality_class"], quality_class=name))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


CHEAPEST_COLUMNS = [
    *COST_COLUMNS,
    "point_index",
    "package_index",
    "achieved_class",
    "ratio_to_cheapest_gpu",
]
# one cheapest row per layout of a (model, class, GPU, package length): layouts side by side
CHEAPEST_BY = ("model", "gpu", "package_days", "layout")


def cheapest_passing(
    points: pd.DataFrame,
    packages: pd.DataFrame,
    utilisation: float,
    codes: Codes | None = None,
) -> pd.DataFrame:
    """The cheapest (decode $/Mtok) configuration per (model, class, GPU, package length,
    layout), with its ratio to the cheapest of the same (model, class, package length) over
    every GPU and layout.

    For one package the cost is a constant × gpus_used ÷ decode tok/s, so the cheapest row of a
    (model, GPU, layout) is the one with the highest decode tok/s; only those are priced.
    """
    can_price = priceable(points, packages)
    if not can_price.any():
        return pd.DataFrame(columns=CHEAPEST_COLUMNS)
    used = gpus_used(points)
    efficiency = points["decode_tok_s"].to_numpy(dtype=np.float64) / used
    codes = codes or Codes(points)
    layouts = codes("layout") if "layout" in points else column_codes(used)
    key = joint_key(codes("model"), codes("gpu"), layouts)

    def candidates(name: str) -> pd.DataFrame:
        rows = np.flatnonzero(can_price & points[pass_column(name)].to_numpy(dtype=bool))
        if rows.size == 0:
            return pd.DataFrame()
        best = rows[best_per_group(key[rows], efficiency[rows])]
        return cost_table(points, packages, utilisation, best)

    by = CHEAPEST_BY if "layout" in points else CHEAPEST_BY[:-1]
    out = cheapest_by_class(candidates, by, "usd_per_mtok_output")
    if out.empty:
        return pd.DataFrame(columns=CHEAPEST_COLUMNS)
    if "layout" in out:  # one card: no layout (None, as in the rows; not pandas' NaN)
        out["layout"] = out["layout"].astype("object").where(out["layout"].notna(), None)
    floor = out.groupby(["model", "quality_class", "package_days"])["usd_per_mtok_output"]
    out["ratio_to_cheapest_gpu"] = out["usd_per_mtok_output"] / floor.transform("min")
    out = out.sort_values(["model", "quality_class", "package_days", "usd_per_mtok_output"])
    return out.reset_index(drop=True)[CHEAPEST_COLUMNS]


def gpu_ratios(cheapest: pd.DataFrame) -> pd.DataFrame:
    """Every ordered GPU pair at equal quality: cost_a ÷ cost_b (> 1: GPU a is dearer); each
    GPU at its cheapest layout."""
    columns = [
        "model",
        "quality_class",
        "package_days",
        "gpu_a",
        "gpu_b",
        "usd_per_mtok_a",
        "usd_per_mtok_b",
        "cost_ratio_a_over_b",
    ]
    if cheapest.empty:
        return pd.DataFrame(columns=columns)
    small = cheapest[["model", "quality_class", "package_days", "gpu", "usd_per_mtok_output"]]
    small = small.sort_values("usd_per_mtok_output", kind="stable").drop_duplicates(
        ["model", "quality_class", "package_days", "gpu"]
    )
    pairs = small.merge(small, on=["model", "quality_class", "package_days"], suffixes=("_a", "_b"))
    pairs = pairs[pairs["gpu_a"] != pairs["gpu_b"]].rename(
        columns={
            "usd_per_mtok_output_a": "usd_per_mtok_a",
            "usd_per_mtok_output_b": "usd_per_mtok_b",
        }
    )
    pairs["cost_ratio_a_over_b"] = pairs["usd_per_mtok_a"] / pairs["usd_per_mtok_b"]
    return pairs.reset_index(drop=True)[columns]
