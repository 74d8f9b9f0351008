"""ARC-Easy as a shipped ``choice`` task (``arc-easy``): the test split's 2,376 four-way
questions (``harness/data/corpus/arc_easy.jsonl``, CC BY-SA 4.0, its licence in that folder's
LICENSES.md; the file stays in the corpus, whose hash covers it).

A line is ``{"query": "Question: …", "choices": [...], "gold": i}``. An item's id is its index
in the file (0-based, blank lines skipped), so the error analysis names it ``arc-easy:<index>``;
its prompt is ``"{query}\\nAnswer:"`` and every choice is scored as " " + choice after it
(lm-evaluation-harness's ``arc_easy``). ``arc_task(n)`` scores ``n`` items spread evenly over
the file (``corpus.evenly_spaced``; the scenario's ``quality.arc_items``), every item for None.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Final

from harness import corpus
from harness.row.tasks import ARC_TASK
from harness.tasks.spec import MAX_CHOICES, TaskItem, TaskSpec

NAME: Final = ARC_TASK
PROMPT = "{query}\nAnswer:"
FILE: Path = corpus.ARC_FILE
SHA256 = "d2d12e59543acf9a5ef6079634a72b30215e36c2fd4236fff3bc855d287b87f5"  # its README's


@functools.cache
def arc_rows() -> tuple[TaskItem, ...]:
    """Every ARC-Easy item of the shipped file (checked against its hash), in file order; a
    ValueError naming the line of one that is not ``{"query", "choices", "gold"}`` with gold
    an index into 2 or more choices."""
    raw = FILE.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SHA256:
        raise RuntimeError(f"{FILE} changed (sha256 {digest}, expected {SHA256})")
    items: list[TaskItem] = []
    for number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        items.append(arc_item(json.loads(line), len(items), number))
    return tuple(items)


def arc_item(data: object, index: int, line: int) -> TaskItem:
    """The item of one line (``index``: its id); a ValueError naming ``line`` and the key."""
    where = f"{FILE}:{line}"
    if not isinstance(data, dict) or set(data) != {"query", "choices", "gold"}:
        raise ValueError(f"{where}: expected an object of query, choices and gold")
    query, choices, gold = data["query"], data["choices"], data["gold"]
    if not isinstance(query, str) or not query:
        raise ValueError(f"{where}: query: expected a non-empty string")
    if not isinstance(choices, list) or not 2 <= len(choices) <= MAX_CHOICES:
        raise ValueError(f"{where}: choices: expected a list of 2 to {MAX_CHOICES} strings")
    if not all(isinstance(c, str) and c for c in choices):
        raise ValueError(f"{where}: choices: expected non-empty strings")
    if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
        raise ValueError(f"{where}: gold: {gold!r} is not an index into {len(choices)} choices")
    return TaskItem(str(index), "all", {"query": query}, choices=tuple(choices), gold=gold)


def arc_task(n: int | None = None) -> TaskSpec:
    """ARC-Easy with ``n`` scored items spread evenly over the file (None: every item)."""
    rows = arc_rows()
    return TaskSpec(
        name=NAME,
        kind="choice",
        prompt=PROMPT,
        scored=tuple(rows[k] for k in corpus.evenly_spaced(len(rows), n)),
        source=str(FILE),
        sha256=SHA256,
    )
