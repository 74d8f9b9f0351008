"""The shared shapes of a kind: a pick kind scores each option once, in order, and picks the
first of the highest; an item outcome has no field arrays; an excerpt is one short line."""

from __future__ import annotations

from harness.tasks.kinds import kind_of
from harness.tasks.kinds.base import EXCERPT_CHARS, excerpt, item_outcome
from harness.tasks.spec import TaskItem, TaskSpec

TASK = TaskSpec(name="t", kind="choice", prompt="{text}", scored=(
    TaskItem("a", "all", {"text": "A?"}, choices=("x", "y", "z"), gold=2),
    TaskItem("b", "all", {"text": "B?"}, choices=("u", "v"), gold=0),
))  # fmt: skip


class Scores:
    def __init__(self, flat: list[float]) -> None:
        self.flat, self.pairs = flat, []  # type: ignore[var-annotated]

    def score_continuations(self, pairs: list[tuple[str, str]]) -> list[float]:
        self.pairs = pairs
        return self.flat

    def generate_text(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        raise AssertionError("a pick kind generates nothing")


def test_a_pick_kind_scores_every_option_in_order_and_takes_the_first_highest() -> None:
    engine = Scores([-3.0, -1.0, -1.0, -0.5, -2.0])  # a: y and z tie at −1 → y (1); b: u (0)
    got = kind_of("choice").score(engine, TASK, ["A?", "B?"])
    assert engine.pairs == [("A?", " x"), ("A?", " y"), ("A?", " z"), ("B?", " u"), ("B?", " v")]
    assert got.predicted.tolist() == ["1", "0"] and got.correct.tolist() == [False, True]


def test_an_item_outcome_holds_no_field_arrays() -> None:
    got = item_outcome("choice", TASK, [True, False], ["2", "1"], ["2", "0"])
    assert len(got.field_item) == 0 and got.valid.tolist() == [True, True]
    assert got.required.tolist() == [0, 0]


def test_an_excerpt_is_one_line_cut_to_its_length() -> None:
    assert excerpt("a\n  b\tc") == "a b c"
    long = excerpt("w " * 200)
    assert len(long) == EXCERPT_CHARS and long.endswith("…")
