"""ARC-Easy as a shipped ``choice`` task: every line of the corpus's file read as an item whose
id is its index, a fixed subset spread evenly over the file, and a bad line named by its line."""

from __future__ import annotations

import json

import pytest

from harness import corpus
from harness.errors import UserInputError
from harness.tasks import arc
from harness.tasks.builtin import builtin_task, tasks_of
from harness.tasks.spec import BuiltinEntry, render_prompt, render_target


def test_every_item_of_the_file_is_read_with_its_index_as_id() -> None:
    rows = arc.arc_rows()
    assert len(rows) == 2376  # the corpus README's count
    first = json.loads(corpus.ARC_FILE.read_text(encoding="utf-8").splitlines()[0])
    assert rows[0].id == "0" and rows[0].values == {"query": first["query"]}
    assert rows[0].choices == tuple(first["choices"]) and rows[0].gold == first["gold"]


def test_the_subset_is_spread_evenly_and_rendered_as_arc_easy_is() -> None:
    task = arc.arc_task(4)
    # round(i * 2376 / 4) for i = 0..3: 0, 594, 1188, 1782
    assert [item.id for item in task.scored] == ["0", "594", "1188", "1782"]
    item = task.scored[0]
    assert render_prompt(task, item) == item.values["query"] + "\nAnswer:"
    assert render_target(task, item) == " " + (item.choices or ())[item.gold or 0]
    assert task.kind == "choice" and task.name == "arc-easy"


def test_the_shipped_arc_easy_task_scores_every_item_and_takes_no_shots() -> None:
    assert len(builtin_task("arc-easy").scored) == 2376
    with pytest.raises(UserInputError, match="arc-easy has 0 few-shot"):
        tasks_of([BuiltinEntry(name="arc-easy", shots=2)])


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ({"query": "Q", "choices": ["a", "b"], "gold": 2}, "gold: 2 is not an index into 2"),
        ({"query": "Q", "choices": ["a"], "gold": 0}, "choices: expected a list of 2 to 26"),
        ({"query": "", "choices": ["a", "b"], "gold": 0}, "query: expected a non-empty"),
        ({"query": "Q", "choices": ["a", "b"]}, "expected an object of query, choices and gold"),
    ],
)
def test_a_bad_line_is_named_by_its_line_and_key(line: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=f"arc_easy.jsonl:7: {says}"):
        arc.arc_item(line, 6, 7)
