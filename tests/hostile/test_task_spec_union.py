"""A mistake in a scenario's `quality.tasks` entry is reported as that entry's own error: the
entry's type is chosen from its shape (a name, `{name: ...}` or `{path: ...}`), so the message
names the scenario file, the line and the field, and lists the keys of THAT type, never
another type's ("BuiltinEntry.path: unknown field") or the quality block's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.spec.scenario import parse

# Lines 1-13 of every scenario below; the task entry starts on line 14.
HEAD = """name: t
models: [tiny-llama]
backend: [transformers]
quantization: [none]
kv_cache_dtype: [auto]
batch: [1]
context: [16]
output_tokens: 2
targets: [cpu]
repeats: 1
warmups: 0
quality:
  tasks:
"""
GOOD = ['{"id": "1", "text": "a", "label": "x"}', '{"id": "2", "text": "b", "label": "y"}']


@pytest.fixture
def task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A good classify task file (labels x, y), read from the working directory."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(GOOD) + "\n", encoding="utf-8")
    return path


def file_entry(**extra: str) -> str:
    """A file entry in block style: `- path` on line 14, kind 15, prompt 16, labels 17, then
    each extra key on its own line from 18 on."""
    keys = {"kind": "classify", "prompt": json.dumps("T: {text}"), "labels": "[x, y]", **extra}
    return "    - path: t.jsonl\n" + "".join(f"      {k}: {v}\n" for k, v in keys.items())


def error_of(entry: str) -> UserInputError:
    with pytest.raises(UserInputError) as caught:
        parse(HEAD + entry, "s.yaml")
    return caught.value


def test_a_good_file_entry_passes(task: Path) -> None:
    scenario = parse(HEAD + file_entry(), "s.yaml")
    assert scenario.quality is not None and scenario.quality.tasks is not None


@pytest.mark.parametrize(
    ("extra", "line", "field", "words"),
    [
        # labels on line 17 (14 path, 15 kind, 16 prompt, 17 labels)
        ({"labels": "[x]"}, 17, "labels", "at least 2"),
        ({"labels": json.dumps([f"l{i}" for i in range(10_000)])}, 17, "labels", "at most 256"),
        ({"labels": "[x, x]"}, 14, None, "lists a label twice"),
        # prompt on line 16
        ({"prompt": json.dumps("T: {text.upper}")}, 16, "prompt", "not a plain name"),
        ({"prompt": json.dumps("T: {text[0]}")}, 16, "prompt", "not a plain name"),
        ({"prompt": json.dumps("T: {text!r}")}, 16, "prompt", "not a plain name"),
        ({"prompt": json.dumps("T: {0}")}, 16, "prompt", "not a plain name"),
        ({"prompt": json.dumps("T: {text")}, 16, "prompt", "does not parse"),
        ({"prompt": json.dumps("Classify this.")}, 16, "prompt", "no field of the items"),
        # max_new_tokens is the first extra key: line 18
        ({"max_new_tokens": "0"}, 18, "max_new_tokens", "greater than or equal to 1"),
        ({"max_new_tokens": "513"}, 18, "max_new_tokens", "less than or equal to 512"),
        ({"shots": "-1"}, 18, "shots", "greater than or equal to 0"),
    ],
)
def test_a_bad_file_entry_names_its_own_field_and_line(
    task: Path, extra: dict[str, str], line: int, field: str | None, words: str
) -> None:
    err = error_of(file_entry(**extra))
    want = "quality.tasks[0]" + (f".{field}" if field else "")
    assert (err.file, err.line, err.field) == ("s.yaml", line, want)
    assert words in err.message
    assert "BuiltinEntry" not in str(err) and "TaskFile" not in str(err)
    assert len(str(err)) < 300 and "\n" not in str(err)


def test_an_unknown_key_of_a_file_entry_lists_the_file_entrys_keys(task: Path) -> None:
    err = error_of(file_entry(lables="[x, y]"))  # line 18: the first extra key
    assert (err.line, err.field) == (18, "quality.tasks[0].lables")
    assert "did you mean 'labels'" in err.message
    for key in ("path", "kind", "prompt", "labels", "fields", "shots", "max_new_tokens"):
        assert key in err.message
    assert "window_tokens" not in err.message and "per_category" not in err.message


def test_a_file_entry_without_its_path_is_told_the_path_is_missing(task: Path) -> None:
    err = error_of('    - {kind: classify, prompt: "T: {text}", labels: [x, y]}\n')
    assert (err.line, err.field) == (14, "quality.tasks[0].path")
    assert "missing" in err.message


@pytest.mark.parametrize(
    ("entry", "field", "words", "not_words"),
    [
        ("{name: snips-intent, shots: 99}", "shots", "less than or equal to 16", "path"),
        ("{name: snips-intent, per_category: 0}", "per_category", "greater than or equal", "x"),
        (
            "{name: snips-intent, per_categry: 3}",
            "per_categry",
            "did you mean 'per_category'?); expected one of: name, shots, per_category",
            "path",
        ),
        ("{name: snips-intnt}", "name", "did you mean 'snips-intent'", "path"),
        ("snips-intnt", None, "did you mean 'snips-intent'", "path"),
        ("{nam: snips-intent}", "nam", "did you mean 'name'", "path"),
    ],
)
def test_a_bad_shipped_entry_names_its_own_field(
    task: Path, entry: str, field: str | None, words: str, not_words: str
) -> None:
    err = error_of(f"    - {entry}\n")
    assert (err.file, err.line) == ("s.yaml", 14)
    assert err.field == "quality.tasks[0]" + (f".{field}" if field else "")
    assert words in err.message, err.message
    assert not_words not in err.message
    assert "BuiltinEntry" not in str(err)


@pytest.mark.parametrize("entry", ["3", "[a, b]", "null", "true"])
def test_an_entry_of_no_task_shape_says_what_an_entry_is(task: Path, entry: str) -> None:
    err = error_of(f"    - {entry}\n")
    assert (err.line, err.field) == (14, "quality.tasks[0]")
    assert "a shipped task's name" in err.message and "{path:" in err.message


@pytest.mark.parametrize(
    ("kind", "prompt", "extra", "placeholder"),
    [
        ("classify", "T: {text} ({label})", "labels: [x, y]", "label"),
        ("classify", "T: {text} ({category})", "labels: [x, y]", "category"),
        ("choice", "Q: {text} {gold}", "", "gold"),
        ("choice", "Q: {text} {choices}", "", "choices"),
        ("extract", "T: {text} {fields}", "", "fields"),
        ("classify", "T: {text} {split}", "labels: [x, y]", "split"),
    ],
)
def test_a_prompt_that_holds_the_answer_is_refused_at_the_prompt(
    task: Path, kind: str, prompt: str, extra: str, placeholder: str
) -> None:
    entry = f"    - path: t.jsonl\n      kind: {kind}\n      prompt: {json.dumps(prompt)}\n"
    err = error_of(entry + (f"      {extra}\n" if extra else ""))
    assert (err.line, err.field) == (16, "quality.tasks[0].prompt")  # prompt: line 16
    assert f"{{{placeholder}}}" in err.message
