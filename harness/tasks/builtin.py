"""The shipped tasks: SNIPS (CC0, ``harness/data/tasks/snips/``, licence in its LICENSES.md) as
``snips-intent`` (classify the utterance's intent among 7) and ``snips-slots`` (extract its slot
fields as JSON; every gold field of an item is required); ARC-Easy as ``arc-easy`` (``choice``,
every test item; ``harness.tasks.arc``).

Splits, per intent, in file order, disjoint (``snips_split``): items 0-9 the few-shot pool, 10-39
scored (30 per intent, 210), 40-99 the train split adapters are fine-tuned on (60 per intent,
420). The prompts are ``render_prompt``'s, the answers ``render_target``'s
(``harness.tasks.spec``): the same strings are scored and trained on.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

from harness.errors import UserInputError
from harness.files import read_capped, text_lines
from harness.tasks.arc import NAME as ARC_NAME
from harness.tasks.arc import arc_task
from harness.tasks.longctx.entry import LongContextEntry
from harness.tasks.longctx_task import longctx_task
from harness.tasks.spec import (
    DEFAULT_NEW_TOKENS,
    MAX_TASK_BYTES,
    BuiltinEntry,
    BuiltinTask,
    TaskEntry,
    TaskFile,
    TaskItem,
    TaskKind,
    TaskSpec,
    load_task_file,
)

SNIPS_DIR: Path = Path(__file__).resolve().parents[1] / "data" / "tasks" / "snips"
SNIPS_FILE: Path = SNIPS_DIR / "snips_validate_fields.jsonl"
SNIPS_SHA256 = "d880d1471636dcb01fb1a4374cb33f1bd068c8e1be11943db782a7494cce87ec"
SNIPS_INTENTS: tuple[str, ...] = (
    "AddToPlaylist", "BookRestaurant", "GetWeather", "PlayMusic", "RateBook",
    "SearchCreativeWork", "SearchScreeningEvent",
)  # fmt: skip
Split = Literal["train", "fewshot", "scored"]
# item positions within each intent, in file order: [start, stop)
SPLITS: dict[Split, tuple[int, int]] = {"fewshot": (0, 10), "scored": (10, 40), "train": (40, 100)}
PROMPTS: dict[BuiltinTask, str] = {
    "snips-intent": "Utterance: {text}\nIntent:",
    "snips-slots": "Utterance: {text}\nJSON:",
}
KIND: dict[BuiltinTask, TaskKind] = {"snips-intent": "classify", "snips-slots": "extract"}
LABELS: dict[BuiltinTask, tuple[str, ...]] = {"snips-intent": SNIPS_INTENTS}
SNIPS_TASKS: tuple[BuiltinTask, ...] = tuple(PROMPTS)
BUILTIN: tuple[BuiltinTask, ...] = (*SNIPS_TASKS, ARC_NAME)


@functools.cache
def _snips_rows() -> tuple[TaskItem, ...]:
    """Every SNIPS item (the shipped file, checked against its hash)."""
    raw = read_capped(SNIPS_FILE, MAX_TASK_BYTES, "SNIPS task file")
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SNIPS_SHA256:
        raise RuntimeError(f"{SNIPS_FILE} changed (sha256 {digest}, expected {SNIPS_SHA256})")
    items = []
    for line in text_lines(raw, SNIPS_FILE, "SNIPS task file"):
        row = json.loads(line)
        values = {"text": row["text"], "intent": row["intent"]}
        fields = {str(k): str(v) for k, v in row["fields"].items()}
        items.append(TaskItem(row["id"], row["intent"], values, row["intent"], None, None, fields))
    return tuple(items)


def snips_split(name: Split) -> list[TaskItem]:
    """The SNIPS items of one split, intent by intent (``SPLITS``); a ValueError for another
    name."""
    if name not in SPLITS:
        raise ValueError(f"unknown SNIPS split {name!r}; expected one of: {', '.join(SPLITS)}")
    start, stop = SPLITS[name]
    out: list[TaskItem] = []
    for intent in SNIPS_INTENTS:
        of_intent = [item for item in _snips_rows() if item.category == intent]
        out += of_intent[start:stop]
    return out


def builtin_task(name: BuiltinTask, shots: int = 0) -> TaskSpec:
    """A shipped task with its scored items and few-shot pool; ``shots``: few-shot examples
    prepended to every prompt (0: zero-shot, as adapters are trained)."""
    if name == ARC_NAME:
        return arc_task()
    if name not in PROMPTS:
        raise ValueError(f"unknown task {name!r}; shipped: {', '.join(BUILTIN)}")
    return TaskSpec(
        name=name,
        kind=KIND[name],
        prompt=PROMPTS[name],
        scored=tuple(snips_split("scored")),
        fewshot=tuple(snips_split("fewshot")),
        labels=LABELS.get(name),
        required=None,  # every gold field of an item
        shots=shots,
        max_new_tokens=DEFAULT_NEW_TOKENS,
        source=str(SNIPS_FILE),
        sha256=SNIPS_SHA256,
    )


def first_per_category(items: Sequence[TaskItem], n: int) -> tuple[TaskItem, ...]:
    """The first ``n`` items of each category, in their order."""
    seen: dict[str, int] = {}
    out = []
    for item in items:
        seen[item.category] = seen.get(item.category, 0) + 1
        if seen[item.category] <= n:
            out.append(item)
    return tuple(out)


def tasks_of(entries: Sequence[TaskEntry]) -> list[TaskSpec]:
    """The tasks a scenario lists, each ready to score (a user's file read strictly: a bad line
    is a UserInputError naming its file, line and field); two tasks of one name are refused."""
    out: list[TaskSpec] = []
    for entry in entries:
        if isinstance(entry, TaskFile):
            task = load_task_file(entry)
        elif isinstance(entry, LongContextEntry):
            task = longctx_task(entry)
        elif isinstance(entry, BuiltinEntry):
            task = builtin_task(entry.name, entry.shots)
            if entry.shots > len(task.fewshot):
                raise UserInputError(
                    f"{entry.name} has {len(task.fewshot)} few-shot item(s); shots = "
                    f"{entry.shots} asks for more",
                    field="quality.tasks",
                )
            if entry.per_category is not None:
                task = replace(task, scored=first_per_category(task.scored, entry.per_category))
        else:
            task = builtin_task(entry)
        if any(t.name == task.name for t in out):
            raise UserInputError(
                f"two tasks are named {task.name!r}; give each a distinct `name`",
                field="quality.tasks",
            )
        out.append(task)
    return out
