"""A task as data: a JSONL file of items and a small spec (kind, prompt template, labels or
required fields, few-shot split), read strictly; and the one rendering of a prompt and of its
gold continuation, used to score and to train.

Kinds (``harness.tasks.kinds``, one module each; an item's gold keys are its kind's):

- ``choice``: each item has ``choices`` and ``gold`` (an index); the choice with the highest
  log-likelihood after the prompt is the answer (like ARC).
- ``classify``: a fixed label set; each item has a ``label``; every label's continuation is
  scored after the prompt, the highest is the prediction (per-label metrics).
- ``extract``: each item has gold ``fields`` (name → value); the model generates greedily after
  the prompt, its output up to the first newline must be a JSON object (``metrics``).
- ``exact``: each item has an ``answer``; the model generates greedily after the prompt, right
  when its normalised output is the normalised answer.

A user's task file (one JSON object a line)::

    {"id": "a1", "text": "...", "label": "spam"}                          # classify
    {"id": "q1", "text": "...", "choices": ["x", "y"], "gold": 1}         # choice
    {"id": "e1", "text": "...", "fields": {"name": "Ada", "city": "Paris"}}  # extract

Every placeholder of the prompt template (``{text}``: plain names only, no attribute, index or
format spec; at least one) must be a string key of every item. A placeholder never holds the
answer: not the kind's gold keys (``label``, ``gold``, ``choices``, ``fields``, ...), not ``split``,
not ``category`` of a classify task (its gold label), and not a key whose value is each item's
gold answer. Optional keys: ``category`` (choice and extract: the group of the per-category
metrics; classify: the gold label is the category) and ``split`` (``"fewshot"``: the item is a
few-shot example, never scored; ``"scored"``, the default).

The file is read by ``harness.files``' rules for JSON lines (UTF-8, a line ends at "\\n", a key
given twice refused). An id, a category, a label and a field name are keys (``check_key``): no
control or invisible character, no space at either end; two ids that are one after Unicode
NFKC normalisation are refused as given twice. A bad line is one ``UserInputError`` naming the
file, the line and the field, quoting values short (``harness.errors.quote``).
"""

from __future__ import annotations

import hashlib
import json
import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from harness.errors import UserInputError, as_field, did_you_mean, one_of, quote
from harness.files import FileTooLarge, JsonRefused, read_capped, strict_json, text_lines
from harness.tasks.kinds import KINDS, kind_of, unknown_kind
from harness.tasks.longctx.entry import LongContextEntry

TaskKind = str  # a name in the kinds' registry (harness.tasks.kinds.KINDS)
BuiltinTask = Literal["snips-intent", "snips-slots", "arc-easy"]

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
# The task-file options a kind takes or needs (``Kind.takes`` / ``Kind.needs``).
KIND_OPTIONS = ("labels", "fields")
# Unicode categories a key may not hold: controls, format (zero-width, BOM, bidi), line and
# paragraph separators, surrogates, private use.
INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co"})


def check_key(text: str) -> str:
    """`text` when it is usable as a key (an id, a category, a label, a field name); else a
    ValueError saying why: a control or invisible character, or a space at either end, makes
    two keys that look (or are stored) as one."""
    bad = next((c for c in text if unicodedata.category(c) in INVISIBLE), None)
    if bad is not None:
        raise ValueError(
            f"{quote(text)} holds the control or invisible character U+{ord(bad):04X}; a key "
            "is printable text"
        )
    if text != text.strip():
        raise ValueError(f"{quote(text)} begins or ends with a space")
    return text


Text = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(check_key)]


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

    @field_validator("kind")
    @classmethod
    def kind_is_registered(cls, kind: str) -> str:
        if kind not in KINDS:
            raise ValueError(unknown_kind(kind))
        return kind

    @field_validator("prompt")
    @classmethod
    def prompt_is_a_template_without_the_answer(cls, prompt: str, info: ValidationInfo) -> str:
        names = placeholders(prompt)  # a template that cannot be rendered is refused here
        if not names:
            raise ValueError(
                "the prompt uses no field of the items (write {text} where an item's text goes)"
            )
        kind = info.data.get("kind")
        answer = kind_of(kind).answer_keys if kind in KINDS else ()
        for name in names:
            if name in answer:
                raise ValueError(
                    f"{{{name}}} is a {kind} item's answer; a prompt must not contain the answer "
                    "(it is scored after the prompt)"
                )
            if name == "split":
                raise ValueError("{split} is an item's split (fewshot or scored), not its text")
        return prompt

    @model_validator(mode="after")
    def kind_has_its_keys(self) -> TaskFile:
        kind = kind_of(self.kind)
        problem = kind.check_entry(self)
        if problem:
            raise ValueError(problem)
        for key in KIND_OPTIONS:
            if key not in kind.takes and getattr(self, key) is not None:
                takers = [k for k in KINDS if key in kind_of(k).takes]
                raise ValueError(f"`{key}` is for {' and '.join(takers)} tasks, not {self.kind}")
        for key in KIND_OPTIONS:
            given = getattr(self, key) or []
            if len({unicodedata.normalize("NFKC", x) for x in given}) != len(given):
                raise ValueError(f"`{key}` lists a {key[:-1]} twice")
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


# Keys only a user's file entry has: an entry holding any of them is read as a TaskFile.
FILE_KEYS = frozenset(TaskFile.model_fields) - frozenset(BuiltinEntry.model_fields)
# An entry's type is chosen from its shape, so its error is its own type's (a union tried left to
# right reports the last member's). Each tag holds a "-": an error location drops it
# (``harness.spec.yamlinput.data_location``).
SHAPES: dict[type, str] = {
    BuiltinEntry: "shipped-entry", TaskFile: "task-file", LongContextEntry: "longctx-entry",
}  # fmt: skip


def entry_shape(value: Any) -> str | None:
    """The tag of a task entry's type: a name, a mapping with a file's keys, or another mapping;
    None for anything else."""
    if isinstance(value, str):
        return "shipped-name"
    if isinstance(value, dict):
        if "longctx" in value:
            return "longctx-entry"
        return "task-file" if FILE_KEYS & value.keys() else "shipped-entry"
    return SHAPES.get(type(value))


# What `quality: {tasks: [...]}` lists: a shipped task's name, one with settings, or a user's file.
TaskEntry = Annotated[
    Annotated[BuiltinTask, Tag("shipped-name")]
    | Annotated[BuiltinEntry, Tag("shipped-entry")]
    | Annotated[TaskFile, Tag("task-file")]
    | Annotated[LongContextEntry, Tag("longctx-entry")],
    Discriminator(
        entry_shape,
        custom_error_type="task_entry",
        custom_error_message=(
            f"expected a shipped task's name ({', '.join(get_args(BuiltinTask))}), "
            "{name: ..., shots: ...}, a task file {path: ..., kind: ..., prompt: ...} or a "
            "long-context task {longctx: ..., contexts: [...]}"
        ),
    ),
]


@dataclass(frozen=True)
class TaskItem:
    """One item: its id, its category (the per-category metrics' group), the template's values,
    and its gold answer, by kind: ``label`` (the answer as text: classify's label, exact's
    answer), ``choices`` + ``gold``, or ``target_fields``."""

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
    """The gold continuation of ``item``, as its kind writes it (classify: " label"; choice:
    " choice"; extract: " " + its fields as sorted JSON)."""
    return kind_of(task.kind).target(task, item)


def fields_json(fields: dict[str, str]) -> str:
    """Fields as an extract answer writes them: JSON, keys sorted, non-ASCII as is."""
    return json.dumps(fields, sort_keys=True, ensure_ascii=False)


# --- reading a user's task file ---------------------------------------------------------------


def load_task_file(entry: TaskFile, base: Path | None = None) -> TaskSpec:
    """The task of a scenario entry, its file read strictly (``read_item``); ``base``: the
    directory a relative path is read from (default: the working directory)."""
    path = Path(entry.path).expanduser()  # `~` as in model, adapter and trace paths
    if base is not None and not path.is_absolute():
        path = base / path
    raw = _read(path)
    lines = text_lines(raw, path, "the task file")
    if len(lines) > MAX_ITEMS:
        raise UserInputError(f"{len(lines):,} lines; a task file holds at most {MAX_ITEMS:,}",
                             file=str(path))  # fmt: skip
    seen: dict[str, int] = {}  # an id, normalised → its line
    scored: list[TaskItem] = []
    fewshot: list[TaskItem] = []
    names = placeholders(entry.prompt)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = Where(str(path), number)
        split, item = read_item(entry, line, names, where)
        key = unicodedata.normalize("NFKC", item.id)
        if key in seen:
            same = "" if key == item.id else " (the same once normalised)"
            raise where.error("id", f"{quote(item.id)} is the id of line {seen[key]}{same}; "
                                    "ids are unique")  # fmt: skip
        seen[key] = number
        (fewshot if split == "fewshot" else scored).append(item)
    if not scored:
        raise UserInputError("no scored item (every line is a few-shot example)", file=str(path))
    if entry.shots > len(fewshot):
        raise UserInputError(
            f"shots = {entry.shots} but the file has {len(fewshot)} few-shot item(s) "
            '(lines with "split": "fewshot")',
            file=str(path),
        )
    task = TaskSpec(
        name=entry.task_name, kind=entry.kind, prompt=entry.prompt, scored=tuple(scored),
        fewshot=tuple(fewshot), labels=tuple(entry.labels) if entry.labels else None,
        required=tuple(entry.fields) if entry.fields else None, shots=entry.shots,
        max_new_tokens=entry.max_new_tokens, source=str(path),
        sha256=hashlib.sha256(raw).hexdigest(),
    )  # fmt: skip
    check_no_answer_in_prompt(task, names)
    return task


def check_no_answer_in_prompt(task: TaskSpec, names: tuple[str, ...]) -> None:
    """Refuse a placeholder whose value is the item's gold answer on every item (at least two):
    the prompt would carry the answer it is scored on."""
    items = (*task.fewshot, *task.scored)
    if len(items) < 2:
        return
    for name in names:
        if all(i.values[name].strip() == render_target(task, i).strip() for i in items):
            raise UserInputError(
                f"{{{name}}} holds each item's gold answer (on all {len(items)} items); a "
                "prompt must not contain the answer",
                file=task.source,
                field="prompt",
            )


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
        """The error at this line; `field` (a key from the file, maybe long) shortened."""
        return UserInputError(message, file=self.file, line=self.line, field=as_field(field))


def read_item(
    entry: TaskFile, line: str, names: tuple[str, ...], where: Where
) -> tuple[str, TaskItem]:
    """(split, item) of one line, or the UserInputError naming its file, line and field."""
    if len(line) > MAX_LINE_CHARS:
        raise where.error("line", f"{len(line):,} characters; an item holds at most "
                                  f"{MAX_LINE_CHARS:,}")  # fmt: skip
    data = json_object(line, where)
    kind = kind_of(entry.kind)
    allowed = {"id", "category", "split", *names, *kind.gold_keys}
    for key in data:
        if key not in allowed:
            raise where.error(key, f"unknown key{did_you_mean(key, allowed)}; this "
                              f"task's items take: {one_of(sorted(allowed))}")  # fmt: skip
    item_id = _key(data, "id", where)
    split = data.get("split", "scored")
    if split not in SPLITS:
        raise where.error("split", f"{quote(split)}; expected one of: {one_of(SPLITS)}")
    values = {name: text_value(data, name, where) for name in names}
    category = _key(data, "category", where) if "category" in data else "all"
    gold = kind.read_gold(entry, data, where)
    if gold.category is not None:
        category = gold.category
    item = TaskItem(item_id, category, values, gold.label, gold.choices, gold.gold, gold.fields)
    return str(split), item


def json_object(line: str, where: Where) -> dict[str, Any]:
    """The JSON object of one line (``harness.files.strict_json``: a key given twice refused)."""
    try:
        data = strict_json(line)
    except JsonRefused as exc:
        raise where.error(exc.key if exc.key is not None else "line", str(exc)) from None
    except (ValueError, RecursionError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise where.error("line", f"not JSON ({why}); expected one JSON object a line") from None
    if not isinstance(data, dict):
        raise where.error("line", f"a JSON {type(data).__name__}; expected an object")
    return data


def text_value(data: dict[str, Any], key: str, where: Where) -> str:
    """The non-empty string at ``key`` of an item, or the error naming the key."""
    if key not in data:
        raise where.error(key, "missing; expected a string")
    value = data[key]
    if not isinstance(value, str) or not value or len(value) > MAX_LINE_CHARS:
        raise where.error(key, f"{quote(value)}; expected a non-empty string")
    return value


def _key(data: dict[str, Any], key: str, where: Where) -> str:
    """A string that is a key (``check_key``): an id or a category."""
    value = text_value(data, key, where)
    try:
        return check_key(value)
    except ValueError as exc:
        raise where.error(key, str(exc)) from None
