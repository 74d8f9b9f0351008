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
- ``tasks``: each task of the row's ``tasks`` part (ARC-Easy is the task ``arc-easy``; a run
  gated on ``arc`` before it was one is gated on ``tasks``), paired by the worker with the
  reference's per-item (per-field) results, against m = (1 − C) × the reference's rate on those
  units (``verdict.judge_task``): a task fails on its overall interval or on one category whose
  whole interval is beyond its margin, named in ``tasks_failed_by_<class>``;

and the row's ``verdict_<class>`` combines the metrics it gates on: fail if any fails, pass if
every one passes, undecided otherwise, **and undecided when a gated metric was not measured** on
the row (never compared with the reference: no reference row, its windows or a task's item ids
not paired with the reference's, a task the reference scored and the row did not).
``unmeasured_gates`` says, per row, which gated metric was not measured and why (one clause each,
``"task snips-intent: no item ids paired with the reference's"``), and ``<metric>_unmeasured``
each metric's own (gated or not); the report's undecided table carries them. Reference rows
pass by definition. Columns per class and metric: ``<metric>_verdict_<class>``, the bound that
decided it (``<metric>_bound_<class>``), the margin (``<metric>_margin_<class>``) and the units
(windows, items) that would decide an undecided one (``<metric>_needed_<class>``, from which
``<metric>_more_<class>`` more than it scored);
``undecided_by_<class>`` names the metrics that left a row undecided. ``pass_<class>`` is
``verdict_<class> == "pass"``: only those rows are priced as equal quality.

**What a row gates on** (``Gates``): the metrics its run's scenario names (``quality.gate``, as
the manifest records it); where nothing says, every metric its run's rows scored (``ppl``, and
``tasks`` where any row of the run scored one). Rows of several runs (a site) are
each gated on their own run's metrics (a mapping run → metrics); ``gated_on`` names them per row.

``quality_class`` is the strictest class a row passes, else ``undecided`` (class 99 undecided),
``below`` (class 99 failed) or ``unknown`` (no reference, no quality). The paired bootstrap 95 %
CI of the per-window NLL difference (``dnll_ci_low/high``) is carried as a perplexity change in
per cent: ``dppl_pct = (exp(dnll) − 1) × 100``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.measure import verdict
from harness.measure.verdict import VERDICTS
from harness.results import context_gate
from harness.results.frame import (
    Array,
    Codes,
    Phrases,
    groups_of,
    joined_phrases,
    joint_key,
    random_weights,
    with_columns,
)
from harness.results.pricing import QUALITY_CLASSES, pass_column, verdict_column
from harness.spec.quality import GATE_METRICS, gate_names

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
}
# what each metric the gate judges (spec.quality.GATE_METRICS, in the order it shows them) counts
UNITS = {"ppl": "windows", "tasks": "task units (items or gold fields)",
         "context": "long-context items at the judged context"}  # fmt: skip
NOT_MEASURED = "not measured"  # a metric's verdict column where the row did not measure it
UNMEASURED = "unmeasured_gates"  # per row: each gated metric not measured, and why
GATED_ON = "gated_on"  # per row: the metrics its verdict reads, comma-separated

Columns = dict[str, Any]  # the columns the gate adds, by name

# What one run gates on: its metrics, or None for every metric its rows scored (the default of a
# run whose manifest does not say). Gates: that, or per run name (rows of several runs: a site).
RunGates = Sequence[str] | None
Gates = RunGates | Mapping[str, RunGates]


def _scored(frame: pd.DataFrame, metric: str) -> bool:
    """Whether any row of ``frame`` scored ``metric`` (ppl: always gated where nothing says)."""
    if metric == "tasks":
        if "tasks" not in frame.columns:
            return False
        column = frame["tasks"].to_numpy(dtype=object)
        return any(_gated_tasks(v) for v in column[pd.notna(column)])
    if metric == "context":
        if "tasks" not in frame.columns:
            return False
        column = frame["tasks"].to_numpy(dtype=object)
        return any(_long_tasks(v) for v in column[pd.notna(column)])
    return True


def _gated_tasks(value: object) -> bool:
    """A row's tasks part holds a task the ``tasks`` metric judges (long-context tasks are the
    ``context`` metric's: harness.results.context_gate)."""
    return _is_list(value) and any(not _is_long(t) for t in value)  # type: ignore[attr-defined]


def _long_tasks(value: object) -> bool:
    return _is_list(value) and any(_is_long(t) for t in value)  # type: ignore[attr-defined]


def _is_long(task: object) -> bool:
    return isinstance(task, dict) and task.get("kind") == context_gate.KIND


def _is_list(value: object) -> bool:
    return isinstance(value, list)


def measured_gates(frame: pd.DataFrame, gated: RunGates) -> tuple[str, ...]:
    """The metrics one run's rows (``frame``) are gated on: ``gated`` as its scenario named them
    (even one no row measured: those rows stay undecided, said why), or where nothing named
    them (None), ``ppl`` and every other metric a row of the run scored."""
    if gated is not None:
        named = gate_names(gated)
        return tuple(m for m in GATE_METRICS if m in named)
    return tuple(m for m in GATE_METRICS if _scored(frame, m))


def gates_by_run(frame: pd.DataFrame, gated: Gates) -> dict[str, tuple[str, ...]]:
    """Each run's gated metrics (``measured_gates`` over that run's rows); a run a mapping does
    not name is gated as one whose manifest does not say."""
    codes, names = _run_codes(frame)
    scored = frame[[c for c in ("tasks",) if c in frame.columns]]  # what measured_gates reads
    out: dict[str, tuple[str, ...]] = {}
    for i, name in enumerate(names or [""]):
        own = gated.get(name) if isinstance(gated, Mapping) else gated
        rows = scored if len(names) < 2 else scored[codes == i]
        out[name] = measured_gates(rows, own)
    return out


def _run_codes(frame: pd.DataFrame) -> tuple[Array, list[str]]:
    """Per row, its run as a position in the run names (in order of appearance; "" for none)."""
    if not len(frame):
        return np.zeros(0, dtype=np.int64), []
    found, uniques = pd.factorize(frame["run"])  # hashed as stored: no Python string per row
    codes: Array = found
    names = [str(u) for u in uniques]
    if (codes < 0).any():  # no run named
        names += [] if "" in names else [""]
        codes = np.where(codes < 0, names.index(""), codes)
    return codes.astype(np.int64), names


def _gate_masks(frame: pd.DataFrame, by_run: dict[str, tuple[str, ...]]) -> dict[str, Array]:
    """Per metric: the rows whose verdict it decides."""
    codes, names = _run_codes(frame)
    return {
        m: np.isin(codes, [i for i, r in enumerate(names) if m in by_run.get(r, ())])
        for m in GATE_METRICS
    }


def metric_column(metric: str, what: str, quality_class: str) -> str:
    return f"{metric}_{what}_{quality_class.replace('.', '_')}"


def unmeasured_column(metric: str) -> str:
    """Per row: why ``metric`` was not compared with the reference ("" where it was)."""
    return f"{metric}_unmeasured"


def quality_gate(
    frame: pd.DataFrame,
    codes: Codes | None = None,
    gated: Gates = None,
) -> pd.DataFrame:
    """Adds ppl_ref, quality_pct, the verdict columns of every class (module
    docstring), pass_<class>, quality_class, dppl_pct (+CI), ``gated_on`` and
    ``unmeasured_gates``. ``gated``: the metrics that decide (``Gates``: the scenario's
    ``quality.gate``, per run where rows of several runs meet); the others are judged and shown
    all the same."""
    out = frame
    cols: Columns = {}  # every column the gate adds, joined to the frame at once
    codes = codes or Codes(frame)
    ppl = np.where(random_weights(out), np.nan, out["ppl"].to_numpy(dtype=np.float64))
    among = strata(out, codes)
    ppl_rule = references(out, "ppl", among=among)
    ppl_ref = ppl_rule.median(out["ppl"].to_numpy(dtype=np.float64))
    cols["ppl_ref"] = ppl_ref
    with np.errstate(invalid="ignore", divide="ignore"):
        cols["quality_pct"] = ppl_ref / ppl * 100
    known = ~np.isnan(ppl) & ~np.isnan(ppl_ref)
    reference = (
        out["is_reference"].to_numpy(dtype=bool)
        & (out["status"] == "ok").to_numpy(dtype=bool)
        & ~random_weights(out)
    )
    by_run = gates_by_run(out, gated)
    decides = _gate_masks(out, by_run)
    cols[GATED_ON] = _joined(decides, ", ")
    why = _unmeasured(out, ppl, known, ppl_rule)
    for metric, text in why.items():
        cols[unmeasured_column(metric)] = Phrases.constant("", len(out)).where(reference, text)
    cols[UNMEASURED] = _reasons(why, decides, ~reference)
    for name, share in QUALITY_CLASSES.items():
        margin = np.full(len(out), verdict.ppl_margin(share))
        # every metric is judged and shown; only the gated ones decide the configuration
        judged = {"ppl": _judge_metric(out, cols, "ppl", margin, name, measured=known)}
        judged["tasks"] = _judge_tasks(
            out, cols, share, name, measured=known, unpaired=~why["tasks"].is_("")
        )
        judged["context"] = _judge_context(out, cols, share, name, measured=known)
        _combine(cols, len(out), name, judged, decides, reference)
    passes = [np.asarray(cols[pass_column(name)], dtype=bool) for name in PASSING]
    verdict_99: Phrases = cols[verdict_column(LOOSEST)]
    below = [verdict_99.is_("undecided"), verdict_99.is_("fail")]
    code = np.select(
        [*passes, *(known & b for b in below)], list(range(len(PASSING) + 2)), len(PASSING) + 2
    )
    cols["quality_class"] = pd.Categorical.from_codes(
        code.astype(np.int64), categories=pd.Index(CLASS_ORDER)
    )
    for suffix in ("", "_ci_low", "_ci_high"):
        source = "dnll_vs_ref" if not suffix else f"dnll{suffix}"
        cols[f"dppl_pct{suffix}"] = np.expm1(_floats(out, source)) * 100
    texts = {k: v.column() for k, v in cols.items() if isinstance(v, Phrases)}
    return with_columns(out, pd.DataFrame({**cols, **texts}, index=out.index))


def _floats(frame: pd.DataFrame, column: str) -> Array:
    """A float column as an array; all NaN where the frame lacks it (rows of older runs)."""
    if column not in frame.columns:
        return np.full(len(frame), np.nan)
    values: Array = frame[column].to_numpy(dtype=np.float64)
    return values


def _joined(masks: dict[str, Array], sep: str) -> Phrases:
    """Per row: the names of the masks that hold there, joined with ``sep``."""
    return joined_phrases([Phrases.flag(mask, name) for name, mask in masks.items()], sep)


# --- a gated metric that was never compared ----------------------------------------------------


def _unmeasured(
    out: pd.DataFrame, ppl: Array, known: Array, ppl_rule: References
) -> dict[str, Phrases]:
    """Per metric and row: why the row has no paired comparison of that metric with its
    reference ("" where it has one): one clause per metric, each task named on its own."""
    no_ppl = "no perplexity scored on this row"
    no_ref = "no reference row of its run, model and revision scored perplexity"
    base = Phrases(np.select([np.isnan(ppl), ~known], [1, 2], 0), ("", no_ppl, no_ref))
    why: dict[str, Phrases] = {}
    ppl_pair = [_floats(out, c) for c in METRIC_COLUMNS["ppl"][:3]]
    unpaired = np.isnan(ppl_pair[0]) | np.isnan(ppl_pair[1]) | np.isnan(ppl_pair[2])
    why["ppl"] = _clause("ppl", base, [
        (unpaired, "its windows were not paired with the reference's (no ΔNLL stored)"),
    ])  # fmt: skip
    why["tasks"] = _tasks_unmeasured(out, base, ppl_rule)
    why["context"] = _context_unmeasured(out, base)
    return why


def _context_unmeasured(out: pd.DataFrame, base: Phrases) -> Phrases:
    """Per row: why no judged context gates it (none at or above its context, or no long-context
    task), after the causes every metric shares."""
    if not _scored(out, "context"):  # no row scored a long-context task: one cause for all
        return _clause("context", base, [(np.ones(len(out), dtype=bool),
                                          "no long-context task scored on this row")])  # fmt: skip
    column = out["tasks"].tolist()
    contexts = _floats(out, "context")
    causes = base.texts()
    why: Array = np.full(len(out), "", dtype=object)
    for i, tasks in enumerate(column):
        if causes[i]:
            why[i] = f"context: {causes[i]}"
            continue
        judged = context_gate.context_verdicts(tasks, QUALITY_CLASSES[LOOSEST])
        why[i] = context_gate.row_verdict(judged, float(contexts[i]))[1]
    return Phrases.of(why)


def _clause(metric: str, base: Phrases, causes: list[tuple[Array, str]]) -> Phrases:
    """Per row, ``<metric>: <the first cause that holds>`` ("" where none holds); ``base``: a
    cause of every metric of the row (no quality, no reference), before the metric's own."""
    cause = base
    for mask, text in causes:
        cause = Phrases.constant(text, len(base)).where(cause.is_("") & mask, cause)
    return cause.map(lambda text: f"{metric}: {text}" if text else "")


def _reference_tasks(out: pd.DataFrame, rule: References) -> list[set[str]]:
    """Per row: the names of the tasks its reference rows scored (the reference rule)."""
    column = out["tasks"].tolist() if "tasks" in out.columns else [None] * len(out)
    names = [{str(t.get("name")) for t in v} if isinstance(v, list) else set() for v in column]
    s = rule.strata
    fine: dict[int, set[str]] = {}
    coarse: dict[int, set[str]] = {}
    for i in np.flatnonzero(rule.eligible):
        fine.setdefault(int(s.fine[i]), set()).update(names[i])
        coarse.setdefault(int(s.coarse[i]), set()).update(names[i])
    return [
        (fine if rule.on_target[i] else coarse).get(
            int((s.fine if rule.on_target[i] else s.coarse)[i]), set()
        )
        for i in range(len(out))
    ]


def _tasks_unmeasured(out: pd.DataFrame, base: Phrases, rule: References) -> Phrases:
    """Per row: each task not paired with the reference ("task <name>: no item ids paired with
    the reference's"), or the reference scored and the row did not, joined with "; "."""
    n = len(out)
    if not _scored(out, "tasks"):  # no row scored a task: one cause for every row
        return _clause("tasks", base, [(np.ones(n, dtype=bool), "no task scored on this row")])
    why: Array = np.full(n, "", dtype=object)
    column = out["tasks"].tolist()
    wanted = _reference_tasks(out, rule)
    causes = base.texts()
    for i, tasks in enumerate(column):
        if causes[i]:
            why[i] = f"tasks: {causes[i]}"
            continue
        if not _is_list(tasks) or not tasks:
            why[i] = "tasks: no task scored on this row"
            continue
        own = {str(t.get("name")) for t in tasks}
        clauses = [
            f"task {str(t.get('name'))[:40]}: no item ids paired with the reference's"
            for t in tasks
            if (_task_interval(t, "diff_") is None or t.get("ref_rate") is None) and not _is_long(t)
        ]
        clauses += [
            f"task {name[:40]}: scored by the reference, not on this row"
            for name in sorted(wanted[i] - own)
        ]
        why[i] = "; ".join(clauses)
    return Phrases.of(why)


def _reasons(why: dict[str, Phrases], decides: dict[str, Array], judged: Array) -> Phrases:
    """Per row: the reasons of the metrics it gates on, joined with "; " ("" for a reference
    row)."""
    nothing = Phrases.constant("", len(judged))
    return joined_phrases(
        [text.where(decides[metric] & judged, nothing) for metric, text in why.items()], "; "
    )


# --- each metric's verdict ---------------------------------------------------------------------


def _judge_metric(
    out: pd.DataFrame,
    cols: Columns,
    metric: str,
    margin: Array,
    quality_class: str,
    *,
    measured: Array,
) -> Array:
    """One metric's verdict codes (VERDICTS' indices; -1: not measured on the row) for one
    class, with its bound, margin and the units that would decide it as columns."""
    est, low, high, units = (_floats(out, c) for c in METRIC_COLUMNS[metric])
    present = measured & ~np.isnan(est) & ~np.isnan(low) & ~np.isnan(high) & ~np.isnan(margin)
    codes = np.where(present, verdict.decide_codes(low, high, margin), -1)
    undecided = codes == VERDICTS.index("undecided")
    bound = np.where(codes == VERDICTS.index("fail"), low, high)
    bound = np.where(undecided & (est > margin), low, bound)
    needed = np.where(undecided, verdict.needed_units(est, low, high, margin, units), np.nan)
    cols[metric_column(metric, "verdict", quality_class)] = _verdict_names(codes)
    cols[metric_column(metric, "bound", quality_class)] = np.where(present, bound, np.nan)
    cols[metric_column(metric, "margin", quality_class)] = np.where(present, margin, np.nan)
    cols[metric_column(metric, "needed", quality_class)] = needed
    cols[metric_column(metric, "more", quality_class)] = np.maximum(needed - units, 0)
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
        if overall is None or task.get("ref_rate") is None or _is_long(task):
            continue
        categories = []
        for category in task.get("categories") or []:
            interval = _task_interval(category, "diff_")
            if interval is not None and category.get("ref_rate") is not None:
                categories.append((str(category["category"]), interval, category["ref_rate"]))
        decided = verdict.judge_task(share, overall, float(task["ref_rate"]), categories)
        out.append((str(task["name"]), decided))
    return out


def _judge_tasks(
    out: pd.DataFrame,
    cols: Columns,
    share: float,
    quality_class: str,
    *,
    measured: Array,
    unpaired: Array,
) -> Array:
    """The tasks metric's verdict codes for one class (VERDICTS' indices; -1: not measured):
    fail if any task fails (overall, or one category beyond its margin); else not measured when
    a task is not paired with the reference (``unpaired``: why); pass if every task passes,
    undecided otherwise; the deciding task's bound, margin and units as for every metric, and
    ``tasks_failed_by_<class>`` naming each failing task and category."""
    n = len(out)
    codes = np.full(n, -1, dtype=np.int64)
    bound, margin, needed, units = (np.full(n, np.nan) for _ in range(4))
    failed: Array = np.full(n, "", dtype=object)
    column: Array = (
        out["tasks"].to_numpy(dtype=object) if "tasks" in out.columns else np.full(n, None)
    )
    for i in np.flatnonzero(measured & pd.notna(column)).tolist():
        tasks = column[i]
        if not isinstance(tasks, list):
            continue
        decided = _task_decisions(tasks, share)
        verdicts = [d.verdict for _, d in decided]
        failed[i] = "; ".join(_failure(t, d) for t, d in decided if d.verdict == "fail")
        if not decided or (unpaired[i] and "fail" not in verdicts):
            continue
        codes[i] = VERDICTS.index(verdict.combine(verdicts))
        pick = next((d for _, d in decided if d.verdict == VERDICTS[codes[i]]), decided[0][1])
        decision = pick.category or pick.overall
        bound[i], margin[i] = decision.bound, decision.margin
        needed[i] = np.nan if decision.needed is None else decision.needed
        units[i] = decision.interval.n
    cols[metric_column("tasks", "verdict", quality_class)] = _verdict_names(codes)
    cols[metric_column("tasks", "bound", quality_class)] = bound
    cols[metric_column("tasks", "margin", quality_class)] = margin
    cols[metric_column("tasks", "needed", quality_class)] = needed
    cols[metric_column("tasks", "more", quality_class)] = np.maximum(needed - units, 0)
    cols["tasks_failed_by_" + quality_class.replace(".", "_")] = Phrases.of(failed)
    return codes


def _verdict_names(codes: Array) -> Phrases:
    """Verdict codes (VERDICTS' indices; -1: not measured) as their names."""
    return Phrases(np.where(codes < 0, len(VERDICTS), codes), (*VERDICTS, NOT_MEASURED))


def _judge_context(
    out: pd.DataFrame, cols: Columns, share: float, quality_class: str, *, measured: Array
) -> Array:
    """The context metric's verdict codes for one class (harness.results.context_gate: the
    verdict at the shortest judged context ≥ the row's), with its columns: the judged context
    that decided (``context_judged_at_<class>``), the items there, those that would decide it,
    and every judged context in words (``context_verdicts_<class>``)."""
    tasks = out["tasks"].tolist() if "tasks" in out.columns else None
    codes, at, units, needed, words, _ = context_gate.judge_rows(
        tasks, _floats(out, "context"), share, measured
    )
    cols[metric_column("context", "verdict", quality_class)] = _verdict_names(codes)
    cols[metric_column("context", "judged_at", quality_class)] = at
    cols[metric_column("context", "needed", quality_class)] = needed
    cols[metric_column("context", "more", quality_class)] = np.maximum(needed - units, 0)
    cols["context_verdicts_" + quality_class.replace(".", "_")] = Phrases.of(words)
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
    cols: Columns,
    n: int,
    quality_class: str,
    codes: dict[str, Array],
    decides: dict[str, Array],
    reference: Array,
) -> None:
    """verdict_<class>, pass_<class> and undecided_by_<class> from the metrics' codes and which
    rows each decides: fail if a gated metric fails; pass if every gated metric was measured and
    passes (at least one); else undecided (a gated metric not measured leaves a row undecided,
    never passes it). Reference rows pass: they are the quality every other row is measured
    against."""
    fail_code, pass_code = VERDICTS.index("fail"), VERDICTS.index("pass")
    metrics = list(codes)
    stacked = np.vstack([codes[m] for m in metrics]) if metrics else np.full((1, n), -1)
    gated = np.vstack([decides[m] for m in metrics]) if metrics else np.zeros((1, n), dtype=bool)
    any_fail = (gated & (stacked == fail_code)).any(axis=0)
    all_pass = gated.any(axis=0) & (~gated | (stacked == pass_code)).all(axis=0)
    result = np.select([reference, any_fail, all_pass], [0, 1, 0], 2)  # pass, fail, undecided
    cols[verdict_column(quality_class)] = Phrases(result, ("pass", "fail", "undecided"))
    cols[pass_column(quality_class)] = result == 0
    undecided_code = VERDICTS.index("undecided")
    leaving = _joined(
        {
            m: decides[m] & ((codes[m] == undecided_code) | (codes[m] < 0)) & (result == 2)
            for m in metrics
        },
        ",",
    )
    cols["undecided_by_" + quality_class.replace(".", "_")] = leaving
