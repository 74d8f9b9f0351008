"""summary.json: counts, the headline, the cheapest configurations, ratios, fronts, tariffs."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from harness import __version__
from harness.results.aggregate import Aggregate
from harness.results.publish.analysis import mode_reports
from harness.results.publish.headline import headline_table
from harness.results.publish.method import FORMULAS, LICENCES
from harness.spec.tariffs import TariffTable


def json_safe(value: Any) -> Any:
    """JSON-safe: NaN/inf → None, numpy scalars → Python, containers recursively."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def records(frame: pd.DataFrame, limit: int | None = None) -> list[dict[str, Any]]:
    part = frame if limit is None else frame.head(limit)
    return [json_safe(r) for r in part.astype("object").to_dict(orient="records")]


def mode_summaries(result: Aggregate) -> dict[str, list[dict[str, Any]]]:
    """Each mode's own entries (its `report` part's ``summary``), in the registry's order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for part in mode_reports():
        out |= {key: records(frame) for key, frame in part.summary(result).items()}
    return out


def summary(result: Aggregate, tariffs: TariffTable | None, quality_class: str) -> dict[str, Any]:
    return {
        "harness": __version__,
        "generated_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "utilisation": result.utilisation,
        "quality_class": quality_class,
        "counts": json_safe(result.counts),
        "unreadable": [{"file": f, "reason": why} for f, why in result.unreadable],
        "headline": headline_table(result, quality_class),
        "cheapest": records(result.cheapest),
        "gpu_ratios": records(result.gpu_ratios),
        "pareto_cost_quality": records(result.pareto_cost_quality),
        "pareto_throughput_latency": records(result.pareto_throughput_latency, 500),
        **mode_summaries(result),
        "tariffs": [t.model_dump() for t in tariffs.tariffs] if tariffs else [],
        "tariff_note": tariffs.note if tariffs else None,
        "formulas": FORMULAS,
        "licences": [{"data": name, "attribution": text} for name, text in LICENCES],
    }
