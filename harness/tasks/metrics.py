"""Task metrics (pure numpy): what one configuration got right, item by item, and its change
against the reference on the same items.

**Per item** (``Outcome``, kept in the run folder beside the window scores): each kind
(``harness.tasks.kinds``) says how its outcome is made from what the engine returned (the option
with the highest log-likelihood, or a generated text judged against the gold answer) and which
units pair with the reference's. The extract kind's rule, whose arrays ``Outcome`` also holds:
the output is cut at its first newline and stripped; it is *valid* when that parses
(``json.loads``) as a JSON object. A gold field is *hit* when the output is valid and holds the
field with exactly the gold value (a string, compared as is). ``required`` fields are *present*
when the output has the key (any value). An output's fields that are not gold (extra fields,
or gold fields with a wrong value) count against precision only.

**Metrics.** accuracy = mean(correct); per-category accuracy (classify: per gold label, i.e. the
label's recall); the confusion matrix (gold label × predicted label); macro-F1 = the mean over the
labels that occur (as gold or predicted) of 2·tp / (2·tp + fp + fn). Extract: JSON validity rate =
valid outputs / items; required-field presence rate = present / required fields (all items);
field precision = hits / output fields, recall = hits / gold fields, F1 their harmonic mean (0 when
both are 0); per-category F1 the same over a category's items.

**Paired change** (what the gate reads): the unit is the item (right or wrong) or, where the
kind says so, a part of it (extract: the gold field, hit or not), matched by id with the
reference's; the degradation is reference − candidate rate with Newcombe's 90 % interval
(``harness.measure.verdict``), overall and per category. The worst category is the one with
the largest degradation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from harness.measure import verdict
from harness.row.tasks import CategoryScore, TaskScore
from harness.tasks.kinds import KINDS, kind_of
from harness.tasks.spec import TaskKind, TaskSpec

PREFIX = "task__"  # the keys of a task's arrays in a run's window-scores file
SEP = "__"


@dataclass(frozen=True)
class Outcome:
    """One task's per-item results on one configuration. [N]: one per scored item; [F]: one per
    gold field (extract). Strings are numpy unicode arrays (no pickled objects)."""

    kind: TaskKind
    item_id: NDArray[Any]  # [N] str
    category: NDArray[Any]  # [N] str
    correct: NDArray[Any]  # [N] bool: the prediction is the gold answer (extract: every field)
    predicted: NDArray[Any]  # [N] str: the label, the choice's index, or the output (capped)
    gold: NDArray[Any]  # [N] str: the gold label, index, or fields as JSON
    valid: NDArray[Any]  # [N] bool: extract: a JSON object; else True
    required: NDArray[Any]  # [N] int: required fields (extract; else 0)
    present: NDArray[Any]  # [N] int: of them, keys in the output
    output_fields: NDArray[Any]  # [N] int: fields the output holds
    output_hits: NDArray[Any]  # [N] int: of them, with the gold value
    field_item: NDArray[Any]  # [F] int: the item (position) of each gold field
    field_name: NDArray[Any]  # [F] str
    field_hit: NDArray[Any]  # [F] bool
    # [N] bool: choice: the choice with the highest log-likelihood per character is the gold one
    # (``acc_norm``); None for the other kinds (an optional array: older files lack it)
    correct_norm: NDArray[Any] | None = None
    # [N] float / int: longctx: the gold answer's teacher-forced NLL (nats) and its tokens (0:
    # the engine did not count them); None for the other kinds
    answer_nll: NDArray[Any] | None = None
    answer_tokens: NDArray[Any] | None = None

    @property
    def units(self) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any]]:
        """(unit keys, their category, hit): what pairs with the reference's, as the kind says
        (the items; extract: the gold fields)."""
        return kind_of(self.kind).units(self)


def outcome_of(task: TaskSpec, raw: Sequence[Any]) -> Outcome:
    """The outcome of what the engine returned for ``task``'s scored items, by its kind (per
    item: its options' log-likelihoods, or its generated text)."""
    made: Outcome = kind_of(task.kind).outcome(task, raw)
    return made


# --- storing: a task's arrays beside the window scores -----------------------------------------

OPTIONAL = ("correct_norm", "answer_nll", "answer_tokens")  # arrays a kind may leave out (None)
ARRAYS = tuple(f.name for f in fields(Outcome) if f.name != "kind" and f.name not in OPTIONAL)


def to_arrays(name: str, outcome: Outcome) -> dict[str, NDArray[Any]]:
    """``outcome`` as named arrays (``task__<name>__<array>``), for ``np.savez``."""
    out = {f"{PREFIX}{name}{SEP}kind": np.array(outcome.kind)}
    for key in (*ARRAYS, *OPTIONAL):
        if getattr(outcome, key) is not None:
            out[f"{PREFIX}{name}{SEP}{key}"] = np.asarray(getattr(outcome, key))
    return out


def from_arrays(arrays: dict[str, NDArray[Any]]) -> dict[str, Outcome]:
    """Every task's outcome in a set of named arrays (``to_arrays``'); a task whose arrays are
    incomplete or inconsistent is left out (an older or damaged file pairs nothing)."""
    names = {k[len(PREFIX) :].rsplit(SEP, 1)[0] for k in arrays if k.startswith(PREFIX)}
    out: dict[str, Outcome] = {}
    for name in sorted(names):
        got = {k: arrays.get(f"{PREFIX}{name}{SEP}{k}") for k in ("kind", *ARRAYS)}
        if any(v is None for v in got.values()) or str(got["kind"]) not in KINDS:
            continue
        n = len(got["item_id"])  # type: ignore[arg-type]
        per_item = ("category", "correct", "predicted", "gold", "valid", "required", "present",
                    "output_fields", "output_hits")  # fmt: skip
        per_field = ("field_item", "field_name", "field_hit")
        f = len(got["field_item"])  # type: ignore[arg-type]
        if any(np.ndim(got[k]) != 1 or len(got[k]) != n for k in per_item):  # type: ignore[arg-type]
            continue
        if any(np.ndim(got[k]) != 1 or len(got[k]) != f for k in per_field):  # type: ignore[arg-type]
            continue
        items = np.asarray(got["field_item"])
        if f and (items.min() < 0 or items.max() >= n):
            continue
        extra = {k: arrays.get(f"{PREFIX}{name}{SEP}{k}") for k in OPTIONAL}
        kept = {k: np.asarray(v) for k, v in extra.items() if v is not None and _rows(v) == n}
        out[name] = Outcome(kind=str(got["kind"]), **{k: np.asarray(got[k]) for k in ARRAYS},
                            **kept)  # fmt: skip
    return out


def _rows(array: NDArray[Any]) -> int | None:
    """The length of a one-dimensional array, None for another shape."""
    return len(array) if np.ndim(array) == 1 else None


# --- metrics -----------------------------------------------------------------------------------


def rate(hits: NDArray[Any]) -> float:
    return float(np.mean(hits)) if len(hits) else math.nan


def confusion(gold: Sequence[str], predicted: Sequence[str], labels: Sequence[str]) -> NDArray[Any]:
    """[gold label, predicted label] counts, in ``labels`` order."""
    at = {label: i for i, label in enumerate(labels)}
    table = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for g, p in zip(gold, predicted, strict=True):
        table[at[g], at[p]] += 1
    return table


def macro_f1(table: NDArray[Any]) -> float:
    """The mean per-label F1 = 2tp / (2tp + fp + fn) over the labels that occur (gold or
    predicted) in the confusion ``table``."""
    tp = np.diag(table).astype(np.float64)
    fp = table.sum(axis=0) - tp
    fn = table.sum(axis=1) - tp
    occurs = (tp + fp + fn) > 0
    if not occurs.any():
        return math.nan
    return float(np.mean(2 * tp[occurs] / (2 * tp[occurs] + fp[occurs] + fn[occurs])))


def field_prf(outcome: Outcome, mask: NDArray[Any] | None = None) -> tuple[float, float, float]:
    """Field-level exact-match (precision, recall, F1) over the items in ``mask`` (all: None)."""
    keep = np.ones(len(outcome.item_id), dtype=bool) if mask is None else mask
    hits = float(outcome.output_hits[keep].sum())
    said = float(outcome.output_fields[keep].sum())
    gold_fields = float(np.isin(outcome.field_item, np.flatnonzero(keep)).sum())
    precision = hits / said if said else 0.0
    recall = hits / gold_fields if gold_fields else math.nan
    if math.isnan(recall):
        return precision, recall, math.nan
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def json_validity(outcome: Outcome) -> float:
    return rate(outcome.valid)


def presence_rate(outcome: Outcome) -> float:
    """Required fields present in the outputs / required fields, over every item."""
    need = float(outcome.required.sum())
    return float(outcome.present.sum()) / need if need else math.nan


def per_category_accuracy(outcome: Outcome) -> dict[str, float]:
    return {c: rate(outcome.correct[outcome.category == c]) for c in _categories(outcome)}


def _categories(outcome: Outcome) -> list[str]:
    return sorted(set(outcome.category.astype(str).tolist()))


# --- paired against the reference --------------------------------------------------------------


def paired(
    ref: Outcome, cand: Outcome, category: str | None = None
) -> tuple[verdict.Interval, float] | None:
    """(reference − candidate rate on the units both scored, with its 90 % Newcombe interval;
    the reference's rate on them), over one category or all; None when no unit pairs."""
    ref_keys, ref_cat, ref_hit = ref.units
    keys, cat, hit = cand.units
    if category is not None:
        ref_keys, ref_hit = ref_keys[ref_cat == category], ref_hit[ref_cat == category]
        keys, hit = keys[cat == category], hit[cat == category]
    _, at_ref, at_cand = np.intersect1d(ref_keys, keys, return_indices=True)
    if not len(at_ref):
        return None
    ref_hits, cand_hits = ref_hit[at_ref], hit[at_cand]
    return verdict.accuracy_interval(ref_hits, cand_hits), rate(ref_hits)


def summarize(name: str, task: TaskSpec, cand: Outcome, ref: Outcome | None) -> TaskScore:
    """The row's figures of one task: overall, per category, paired with the reference."""
    units = cand.units
    # built unchecked (a rate over no unit is NaN until _no_nan), then validated whole below
    score = TaskScore.model_construct(name=name, kind=cand.kind, items=len(cand.item_id),
                                      unit_rate=rate(units[2]), units=len(units[2]))  # fmt: skip
    kind_of(cand.kind).summarize(task, cand, score)
    if ref is not None:
        found = paired(ref, cand)
        if found is not None:
            interval, ref_rate = found
            score.ref_rate, score.diff, score.paired_units = ref_rate, interval.estimate, interval.n
            score.diff_ci90_low, score.diff_ci90_high = interval.low, interval.high
    _answer_nll(score, cand, ref, None)
    score.categories = [_category(c, cand, ref) for c in _categories(cand)]
    _worst(score)
    return TaskScore.model_validate(_no_nan(score.model_dump()))


def _no_nan(value: Any) -> Any:
    """NaN (a rate over no unit) as None: the row says "not measured", never NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


def _category(category: str, cand: Outcome, ref: Outcome | None) -> CategoryScore:
    mask = cand.category == category
    _, cat, hit = cand.units
    out = CategoryScore.model_construct(category=category, items=int(mask.sum()),
                                        unit_rate=rate(hit[cat == category]))  # fmt: skip
    out.score = kind_of(cand.kind).category_score(cand, mask)
    found = None if ref is None else paired(ref, cand, category)
    if found is not None:
        interval, ref_rate = found
        out.ref_rate, out.diff, out.paired_units = ref_rate, interval.estimate, interval.n
        out.diff_ci90_low, out.diff_ci90_high = interval.low, interval.high
    _answer_nll(out, cand, ref, category)
    return out


def paired_nll(ref: Outcome, cand: Outcome, category: str | None = None) -> verdict.Interval | None:
    """The candidate − reference NLL of the gold answers (nats/token) over the items both scored
    (one category or all), with its one-sided 95 % bounds (``verdict.dnll_interval``, paired by
    item); None when no item pairs or either side kept no answer NLL."""
    if cand.answer_nll is None or ref.answer_nll is None or cand.answer_tokens is None:
        return None
    keep_ref = (
        np.ones(len(ref.item_id), dtype=bool) if category is None else ref.category == category
    )
    keep = np.ones(len(cand.item_id), dtype=bool) if category is None else cand.category == category
    _, at_ref, at_cand = np.intersect1d(ref.item_id[keep_ref], cand.item_id[keep],
                                        return_indices=True)  # fmt: skip
    if not len(at_ref):
        return None
    tokens = np.maximum(cand.answer_tokens[keep][at_cand].astype(np.float64), 1.0)
    return verdict.dnll_interval(ref.answer_nll[keep_ref][at_ref], cand.answer_nll[keep][at_cand],
                                 tokens, tokens)  # fmt: skip


def _answer_nll(
    out: TaskScore | CategoryScore, cand: Outcome, ref: Outcome | None, category: str | None
) -> None:
    """A longctx part's answer NLL (nats/token) and its paired change vs the reference."""
    if cand.answer_nll is None or cand.answer_tokens is None:
        return
    keep = np.ones(len(cand.item_id), dtype=bool) if category is None else cand.category == category
    tokens = np.maximum(cand.answer_tokens[keep].astype(np.float64), 1.0)
    out.answer_nll = float(cand.answer_nll[keep].sum() / tokens.sum()) if keep.any() else None
    found = None if ref is None else paired_nll(ref, cand, category)
    if found is not None:
        out.dnll, out.dnll_ci90_low, out.dnll_ci90_high = found.estimate, found.low, found.high
        out.dnll_sd = found.sd


def _worst(score: TaskScore) -> None:
    """The category with the largest paired degradation (the highest low bound on a tie)."""
    paired_ones = [c for c in score.categories if c.diff is not None]
    if not paired_ones:
        return
    worst = max(paired_ones, key=lambda c: (c.diff or 0.0, c.diff_ci90_low or 0.0))
    score.worst_category, score.worst_diff = worst.category, worst.diff
    score.worst_ci90_low, score.worst_ci90_high = worst.diff_ci90_low, worst.diff_ci90_high
