"""Energy in the tables: joules per million tokens beside dollars per million, and, where the
tariff file gives an electricity price, what owning the hardware would cost ("rent vs own").

The energy figures are what the worker measured from the device's cumulative energy counter
(``harness.measure.energy``): the GPU board (NVML, amdsmi) or the CPU packages (RAPL), never the
host, the cooling or the network, and never an estimate. Rows without them stay NaN. Formulas::

    j_per_mtok_output        = j_per_token_decode × 10⁶   (J per million decoded tokens)
    usd_per_mtok_electricity = j_per_mtok_output ÷ 3.6 × 10⁶ J/kWh × electricity_usd_per_kwh
    own_usd_per_hour         = avg_power_w_decode × gpus_per_node ÷ 1000 × electricity_usd_per_kwh
    breakeven_hours          = purchase_usd ÷ (hourly_usd − own_usd_per_hour)
    breakeven_days           = breakeven_hours ÷ (24 × utilisation)

``breakeven_hours`` is how many busy node-hours of on-demand rent (``hourly_usd``, the tariff's
whole node) pay for buying the node (``purchase_usd``, optional in the tariff file) and running it
at the measured decode power on every card; owning is cheaper beyond it, and never when the rent
is not above the electricity. Left out, so it flatters owning: the host, cooling (PUE),
space, staff, financing, resale value and idle power.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from harness.results.frame import with_columns
from harness.spec.tariffs import HOURS_PER_DAY, TariffTable

J_PER_KWH = 3.6e6
# a rent-vs-own row: one per (model, class, GPU, provider) of the cheapest table
RENT_VS_OWN_KEY = ("model", "quality_class", "gpu", "provider")
RENT_VS_OWN_COLUMNS = [
    *RENT_VS_OWN_KEY,
    "gpus_per_node",
    "avg_power_w_decode",
    "j_per_mtok_output",
    "usd_per_mtok_electricity",
    "usd_per_mtok_output_hourly",
    "hourly_usd",
    "own_usd_per_hour",
    "purchase_usd",
    "breakeven_hours",
    "breakeven_days",
    "utilisation",
    "energy_source",
]


def electricity_usd_per_kwh(tariffs: TariffTable | None) -> float | None:
    return None if tariffs is None else tariffs.electricity_usd_per_kwh


def with_energy_columns(points: pd.DataFrame, tariffs: TariffTable | None) -> pd.DataFrame:
    """``points`` with ``j_per_mtok_output`` and ``usd_per_mtok_electricity`` (NaN where the
    energy was not measured, or no electricity price is given)."""
    per_token = (
        pd.to_numeric(points["j_per_token_decode"], errors="coerce").to_numpy(dtype=np.float64)
        if "j_per_token_decode" in points
        else np.full(len(points), np.nan)
    )
    price = electricity_usd_per_kwh(tariffs)
    j_per_mtok = per_token * 1e6
    columns: dict[str, Any] = {
        "j_per_mtok_output": j_per_mtok,
        "usd_per_mtok_electricity": j_per_mtok / J_PER_KWH * price if price is not None else np.nan,
    }
    if "energy_source" not in points:
        columns["energy_source"] = np.full(len(points), None, dtype=object)
    added = pd.DataFrame(columns, index=points.index)
    return with_columns(points, added)


def breakeven_hours(purchase_usd: float, hourly_usd: float, own_usd_per_hour: float) -> float:
    """Busy node-hours after which buying beats renting; inf when renting is never dearer."""
    margin = hourly_usd - own_usd_per_hour
    return purchase_usd / margin if margin > 0 else float("inf")


def rent_vs_own(
    cheapest: pd.DataFrame, tariffs: TariffTable | None, utilisation: float
) -> pd.DataFrame:
    """One row per (model, class, GPU, provider) of the cheapest table with measured decode
    power, when the tariff file gives an electricity price (formulas in the module docstring)."""
    price = electricity_usd_per_kwh(tariffs)
    needed = {"avg_power_w_decode", "provider", "gpu", "gpus_in_package", "hourly_usd"}
    if price is None or tariffs is None or cheapest.empty or not needed <= set(cheapest.columns):
        return pd.DataFrame(columns=RENT_VS_OWN_COLUMNS)
    measured = cheapest[pd.to_numeric(cheapest["avg_power_w_decode"], errors="coerce").notna()]
    purchases = {(t.provider, t.gpu, t.gpus_per_node): t.purchase_usd for t in tariffs.tariffs}
    rows: list[dict[str, Any]] = []
    for _, row in measured.drop_duplicates(list(RENT_VS_OWN_KEY)).iterrows():
        cards = int(row["gpus_in_package"])
        power_w = float(row["avg_power_w_decode"])
        own = power_w * cards / 1000 * price
        purchase = purchases.get((row["provider"], row["gpu"], cards))
        hours = None if purchase is None else breakeven_hours(purchase, row["hourly_usd"], own)
        j_per_mtok = float(row.get("j_per_mtok_output", np.nan))
        rows.append({
            **{k: row[k] for k in RENT_VS_OWN_KEY},
            "gpus_per_node": cards,
            "avg_power_w_decode": power_w,
            "j_per_mtok_output": j_per_mtok,
            "usd_per_mtok_electricity": j_per_mtok / J_PER_KWH * price,
            "usd_per_mtok_output_hourly": row.get("usd_per_mtok_output_hourly"),
            "hourly_usd": float(row["hourly_usd"]),
            "own_usd_per_hour": own,
            "purchase_usd": purchase,
            "breakeven_hours": hours,
            "breakeven_days": None if hours is None else hours / (HOURS_PER_DAY * utilisation),
            "utilisation": utilisation,
            "energy_source": row.get("energy_source"),
        })  # fmt: skip
    return pd.DataFrame(rows, columns=RENT_VS_OWN_COLUMNS)


def unavailable_reasons(points: pd.DataFrame) -> list[tuple[str, int]]:
    """Why energy is missing, and on how many measured rows (most frequent first)."""
    if "energy_unavailable_reason" not in points or "status" not in points:
        return []
    ok = points[points["status"] == "ok"]
    counts = ok["energy_unavailable_reason"].dropna().astype(str).value_counts()
    return [(str(reason), int(n)) for reason, n in counts.items()]
