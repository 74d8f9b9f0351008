"""The equal-quality verdict as a reader meets it: the rule in one line, the count of pass /
fail / undecided per class, and the undecided configurations with what would decide them.

The rule's words live in ``harness.measure.verdict.METHOD`` (the page and the code read the
same sentences); the columns come from ``harness.results.gate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from harness.measure import verdict
from harness.measure.verdict import QUALITY_CLASSES, VERDICTS
from harness.modes.base import HtmlTable, MdTable
from harness.results.columns import headers, table_columns
from harness.results.gate import NOT_MEASURED, UNITS, metric_column, unmeasured_column
from harness.results.pricing import verdict_column
from harness.results.publish.format import escape, fmt_count, fmt_float, fmt_int
from harness.spec.labels import CONFIGURATION, configuration_label

if TYPE_CHECKING:
    from harness.results.aggregate import Aggregate

# Beyond this many more units (windows, items) the advice is "no practical sample": the shipped
# corpus holds 1,100-1,500 windows of 256 tokens (by tokenizer) and 2,376 ARC items.
PRACTICAL_UNITS = 1e6
# what makes a configuration one group (harness.spec.scenario.GroupKey), within one run
GROUP_FIELDS = (
    "run", "model", "revision", "weights", "adapter", "backend", "quantization", "kv_cache_dtype",
    "target",
)  # fmt: skip
UNDECIDED = (
    "model", "configuration", "device", "quality_class", "undecided_on", "deciding_bounds",
    "to_decide",
)  # fmt: skip


def rule_line(quality_class: str, gated: tuple[str, ...]) -> str:
    """One line: the class, its margins, the test and the metrics it reads."""
    share = QUALITY_CLASSES[quality_class]
    margins = {
        "ppl": f"ΔNLL ≤ {verdict.ppl_margin(share):.5g} nats/token",
        "tasks": f"each task's drop ≤ {verdict.accuracy_share(share):.3g} × its reference rate, "
        "and no category's beyond its own",
    }
    metrics = " and ".join(margins[m] for m in gated)
    return (
        f"class {quality_class}: pass when the one-sided 95 % bound of each gated degradation "
        f"({metrics}) clears its margin, fail when the whole 90 % interval is beyond it, "
        "undecided otherwise; only pass is priced"
    )


def verdict_counts(result: Aggregate) -> dict[str, dict[str, int]]:
    """Per class: how many measured configurations (a run's group: quality is measured once
    per group, every point of it shares the verdict) pass, fail and stay undecided."""
    points = result.points
    known = (points["status"] == "ok").to_numpy(dtype=bool) & points["ppl_ref"].notna().to_numpy(
        dtype=bool
    )
    identity = [c for c in GROUP_FIELDS if c in points.columns]
    groups = points.loc[known].drop_duplicates(identity)
    out: dict[str, dict[str, int]] = {}
    for name in QUALITY_CLASSES:
        values = groups[verdict_column(name)].astype("object")
        out[name] = {v: int((values == v).sum()) for v in VERDICTS}
    return out


def _unmeasured(row: dict[str, Any], metric: str, quality_class: str) -> bool:
    return row.get(metric_column(metric, "verdict", quality_class)) == NOT_MEASURED


def _to_decide(row: dict[str, Any], metrics: list[str], quality_class: str) -> str:
    """'score N more windows' per undecided metric ('no finite sample' where d = m); a gated
    metric never compared with the reference: why, and that it needs measuring against it."""
    parts = []
    for metric in metrics:
        if _unmeasured(row, metric, quality_class):
            why = str(row.get(unmeasured_column(metric)) or f"{metric}: not measured")
            parts.append(f"{why} (not measured: score it against the reference)")
            continue
        more = row.get(metric_column(metric, "more", quality_class))
        if more is None or (isinstance(more, float) and np.isnan(more)):
            parts.append(f"{metric}: no sample size decides it at the observed mean")
        elif more > PRACTICAL_UNITS:
            parts.append(
                f"{metric}: no practical sample decides it (needs {fmt_count(more)} more "
                f"{UNITS[metric]} at the observed mean: it sits on the margin)"
            )
        else:
            unit = UNITS[metric] if more != 1 else UNITS[metric].removesuffix("s")
            parts.append(f"{metric}: score {fmt_int(more)} more {unit}")
    return "; ".join(parts)


def _bounds(row: dict[str, Any], metrics: list[str], quality_class: str) -> str:
    return "; ".join(
        f"{m} not measured"
        if _unmeasured(row, m, quality_class)
        else f"{m} bound {fmt_float(row.get(metric_column(m, 'bound', quality_class)))} vs "
        f"margin {fmt_float(row.get(metric_column(m, 'margin', quality_class)))}"
        for m in metrics
    )


def undecided_table(result: Aggregate, quality_class: str) -> pd.DataFrame:
    """One row per configuration left undecided for the class: the metric(s) that left it so,
    their deciding bound against the margin, and the items / windows that would decide."""
    points = result.points
    column = verdict_column(quality_class)
    if column not in points.columns:
        return pd.DataFrame(columns=list(UNDECIDED))
    chosen = points[(points[column] == "undecided") & (points["status"] == "ok")]
    by = "undecided_by_" + quality_class.replace(".", "_")
    rows = []
    seen: set[tuple[Any, ...]] = set()
    for record in chosen.astype("object").to_dict(orient="records"):
        r = {str(k): v for k, v in record.items()}
        ident = tuple(r.get(f) for f in GROUP_FIELDS)
        if ident in seen:  # one line per configuration: quality is measured once per group
            continue
        seen.add(ident)
        metrics = [m for m in str(r.get(by) or "").split(",") if m]
        rows.append(
            {
                "model": str(r.get("model")),
                "configuration": configuration_label(r, CONFIGURATION[:3]),
                "device": str(r.get("device")),
                "quality_class": quality_class,
                "undecided_on": ", ".join(metrics),
                "deciding_bounds": _bounds(r, metrics, quality_class),
                "to_decide": _to_decide(r, metrics, quality_class),
            }
        )
    return pd.DataFrame(rows, columns=list(UNDECIDED))


def classes_from(quality_class: str) -> list[str]:
    """Every class, the report's own first."""
    return [quality_class, *(c for c in QUALITY_CLASSES if c != quality_class)]


@dataclass(frozen=True)
class ClassVerdict:
    """One class's part of the section, as both renderings say it: its rule, its counts, and
    its undecided configurations (the UNDECIDED table)."""

    name: str
    rule: str
    counts: str
    undecided: pd.DataFrame


def section_title(result: Aggregate) -> str:
    return f"Equal quality: the verdict (gated on {', '.join(result.gated)})"


def class_verdicts(result: Aggregate, quality_class: str) -> list[ClassVerdict]:
    """Every class's verdict, the report's own class first."""
    every = verdict_counts(result)
    out = []
    for name in classes_from(quality_class):
        c = every[name]
        counts = f"Configurations: {c['pass']} pass, {c['fail']} fail, {c['undecided']} undecided."
        rule = rule_line(name, result.gated)
        out.append(ClassVerdict(name, rule, counts, undecided_table(result, name)))
    return out


def undecided_heading(name: str) -> str:
    return f"Undecided in class {name}, and what would decide them:"


def markdown_section(result: Aggregate, quality_class: str, table: MdTable) -> list[str]:
    """The verdict of every class: its rule, its counts, its undecided table."""
    lines = [f"\n## {section_title(result)}\n"]
    named = headers(UNDECIDED)
    for v in class_verdicts(result, quality_class):
        lines += [f"- {v.rule}.", f"  {v.counts}"]
        if not v.undecided.empty:
            records = v.undecided.to_dict("records")
            lines += [f"\n{undecided_heading(v.name)}\n"]
            lines.append(table([{named[str(k)]: str(x) for k, x in r.items()} for r in records]))
    return lines


def html_section(result: Aggregate, quality_class: str, table: HtmlTable) -> list[str]:
    """The verdict of every class: its rule, its counts, its undecided table."""
    parts = [f"<h2>{escape(section_title(result))}</h2>"]
    for v in class_verdicts(result, quality_class):
        parts.append(f"<p>{escape(v.rule)}. {v.counts}</p>")
        if not v.undecided.empty:
            parts.append(f"<p>{escape(undecided_heading(v.name))}</p>")
            table_id = "undecided" + (
                "" if v.name == quality_class else "-" + v.name.replace(".", "_")
            )
            parts.append(table(v.undecided, table_columns(UNDECIDED), table_id))
    return parts
