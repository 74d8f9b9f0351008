"""A row's task parts (``harness.row.Tasks`` lists them): one task on one configuration
(``TaskScore``) and one of its categories (``CategoryScore``), each checked as a whole; and how a
row of an earlier run, which held ARC-Easy's figures in fields of their own, is read as the
``arc-easy`` task (``legacy_arc_task``)."""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

# A task part's figures, each checked alone: a share of units (a score, a rate) in [0, 1], a paired
# change (reference − candidate rate) and its interval's ends in [−1, 1], a count ≥ 0; never NaN
# or ±inf (harness.tasks.metrics stores "not measured" as None). ``_paired_problem`` and the
# parts' ``whole`` validators check them together.
Share = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Change = Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
TOLERANCE = 1e-9  # two figures computed from the same units: equal up to rounding
PAIRED = ("ref_rate", "diff", "diff_ci90_low", "diff_ci90_high", "paired_units")


def _paired_problem(part: CategoryScore | TaskScore) -> str | None:
    """Why a part's paired figures contradict each other: some given without the others, an
    interval whose low end is above its high end, a change outside its own interval, or a
    change no candidate rate in [0, 1] gives against the reference's rate (ref_rate − 1 ≤ diff ≤
    ref_rate)."""
    given = [name for name in PAIRED if getattr(part, name) is not None]
    if given and len(given) < len(PAIRED):
        missing = ", ".join(name for name in PAIRED if name not in given)
        return f"paired figures without {missing}: {', '.join(PAIRED)} come together"
    diff, low, high = part.diff, part.diff_ci90_low, part.diff_ci90_high
    if diff is None or low is None or high is None or part.ref_rate is None:
        return None
    if part.paired_units == 0:
        return f"diff {diff:g} from paired_units 0 (no unit paired with the reference's)"
    return _interval_problem("diff", diff, low, high) or (
        f"diff {diff:g} is not ref_rate {part.ref_rate:g} minus a rate in [0, 1]"
        if not part.ref_rate - 1 - TOLERANCE <= diff <= part.ref_rate + TOLERANCE
        else None
    )


def _interval_problem(name: str, estimate: float, low: float, high: float) -> str | None:
    """An interval that is upside down, or an estimate outside its own interval."""
    if low > high + TOLERANCE:
        return f"{name}_ci90_low {low:g} is above {name}_ci90_high {high:g}"
    if not low - TOLERANCE <= estimate <= high + TOLERANCE:
        return f"{name} {estimate:g} lies outside its own 90 % interval [{low:g}, {high:g}]"
    return None


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOLERANCE


class CategoryScore(BaseModel):
    """One category of a task (an intent, a label): its items, its score (accuracy; extract:
    field F1), the rate of its paired units (items right; extract: gold fields exact) and that
    rate's paired degradation vs the reference (reference − candidate, 90 % Newcombe interval)."""

    model_config = ConfigDict(extra="forbid")
    category: str
    items: Count
    score: Share | None = None
    unit_rate: Share | None = None
    ref_rate: Share | None = None
    diff: Change | None = None
    diff_ci90_low: Change | None = None
    diff_ci90_high: Change | None = None
    paired_units: Count | None = None
    # longctx: the gold answers' NLL (nats/token) and its paired change vs the reference
    # (candidate − reference, one-sided 95 % bounds; harness.tasks.metrics.paired_nll)
    answer_nll: float | None = Field(None, allow_inf_nan=False)
    dnll: float | None = Field(None, allow_inf_nan=False)
    dnll_ci90_low: float | None = Field(None, allow_inf_nan=False)
    dnll_ci90_high: float | None = Field(None, allow_inf_nan=False)
    dnll_sd: float | None = Field(None, allow_inf_nan=False)

    @model_validator(mode="after")
    def whole(self) -> CategoryScore:
        """The paired figures agree with each other (``_paired_problem``)."""
        problem = _paired_problem(self)
        if problem:
            raise ValueError(f"category {self.category[:40]!r}: {problem}")
        return self


class TaskScore(BaseModel):
    """One task on one configuration (harness.tasks.metrics states every figure): shares in
    [0, 1]; ``score`` is accuracy (classify, choice) or field F1 (extract); the paired units are
    items (classify, choice) or gold fields (extract), their degradation vs the reference
    (reference − candidate rate) with its 90 % Newcombe interval; the worst category is the one
    with the largest degradation. Checked as a whole (``whole``): see its docstring."""

    model_config = ConfigDict(extra="forbid")
    name: str
    kind: str
    items: Count
    units: Count
    score: Share | None = None
    unit_rate: Share | None = None
    macro_f1: Share | None = None
    acc_norm: Share | None = None  # choice: accuracy of the length-normalised pick
    json_valid: Share | None = None
    required_present: Share | None = None
    field_precision: Share | None = None
    field_recall: Share | None = None
    field_f1: Share | None = None
    ref_rate: Share | None = None
    diff: Change | None = None
    diff_ci90_low: Change | None = None
    diff_ci90_high: Change | None = None
    paired_units: Count | None = None
    worst_category: str | None = None
    worst_diff: Change | None = None
    worst_ci90_low: Change | None = None
    worst_ci90_high: Change | None = None
    answer_nll: float | None = Field(None, allow_inf_nan=False)  # longctx (CategoryScore's)
    dnll: float | None = Field(None, allow_inf_nan=False)
    dnll_ci90_low: float | None = Field(None, allow_inf_nan=False)
    dnll_ci90_high: float | None = Field(None, allow_inf_nan=False)
    dnll_sd: float | None = Field(None, allow_inf_nan=False)
    categories: list[CategoryScore] = []
    labels: list[str] | None = None  # classify: the confusion matrix's order
    confusion: list[list[Count]] | None = None  # classify: [gold label][predicted label] counts

    @model_validator(mode="after")
    def whole(self) -> TaskScore:
        """The parts agree: the paired figures (``_paired_problem``); paired_units ≤ units; an
        item per unit (a task without field figures) and their rate the score; the categories'
        items add up to the items, each category once; the worst category is one of them, with
        its figures; every unit paired → diff = ref_rate − unit_rate; the confusion matrix
        square over the labels, its counts adding up to the items and its diagonal to the
        score."""
        problem = (
            _paired_problem(self)
            or self._units_problem()
            or self._categories_problem()
            or self._worst_problem()
            or self._confusion_problem()
        )
        if problem:
            raise ValueError(f"task {self.name[:40]!r}: {problem}")
        return self

    def _units_problem(self) -> str | None:
        paired, units = self.paired_units, self.units
        if paired is not None and paired > units:
            return f"paired_units {paired} is above units {units}"
        per_item = self._per_item()
        if per_item and units != self.items:
            return f"units {units} ≠ items {self.items} (a {self.kind} task's unit is its item)"
        rate, score = self.unit_rate, self.score
        if per_item and rate is not None and score is not None and not _close(rate, score):
            return f"unit_rate {rate:g} ≠ score {score:g} (both are the items' accuracy)"
        ref, diff = self.ref_rate, self.diff
        if paired != units or rate is None or ref is None or diff is None:
            return None
        if not _close(diff, ref - rate):
            return (
                f"diff {diff:g} ≠ ref_rate {ref:g} − unit_rate {rate:g} with every unit "
                f"paired (paired_units = units = {units})"
            )
        return None

    def _per_item(self) -> bool:
        """Whether the task's unit is its item: it has no field figures (extract's unit, the
        gold field, is the only one that is not; the row names no kind)."""
        return all(
            v is None
            for v in (self.json_valid, self.required_present, self.field_precision,
                      self.field_recall, self.field_f1)
        )  # fmt: skip

    def _categories_problem(self) -> str | None:
        if not self.categories:
            return None
        names = [c.category for c in self.categories]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            return f"category {twice[0][:40]!r} listed twice"
        total = sum(c.items for c in self.categories)
        if total != self.items:
            return f"the categories' items add up to {total}, not items {self.items}"
        return None

    def _worst_problem(self) -> str | None:
        worst = (self.worst_diff, self.worst_ci90_low, self.worst_ci90_high)
        if self.worst_category is None:
            if any(v is not None for v in worst):
                return "worst_diff or its interval without worst_category"
            return None
        found = [c for c in self.categories if c.category == self.worst_category]
        if not found:
            return f"worst_category {self.worst_category[:40]!r} is none of its categories"
        c = found[0]
        if worst != (c.diff, c.diff_ci90_low, c.diff_ci90_high):
            return (
                f"worst_diff and its interval are not those of category "
                f"{self.worst_category[:40]!r}"
            )
        return None

    def _confusion_problem(self) -> str | None:
        table, labels = self.confusion, self.labels
        if table is None:
            return None
        if labels is None:
            return "confusion without labels (its rows' and columns' order)"
        size = len(labels)
        if len(table) != size or any(len(row) != size for row in table):
            return f"confusion is not {size} × {size} (one row and column per label)"
        total = sum(sum(row) for row in table)
        if total != self.items:
            return f"confusion counts add up to {total}, not items {self.items}"
        right = sum(table[i][i] for i in range(size))
        if self.score is not None and total and not _close(right / total, self.score):
            return (
                f"confusion's diagonal gives accuracy {right / total:g}, not score {self.score:g}"
            )
        return None


# A row of a run before ARC-Easy was scored as a task held its figures in these fields; read, they
# become the ``arc-easy`` task part (``legacy_arc_task``).
LEGACY_ARC = ("arc_acc", "arc_acc_norm", "arc_items", "arc_diff", "arc_diff_ci90_low",
              "arc_diff_ci90_high", "arc_diff_sd", "arc_paired_items")  # fmt: skip
ARC_TASK: Final = "arc-easy"  # the shipped task's name (harness.tasks.arc.NAME)


def legacy_arc_task(data: object) -> object:
    """A row's data with an earlier run's ARC fields moved into its ``arc-easy`` task part: its
    accuracy the score and unit rate of its one category ``all``; paired figures where every
    item paired (as that run paired: all or none), the reference's rate arc_diff + arc_acc.
    Other data as given; a row that lists ``arc-easy`` already keeps it (the fields dropped)."""
    if not isinstance(data, dict) or not LEGACY_ARC & data.keys():
        return data
    data = dict(data)
    old = {name: data.pop(name, None) for name in LEGACY_ARC}
    acc, items, tasks = old["arc_acc"], old["arc_items"], data.get("tasks")
    if acc is None or items is None or (isinstance(tasks, list) and any(
        isinstance(t, dict) and t.get("name") == ARC_TASK for t in tasks
    )):  # fmt: skip
        return data
    figures: dict[str, object] = {"items": items, "score": acc, "unit_rate": acc}
    diff, paired = old["arc_diff"], old["arc_paired_items"]
    if isinstance(diff, (int, float)) and isinstance(acc, (int, float)) and paired == items:
        figures |= {"ref_rate": diff + acc, "diff": diff, "paired_units": paired,
                    "diff_ci90_low": old["arc_diff_ci90_low"],
                    "diff_ci90_high": old["arc_diff_ci90_high"]}  # fmt: skip
    worst = {}
    if "diff" in figures:
        worst = {"worst_category": "all", "worst_diff": diff,
                 "worst_ci90_low": figures["diff_ci90_low"],
                 "worst_ci90_high": figures["diff_ci90_high"]}  # fmt: skip
    part = {"name": ARC_TASK, "kind": "choice", "units": items, "acc_norm": old["arc_acc_norm"],
            **figures, **worst, "categories": [{"category": "all", **figures}]}  # fmt: skip
    data["tasks"] = [*(tasks if isinstance(tasks, list) else []), part]
    return data
