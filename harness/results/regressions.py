"""Error analysis per configuration against its model's reference: which units it gets wrong.

A quality class says *whether* a configuration keeps the reference's quality; this says *where*
it does not. Source: what the worker keeps for every group beside its window scores
(``harness.run.store``): per-window NLL sums and token counts, and per task its per-item results
(``harness.tasks.metrics.Outcome``; ARC-Easy is the task ``arc-easy`` like any other).

For each configuration (a group of checkpoint weights that is not its model's reference) and its
reference (the quality gate's reference rule, ``harness.results.gate.references``: the same run,
model and revision, the same target preferred; of the reference rows the gate takes its median
from, the first that kept its scores' group):

- **flips, per task both scored**, on the units both scored, paired by the keys the task's kind
  gives them (``Outcome.units``: the item; extract: the gold field), as the gate pairs them:
  ``right_to_wrong`` (b: the reference's unit was a hit, the configuration's a miss) and
  ``wrong_to_right`` (c), each with its unit keys (``<task>:<key>``);
- **McNemar's exact test** on each task's discordant pairs (b, c): under "no difference" each
  discordant unit is right→wrong with probability ½, so the two-sided p-value is
  ``p = min(1, 2 · P(X ≤ min(b, c)))`` with ``X ~ Binomial(b + c, ½)`` (p = 1 when b + c = 0);
  computed exactly with integers. It tests whether the flips lean one way; it says nothing
  about units neither side got right;
- **the windows with the largest ΔNLL**: per window (configuration − reference) NLL in nats per
  predicted token, the ``TOP_WINDOWS`` largest, each with a short excerpt of its text (the shipped
  corpus decoded with the model's tokenizer; empty with a note where the tokenizer cannot load).

Tables: ``summary`` (one row per configuration: its windows and a note), ``flips`` (one row per
configuration and task both scored) and ``items`` (``regressions.csv``: one row per worst window
and per item a task's kind lists, ``harness.results.tasks.task_items``).
"""

from __future__ import annotations

import functools
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from harness import corpus
from harness.results.columns import ENGINE_WEIGHTS_KV
from harness.results.gate import references
from harness.results.tasks import kept_outcomes, task_items
from harness.run.store import load_window_nll
from harness.tasks.metrics import Outcome

Array = NDArray[Any]
Outcomes = dict[str, Outcome]  # task name → its per-item results
TOP_WINDOWS = 5
EXCERPT_CHARS = 160
TEST = (
    "McNemar exact: two-sided binomial on the discordant pairs, "
    "p = min(1, 2·P(X ≤ min(b, c))), X ~ Binomial(b + c, 1/2)"
)
CONFIG_COLUMNS = ["model", *ENGINE_WEIGHTS_KV, "target", "group", "reference_group"]
SUMMARY_COLUMNS = [
    *CONFIG_COLUMNS,
    "windows_paired",
    "dnll_nats_per_token",
    "worst_window",
    "worst_dnll_nats_per_token",
    "note",
]
FLIPS_COLUMNS = [
    *CONFIG_COLUMNS,
    "task",
    "units_paired",  # units both scored, paired by the kind's unit keys (Outcome.units)
    "right_to_wrong",  # b
    "wrong_to_right",  # c
    "mcnemar_p_exact",
    "test",
    "right_to_wrong_ids",  # "<task>:<unit key>", space-separated, in the configuration's order
    "wrong_to_right_ids",
]
ITEM_COLUMNS = [
    *CONFIG_COLUMNS,
    "kind",  # "window" | "task:<name>" (harness.results.tasks.task_items)
    "item",  # "window:<corpus window index>" | "scored-window:<position>" | "<task>:<item id>"
    "change",  # "largest_dnll" | what the task's kind lists ("right_to_wrong", "wrong_to_right", …)
    "dnll_nats_per_token",
    "nll_ref_nats_per_token",
    "nll_nats_per_token",
    "excerpt",
]
NO_TASKS = "no per-item task results kept"
NO_COMMON_TASK = "no task scored by both it and its reference"
NO_WINDOWS = "no paired window scores (missing, or other windows than the reference's)"


@dataclass
class Regressions:
    summary: pd.DataFrame  # SUMMARY_COLUMNS, one row per configuration
    flips: pd.DataFrame  # FLIPS_COLUMNS, one row per configuration and task both scored
    items: pd.DataFrame  # ITEM_COLUMNS: regressions.csv

    @classmethod
    def empty(cls) -> Regressions:
        return cls(
            pd.DataFrame(columns=SUMMARY_COLUMNS),
            pd.DataFrame(columns=FLIPS_COLUMNS),
            pd.DataFrame(columns=ITEM_COLUMNS),
        )


# --------------------------------------------------------------------------- statistics


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value on b and c discordant pairs (see the module docstring)."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = Fraction(sum(math.comb(n, i) for i in range(min(b, c) + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


@dataclass(frozen=True)
class Flips:
    """One task's units both sides scored and, of them, the discordant ones (unit keys)."""

    paired: int
    right_to_wrong: list[str]
    wrong_to_right: list[str]

    @property
    def p_value(self) -> float:
        return mcnemar_exact(len(self.right_to_wrong), len(self.wrong_to_right))


def unit_flips(ref: Outcome, own: Outcome) -> Flips:
    """The flips on the units both scored, paired by the kind's unit keys as the gate pairs them
    (``metrics.paired``: a key's first unit on each side), in the configuration's order."""
    ref_keys, _, ref_hit = ref.units
    keys, _, hit = own.units
    _, at_ref, at_own = np.intersect1d(ref_keys, keys, return_indices=True)
    order = np.argsort(at_own, kind="stable")
    at_ref, at_own = at_ref[order], at_own[order]
    was, now = ref_hit[at_ref].astype(bool), hit[at_own].astype(bool)
    paired = keys[at_own].astype(str)
    return Flips(
        paired=len(at_own),
        right_to_wrong=paired[was & ~now].tolist(),
        wrong_to_right=paired[now & ~was].tolist(),
    )


def unit_label(task: str, key: str) -> str:
    """``<task>:<unit key>``, a unit key's control characters (the extract kind joins item id and
    field name with U+001F; ``check_key`` keeps them out of ids and names) shown as "/"."""
    return f"{task}:" + "".join("/" if unicodedata.category(c) == "Cc" else c for c in key)


def task_flips(own: Outcomes, refs: Outcomes, config: dict[str, Any]) -> list[dict[str, Any]]:
    """``flips``' rows of one configuration: one per task both it and its reference scored."""
    rows = []
    for name, outcome in own.items():
        if (ref := refs.get(name)) is None:
            continue
        found = unit_flips(ref, outcome)
        rows.append({
            **config, "task": name, "units_paired": found.paired,
            "right_to_wrong": len(found.right_to_wrong),
            "wrong_to_right": len(found.wrong_to_right),
            "mcnemar_p_exact": found.p_value, "test": TEST,
            "right_to_wrong_ids": " ".join(unit_label(name, k) for k in found.right_to_wrong),
            "wrong_to_right_ids": " ".join(unit_label(name, k) for k in found.wrong_to_right),
        })  # fmt: skip
    return rows


def tasks_note(own: Outcomes, refs: Outcomes) -> str | None:
    """Why a configuration has no flips row, None when it has one."""
    if not own and not refs:
        return NO_TASKS
    return None if own.keys() & refs.keys() else NO_COMMON_TASK


def window_dnll(
    ref: tuple[Array, Array], own: tuple[Array, Array]
) -> tuple[Array, Array, Array] | None:
    """Per window (ΔNLL, reference NLL, own NLL) in nats per predicted token; None when the two
    runs did not score the same windows (other counts or token totals)."""
    (ref_nll, ref_tokens), (nll, tokens) = ref, own
    if ref_nll.shape != nll.shape or not np.array_equal(ref_tokens, tokens) or not tokens.size:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        ref_per, own_per = ref_nll / ref_tokens, nll / tokens
    return own_per - ref_per, ref_per, own_per


# --------------------------------------------------------------------------- excerpts


def one_line(text: str, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


@functools.lru_cache(maxsize=8)
def _tokenizer_and_tokens(model: str, revision: str) -> tuple[Any, list[int]]:
    from harness.spec import models

    path = str(models.resolve(model, revision, need="weights").path)
    return corpus.load_tokenizer(path), corpus.tokenize_eval(path)


def window_excerpts(
    model: str, revision: str, window_tokens: int, count: int, positions: Sequence[int]
) -> tuple[dict[int, tuple[int, str]], str | None]:
    """Array position → (corpus window index, its text), as the worker cut the windows
    (``corpus.windows``); or ({}, why) when the model's tokenizer cannot be loaded here."""
    try:
        tokenizer, tokens = _tokenizer_and_tokens(model, revision)
    except Exception as exc:  # no tokenizer here (an engine-less machine, a pruned cache)
        return {}, f"window excerpts unavailable: {type(exc).__name__}: {exc}"[:300]
    order = corpus.evenly_spaced(len(tokens) // window_tokens, count)
    if len(order) != count:
        return (
            {},
            f"window excerpts unavailable: {count} windows kept, the corpus gives {len(order)}",
        )
    out: dict[int, tuple[int, str]] = {}
    for position in positions:
        k = order[position]
        ids = tokens[k * window_tokens : (k + 1) * window_tokens]
        out[position] = (k, one_line(str(tokenizer.decode(ids))))
    return out, None


# --------------------------------------------------------------------------- per run


def pairs(points: pd.DataFrame) -> list[tuple[int, int]]:
    """(configuration, reference) row positions in ``points``: the first row of each scored group
    of checkpoint weights that is not a reference, and the first of the rows the quality gate
    takes that row's reference from (``gate.references`` on ppl) that has a group. A
    configuration without such a reference is left out."""
    needed = {"group", "model", "is_reference", "ppl"}
    if points.empty or not needed <= set(points.columns):
        return []
    weights = points["weights"] if "weights" in points else pd.Series("checkpoint", points.index)
    scored = (weights != "random") & points["ppl"].notna() & points["group"].notna()
    first = ~points["group"].duplicated() & scored
    configs = np.flatnonzero(first.to_numpy(dtype=bool) & ~points["is_reference"].to_numpy(bool))
    if configs.size == 0:
        return []
    refs = references(points, "ppl")
    has_group = points["group"].notna().to_numpy(dtype=bool)
    out: list[tuple[int, int]] = []
    for position in configs:
        candidates = refs.rows_for(int(position))
        candidates = candidates[has_group[candidates]]
        if candidates.size:
            out.append((int(position), int(candidates[0])))
    return out


def analyse(run_dir: Path, points: pd.DataFrame, top_windows: int = TOP_WINDOWS) -> Regressions:
    """Every configuration of the run against its reference (see the module docstring)."""
    found = pairs(points)
    if not found:
        return Regressions.empty()
    summary: list[dict[str, Any]] = []
    flips: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []
    for position, reference in found:
        row, ref = points.iloc[position], points.iloc[reference]
        config = {c: row.get(c) for c in CONFIG_COLUMNS if c != "reference_group"}
        config["reference_group"] = ref["group"]
        own_tasks = kept_outcomes(Path(run_dir), str(row["group"]))
        ref_tasks = kept_outcomes(Path(run_dir), str(ref["group"]))
        entry, windows = _windows(Path(run_dir), row, ref, config, top_windows)
        notes = [n for n in (tasks_note(own_tasks, ref_tasks), entry.pop("note")) if n]
        summary.append({**entry, "note": "; ".join(notes)})
        flips += task_flips(own_tasks, ref_tasks, config)
        items += windows + task_items(own_tasks, ref_tasks, config)
    return Regressions(
        pd.DataFrame(summary, columns=SUMMARY_COLUMNS),
        pd.DataFrame(flips, columns=FLIPS_COLUMNS),
        pd.DataFrame(items, columns=ITEM_COLUMNS),
    )


def _windows(
    run_dir: Path, row: pd.Series, ref: pd.Series, config: dict[str, Any], top: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The configuration's summary entry (its window figures; ``note``: why they are missing or
    have no text, else None) and its ``top`` worst windows as item rows."""
    entry: dict[str, Any] = {**config, "note": None}
    own_nll = load_window_nll(run_dir, row["group"])
    ref_nll = load_window_nll(run_dir, ref["group"])
    deltas = None if own_nll is None or ref_nll is None else window_dnll(ref_nll, own_nll)
    if deltas is None:
        entry["note"] = NO_WINDOWS
        return entry, []
    assert own_nll is not None and ref_nll is not None
    delta, ref_per, own_per = deltas
    entry["windows_paired"] = int(delta.size)
    entry["dnll_nats_per_token"] = float((own_nll[0].sum() - ref_nll[0].sum()) / own_nll[1].sum())
    worst = [int(i) for i in np.argsort(-delta, kind="stable")[:top]]
    texts, entry["note"] = window_excerpts(
        str(row["model"]), str(row.get("revision") or "main"),
        int(row["window_tokens"]), int(delta.size), worst,
    )  # fmt: skip
    items: list[dict[str, Any]] = []
    for rank, position in enumerate(worst):
        # the corpus window's index when the tokenizer told it, else the scored position
        k, text = texts.get(position, (None, ""))
        label = f"window:{k}" if k is not None else f"scored-window:{position}"
        if rank == 0:
            entry["worst_window"] = label
            entry["worst_dnll_nats_per_token"] = float(delta[position])
        items.append({**config, "kind": "window", "item": label, "change": "largest_dnll",
                      "dnll_nats_per_token": float(delta[position]),
                      "nll_ref_nats_per_token": float(ref_per[position]),
                      "nll_nats_per_token": float(own_per[position]), "excerpt": text})  # fmt: skip
    return entry, items
