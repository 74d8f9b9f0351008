"""Acceptance of speculative decoding, from the engine's own cumulative counters.

vLLM counts, per engine (vllm/v1/spec_decode/metrics.py, ``SpecDecodingProm``):
``vllm:spec_decode_num_drafts`` (steps that proposed), ``..._num_draft_tokens`` (tokens
proposed), ``..._num_accepted_tokens`` (tokens kept) and ``..._num_accepted_tokens_per_pos``
(kept at draft position i). ``LLM.get_metrics()`` reads them offline, a server's ``/metrics``
serving (with a ``_total`` suffix). A pass is measured as the difference of two readings
around it (``Counters.since``), so what the engine did before (quality scoring, another pass)
never leaks into a pass's figures.

Formulas (as vLLM's own logger states them):
  acceptance rate        = accepted / draft tokens                          (a share, × 100 in %)
  mean acceptance length = 1 + accepted / drafts    (tokens per target step, the bonus included)
  acceptance at pos i    = accepted at position i / drafts

Acceptance depends on the text, so a reading is always kept with the workload it was read on
(``Acceptance.workload``); a row never carries one figure for mixed text without saying so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
PROMETHEUS_SUFFIX = "_total"  # a counter's name on a server's /metrics page
# the workload a row on random weights names: its text means nothing, so no acceptance is claimed
RANDOM_WEIGHTS = "random weights: speed and memory only, no acceptance claim"


class Counters(BaseModel):
    """One reading of the engine's cumulative speculative-decoding counters (summed over its
    engines), or the difference of two."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    drafts: int = Field(0, ge=0)
    draft_tokens: int = Field(0, ge=0)
    accepted: int = Field(0, ge=0)
    accepted_per_pos: tuple[int, ...] = ()

    def since(self, before: Counters) -> Counters:
        """What happened between ``before`` and this reading (counters only grow; a reading
        that went down means the engine was restarted between them: refused)."""
        width = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        now = (*self.accepted_per_pos, *([0] * (width - len(self.accepted_per_pos))))
        then = (*before.accepted_per_pos, *([0] * (width - len(before.accepted_per_pos))))
        deltas = (
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.accepted - before.accepted,
            *(a - b for a, b in zip(now, then, strict=True)),
        )
        if min(deltas, default=0) < 0:
            raise ValueError(f"speculative-decoding counters went down: {before} then {self}")
        return Counters(
            drafts=deltas[0],
            draft_tokens=deltas[1],
            accepted=deltas[2],
            accepted_per_pos=tuple(deltas[3:]),
        )


def from_engine_metrics(metrics: Iterable[Any]) -> Counters | None:
    """A reading from ``vllm.LLM.get_metrics()`` (vllm.v1.metrics.reader: ``Counter`` with
    ``.value``, ``Vector`` with ``.values``, one per engine); None where the engine exposes no
    speculative-decoding counters (it runs without speculation)."""
    totals: dict[str, int] = {}
    per_pos: list[int] = []
    for metric in metrics:
        name = str(getattr(metric, "name", ""))
        if name == ACCEPTED_PER_POS:
            values = [int(v) for v in getattr(metric, "values", [])]
            per_pos = [a + b for a, b in zip_longest_zero(per_pos, values)]
        elif name in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
            totals[name] = totals.get(name, 0) + int(getattr(metric, "value", 0))
    if DRAFTS not in totals:
        return None
    return Counters(
        drafts=totals[DRAFTS],
        draft_tokens=totals.get(DRAFT_TOKENS, 0),
        accepted=totals.get(ACCEPTED, 0),
        accepted_per_pos=tuple(per_pos),
    )


def from_prometheus(samples: Iterable[tuple[str, dict[str, str], float]]) -> Counters | None:
    """A reading from a server's ``/metrics`` page, given as (name, labels, value) samples (the
    ``_total`` counters; per position by its ``position`` label)."""
    totals: dict[str, int] = {}
    per_pos: dict[int, int] = {}
    for name, labels, value in samples:
        base = name.removesuffix(PROMETHEUS_SUFFIX)
        if base == ACCEPTED_PER_POS and "position" in labels:
            at = int(labels["position"])
            per_pos[at] = per_pos.get(at, 0) + int(value)
        elif base in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
            totals[base] = totals.get(base, 0) + int(value)
    if DRAFTS not in totals:
        return None
    width = max(per_pos, default=-1) + 1
    return Counters(
        drafts=totals[DRAFTS],
        draft_tokens=totals.get(DRAFT_TOKENS, 0),
        accepted=totals.get(ACCEPTED, 0),
        accepted_per_pos=tuple(per_pos.get(i, 0) for i in range(width)),
    )


def zip_longest_zero(a: Sequence[int], b: Sequence[int]) -> list[tuple[int, int]]:
    width = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0, b[i] if i < len(b) else 0) for i in range(width)]


class Acceptance(BaseModel):
    """The acceptance of one pass on one workload (formulas in the module docstring); None
    figures where the pass drafted nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    workload: str
    drafts: int
    draft_tokens: int
    accepted: int
    rate_pct: float | None
    mean_length_tokens: float | None
    per_pos_pct: tuple[float, ...]

    def per_pos_text(self) -> str | None:
        """Per-position acceptance as a row holds it: percents, comma-separated, position 1
        first; None where nothing was drafted."""
        if not self.per_pos_pct:
            return None
        return ",".join(f"{p:.1f}" for p in self.per_pos_pct)


def acceptance(counters: Counters, workload: str) -> Acceptance:
    """The figures of a pass's counters (the difference of two readings) on ``workload``."""
    drafts, proposed, kept = counters.drafts, counters.draft_tokens, counters.accepted
    return Acceptance(
        workload=workload,
        drafts=drafts,
        draft_tokens=proposed,
        accepted=kept,
        rate_pct=100.0 * kept / proposed if proposed else None,
        mean_length_tokens=1.0 + kept / drafts if drafts else None,
        per_pos_pct=tuple(100.0 * a / drafts for a in counters.accepted_per_pos) if drafts else (),
    )


# --- greedy identity: what each generation produced, as digests --------------------------------

ITEM_DIGEST_HEX = 12  # hex digits of one item's digest in a row (48 bits: collisions moot)


def item_digest(token_ids: Sequence[int]) -> str:
    """One generated sequence's token ids as a short sha256 (a row keeps one per item, so that
    two configurations' greedy outputs are compared item by item without the outputs)."""
    text = ",".join(str(int(t)) for t in token_ids)
    return hashlib.sha256(text.encode()).hexdigest()[:ITEM_DIGEST_HEX]


def differing_items(ours: Sequence[str], theirs: Sequence[str]) -> int | None:
    """How many items' digests differ between two configurations' generations of the same items
    in the same order; None where they did not generate the same number of items."""
    if len(ours) != len(theirs):
        return None
    return sum(1 for a, b in zip(ours, theirs, strict=True) if a != b)
