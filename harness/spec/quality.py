"""A scenario's quality block (``quality:``): the perplexity windows, ARC-Easy's items (the shipped
task ``arc-easy``), the bootstrap, the tasks scored on each group's engine, and which measured
metrics decide equal quality (the gate, ``harness.measure.verdict``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from harness.spec.yamlinput import Input
from harness.tasks.arc import NAME as ARC_NAME
from harness.tasks.arc import arc_task
from harness.tasks.builtin import tasks_of
from harness.tasks.kinds import kind_of
from harness.tasks.longctx_task import KIND as LONG_KIND
from harness.tasks.spec import TaskEntry, TaskSpec

# Plausible bounds: a value outside them is a typo or an attack, never a benchmark.
MAX_WINDOW_TOKENS = 8192
MAX_WINDOWS = 100_000
MAX_ARC_ITEMS = 10_000
MAX_BOOTSTRAP = 100_000

# The metrics the equal-quality gate can decide on (harness.measure.verdict): the paired
# per-window ΔNLL (perplexity) and the scored tasks (harness.tasks: per item or per field, overall
# and per category; ARC-Easy is the shipped task `arc-easy`).
# ``context``: the long-context tasks (kind longctx) judged per context length, a row gated at
# the shortest judged context at or above its own (harness.results.context_gate).
GateMetric = Literal["ppl", "tasks", "context"]
GATE_METRICS: tuple[GateMetric, ...] = ("ppl", "tasks", "context")
# Gate names of earlier versions, read as what they are now (scenarios and run manifests): ARC
# had a metric of its own before it was scored as a task.
GATE_RENAMED: dict[str, GateMetric] = {"arc": "tasks"}
MAX_TASKS = 32


def gate_names(names: Iterable[str]) -> list[str]:
    """``names`` with earlier gate names read as today's (``GATE_RENAMED``), each once."""
    return list(dict.fromkeys(GATE_RENAMED.get(n, n) for n in names))


class QualitySettings(Input):
    window_tokens: int = Field(256, gt=0, le=MAX_WINDOW_TOKENS)
    max_windows: int | None = Field(64, gt=0, le=MAX_WINDOWS)  # None = every window
    # ARC-Easy test items scored as the shipped task `arc-easy`, spread evenly over the file
    # ("all": every item; 0: none); a scenario that lists `arc-easy` in `tasks` decides there
    arc_items: Annotated[int, Field(ge=0, le=MAX_ARC_ITEMS)] | Literal["all"] = 100
    bootstrap_samples: int = Field(1000, gt=0, le=MAX_BOOTSTRAP)
    # which measured metrics decide equal quality; None: every metric the run measures
    gate: Annotated[list[GateMetric], Field(min_length=1)] | None = None
    # tasks scored on the group's engine (harness.tasks): a shipped task's name, one with
    # settings, or a user's task file ({path, kind, prompt, ...}), read and checked here; the
    # entry's type is chosen from its shape (harness.tasks.spec.entry_shape)
    tasks: Annotated[list[TaskEntry], Field(min_length=1, max_length=MAX_TASKS)] | None = None

    @field_validator("gate", mode="before")
    @classmethod
    def earlier_gate_names(cls, value: object) -> object:
        return gate_names(map(str, value)) if isinstance(value, list) else value

    @model_validator(mode="after")
    def task_files_are_valid(self) -> QualitySettings:
        """Every task file read strictly now (one line: file, line, field), names distinct."""
        self.scored_tasks()
        return self

    @model_validator(mode="after")
    def a_gated_task_is_scored(self) -> QualitySettings:
        """`gate: [tasks]` needs a task to score: else the run would be gated on ppl alone."""
        if self.gate is not None and "tasks" in self.gate and not self.tasks and not self.arc_items:
            raise ValueError(
                "gate names tasks, but nothing scores a task (no `tasks`, arc_items: 0): list "
                "a task in quality.tasks, set arc_items, or gate on [ppl]"
            )
        return self

    def scored_tasks(self) -> list[TaskSpec]:
        """Every task a group scores: the listed ones, then `arc-easy` on ``arc_items`` items
        unless listed or 0."""
        listed = tasks_of(self.tasks or [])
        if self.arc_items and all(t.name != ARC_NAME for t in listed):
            listed.append(arc_task(None if self.arc_items == "all" else self.arc_items))
        return listed

    def task_calls(self) -> tuple[int, int]:
        """(continuations scored, tokens generated at most) by the tasks of one group, as each
        task's kind counts them (harness.tasks.kinds: each label or choice of each scored item
        scored, or max_new_tokens per item generated)."""
        continuations = generated = 0
        for task in self.scored_tasks():
            scored, made = kind_of(task.kind).work(task)
            continuations, generated = continuations + scored, generated + made
        return continuations, generated

    def task_texts(self) -> list[tuple[str, str]]:
        """(name, every prompt and answer) of each task, for the leakage check."""
        return [(t.name, t.text()) for t in self.scored_tasks()]

    def task_seeds(self) -> list[tuple[str, tuple[int, int]]]:
        """(name, [start, end) evaluation seeds) of each generated long-context task, for the
        leak report's seed check."""
        return [(t.name, (int(t.extra["seeds"][0]), int(t.extra["seeds"][1])))
                for t in self.scored_tasks() if t.kind == LONG_KIND]  # fmt: skip

    def gated(self) -> tuple[GateMetric, ...]:
        """The metrics the gate reads, in GATE_METRICS order (tasks only where one is scored)."""
        wanted = self.gate if self.gate is not None else list(GATE_METRICS)
        kinds = [t.kind for t in self.scored_tasks()]
        scored = {"tasks": any(k != LONG_KIND for k in kinds), "context": LONG_KIND in kinds}
        return tuple(m for m in GATE_METRICS if m in wanted and scored.get(m, True))
