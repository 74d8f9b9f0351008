"""Serving points: one per (group measured offline, load level of `serving:`), and why one
cannot run."""

from __future__ import annotations

from pathlib import Path

from harness.errors import UserInputError
from harness.modes.serving import workload
from harness.modes.serving.spec import SPARE_TOKENS, Serving, ServingLevel
from harness.spec import catalog
from harness.spec.scenario import Point, Scenario


def serving_points(scenario: Scenario, offline: list[Point]) -> list[Point]:
    """One point per (group of the grid, load level of `serving:`), groups in grid order. Its
    batch is the level's concurrency (1 for a rate level), its context and output_tokens the
    mean prompt and output lengths (a workload's: its requests' means); it runs once (repeats 1).
    A trace workload's rate levels arrive as bursty as the trace (`workload.trace_arrivals`)."""
    if scenario.serving is None:
        return []
    levels = scenario.serving.levels(seed=scenario.seed, trace_arrivals=arrivals(scenario.serving))
    firsts = {p.group: p for p in reversed(offline)}
    ordered = sorted(firsts.values(), key=offline.index)
    return [
        first.model_copy(
            update={
                "batch": level.concurrency or 1,
                "context": context,
                "output_tokens": output,
                "repeats": 1,
                "serving": level,
            }
        )
        for first in ordered
        for level in levels
        for context, output in [mean_lengths(level, catalog.model(first.model, first.revision))]
    ]


def serving_inputs(point: Point) -> list[tuple[str, Path]]:
    """The file a serving point reads beyond its model: its workload's trace (its content is
    part of the point's key: harness.spec.inputs)."""
    level = point.serving
    if level is None or level.workload is None or level.workload.trace is None:
        return []
    return [("trace", workload.trace_path(level.workload.trace))]


def arrivals(serving: Serving) -> tuple[float, float] | None:
    """A trace workload's (requests/s, gamma shape), None for any other block."""
    if serving.workload is None or serving.workload.trace is None:
        return None
    try:
        return workload.trace_arrivals(workload.scaled_requests(serving.workload))
    except UserInputError as exc:
        raise trace_refusal(exc) from None


def trace_refusal(exc: UserInputError) -> UserInputError:
    """A refusal read in the trace as one of the scenario's fields (`serving.workload.trace`, or
    the workload field it names), the trace's file, line and field in its message; the scenario's
    file and line are added where the grid is expanded (harness.spec.scenario.expand)."""
    if exc.file is None:
        return exc
    own = exc.field if exc.field and exc.field.startswith("serving.") else None  # the scenario's
    inner = UserInputError(
        exc.message, file=exc.file, line=exc.line, field=None if own else exc.field
    )
    return UserInputError(f"in the trace {inner.render()}", field=own or "serving.workload.trace")


def mean_lengths(level: ServingLevel, arch: catalog.ModelArch) -> tuple[int, int]:
    """The level's mean prompt and output tokens (rounded): its distributions' means, or its
    workload's requests' as sent (prompts cut to the model's positions beside the longest
    output, as `prompts.workload_prompts` cuts them)."""
    if level.workload is None:
        return level.prompt_tokens.mean, level.output_tokens.mean
    lengths = workload.level_lengths(level)
    room = arch.max_positions - max(o for _, o in lengths) - SPARE_TOKENS
    return (max(1, round(sum(min(p, room) for p, _ in lengths) / len(lengths))),
            max(1, round(sum(o for _, o in lengths) / len(lengths))))  # fmt: skip


def serving_skip_reason(point: Point, arch: catalog.ModelArch) -> str | None:
    """Why a serving point cannot run (None: it can): an engine without a server, or a request
    longer than the model's positions."""
    if point.backend != "vllm":
        return (
            f"the {point.backend} engine has no server (serving needs vLLM's `vllm serve`) "
            "[rule serving-needs-server]"
        )
    level = point.serving
    if level is not None and level.workload is not None:
        return None  # a workload's prompts are cut to the model (prompts.workload_prompts)
    longest = level.longest_sequence() if level is not None else 0
    if longest > arch.max_positions:
        return (
            f"the longest request (prompt + output + {SPARE_TOKENS} spare) has {longest} tokens, "
            f"more than the model's max_position_embeddings ({arch.max_positions}) "
            "[rule max-positions]"
        )
    return None
