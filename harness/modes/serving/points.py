"""Serving points: one per (group measured offline, load level of `serving:`), and why one
cannot run."""

from __future__ import annotations

from harness.modes.serving.spec import SPARE_TOKENS
from harness.spec import catalog
from harness.spec.scenario import Point, Scenario


def serving_points(scenario: Scenario, offline: list[Point]) -> list[Point]:
    """One point per (group of the grid, load level of `serving:`), groups in grid order. Its
    batch is the level's concurrency (1 for a rate level), its context and output_tokens the
    mean prompt and output lengths; it runs once (repeats 1)."""
    if scenario.serving is None:
        return []
    levels = scenario.serving.levels(seed=scenario.seed)
    firsts = {p.group: p for p in reversed(offline)}
    ordered = sorted(firsts.values(), key=offline.index)
    return [
        first.model_copy(
            update={
                "batch": level.concurrency or 1,
                "context": level.prompt_tokens.mean,
                "output_tokens": level.output_tokens.mean,
                "repeats": 1,
                "serving": level,
            }
        )
        for first in ordered
        for level in levels
    ]


def serving_skip_reason(point: Point, arch: catalog.ModelArch) -> str | None:
    """Why a serving point cannot run (None: it can): an engine without a server, or a request
    longer than the model's positions."""
    if point.backend != "vllm":
        return (
            f"the {point.backend} engine has no server (serving needs vLLM's `vllm serve`) "
            "[rule serving-needs-server]"
        )
    longest = point.serving.longest_sequence() if point.serving is not None else 0
    if longest > arch.max_positions:
        return (
            f"the longest request (prompt + output + {SPARE_TOKENS} spare) has {longest} tokens, "
            f"more than the model's max_position_embeddings ({arch.max_positions}) "
            "[rule max-positions]"
        )
    return None
