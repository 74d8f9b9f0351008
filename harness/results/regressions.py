"""Error analysis per configuration against its model's reference: which items it gets wrong.

A quality class says *whether* a configuration keeps the reference's quality; this says *where*
it does not. Source: what the worker keeps for every group beside its window scores
(``harness.run.store``): per-window NLL sums and token counts, and per ARC-Easy item whether the
highest-likelihood choice is the gold one (``arc_acc``'s criterion).

For each configuration (a group of checkpoint weights that is not its model's reference) and its
reference (the quality gate's reference rule, ``harness.results.gate.references``: the same run,
model and revision, the same target preferred; of the reference rows the gate takes its median
from, the first that kept its scores' group):

- **ARC flips** on the items both scored (matched by item id ``arc-easy:<index in the file>``):
  ``right_to_wrong`` (b: the reference answered right, the configuration wrong) and
  ``wrong_to_right`` (c), each with its question ids;
- **McNemar's exact test** on the discordant pairs (b, c): under "no difference" each discordant
  item is right→wrong with probability ½, so the two-sided p-value is
  ``p = min(1, 2 · P(X ≤ min(b, c)))`` with ``X ~ Binomial(b + c, ½)`` (p = 1 when b + c = 0);
  computed exactly with integers. It tests whether the flips lean one way; it says nothing
  about items neither side got right;
- **the windows with the largest ΔNLL**: per window (configuration − reference) NLL in nats per
  predicted token, the ``TOP_WINDOWS`` largest, each with a short excerpt of its text (the shipped
  corpus decoded with the model's tokenizer; empty with a note where the tokenizer cannot load).

Tables: ``summary`` (one row per configuration) and ``items`` (``regressions.csv``: one row per
flipped item and per worst window).
"""

from __future__ import annotations

import functools
import math
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
from harness.results.tasks import task_items
from harness.run.store import load_window_arc, load_window_nll
from harness.tasks.arc import arc_rows

Array = NDArray[Any]
TOP_WINDOWS = 5
EXCERPT_CHARS = 160
TEST = (
    "McNemar exact: two-sided binomial on the discordant pairs, "
    "p = min(1, 2·P(X ≤ min(b, c))), X ~ Binomial(b + c, 1/2)"
)
CONFIG_COLUMNS = ["model", *ENGINE_WEIGHTS_KV, "target", "group", "reference_group"]
SUMMARY_COLUMNS = [
    *CONFIG_COLUMNS,
    "arc_items_paired",
    "right_to_wrong",
    "wrong_to_right",
    "mcnemar_p_exact",
    "test",
    "right_to_wrong_ids",
    "wrong_to_right_ids",
    "windows_paired",
    "dnll_nats_per_token",
    "worst_window",
    "worst_dnll_nats_per_token",
    "note",
]
ITEM_COLUMNS = [
    *CONFIG_COLUMNS,
    "kind",  # "arc" | "window" | "task:<name>" (harness.results.tasks.task_items)
    "item",  # "arc-easy:<index in the ARC file>" | "window:<corpus window index>" | "<task>:<id>"
    "change",  # "right_to_wrong" | "wrong_to_right" | "largest_dnll"
    "dnll_nats_per_token",
    "nll_ref_nats_per_token",
    "nll_nats_per_token",
    "excerpt",
]


@dataclass
class Regressions:
    summary: pd.DataFrame  # SUMMARY_COLUMNS, one row per configuration
    items: pd.DataFrame  # ITEM_COLUMNS: regressions.csv

    @classmethod
    def empty(cls) -> Regressions:
        return cls(pd.DataFrame(columns=SUMMARY_COLUMNS), pd.DataFrame(columns=ITEM_COLUMNS))


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


def arc_id(index: int) -> str:
    return f"arc-easy:{index}"


@dataclass(frozen=True)
class Flips:
    paired: int
    right_to_wrong: list[int]  # ARC file indices
    wrong_to_right: list[int]

    @property
    def p_value(self) -> float:
        return mcnemar_exact(len(self.right_to_wrong), len(self.wrong_to_right))


def arc_flips(ref_index: Array, ref_hits: Array, index: Array, hits: Array) -> Flips:
    """Flips on the items both sides scored; ``*_hits`` column 0 is ``arc_acc``'s criterion."""
    ref = dict(zip(ref_index.tolist(), ref_hits[:, 0].tolist(), strict=True))
    own = dict(zip(index.tolist(), hits[:, 0].tolist(), strict=True))
    common = sorted(ref.keys() & own.keys())
    return Flips(
        paired=len(common),
        right_to_wrong=[i for i in common if ref[i] and not own[i]],
        wrong_to_right=[i for i in common if own[i] and not ref[i]],
    )


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


def arc_excerpt(index: int) -> str:
    rows = arc_rows()
    if not 0 <= index < len(rows):
        return ""
    return one_line(rows[index].values["query"].removeprefix("Question:").strip())


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
    items: list[dict[str, Any]] = []
    for position, reference in found:
        row, ref = points.iloc[position], points.iloc[reference]
        config = {c: row.get(c) for c in CONFIG_COLUMNS if c != "reference_group"}
        config["reference_group"] = ref["group"]
        entry, rows = _compare(Path(run_dir), row, ref, config, top_windows)
        summary.append(entry)
        items += rows
    return Regressions(
        pd.DataFrame(summary, columns=SUMMARY_COLUMNS),
        pd.DataFrame(items, columns=ITEM_COLUMNS),
    )


def _compare(
    run_dir: Path, row: pd.Series, ref: pd.Series, config: dict[str, Any], top: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    entry: dict[str, Any] = {**config, "test": TEST}
    notes: list[str] = []
    items: list[dict[str, Any]] = []
    own_arc, ref_arc = (
        load_window_arc(run_dir, row["group"]),
        load_window_arc(run_dir, ref["group"]),
    )
    if own_arc is None or ref_arc is None:
        notes.append("no per-item ARC answers kept (no ARC items, or a run before they were)")
    else:
        flips = arc_flips(ref_arc[0], ref_arc[1], own_arc[0], own_arc[1])
        entry.update(
            arc_items_paired=flips.paired,
            right_to_wrong=len(flips.right_to_wrong),
            wrong_to_right=len(flips.wrong_to_right),
            mcnemar_p_exact=flips.p_value,
            right_to_wrong_ids=" ".join(arc_id(i) for i in flips.right_to_wrong),
            wrong_to_right_ids=" ".join(arc_id(i) for i in flips.wrong_to_right),
        )
        for change, indices in (("right_to_wrong", flips.right_to_wrong),
                                ("wrong_to_right", flips.wrong_to_right)):  # fmt: skip
            items += [{**config, "kind": "arc", "item": arc_id(i), "change": change,
                       "excerpt": arc_excerpt(i)} for i in indices]  # fmt: skip
    own_nll = load_window_nll(run_dir, row["group"])
    ref_nll = load_window_nll(run_dir, ref["group"])
    deltas = None if own_nll is None or ref_nll is None else window_dnll(ref_nll, own_nll)
    if deltas is None:
        notes.append("no paired window scores (missing, or other windows than the reference's)")
    else:
        delta, ref_per, own_per = deltas
        assert own_nll is not None and ref_nll is not None
        entry["windows_paired"] = int(delta.size)
        entry["dnll_nats_per_token"] = float(
            (own_nll[0].sum() - ref_nll[0].sum()) / own_nll[1].sum()
        )
        worst = [int(i) for i in np.argsort(-delta, kind="stable")[:top]]
        texts, why = window_excerpts(
            str(row["model"]), str(row.get("revision") or "main"),
            int(row["window_tokens"]), int(delta.size), worst,
        )  # fmt: skip
        if why:
            notes.append(why)
        for rank, position in enumerate(worst):
            # the corpus window's index when the tokenizer told it, else the scored position
            k, text = texts.get(position, (None, ""))
            label = f"window:{k}" if k is not None else f"scored-window:{position}"
            if rank == 0:
                entry["worst_window"] = label
                entry["worst_dnll_nats_per_token"] = float(delta[position])
            items.append({**config, "kind": "window", "item": label,
                          "change": "largest_dnll",
                          "dnll_nats_per_token": float(delta[position]),
                          "nll_ref_nats_per_token": float(ref_per[position]),
                          "nll_nats_per_token": float(own_per[position]),
                              "excerpt": text})  # fmt: skip
    items += task_items(run_dir, str(row["group"]), str(ref["group"]), config)
    entry["note"] = "; ".join(notes)
    return entry, items
