"""The choice kind: a line's choices and gold index are read strictly; its gold continuation
is " " + the right choice; its work is one continuation per choice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.tasks.kinds import kind_of
from harness.tasks.kinds.choice import Choice
from harness.tasks.spec import TaskFile, load_task_file, render_target


def test_a_choice_task_reads_and_renders_the_gold_choice(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"id": "q", "text": "2+2?", "choices": ["3", "4"], "gold": 1})
                    + "\n" + json.dumps({"id": "r", "text": "1+1?", "choices": ["2", "5", "7"],
                                         "gold": 0}) + "\n")  # fmt: skip
    task = load_task_file(TaskFile(path=str(path), kind="choice", prompt="Q: {text}"))
    assert isinstance(kind_of("choice"), Choice)
    assert render_target(task, task.scored[0]) == " 4"
    assert kind_of("choice").work(task) == (5, 0)  # 2 + 3 choices scored, nothing generated


def test_a_gold_index_out_of_range_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"id": "q", "text": "x", "choices": ["a", "b"], "gold": 2}) + "\n")
    with pytest.raises(UserInputError, match="0 to 1"):
        load_task_file(TaskFile(path=str(path), kind="choice", prompt="Q: {text}"))
