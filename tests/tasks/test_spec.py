"""A user's task file is read strictly: each bad line is one error naming file, line and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.errors import UserInputError
from harness.tasks.spec import TaskFile, load_task_file, render_prompt, render_target

CLASSIFY: dict[str, Any] = {
    "kind": "classify",
    "prompt": "Text: {text}\nLabel:",
    "labels": ["spam", "ham"],
}


def write(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "my_task.jsonl"
    path.write_text(
        "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n",
        encoding="utf-8",
    )
    return path


def entry(path: Path, **kw: Any) -> TaskFile:
    return TaskFile.model_validate({"path": str(path), **CLASSIFY, **kw})


def error_of(path: Path, **kw: Any) -> UserInputError:
    with pytest.raises(UserInputError) as caught:
        load_task_file(entry(path, **kw))
    return caught.value


def test_a_good_file_gives_scored_and_few_shot_items_apart(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {"id": "1", "text": "buy now", "label": "spam"},
        {"id": "2", "text": "hi mum", "label": "ham", "split": "fewshot"},
        {"id": "3", "text": "lunch?", "label": "ham"},
    )
    task = load_task_file(entry(path, shots=1))
    assert task.name == "my-task" and [i.id for i in task.scored] == ["1", "3"]
    assert [i.id for i in task.fewshot] == ["2"] and task.scored[1].category == "ham"
    assert render_prompt(task, task.scored[0], task.shot_items()) == (
        "Text: hi mum\nLabel: ham\n\nText: buy now\nLabel:"
    )
    assert render_target(task, task.scored[0]) == " spam"
    assert len(task.sha256) == 64


@pytest.mark.parametrize(
    ("line", "field", "words"),
    [
        ("{not json", "line", "not JSON"),
        ('["a list"]', "line", "expected an object"),
        ({"text": "x", "label": "spam"}, "id", "missing"),
        ({"id": "1", "label": "spam"}, "text", "missing"),
        ({"id": "1", "text": 3, "label": "spam"}, "text", "non-empty string"),
        ({"id": "1", "text": "x", "label": "spma"}, "label", "did you mean 'spam'"),
        ({"id": "1", "text": "x", "label": "spam", "lable": "x"}, "lable", "unknown key"),
        ({"id": "1", "text": "x", "label": "spam", "split": "train"}, "split", "expected one of"),
    ],
)
def test_a_bad_line_names_file_line_and_field(
    tmp_path: Path, line: object, field: str, words: str
) -> None:
    path = write(tmp_path, {"id": "0", "text": "ok", "label": "ham"}, line)
    err = error_of(path)
    assert err.file == str(path) and err.line == 2 and err.field == field
    assert words in err.message
    assert str(err).startswith(f"{path}:2: {field}: ")  # one line: file:line: field: what
    assert "\n" not in str(err)


def test_a_repeated_id_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path, {"id": "1", "text": "a", "label": "ham"}, {"id": "1", "text": "b", "label": "ham"}
    )
    assert error_of(path).line == 2


def test_extract_items_need_every_required_field(tmp_path: Path) -> None:
    path = write(tmp_path, {"id": "1", "text": "a", "fields": {"name": "Ada"}})
    spec = {"path": str(path), "kind": "extract", "prompt": "{text}", "fields": ["name", "city"]}
    with pytest.raises(UserInputError) as caught:
        load_task_file(TaskFile.model_validate(spec))
    assert caught.value.field == "fields.city" and caught.value.line == 1


def test_choice_gold_must_index_a_choice(tmp_path: Path) -> None:
    path = write(tmp_path, {"id": "1", "text": "a", "choices": ["x", "y"], "gold": 2})
    spec = {"path": str(path), "kind": "choice", "prompt": "{text}"}
    with pytest.raises(UserInputError) as caught:
        load_task_file(TaskFile.model_validate(spec))
    assert caught.value.field == "gold" and "0 to 1" in caught.value.message


def test_more_shots_than_few_shot_items_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, {"id": "1", "text": "a", "label": "ham"})
    assert "shots = 2" in error_of(path, shots=2).message


@pytest.mark.parametrize("prompt", ["{text.__class__}", "{0}", "{text!r}", "{text:>9}", "{text"])
def test_a_template_with_more_than_plain_names_is_refused(tmp_path: Path, prompt: str) -> None:
    with pytest.raises(ValueError):
        entry(tmp_path / "x.jsonl", prompt=prompt)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    err = error_of(tmp_path / "nope.jsonl")
    assert "no such task file" in str(err)
