"""The equal-quality gate per context length (the ``context`` metric): a KV cache's error is
paid where the context is long, so a configuration is judged at each context its long-context
tasks (kind ``longctx``, one category per length: ``ctx-4096``) were scored at, and a row (a
point at context c) is gated by the verdict at the shortest judged context ≥ c.

**Per judged context** and quality class C, over every long-context task of the row: the
paired exact-match drop (reference − candidate rate, Newcombe's 90 % interval) against
(1 − C) × the reference's rate, and the paired gold-answer ΔNLL (nats/token, one-sided 95 %
bounds) against −ln C; the context's verdict combines them (fail if any fails, pass if all
pass, else undecided), with the items that would decide an undecided one.

**A row's context verdict**: that of the shortest judged context ≥ the row's context; none
(every judged context shorter than the row's) → not measured, reason "quality not measured at
this context (judged up to N tokens)"; a row without long-context tasks → not measured.
``context_verdicts_<class>`` says it per context in words: "pass at 1k (40 items), undecided at
4k (needs 31 more items)". Pure pandas/numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from harness.measure import verdict
from harness.tasks.longctx_task import KIND, context_of

NOT_AT_CONTEXT = "quality not measured at this context"
NO_LONG_CONTEXT = "context: no long-context task scored on this row"
Array = NDArray[Any]
__all__ = ["KIND", "ContextVerdict", "context_verdicts", "judge_rows", "row_verdict"]


@dataclass(frozen=True)
class ContextVerdict:
    """One judged context of one row: its verdict, the paired items, the items that would
    decide it (undecided only)."""

    context: int
    verdict: verdict.Verdict
    items: int
    needed: int | None


def _interval(part: dict[str, Any], prefix: str, sd_key: str | None) -> verdict.Interval | None:
    keys = (prefix.rstrip("_") or "diff", f"{prefix}ci90_low", f"{prefix}ci90_high")
    values = [part.get(k) for k in keys]
    if any(v is None for v in values) or not part.get("paired_units"):
        return None
    sd = part.get(sd_key) if sd_key else None
    est, low, high = (float(v) for v in values if v is not None)
    return verdict.Interval(est, low, high, float("nan") if sd is None else float(sd),
                            int(part["paired_units"]))  # fmt: skip


def judge_context(
    share: float, parts: list[dict[str, Any]]
) -> tuple[verdict.Verdict, int, int | None]:
    """(verdict, paired items, items needed) of one context from its categories (one per
    long-context task): exact match and answer ΔNLL judged each, combined."""
    decisions: list[verdict.Decision] = []
    items = 0
    for part in parts:
        em = _interval(part, "diff_", None)
        if em is not None and part.get("ref_rate") is not None:
            decisions.append(
                verdict.judge("tasks", em, verdict.accuracy_margin(share, float(part["ref_rate"])))
            )
        nll = _interval(part, "dnll_", "dnll_sd")
        if nll is not None:
            decisions.append(verdict.judge("ppl", nll, verdict.ppl_margin(share)))
        items += int(part.get("paired_units") or 0)
    if not decisions:
        return "undecided", items, None
    combined = verdict.combine(d.verdict for d in decisions)
    needed = [d.needed for d in decisions if d.verdict == "undecided" and d.needed is not None]
    return combined, items, (max(needed) if needed and combined == "undecided" else None)


def context_verdicts(tasks: object, share: float) -> list[ContextVerdict]:
    """Each judged context of a row's ``tasks`` part (its long-context tasks' categories that
    are paired with the reference), shortest first."""
    if not isinstance(tasks, list):
        return []
    by_context: dict[int, list[dict[str, Any]]] = {}
    for task in tasks:
        if not isinstance(task, dict) or task.get("kind") != KIND:
            continue
        for category in task.get("categories") or []:
            tokens = context_of(str(category.get("category", "")))
            if tokens is not None:
                by_context.setdefault(tokens, []).append(category)
    out = []
    for tokens in sorted(by_context):
        decided, items, needed = judge_context(share, by_context[tokens])
        out.append(ContextVerdict(tokens, decided, items, needed))
    return out


def row_verdict(judged: list[ContextVerdict], context: float) -> tuple[ContextVerdict | None, str]:
    """The judged context that gates a row at ``context`` tokens (the shortest ≥ it) and, where
    none does, why."""
    if not judged:
        return None, NO_LONG_CONTEXT
    for one in judged:
        if math.isnan(context) or one.context >= context:
            return one, ""
    return None, f"context: {NOT_AT_CONTEXT} (judged up to {judged[-1].context:,} tokens)"


def tokens_label(tokens: int) -> str:
    """4096 → "4k", 1000 → "1000", 512 → "512"."""
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def in_words(judged: list[ContextVerdict]) -> str:
    """ "pass at 1k (40 items), undecided at 4k (needs 31 more items)"."""
    parts = []
    for one in judged:
        if one.verdict == "undecided" and one.needed is not None:
            size = f"needs {max(one.needed - one.items, 0)} more items"
        else:
            size = f"{one.items} items"
        parts.append(f"{one.verdict} at {tokens_label(one.context)} ({size})")
    return ", ".join(parts)


def judge_rows(
    tasks: Sequence[object] | None, contexts: Array, share: float, measured: Array
) -> tuple[Array, Array, Array, Array, Array, Array]:
    """Per row: (verdict code, VERDICTS' index or −1 not measured; the judged context that
    decided, NaN if none; paired items there; items needed; the per-context words; why not
    measured). ``tasks``: each row's tasks part (None: no row has one). Only rows whose part is
    a non-empty list are judged one by one; every other row has no judged context."""
    n = len(contexts)
    codes = np.full(n, -1, dtype=np.int64)
    at, units, needed = (np.full(n, np.nan) for _ in range(3))
    words = np.full(n, "", dtype=object)
    why = np.full(n, "", dtype=object)
    why[np.asarray(measured, dtype=bool)] = NO_LONG_CONTEXT
    parts: Sequence[object] = () if tasks is None else tasks
    for i in [i for i, part in enumerate(parts) if isinstance(part, list) and part]:
        judged = context_verdicts(parts[i], share)
        words[i] = in_words(judged)
        if not measured[i]:
            continue
        gate, reason = row_verdict(judged, float(contexts[i]))
        why[i] = reason
        if gate is None:
            continue
        codes[i] = verdict.VERDICTS.index(gate.verdict)
        at[i], units[i] = gate.context, gate.items
        needed[i] = np.nan if gate.needed is None else gate.needed
    return codes, at, units, needed, words, why
