"""The serving part of a publication: a latency–throughput chart per configuration (every load
level, the TPOT target as a line, the level chosen at the SLO marked) and the rows of the
"cheapest at SLO" and "level at SLO" tables (html.py and markdown.py lay them out)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from harness.results.aggregate import Aggregate
from harness.results.publish.svg import svg_scatter

MAX_CHARTS = 12


def _finite(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def latency_throughput_charts(result: Aggregate, max_charts: int = MAX_CHARTS) -> list[str]:
    """One SVG per configuration with serving rows: x output tok/s, y TPOT p99 (ms) per level."""
    served = result.serving
    if served.empty:
        return []
    chosen = {str(k) for k in result.at_slo["key_at_slo"].dropna()}
    out = []
    for (_, group), rows in list(served.groupby(["run", "group"], sort=False))[:max_charts]:
        ok = rows[rows["status"] == "ok"]
        closed: list[tuple[float, float, str]] = []  # concurrency levels
        opened: list[tuple[float, float, str]] = []  # request-rate levels
        picked = []
        for rec in ok.to_dict(orient="records"):
            x, y = _finite(rec.get("output_tok_s")), _finite(rec.get("tpot_ms_p99"))
            tip = (
                f"{rec.get('level', '')}: {x:.4g} tok/s, TPOT p99 {y:.4g} ms, TTFT p99 "
                f"{_finite(rec.get('ttft_ms_p99')):.4g} ms, attainment "
                f"{_finite(rec.get('slo_attainment')):.3g}"
                + (", saturated" if rec.get("saturated") is True else "")
            )
            rate = _finite(rec.get("request_rate"))
            (opened if math.isfinite(rate) else closed).append((x, y, tip))
            if str(rec.get("key")) in chosen:
                picked.append((x, y, "chosen at the SLO: " + tip))
        if not closed and not opened:
            continue
        slo = _finite(rows["slo_tpot_ms"].iloc[0])
        attainment = _finite(rows["slo_attainment_target"].iloc[0])
        lines = [(slo, f"TPOT target {slo:g} ms")] if math.isfinite(slo) else []
        out.append(
            svg_scatter(
                f"{group}: throughput vs latency per load level",
                "output tok/s",
                "TPOT p99 (ms)",
                [
                    ("concurrency levels", closed, True),
                    ("request-rate levels", opened, True),
                    (f"chosen, attain. ≥ {attainment:g}", picked, False),
                ],
                hlines=lines,
            )
        )
    return out


def level_table(result: Aggregate) -> pd.DataFrame:
    """Per configuration: its level at the SLO (empty when there are no serving rows)."""
    return result.at_slo
