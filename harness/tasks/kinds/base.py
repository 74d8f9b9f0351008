"""What a quality kind is (``Kind``): how an item's gold answer is read and written, what its
task costs an engine and how it is scored there, what a configuration got right item by item
(``Outcome``), its figures and per-category figures, the units it pairs with the reference (the
gate reads their paired difference), and the items the error analysis lists.

Two shapes share most of that: ``Pick`` (each item's options scored by log-likelihood after the
prompt, the highest one the answer) and ``Generate`` (a greedy generation of at most
``max_new_tokens`` after the prompt, judged against the gold answer).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
from numpy.typing import NDArray

from harness.row.tasks import TaskScore
from harness.tasks.metrics import Outcome, rate
from harness.tasks.spec import TaskFile, TaskItem, TaskSpec, Where

EXCERPT_CHARS = 120  # an output quoted in the error analysis


class Engine(Protocol):
    """What a kind needs of a loaded engine (``harness.backends.base.Backend`` is one)."""

    def score_continuations(self, pairs: list[tuple[str, str]]) -> list[float]: ...

    def generate_text(self, prompts: list[str], max_new_tokens: int) -> list[str]: ...


@dataclass(frozen=True)
class Gold:
    """An item's gold answer as its line gives it; ``category``: the item's category where the
    kind decides it (classify: the gold label), else None (the line's own)."""

    label: str | None = None
    choices: tuple[str, ...] | None = None
    gold: int | None = None
    fields: dict[str, str] | None = None
    category: str | None = None


@dataclass(frozen=True)
class Miss:
    """An item the error analysis lists: its id, what changed or failed, a short excerpt."""

    item: str
    change: str
    excerpt: str


class Kind(ABC):
    """One quality kind. ``gold_keys``: an item's keys that hold its gold answer (never a prompt
    placeholder, nor ``answer_keys``); ``takes`` / ``needs``: the task-file options it accepts /
    requires (``labels``, ``fields``); ``per_item``: its paired unit is the item (else a part of
    it, listed by ``units``); ``generates``: it runs generations (not only log-likelihoods);
    ``figures``: the ``TaskScore`` fields it fills besides the common ones (its report columns)."""

    name: ClassVar[str]
    gold_keys: ClassVar[tuple[str, ...]]
    takes: ClassVar[frozenset[str]] = frozenset()
    needs: ClassVar[frozenset[str]] = frozenset()
    per_item: ClassVar[bool] = True
    generates: ClassVar[bool] = False
    figures: ClassVar[tuple[str, ...]] = ()

    @property
    def answer_keys(self) -> tuple[str, ...]:
        """The keys a prompt may not name: those holding the gold answer."""
        return self.gold_keys

    def check_entry(self, entry: TaskFile) -> str | None:
        """What is wrong with a task file's options for this kind, None when nothing is."""
        for key in sorted(self.needs):
            if not getattr(entry, key):
                return f"a {self.name} task needs `{key}`"
        return None

    # --- reading and writing an item ----------------------------------------------------------

    @abstractmethod
    def read_gold(self, entry: TaskFile, data: dict[str, Any], where: Where) -> Gold:
        """The gold answer of one line, or ``where.error`` naming the key and what is expected."""

    @abstractmethod
    def target(self, task: TaskSpec, item: TaskItem) -> str:
        """The gold continuation of ``item``: what is scored as right and trained on."""

    # --- on an engine -------------------------------------------------------------------------

    @abstractmethod
    def work(self, task: TaskSpec) -> tuple[int, int]:
        """(continuations scored, tokens generated at most) by the task's scored items."""

    @abstractmethod
    def score(self, engine: Engine, task: TaskSpec, prompts: list[str]) -> Outcome:
        """The scored items (``prompts``: each one's rendered prompt) through ``engine``."""

    @abstractmethod
    def outcome(self, task: TaskSpec, raw: Sequence[Any]) -> Outcome:
        """The outcome of what the engine returned (per item: its options' log-likelihoods, or
        its generated text)."""

    # --- figures ------------------------------------------------------------------------------

    def units(self, outcome: Outcome) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any]]:
        """(unit keys, their category, hit) that pair with the reference's: the items."""
        return outcome.item_id.astype(str), outcome.category, outcome.correct.astype(bool)

    def summarize(self, task: TaskSpec, outcome: Outcome, score: TaskScore) -> None:
        """Set the task's score (the items' accuracy) and the kind's own ``figures``."""
        score.score = rate(outcome.correct)

    def category_score(self, outcome: Outcome, mask: NDArray[Any]) -> float:
        """The score of the items in ``mask`` (one category): their accuracy."""
        return rate(outcome.correct[mask])

    # --- error analysis -----------------------------------------------------------------------

    def misses(self, outcome: Outcome, ref_right: dict[str, bool]) -> list[Miss]:
        """The items that flipped against the reference (right → wrong, wrong → right)."""
        out = []
        for item, right, predicted, gold in zip(outcome.item_id.tolist(),
                                                outcome.correct.tolist(),
                                                outcome.predicted.tolist(),
                                                outcome.gold.tolist(), strict=True):  # fmt: skip
            was = ref_right.get(item)
            if was is None or was == right:
                continue
            change = "right_to_wrong" if was else "wrong_to_right"
            out.append(Miss(item, change, f"predicted {excerpt(predicted)}, gold {excerpt(gold)}"))
        return out


def excerpt(text: str) -> str:
    """``text`` on one line, cut to ``EXCERPT_CHARS``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "…"


def item_outcome(
    kind: str, task: TaskSpec, correct: Sequence[bool], predicted: Sequence[str],
    gold: Sequence[str], valid: Sequence[bool] | None = None,
) -> Outcome:  # fmt: skip
    """An outcome whose unit is the item: no field arrays (``Outcome``'s extract-only arrays
    zero); ``valid`` all True unless given."""
    items = task.scored
    n = len(items)
    zeros = np.zeros(n, dtype=np.int64)
    return Outcome(
        kind=kind,
        item_id=np.array([i.id for i in items], dtype=str),
        category=np.array([i.category for i in items], dtype=str),
        correct=np.array(correct, dtype=bool),
        predicted=np.array(predicted, dtype=str),
        gold=np.array(gold, dtype=str),
        valid=np.ones(n, dtype=bool) if valid is None else np.array(valid, dtype=bool),
        required=zeros, present=zeros.copy(), output_fields=zeros.copy(),
        output_hits=zeros.copy(), field_item=np.zeros(0, dtype=np.int64),
        field_name=np.array([], dtype=str), field_hit=np.array([], dtype=bool),
    )  # fmt: skip


class Pick(Kind):
    """A kind whose answer is the option with the highest log-likelihood after the prompt (the
    first on a tie)."""

    @abstractmethod
    def options(self, task: TaskSpec, item: TaskItem) -> list[str]:
        """The continuations scored after ``item``'s prompt, in order."""

    @abstractmethod
    def answer(self, task: TaskSpec, item: TaskItem, index: int) -> str:
        """The option at ``index`` as the outcome keeps it (a label, or the index)."""

    @abstractmethod
    def gold_answer(self, item: TaskItem) -> str:
        """The gold answer as the outcome keeps it."""

    def work(self, task: TaskSpec) -> tuple[int, int]:
        return sum(len(self.options(task, item)) for item in task.scored), 0

    def score(self, engine: Engine, task: TaskSpec, prompts: list[str]) -> Outcome:
        options = [self.options(task, item) for item in task.scored]
        pairs = [(p, o) for p, opts in zip(prompts, options, strict=True) for o in opts]
        flat = engine.score_continuations(pairs)
        loglik, at = [], 0
        for opts in options:
            loglik.append(flat[at : at + len(opts)])
            at += len(opts)
        return self.outcome(task, loglik)

    def outcome(self, task: TaskSpec, raw: Sequence[Any]) -> Outcome:
        items = task.scored
        if len(raw) != len(items):
            raise ValueError(f"{len(raw)} score lists for {len(items)} items")
        best = [int(np.argmax(np.asarray(row, dtype=np.float64))) for row in raw]
        predicted = [self.answer(task, item, b) for item, b in zip(items, best, strict=True)]
        gold = [self.gold_answer(item) for item in items]
        correct = [p == g for p, g in zip(predicted, gold, strict=True)]
        return item_outcome(self.name, task, correct, predicted, gold)


class Generate(Kind):
    """A kind whose answer is a greedy generation of at most ``max_new_tokens`` after the
    prompt."""

    generates = True

    def work(self, task: TaskSpec) -> tuple[int, int]:
        return 0, len(task.scored) * task.max_new_tokens

    def score(self, engine: Engine, task: TaskSpec, prompts: list[str]) -> Outcome:
        return self.outcome(task, engine.generate_text(prompts, task.max_new_tokens))
