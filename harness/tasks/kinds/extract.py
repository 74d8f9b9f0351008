"""``extract``: each item has gold ``fields`` (name → string value); the model generates greedily
after the prompt, and its output up to the first newline, stripped, must parse as a JSON object.
A gold field is *hit* when the output is valid and holds it with exactly the gold value. The unit
is the gold field (hit or not); figures: JSON validity, required-field presence and field
precision / recall / F1 (``harness.tasks.metrics``), the score being the field F1."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from harness.errors import quote
from harness.row.tasks import TaskScore
from harness.tasks.kinds.base import Generate, Gold, Miss, excerpt
from harness.tasks.metrics import Outcome, field_prf, json_validity, presence_rate
from harness.tasks.spec import (
    MAX_FIELDS,
    OUTPUT_CHARS,
    TaskFile,
    TaskItem,
    TaskSpec,
    Where,
    check_key,
    fields_json,
)


def parse_output(text: str) -> dict[str, Any] | None:
    """An extract output as a JSON object: the text up to its first newline, stripped, parsed;
    None when that is not a JSON object."""
    first = text.split("\n", 1)[0].strip()
    try:
        value = json.loads(first)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class Extract(Generate):
    name = "extract"
    gold_keys = ("fields",)
    takes = frozenset({"fields"})
    per_item = False
    figures = ("json_valid", "required_present", "field_precision", "field_recall", "field_f1")

    def read_gold(self, entry: TaskFile, data: dict[str, Any], where: Where) -> Gold:
        fields = data.get("fields")
        if not isinstance(fields, dict) or not fields or len(fields) > MAX_FIELDS:
            raise where.error("fields", f"{quote(fields)}; expected an object of 1 to "
                                        f"{MAX_FIELDS} field name → string value")  # fmt: skip
        for key, value in fields.items():
            name = f"fields.{key}"
            try:
                check_key(key)
            except ValueError as exc:
                raise where.error(name, str(exc)) from None
            if not isinstance(value, str) or not value:
                raise where.error(name, f"{quote(value)}; expected a non-empty string")
        for key in entry.fields or ():
            if key not in fields:
                raise where.error(f"fields.{key}", "missing: it is a required field of this task")
        return Gold(fields=dict(fields))

    def target(self, task: TaskSpec, item: TaskItem) -> str:
        return " " + fields_json(item.target_fields or {})

    def outcome(self, task: TaskSpec, raw: Sequence[Any]) -> Outcome:
        items = task.scored
        if len(raw) != len(items):
            raise ValueError(f"{len(raw)} outputs for {len(items)} items")
        correct, valid, required, present, output_fields, output_hits = [], [], [], [], [], []
        field_item: list[int] = []
        field_name: list[str] = []
        field_hit: list[bool] = []
        for at, (item, text) in enumerate(zip(items, raw, strict=True)):
            gold = item.target_fields or {}
            parsed = parse_output(text)
            got = parsed if parsed is not None else {}
            hits = {k for k, v in gold.items() if k in got and got[k] == v}
            need = task.required_of(item)
            valid.append(parsed is not None)
            required.append(len(need))
            present.append(sum(1 for k in need if k in got))
            output_fields.append(len(got))
            output_hits.append(len(hits))
            correct.append(parsed is not None and len(hits) == len(gold))
            for key in gold:
                field_item.append(at)
                field_name.append(key)
                field_hit.append(key in hits)
        return Outcome(
            kind=self.name,
            item_id=np.array([i.id for i in items], dtype=str),
            category=np.array([i.category for i in items], dtype=str),
            correct=np.array(correct, dtype=bool),
            predicted=np.array([t[:OUTPUT_CHARS] for t in raw], dtype=str),
            gold=np.array([fields_json(i.target_fields or {}) for i in items], dtype=str),
            valid=np.array(valid, dtype=bool),
            required=np.array(required, dtype=np.int64),
            present=np.array(present, dtype=np.int64),
            output_fields=np.array(output_fields, dtype=np.int64),
            output_hits=np.array(output_hits, dtype=np.int64),
            field_item=np.array(field_item, dtype=np.int64),
            field_name=np.array(field_name, dtype=str),
            field_hit=np.array(field_hit, dtype=bool),
        )

    def units(self, outcome: Outcome) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any]]:
        """The gold fields: key "<item id>\\x1f<field name>"."""
        ids = outcome.item_id[outcome.field_item]
        keys = np.char.add(np.char.add(ids.astype(str), "\x1f"), outcome.field_name.astype(str))
        return keys, outcome.category[outcome.field_item], outcome.field_hit.astype(bool)

    def summarize(self, task: TaskSpec, outcome: Outcome, score: TaskScore) -> None:
        p, r, f1 = field_prf(outcome)
        score.json_valid, score.required_present = json_validity(outcome), presence_rate(outcome)
        score.field_precision, score.field_recall, score.field_f1 = p, r, f1
        score.score = f1

    def category_score(self, outcome: Outcome, mask: NDArray[Any]) -> float:
        return field_prf(outcome, mask)[2]

    def misses(self, outcome: Outcome, ref_right: dict[str, bool]) -> list[Miss]:
        """Every item it got wrong (not a JSON object, a required field missing, or a value that
        differs), with the reference's state on it."""
        out = []
        for at in np.flatnonzero(~outcome.correct.astype(bool)):
            valid = bool(outcome.valid[at])
            missed = int(outcome.required[at] - outcome.present[at])
            why = "not a JSON object" if not valid else f"{missed} required field(s) missing"
            if valid and not missed:
                why = "a field's value differs"
            item = str(outcome.item_id[at])
            was = ref_right.get(item)
            state = "" if was is None else (
                "; the reference was right" if was else "; the reference too"
            )  # fmt: skip
            out.append(Miss(item, why + state, excerpt(str(outcome.predicted[at]))))
        return out
