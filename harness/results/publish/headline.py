"""The headline table: the cheapest passing configuration per (model, GPU, package)."""

from __future__ import annotations

from typing import Any

from harness.results.aggregate import Aggregate
from harness.results.columns import (
    CHEAPEST_OF,
    CONFIGURATION,
    DPPL_WITH_CI,
    PACKAGE_TERMS,
    PRICE_READ,
    USD_PER_MTOK,
    headers,
    spec,
)
from harness.results.pricing import check_quality_class
from harness.results.publish.format import fmt_float, fmt_value
from harness.spec.labels import configuration_label

# the columns, by name (labels and formats: harness.results.columns)
HEADLINE = (
    *CHEAPEST_OF,
    *CONFIGURATION,
    "decode_tok_s",
    *USD_PER_MTOK,
    *PACKAGE_TERMS,
    "dppl_pct_with_ci",
    *PRICE_READ,
)
# for a terminal: the configuration (engine, weights, KV, batch, context) in one label
COMPACT_COLUMNS = (
    "model",
    "package_days",
    "gpu",
    "configuration",
    "usd_per_mtok_output",
    "usd_per_mtok_total",
    "tokens_per_package",
    "ratio_to_cheapest_gpu",
    *PRICE_READ,
)
COMPACT = tuple(headers(COMPACT_COLUMNS).values())
# the labels of the numeric columns (a terminal right-justifies them)
NUMERIC = frozenset(spec(n).label for n in (*HEADLINE, *COMPACT_COLUMNS) if spec(n).fmt)
# ratios read at 3 significant digits here (4 in the report's tables)
DIGITS = {"breakeven_utilisation": 3, "ratio_to_cheapest_gpu": 3}


def cell(rec: dict[str, Any], name: str) -> str:
    """One headline cell of the cheapest table's record ``rec`` as text."""
    if name == "configuration":
        return configuration_label(rec)
    if name == "dppl_pct_with_ci":
        value: Any = tuple(rec[c] for c in DPPL_WITH_CI)
    else:
        value = rec[name]
    if name in DIGITS:
        return fmt_float(value, DIGITS[name])
    fmt = spec(name).formatter()
    return fmt_value(value) if fmt is None else fmt(value)  # text: "" where a row has none


def headline_table(
    result: Aggregate,
    quality_class: str = "99",
    package_days: int | None = None,
    compact: bool = False,
) -> list[dict[str, str]]:
    """The cheapest passing configuration per (model, GPU, package) in ``quality_class``, as
    formatted strings keyed by column label, cheapest first per (model, days).
    ``compact``: the COMPACT columns only (engine, quantization, KV, batch and context in one
    configuration label), for a terminal."""
    check_quality_class(quality_class)
    table = result.cheapest
    table = table[table["quality_class"] == quality_class]
    if package_days is not None:
        table = table[table["package_days"] == package_days]
    names = COMPACT_COLUMNS if compact else HEADLINE
    rows = []
    for record in table.to_dict(orient="records"):
        rec = {str(k): v for k, v in record.items()}
        rows.append({spec(n).label: cell(rec, n) for n in names})
    return rows
