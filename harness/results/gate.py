"""The equal-quality gate (MLPerf-style classes) and the reference rule it measures against.

**The reference rule**, stated once and used by the gate and by the error analysis
(``harness.results.regressions``): a row's reference rows are the ``is_reference`` rows of the
same run, model and revision that are ``ok``, on checkpoint weights and have measured the value
compared; those on the row's own target when there are any, else those on any target
(backend-independent). Several reference rows → the gate takes their median; the error analysis
pairs a configuration with the first of them (in row order) that kept its scores' group.

**The gate** (``harness.measure.verdict`` states the rule, the margins, the intervals and the
sample-size formula, and ``METHOD`` says them on the page): per row and quality class C, each
gated metric the row measured gets a verdict from the paired statistics the worker stored —

- ``ppl``: ΔNLL's one-sided 95 % bounds (``dnll_ci90_low/high``) against m = −ln C;
- ``arc``: the paired accuracy degradation's bounds (``arc_diff_ci90_low/high``) against
  m = (1 − C) × the reference's accuracy (``arc_acc_ref``, by the reference rule above);
- ``tasks``: each task of the row's ``tasks`` part, paired by the worker with the reference's
  per-item (per-field) results, against m = (1 − C) × the reference's rate on those units
  (``verdict.judge_task``): a task fails on its overall interval or on one category whose whole
  interval is beyond its margin, named in ``tasks_failed_by_<class>``;

and the row's ``verdict_<class>`` combines them (fail if any fails, pass if every one passes,
undecided otherwise). Reference rows pass by definition. Columns per class and metric:
``<metric>_verdict_<class>``, the bound that decided it (``<metric>_bound_<class>``), the margin
(``<metric>_margin_<class>``) and the units (windows, items) that would decide an undecided one
(``<metric>_needed_<class>``, from which ``<metric>_more_<class>`` more than it scored);
``undecided_by_<class>`` names the metrics that left a row undecided. ``pass_<class>`` is
``verdict_<class> == "pass"``: only those rows are priced as equal quality.

``quality_class`` is the strictest class a row passes, else ``undecided`` (class 99 undecided),
``below`` (class 99 failed) or ``unknown`` (no reference, no quality). The paired bootstrap 95 %
CI of the per-window NLL difference (``dnll_ci_low/high``) is carried as a perplexity change in
per cent: ``dppl_pct = (exp(dnll) − 1) × 100``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.measure import verdict
from harness.measure.verdict import VERDICTS
from harness.results.frame import Array, Codes, groups_of, joint_key, random_weights
from harness.results.pricing import QUALITY_CLASSES, pass_column, verdict_column

# A reference is of the same run, model and revision; the same target is preferred.
SAME_REFERENCE = ("run", "model", "revision")
# quality_class's values, best first: the classes from the strictest, then below any, unknown
PASSING = tuple(sorted(QUALITY_CLASSES, key=QUALITY_CLASSES.__getitem__, reverse=True))
LOOSEST = PASSING[-1]  # class 99: the one whose verdict says undecided / below
CLASS_ORDER = (*PASSING, "undecided", "below", "unknown")


@dataclass(frozen=True)
class Strata:
    """Every row's reference strata as dense group ids: (run, model, revision, target) and
    (run, model, revision). One frame's, shared by every compared column."""

    fine: Array
    fine_count: int
    coarse: Array
    coarse_count: int


def strata(frame: pd.DataFrame, codes: Codes | None = None) -> Strata:
    codes = codes or Codes(frame)
    same = [codes(c) for c in SAME_REFERENCE]
    fine, fine_count, _ = groups_of(joint_key(*same, codes("target")))
    coarse, coarse_count, _ = groups_of(joint_key(*same))
    return Strata(fine, fine_count, coarse, coarse_count)


@dataclass(frozen=True)
class References:
    """The reference rule's answer for every row of one frame and one compared column."""

    eligible: Array  # per row: a reference row that counts (is_reference, ok, measured, ...)
    strata: Strata
    on_target: Array  # per row: its own target has an eligible reference row (else: any target)

    def rows_for(self, row: int) -> Array:
        """Positions of the reference rows row ``row`` is compared with (empty: none)."""
        ids = self.strata.fine if self.on_target[row] else self.strata.coarse
        return np.flatnonzero(self.eligible & (ids == ids[row]))

    def median(self, values: Array) -> Array:
        """Per row: the median of ``values`` over its reference rows (NaN where it has none)."""
        out: Array = np.full(len(values), np.nan)
        if not self.eligible.any():
            return out
        s = self.strata
        for ids, count, use in (
            (s.fine, s.fine_count, self.on_target),
            (s.coarse, s.coarse_count, ~self.on_target),
        ):
            medians = pd.Series(values[self.eligible]).groupby(ids[self.eligible]).median()
            table = np.full(count, np.nan)
            table[medians.index.to_numpy(dtype=np.int64)] = medians.to_numpy(dtype=np.float64)
            out = np.where(use, table[ids], out)
        return out


def references(
    frame: pd.DataFrame, column: str, codes: Codes | None = None, among: Strata | None = None
) -> References:
    """The reference rows of every row of ``frame`` for ``column`` (the module docstring's rule);
    ``among``: the frame's ``strata``, when already known."""
    among = among or strata(frame, codes)
    values = frame[column].to_numpy(dtype=np.float64)
    eligible = (
        frame["is_reference"].to_numpy(dtype=bool)
        & (frame["status"] == "ok").to_numpy(dtype=bool)
        & ~np.isnan(values)
        & ~random_weights(frame)
    )
    has_reference = np.zeros(among.fine_count, dtype=bool)
    has_reference[among.fine[eligible]] = True
    return References(eligible, among, has_reference[among.fine])


# metric → (estimate, low, high, units) columns of the row (harness.row.Quality)
METRIC_COLUMNS: dict[str, tuple[str, str, str, str]] = {
    "ppl": ("dnll_vs_ref", "dnll_ci90_low", "dnll_ci90_high", "quality_windows"),
    "arc": ("arc_diff", "arc_diff_ci90_low", "arc_diff_ci90_high", "arc_paired_items"),
}
UNITS = {"ppl": "windows", "arc": "ARC items", "tasks": "task units (items or gold fields)"}
GATE_METRICS = tuple(UNITS)  # every metric the gate judges, in the order it shows them
NOT_MEASURED = "not measured"  # a metric's verdict column where the row did not measure it


def measured_gates(frame: pd.DataFrame, gated: Sequence[str]) -> tuple[str, ...]:
    """The gated metrics, less ``tasks`` where no row scored a task (the rule a report states
    names only what the run could gate on)."""
    scored = "tasks" in frame.columns and frame["tasks"].map(lambda t: isinstance(t, list)).any()
    return tuple(m for m in gated if m != "tasks" or scored)


def metric_column(metric: str, what: str, quality_class: str) -> str:
    return f"{metric}_{what}_{quality_class.replace('.', '_')}"


def quality_gate(
    frame: pd.DataFrame,
    codes: Codes | None = None,
    gated: Sequence[str] = GATE_METRICS,
) -> pd.DataFrame:
    """Adds ppl_ref, arc_acc_ref, quality_pct, the verdict columns of every class (module
    docstring), pass_<class>, quality_class and dppl_pct (+CI). ``gated``: the metrics that
    decide (the scenario's ``quality.gate``; default every one); the others are judged and
    shown all the same."""
    out = frame
    codes = codes or Codes(frame)
    ppl = np.where(random_weights(out), np.nan, out["ppl"].to_numpy(dtype=np.float64))
    among = strata(out, codes)
    ppl_ref = references(out, "ppl", among=among).median(out["ppl"].to_numpy(dtype=np.float64))
    arc_ref = references(out, "arc_acc", among=among).median(_floats(out, "arc_acc"))
    out["ppl_ref"] = ppl_ref
    out["arc_acc_ref"] = arc_ref
    with np.errstate(invalid="ignore", divide="ignore"):
        out["quality_pct"] = ppl_ref / ppl * 100
    known = ~np.isnan(ppl) & ~np.isnan(ppl_ref)
    reference = (
        out["is_reference"].to_numpy(dtype=bool)
        & (out["status"] == "ok").to_numpy(dtype=bool)
        & ~random_weights(out)
    )
    for name, share in QUALITY_CLASSES.items():
        margins = {
            "ppl": np.full(len(out), verdict.ppl_margin(share)),
            "arc": verdict.accuracy_share(share) * arc_ref,
        }
        # every metric is judged and shown; only the gated ones decide the configuration
        judged = {m: _judge_metric(out, m, margins[m], name, measured=known) for m in margins}
        judged["tasks"] = _judge_tasks(out, share, name, measured=known)
        _combine(out, name, {m: judged[m] for m in gated}, reference)
    passes = [out[pass_column(name)].to_numpy(dtype=bool) for name in PASSING]
    verdict_99 = out[verdict_column(LOOSEST)].to_numpy()
    below = [verdict_99 == "undecided", verdict_99 == "fail"]
    code = np.select(
        [*passes, *(known & b for b in below)], list(range(len(PASSING) + 2)), len(PASSING) + 2
    )
    out["quality_class"] = pd.Categorical.from_codes(
        code.astype(np.int64), categories=pd.Index(CLASS_ORDER)
    )
    for suffix in ("", "_ci_low", "_ci_high"):
        source = "dnll_vs_ref" if not suffix else f"dnll{suffix}"
        out[f"dppl_pct{suffix}"] = np.expm1(out[source].to_numpy(dtype=np.float64)) * 100
    return out


def _floats(frame: pd.DataFrame, column: str) -> Array:
    """A float column as an array; all NaN where the frame lacks it (rows of older runs)."""
    if column not in frame.columns:
        return np.full(len(frame), np.nan)
    values: Array = frame[column].to_numpy(dtype=np.float64)
    return values


def _judge_metric(
    out: pd.DataFrame, metric: str, margin: Array, quality_class: str, *, measured: Array
) -> Array:
    """One metric's verdict codes (VERDICTS' indices; -1: not measured on the row) for one
    class, with its bound, margin and the units that would decide it as columns."""
    est, low, high, units = (_floats(out, c) for c in METRIC_COLUMNS[metric])
    present = measured & ~np.isnan(est)
    codes = np.where(present, verdict.decide_codes(low, high, margin), -1)
    undecided = codes == VERDICTS.index("undecided")
    bound = np.where(codes == VERDICTS.index("fail"), low, high)
    bound = np.where(undecided & (est > margin), low, bound)
    needed = np.where(undecided, verdict.needed_units(est, low, high, margin, units), np.nan)
    names = np.array([*VERDICTS, NOT_MEASURED], dtype=object)
    out[metric_column(metric, "verdict", quality_class)] = names[codes]  # -1: NOT_MEASURED
    out[metric_column(metric, "bound", quality_class)] = np.where(present, bound, np.nan)
    out[metric_column(metric, "margin", quality_class)] = np.where(present, margin, np.nan)
    out[metric_column(metric, "needed", quality_class)] = needed
    out[metric_column(metric, "more", quality_class)] = np.maximum(needed - units, 0)
    return np.asarray(codes, dtype=np.int64)


def _task_interval(part: dict[str, Any], prefix: str) -> verdict.Interval | None:
    """The paired interval a row's task (or category) part stored, None when it has none."""
    keys = ("diff", f"{prefix}ci90_low", f"{prefix}ci90_high")
    values = [part.get(k) for k in keys]
    if any(v is None for v in values) or part.get("paired_units") is None:
        return None
    est, low, high = (float(v) for v in values if v is not None)
    return verdict.Interval(est, low, high, float("nan"), int(part["paired_units"]))


def _task_decisions(
    tasks: list[dict[str, Any]], share: float
) -> list[tuple[str, verdict.TaskDecision]]:
    """Each paired task of a row's ``tasks`` part, judged (``verdict.judge_task``)."""
    out = []
    for task in tasks:
        overall = _task_interval(task, "diff_")
        if overall is None or task.get("ref_rate") is None:
            continue
        categories = []
        for category in task.get("categories") or []:
            interval = _task_interval(category, "diff_")
            if interval is not None and category.get("ref_rate") is not None:
                categories.append((str(category["category"]), interval, category["ref_rate"]))
        decided = verdict.judge_task(share, overall, float(task["ref_rate"]), categories)
        out.append((str(task["name"]), decided))
    return out


def _judge_tasks(out: pd.DataFrame, share: float, quality_class: str, *, measured: Array) -> Array:
    """The tasks metric's verdict codes for one class (VERDICTS' indices; -1: no paired task):
    fail if any task fails (overall, or one category beyond its margin), pass if every paired
    task passes, undecided otherwise; the deciding task's bound, margin and units as for every
    metric, and ``tasks_failed_by_<class>`` naming each failing task and category."""
    n = len(out)
    codes = np.full(n, -1, dtype=np.int64)
    bound, margin, needed, units = (np.full(n, np.nan) for _ in range(4))
    failed: Array = np.full(n, "", dtype=object)
    column = out["tasks"] if "tasks" in out.columns else pd.Series([None] * n)
    for i, tasks in enumerate(column.tolist()):
        if not measured[i] or not isinstance(tasks, list):
            continue
        decided = _task_decisions(tasks, share)
        if not decided:
            continue
        verdicts = [d.verdict for _, d in decided]
        codes[i] = VERDICTS.index(verdict.combine(verdicts))
        pick = next((d for _, d in decided if d.verdict == VERDICTS[codes[i]]), decided[0][1])
        decision = pick.category or pick.overall
        bound[i], margin[i] = decision.bound, decision.margin
        needed[i] = np.nan if decision.needed is None else decision.needed
        units[i] = decision.interval.n
        failed[i] = "; ".join(_failure(t, d) for t, d in decided if d.verdict == "fail")
    out[metric_column("tasks", "verdict", quality_class)] = np.array(
        [*VERDICTS, NOT_MEASURED], dtype=object
    )[codes]
    out[metric_column("tasks", "bound", quality_class)] = bound
    out[metric_column("tasks", "margin", quality_class)] = margin
    out[metric_column("tasks", "needed", quality_class)] = needed
    out[metric_column("tasks", "more", quality_class)] = np.maximum(needed - units, 0)
    out["tasks_failed_by_" + quality_class.replace(".", "_")] = failed
    return codes


def _failure(task: str, decided: verdict.TaskDecision) -> str:
    """A failing task in words: which part failed, its drop's lower bound and the margin."""
    if decided.failed_category is not None and decided.category is not None:
        c = decided.category
        return (f"{task}: category {decided.failed_category} drops {c.interval.estimate:.3f} "
                f"(90 % CI low {c.interval.low:.3f} > margin {c.margin:.4f})")  # fmt: skip
    o = decided.overall
    return (f"{task}: overall drops {o.interval.estimate:.3f} (90 % CI low {o.interval.low:.3f} "
            f"> margin {o.margin:.4f})")  # fmt: skip


def _combine(
    out: pd.DataFrame, quality_class: str, codes: dict[str, Array], reference: Array
) -> None:
    """verdict_<class>, pass_<class> and undecided_by_<class> from the metrics' codes:
    fail if any fails; pass if every measured one passes (at least one); else undecided.
    Reference rows pass: they are the quality every other row is measured against."""
    fail_code, pass_code = VERDICTS.index("fail"), VERDICTS.index("pass")
    stacked = np.vstack(list(codes.values())) if codes else np.full((1, len(out)), -1)
    any_fail = (stacked == fail_code).any(axis=0)
    measured = stacked >= 0
    all_pass = measured.any(axis=0) & ((stacked == pass_code) | ~measured).all(axis=0)
    result = np.select([reference, any_fail, all_pass], ["pass", "fail", "pass"], "undecided")
    out[verdict_column(quality_class)] = result
    out[pass_column(quality_class)] = result == "pass"
    undecided_code = VERDICTS.index("undecided")
    leaving: Array = np.full(len(out), "", dtype=object)
    for metric, metric_codes in codes.items():
        mark = (metric_codes == undecided_code) & (result == "undecided")
        leaving = np.where(mark & (leaving == ""), metric, leaving)
        leaving = np.where(
            mark & (leaving != metric) & (leaving != ""), leaving + "," + metric, leaving
        )
    out["undecided_by_" + quality_class.replace(".", "_")] = leaving
