"""The headline table: the cheapest passing configuration per (model, GPU, package)."""

from __future__ import annotations

from harness.results.aggregate import Aggregate
from harness.results.pricing import check_quality_class
from harness.results.publish.format import fmt_count, fmt_float, fmt_pct_ci, fmt_usd

COMPACT = (
    "model",
    "days",
    "GPU",
    "config",
    "$/Mtok out",
    "$/Mtok total",
    "tokens/package",
    "× cheapest",
)


def headline_table(
    result: Aggregate,
    quality_class: str = "99",
    package_days: int | None = None,
    compact: bool = False,
) -> list[dict[str, str]]:
    """The cheapest passing configuration per (model, GPU, package) in ``quality_class``, as
    formatted strings keyed by column label, cheapest first per (model, days).
    ``compact``: the COMPACT columns only (quantization, KV, batch and context in ``config``),
    for a terminal."""
    check_quality_class(quality_class)
    table = result.cheapest
    table = table[table["quality_class"] == quality_class]
    if package_days is not None:
        table = table[table["package_days"] == package_days]
    out = []
    for rec in table.to_dict(orient="records"):
        out.append(
            {
                "model": str(rec["model"]),
                "class": str(rec["quality_class"]),
                "days": str(rec["package_days"]),
                "GPU": str(rec["gpu"]),
                "provider": str(rec["provider"]),
                "quant": str(rec["quantization"]),
                "KV": str(rec["kv_cache_dtype"]),
                "batch": str(rec["batch"]),
                "context": str(rec["context"]),
                "decode tok/s": fmt_float(rec["decode_tok_s"]),
                "$/Mtok out": fmt_usd(rec["usd_per_mtok_output"]),
                "$/Mtok total": fmt_usd(rec["usd_per_mtok_total"]),
                "tokens/package": fmt_count(rec["tokens_per_package"]),
                "breakeven util.": fmt_float(rec["breakeven_utilisation"], 3),
                "× cheapest": fmt_float(rec["ratio_to_cheapest_gpu"], 3),
                "Δppl % [95 % CI]": fmt_pct_ci(
                    rec["dppl_pct"], rec["dppl_pct_ci_low"], rec["dppl_pct_ci_high"]
                ),
            }
        )
    if compact:
        for row in out:
            row["config"] = f"{row['quant']} kv={row['KV']} b={row['batch']} ctx={row['context']}"
        out = [{k: row[k] for k in COMPACT} for row in out]
    return out
