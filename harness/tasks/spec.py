"""A task as data: a JSONL file of items and a small spec (kind, prompt template, labels or
required fields, few-shot split), read strictly; and the one rendering of a prompt and of its
gold continuation, used to score and to train.

Kinds:

- ``choice``: each item has ``choices`` and ``gold`` (an index); the choice with the highest
  log-likelihood after the prompt is the answer (like ARC).
- ``classify``: a fixed label set; each item has a ``label``; every label's continuation is
  scored after the prompt, the highest is the prediction (per-label metrics).
- ``extract``: each item has gold ``fields`` (name → value); the model generates greedily after
  the prompt, its output up to the first newline must be a JSON object (``metrics``).

A user's task file (one JSON object a line)::

    {"id": "a1", "text": "...", "label": "spam"}                          # classify
    {"id": "q1", "text": "...", "choices": ["x", "y"], "gold": 1}         # choice
    {"id": "e1", "text": "...", "fields": {"name": "Ada", "city": "Paris"}}  # extract

Every placeholder of the prompt template (``{text}``: plain names only, no attribute, index or
format spec) must be a string key of every item. Optional keys: ``category`` (choice and extract:
the group of the per-category metrics; classify: the gold label is the category) and ``split``
(``"fewshot"``: the item is a few-shot example, never scored; ``"scored"``, the default). A bad
line is one ``UserInputError`` naming the file, the line and the field.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.errors import UserInputError, did_you_mean
from harness.files import FileTooLarge, read_capped

TaskKind = Literal["choice", "classify", "extract"]
KINDS: tuple[TaskKind, ...] = ("choice", "classify", "extract")
BuiltinTask = Literal["snips-intent", "snips-slots"]

MAX_TASK_BYTES = 16 << 20  # a task file: 16 MiB
MAX_ITEMS = 20_000  # lines of a task file
MAX_LINE_CHARS = 64 << 10  # one item
MAX_LABELS = 256
MAX_CHOICES = 26
MAX_FIELDS = 64
MAX_SHOTS = 16
MAX_NEW_TOKENS = 512
MAX_PROMPT_CHARS = 4000
DEFAULT_NEW_TOKENS = 64  # extract: the fixed generation length, the same on every engine
OUTPUT_CHARS = 400  # a generated output is kept to this many characters (error analysis)
NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
SPLITS = ("fewshot", "scored")

Text = Annotated[str, Field(min_length=1, max_length=200)]


class TaskFile(BaseModel):
    """A user's task in a scenario: ``quality: {tasks: [{path: my.jsonl, kind: classify, ...}]}``.

    Its file is read and checked when the scenario is (``load_task_file``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    path: str = Field(min_length=1, max_length=4096)
    kind: TaskKind
    name: str | None = Field(None, pattern=NAME_PATTERN)  # None: the file's stem
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    labels: Annotated[list[Text], Field(min_length=2, max_length=MAX_LABELS)] | None = None
    fields: Annotated[list[Text], Field(min_length=1, max_length=MAX_FIELDS)] | None = None
    shots: int = Field(0, ge=0, le=MAX_SHOTS)
    max_new_tokens: int = Field(DEFAULT_NEW_TOKENS, ge=1, le=MAX_NEW_TOKENS)

    @model_validator(mode="after")
    def kind_has_its_keys(self) -> TaskFile:
        if self.kind == "classify" and not self.labels:
            raise ValueError("a classify task needs `labels` (its fixed label set)")
        if self.kind != "classify" and self.labels is not None:
            raise ValueError(f"`labels` is for classify tasks, not {self.kind}")
        if self.kind != "extract" and self.fields is not None:
            raise ValueError(
                f"`fields` (the required fields) is for extract tasks, not {self.kind}"
            )
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise ValueError("`labels` lists a label twice")
        placeholders(self.prompt)  # a template that cannot be rendered is refused here
        return self

    @property
    def task_name(self) -> str:
        if self.name is not None:
            return self.name
        stem = "".join(c if c.isalnum() else "-" for c in Path(self.path).stem.lower())
        return (stem.strip("-") or "task")[:63]


class BuiltinEntry(BaseModel):
    """A shipped task with settings: ``{name: snips-intent, shots: 3, per_category: 10}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: BuiltinTask
    shots: int = Field(0, ge=0, le=MAX_SHOTS)
    # score only the first N scored items of each category (None: every scored item)
    per_category: int | None = Field(None, ge=1, le=MAX_ITEMS)


# What `quality: {tasks: [...]}` lists: a shipped task's name, one with settings, or a user's file.
TaskEntry = BuiltinTask | BuiltinEntry | TaskFile


@dataclass(frozen=True)
class TaskItem:
    """One item: its id, its category (the per-category metrics' group), the template's values,
    and its gold answer (``label``, ``choices`` + ``gold`` or ``target_fields``, by kind)."""

    id: str
    category: str
    values: dict[str, str]
    label: str | None = None
    choices: tuple[str, ...] | None = None
    gold: int | None = None
    target_fields: dict[str, str] | None = None


@dataclass(frozen=True)
class TaskSpec:
    """A task ready to score: its definition, its scored items and its few-shot pool (disjoint).

    ``required``: the fields an extract output must hold (None: each item's gold fields)."""

    name: str
    kind: TaskKind
    prompt: str
    scored: tuple[TaskItem, ...]
    fewshot: tuple[TaskItem, ...] = ()
    labels: tuple[str, ...] | None = None
    required: tuple[str, ...] | None = None
    shots: int = 0
    max_new_tokens: int = DEFAULT_NEW_TOKENS
    source: str = ""  # the file it was read from
    sha256: str = ""  # of that file's bytes
    extra: dict[str, Any] = field(default_factory=dict)

    def shot_items(self) -> tuple[TaskItem, ...]:
        """The few-shot examples every prompt starts with: the first ``shots`` of the pool,
        taken round-robin over its categories (so no category is left out while others repeat)."""
        by_category: dict[str, list[TaskItem]] = {}
        for item in self.fewshot:
            by_category.setdefault(item.category, []).append(item)
        out: list[TaskItem] = []
        depth = 0
        while len(out) < self.shots and any(depth < len(v) for v in by_category.values()):
            out += [v[depth] for v in by_category.values() if depth < len(v)]
            depth += 1
        return tuple(out[: self.shots])

    def required_of(self, item: TaskItem) -> tuple[str, ...]:
        """The fields ``item``'s output must hold."""
        if self.required is not None:
            return self.required
        return tuple(item.target_fields or {})

    def text(self) -> str:
        """Every text of the task (prompts and answers), for the leakage check."""
        items = (*self.fewshot, *self.scored)
        return "\n".join(render_prompt(self, i) + render_target(self, i) for i in items)


# --- rendering: the one place a prompt and its answer are written ------------------------------


def placeholders(template: str) -> tuple[str, ...]:
    """The plain names a template uses; ValueError for anything else (attributes, indices,
    format specs, conversions, positional fields, unbalanced braces)."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"the prompt template does not parse: {exc}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise ValueError(
                f"the prompt template's field {{{name}}} is not a plain name "
                "(write {text}; no attributes, indices, formats or conversions)"
            )
        names.append(name)
    return tuple(dict.fromkeys(names))


def render_prompt(task: TaskSpec, item: TaskItem, shots: Sequence[TaskItem] = ()) -> str:
    """The prompt of ``item``: each shot rendered with its answer and a blank line, then the
    item's template (the same string is scored and trained on)."""
    prefix = "".join(render_prompt(task, s) + render_target(task, s) + "\n\n" for s in shots)
    return prefix + task.prompt.format_map(item.values)


def label_continuation(label: str) -> str:
    """The continuation a classify label is scored (and trained) as."""
    return " " + label


def render_target(task: TaskSpec, item: TaskItem) -> str:
    """The gold continuation of ``item``: " label" (classify), " choice" (choice), or " " +
    its fields as sorted JSON (extract)."""
    if task.kind == "classify":
        return label_continuation(str(item.label))
    if task.kind == "choice":
        return " " + (item.choices or ())[item.gold or 0]
    return " " + fields_json(item.target_fields or {})


def fields_json(fields: dict[str, str]) -> str:
    """Fields as an extract answer writes them: JSON, keys sorted, non-ASCII as is."""
    return json.dumps(fields, sort_keys=True, ensure_ascii=False)


# --- reading a user's task file ---------------------------------------------------------------


def load_task_file(entry: TaskFile, base: Path | None = None) -> TaskSpec:
    """The task of a scenario entry, its file read strictly (``read_item``); ``base``: the
    directory a relative path is read from (default: the working directory)."""
    path = Path(entry.path)
    if base is not None and not path.is_absolute():
        path = base / path
    raw = _read(path)
    seen: set[str] = set()
    scored: list[TaskItem] = []
    fewshot: list[TaskItem] = []
    lines = raw.decode("utf-8", errors="strict").splitlines()
    if len(lines) > MAX_ITEMS:
        raise UserInputError(f"{len(lines):,} lines; a task file holds at most {MAX_ITEMS:,}",
                             file=str(path))  # fmt: skip
    names = placeholders(entry.prompt)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = Where(str(path), number)
        split, item = read_item(entry, line, names, where)
        if item.id in seen:
            raise where.error("id", f"{item.id!r} is the id of an earlier line; ids are unique")
        seen.add(item.id)
        (fewshot if split == "fewshot" else scored).append(item)
    if not scored:
        raise UserInputError("no scored item (every line is a few-shot example)", file=str(path))
    if entry.shots > len(fewshot):
        raise UserInputError(
            f"shots = {entry.shots} but the file has {len(fewshot)} few-shot item(s) "
            '(lines with "split": "fewshot")',
            file=str(path),
        )
    return TaskSpec(
        name=entry.task_name, kind=entry.kind, prompt=entry.prompt, scored=tuple(scored),
        fewshot=tuple(fewshot), labels=tuple(entry.labels) if entry.labels else None,
        required=tuple(entry.fields) if entry.fields else None, shots=entry.shots,
        max_new_tokens=entry.max_new_tokens, source=str(path),
        sha256=hashlib.sha256(raw).hexdigest(),
    )  # fmt: skip


def _read(path: Path) -> bytes:
    try:
        return read_capped(path, MAX_TASK_BYTES, "task file")
    except FileTooLarge:
        raise
    except FileNotFoundError:
        raise UserInputError("no such task file", file=str(path)) from None
    except OSError as exc:
        raise UserInputError(
            f"cannot read the task file ({exc.strerror})", file=str(path)
        ) from None


@dataclass(frozen=True)
class Where:
    """A line of a task file, for its one-line errors."""

    file: str
    line: int

    def error(self, field: str, message: str) -> UserInputError:
        return UserInputError(message, file=self.file, line=self.line, field=field)


def read_item(
    entry: TaskFile, line: str, names: tuple[str, ...], where: Where
) -> tuple[str, TaskItem]:
    """(split, item) of one line, or the UserInputError naming its file, line and field."""
    if len(line) > MAX_LINE_CHARS:
        raise where.error("line", f"{len(line):,} characters; an item holds at most "
                                  f"{MAX_LINE_CHARS:,}")  # fmt: skip
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise where.error("line", f"not JSON ({why}); expected one JSON object a line") from None
    if not isinstance(data, dict):
        raise where.error("line", f"a JSON {type(data).__name__}; expected an object")
    allowed = {"id", "category", "split", *names, *KIND_KEYS[entry.kind]}
    for key in data:
        if key not in allowed:
            raise where.error(key, f"unknown key{did_you_mean(key, allowed)}; this task's items "
                                   f"take: {', '.join(sorted(allowed))}")  # fmt: skip
    item_id = _string(data, "id", where)
    split = data.get("split", "scored")
    if split not in SPLITS:
        raise where.error("split", f"{split!r}; expected one of: {', '.join(SPLITS)}")
    values = {name: _string(data, name, where) for name in names}
    category = _string(data, "category", where) if "category" in data else "all"
    label, choices, gold, fields = _gold(entry, data, where)
    if entry.kind == "classify":
        category = str(label)
    return str(split), TaskItem(item_id, category, values, label, choices, gold, fields)


KIND_KEYS: dict[TaskKind, tuple[str, ...]] = {
    "classify": ("label",),
    "choice": ("choices", "gold"),
    "extract": ("fields",),
}


def _string(data: dict[str, Any], key: str, where: Where) -> str:
    if key not in data:
        raise where.error(key, "missing; expected a string")
    value = data[key]
    if not isinstance(value, str) or not value or len(value) > MAX_LINE_CHARS:
        raise where.error(key, f"{_shown(value)}; expected a non-empty string")
    return value


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _gold(
    entry: TaskFile, data: dict[str, Any], where: Where
) -> tuple[str | None, tuple[str, ...] | None, int | None, dict[str, str] | None]:
    """The item's gold answer by kind: (label, choices, gold, fields)."""
    if entry.kind == "classify":
        label = _string(data, "label", where)
        labels = entry.labels or []
        if label not in labels:
            near = did_you_mean(label, labels)
            raise where.error(
                "label", f"{label!r} is not in the task's labels{near}: {', '.join(labels)}"
            )
        return label, None, None, None
    if entry.kind == "choice":
        given = data.get("choices")
        choices: list[Any] = given if isinstance(given, list) else []
        ok = isinstance(given, list) and 2 <= len(choices) <= MAX_CHOICES
        if not ok or not all(isinstance(c, str) and c for c in choices):
            raise where.error("choices", f"{_shown(given)}; expected a list of 2 to "
                                         f"{MAX_CHOICES} non-empty strings")  # fmt: skip
        gold = data.get("gold")
        if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
            raise where.error("gold", f"{_shown(gold)}; expected the index of the right choice "
                                      f"(0 to {len(choices) - 1})")  # fmt: skip
        return None, tuple(choices), gold, None
    fields = data.get("fields")
    if not isinstance(fields, dict) or not fields or len(fields) > MAX_FIELDS:
        raise where.error("fields", f"{_shown(fields)}; expected an object of 1 to {MAX_FIELDS} "
                                    "field name → string value")  # fmt: skip
    for key, value in fields.items():
        if not isinstance(value, str) or not value:
            raise where.error(f"fields.{key}", f"{_shown(value)}; expected a non-empty string")
    for key in entry.fields or ():
        if key not in fields:
            raise where.error(f"fields.{key}", "missing: it is a required field of this task")
    return None, None, None, dict(fields)
