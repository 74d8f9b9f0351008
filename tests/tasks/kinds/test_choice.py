"""The choice kind: a line's choices and gold index are read strictly; its gold continuation
is " " + the right choice; its work is one continuation per choice; its ``acc_norm`` is the pick
per character of the choice (lm-evaluation-harness's rule), kept with the task's arrays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.tasks import metrics
from harness.tasks.kinds import kind_of
from harness.tasks.kinds.choice import Choice, norm_pick
from harness.tasks.spec import TaskFile, TaskItem, TaskSpec, load_task_file, render_target


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


def two_questions() -> TaskSpec:
    items = (
        TaskItem("q1", "all", {"text": "a"}, choices=("abcde", "x" * 20), gold=1),
        TaskItem("q2", "all", {"text": "b"}, choices=("c1", "c2", "c3"), gold=0),
    )
    return TaskSpec(name="two", kind="choice", prompt="{text}", scored=items)


def test_acc_norm_is_the_pick_per_character_beside_the_plain_pick() -> None:
    task = two_questions()
    loglik = [[-5.0, -6.0], [-2.0, -8.0, -9.0]]
    # q1: the plain pick is choice 0 (−5 > −6: wrong); per character −5/5 = −1.0 vs −6/20 = −0.3
    #     picks choice 1 (right). q2: both pick choice 0 (right).
    outcome = kind_of("choice").outcome(task, loglik)
    assert outcome.correct.tolist() == [False, True]
    assert outcome.correct_norm is not None and outcome.correct_norm.tolist() == [True, True]
    score = metrics.summarize("two", task, outcome, None)
    assert (score.score, score.acc_norm) == (0.5, 1.0)  # 1 of 2; 2 of 2


def test_acc_norm_divides_by_the_choice_without_its_leading_space() -> None:
    # Continuations " a" and " bcd" with log-likelihoods −2.0 and −5.0, gold = choice 1.
    # lm-eval (÷ len(choice)):        −2.0/1 = −2.000 vs −5.0/3 = −1.667 → picks 1 (right)
    # with the space (÷ len(" " + c)): −2.0/2 = −1.000 vs −5.0/4 = −1.250 → would pick 0 (wrong)
    assert norm_pick([-2.0, -5.0], ["a", "bcd"]) == 1


def test_the_norm_pick_names_a_mismatch_of_scores_and_choices() -> None:
    with pytest.raises(ValueError, match="3 log-likelihoods for 2"):
        norm_pick([-1.0, -2.0, -3.0], ["a", "b"])


def test_acc_norm_hits_travel_with_the_tasks_arrays_and_older_files_lack_them() -> None:
    task = two_questions()
    outcome = kind_of("choice").outcome(task, [[-5.0, -6.0], [-2.0, -8.0, -9.0]])
    arrays = metrics.to_arrays("two", outcome)
    back = metrics.from_arrays(arrays)["two"]
    assert back.correct_norm is not None and back.correct_norm.tolist() == [True, True]
    older = {k: v for k, v in arrays.items() if not k.endswith("__correct_norm")}
    assert metrics.from_arrays(older)["two"].correct_norm is None
