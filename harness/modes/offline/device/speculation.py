"""A speculative group's acceptance and every vLLM group's greedy digests, as a row's part.

The runner reads the engine's counters (``Backend.speculation_counters``) before and after each
measured pass; this turns the difference into the row's ``Speculation`` part, each figure with
the workload it was read on (harness.measure.speculation): the point's prompts are windows of
the eval corpus, the tasks pass generates the scenario's extract tasks' answers. On random
weights the text means nothing, so no acceptance is claimed there (the workload says so).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.backends.base import Backend
from harness.measure.speculation import RANDOM_WEIGHTS, Acceptance, Counters, acceptance
from harness.row import Speculation
from harness.spec.scenario import GroupKey
from harness.tasks.builtin import tasks_of
from harness.tasks.kinds import kind_of
from harness.tasks.spec import TaskEntry

CORPUS_WORKLOAD = "corpus windows"  # the offline point's prompts (harness.corpus.prompt_windows)


def pass_acceptance(backend: Backend, before: Counters | None, workload: str) -> Acceptance | None:
    """The acceptance of what the engine did since ``before`` (None: it does not speculate)."""
    if before is None:
        return None
    after = backend.speculation_counters()
    return None if after is None else acceptance(after.since(before), workload)


def tasks_workload(entries: Sequence[TaskEntry] | None) -> str:
    """The text the tasks pass generates: the prompts of the tasks whose kind generates, by
    name."""
    names = [t.name for t in tasks_of(entries or []) if kind_of(t.kind).generates]
    return f"generating tasks' prompts: {', '.join(names)}" if names else "no generation"


def point_workload(group: GroupKey) -> str:
    return RANDOM_WEIGHTS if group.weights == "random" else CORPUS_WORKLOAD


def speculation_part(
    group: GroupKey,
    point: Acceptance | None,
    tasks: Acceptance | None,
    sequences: Sequence[str],
    items: Sequence[str],
) -> Speculation:
    """The row's part: the point's and the tasks' acceptance (each with its workload; none on
    random weights), the synthetic length of a replay, and the greedy digests."""
    part = Speculation(
        greedy_sequences_sha=",".join(sequences) or None,
        greedy_tasks_sha=",".join(items) or None,
    )
    spec = group.speculative
    if spec is None:
        return part
    part.spec_synthetic_length_tokens = spec.synthetic
    if point is not None:
        part.spec_workload = point.workload
        if group.weights != "random":
            part.spec_drafts, part.spec_draft_tokens = point.drafts, point.draft_tokens
            part.spec_accepted_tokens = point.accepted
            part.spec_acceptance_rate_pct = point.rate_pct
            part.spec_acceptance_length_tokens = point.mean_length_tokens
            part.spec_acceptance_per_pos_pct = point.per_pos_text()
    if tasks is not None and tasks.drafts:
        part.spec_tasks_workload = tasks.workload
        part.spec_tasks_drafts = tasks.drafts
        part.spec_tasks_acceptance_rate_pct = tasks.rate_pct
        part.spec_tasks_acceptance_length_tokens = tasks.mean_length_tokens
        part.spec_tasks_acceptance_per_pos_pct = tasks.per_pos_text()
    return part
