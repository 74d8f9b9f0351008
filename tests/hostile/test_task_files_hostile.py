"""The JSON-lines readers (a task file, a serving trace) against hostile lines: a line is what
ends at "\\n" (a JSON string may hold U+2028 or U+0085), a bad byte is blamed on the file and
line that hold it, an offending value is quoted short, an id is one key (no control or invisible
characters, no two ids that normalise to one), a key given twice in a line is refused, and a
prompt never carries the gold answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.errors import UserInputError
from harness.modes.serving.workload import read_trace
from harness.spec.scenario import load as load_scenario
from harness.spec.scenario import parse
from harness.tasks.spec import TaskFile, load_task_file

CLASSIFY: dict[str, Any] = {"kind": "classify", "prompt": "T: {text}", "labels": ["x", "y"]}
SHORT = 300  # a one-line error is at most this many characters


def line(item_id: str, text: str = "a", label: str = "x", **extra: Any) -> str:
    return json.dumps({"id": item_id, "text": text, "label": label, **extra}, ensure_ascii=False)


def write(tmp_path: Path, *lines: str | bytes, name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    raw = [x.encode("utf-8") if isinstance(x, str) else x for x in lines]
    path.write_bytes(b"\n".join(raw) + b"\n")
    return path


def load(path: Path, **kw: Any) -> Any:
    return load_task_file(TaskFile.model_validate({"path": str(path), **CLASSIFY, **kw}))


def error_of(path: Path, **kw: Any) -> UserInputError:
    with pytest.raises(UserInputError) as caught:
        load(path, **kw)
    err = caught.value
    assert len(str(err)) < SHORT and "\n" not in str(err), str(err)
    return err


# -- where a line ends ---------------------------------------------------------------------------
@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_a_json_string_holding_a_unicode_line_separator_stays_one_line(
    tmp_path: Path, separator: str
) -> None:
    # line 1 good, line 2 holds the separator inside its text, line 3 good, line 4 a bad label:
    # counted at "\n" only, the bad label is on line 4 (str.splitlines says 5, or breaks line 2)
    path = write(tmp_path, line("1"), line("2", f"a{separator}b"), line("3"), line("4", label="z"))
    err = error_of(path)
    assert (err.file, err.line, err.field) == (str(path), 4, "label")


def test_a_good_file_with_unicode_separators_keeps_its_text_whole(tmp_path: Path) -> None:
    path = write(tmp_path, line("1", "a\u2028b\x85c\u2029d"), line("2", label="y"))
    task = load(path)
    assert [i.id for i in task.scored] == ["1", "2"]
    assert task.scored[0].values["text"] == "a\u2028b\x85c\u2029d"


def test_crlf_line_ends_count_as_one_line_each(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(f"{line('1')}\r\n{line('2')}\r\n{line('3', label='z')}\r\n".encode())
    assert error_of(path).line == 3  # line 3: the bad label


# -- bytes that are not UTF-8 ----------------------------------------------------------------------
def test_a_non_utf8_byte_names_the_task_file_and_its_line(tmp_path: Path) -> None:
    bad = b'{"id": "3", "text": "caf\xe9", "label": "x"}'  # latin-1 é on line 3
    path = write(tmp_path, line("1"), line("2"), bad)
    err = error_of(path)
    assert (err.file, err.line) == (str(path), 3)
    assert "UTF-8" in err.message and "0xe9" in err.message


def test_a_non_utf8_byte_in_a_task_file_is_not_blamed_on_the_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, line("1"), b'{"id": "2", "text": "\xff", "label": "y"}')  # line 2
    scenario = (
        "name: t\nmodels: [tiny-llama]\nbackend: [transformers]\nquantization: [none]\n"
        "batch: [1]\ncontext: [16]\noutput_tokens: 2\ntargets: [cpu]\nquality:\n  tasks:\n"
        '    - {path: t.jsonl, kind: classify, prompt: "T: {text}", labels: [x, y]}\n'
    )
    with pytest.raises(UserInputError) as caught:
        parse(scenario, "s.yaml")
    assert (caught.value.file, caught.value.line) == (str(path.name), 2)
    assert "s.yaml" not in str(caught.value)


def test_a_non_utf8_byte_in_the_scenario_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: t\nmodels: [tiny-llama]\n# caf\xe9\nbackend: [transformers]\n")
    with pytest.raises(UserInputError) as caught:
        load_scenario(path)
    assert (caught.value.file, caught.value.line) == (str(path), 3)  # the comment on line 3
    assert "0xe9 at column 6" in caught.value.message  # "# caf" is 5 bytes: column 6


# -- offending values are quoted short -------------------------------------------------------------
@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (line("2", label="z" * 5_067), "label"),
        (json.dumps({"id": "2", "text": ["t" * 5_067], "label": "x"}), "text"),
        (json.dumps({"id": "2", "text": "a", "label": "x", "split": "s" * 60_000}), "split"),
        (json.dumps({"id": "2", "text": "a", "label": "x", "k" * 60_000: 1}), "k"),
        (line("1"), "id"),  # a duplicate id: the id is quoted, short
    ],
)
def test_a_long_offending_value_is_quoted_short(tmp_path: Path, bad: str, field: str) -> None:
    path = write(tmp_path, line("1" if field != "id" else "1" * 5_067), bad)
    if field == "id":
        path = write(tmp_path, line("1" * 5_067), line("1" * 5_067))
    err = error_of(path)  # the length is checked there
    assert err.line == 2 and (err.field or "").startswith(field)
    assert len(err.field or "") <= 45


def test_a_wrong_label_among_many_long_labels_lists_a_few_of_them(tmp_path: Path) -> None:
    labels = [f"{i:03d}" + "L" * 196 for i in range(256)]  # 256 labels of 200 characters
    path = write(tmp_path, line("1", label=labels[0]), line("2", label="nope"))
    err = error_of(path, labels=labels)
    # 256 labels: those that fit in the message, then "… (N more)"
    assert err.line == 2 and err.field == "label" and "more)" in err.message


# -- an id is one key ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "twin",
    ["a\x00", "a\u200b", "\u200ba", "a\ufeff", "a\x1b[31m", "a\u2028", "a\x85", "a\t"],
)
def test_an_id_with_a_control_or_invisible_character_is_refused(tmp_path: Path, twin: str) -> None:
    path = write(tmp_path, line("a"), line(twin))
    err = error_of(path)
    assert (err.line, err.field) == (2, "id")
    assert "\x00" not in str(err) and "\x1b" not in str(err)


@pytest.mark.parametrize("twin", ["e\u0301", " \u00e9", "\u00e9 "])
def test_ids_that_normalise_to_one_key_are_refused_as_given_twice(
    tmp_path: Path, twin: str
) -> None:
    # line 1 "é" (U+00E9); line 2 the same after NFC and trimming: "e" + U+0301, or spaced
    path = write(tmp_path, line("\u00e9"), line(twin))
    err = error_of(path)
    assert (err.line, err.field) == (2, "id")


@pytest.mark.parametrize(("key", "value"), [("category", "c\x00"), ("category", " ")])
def test_a_category_is_a_key_too(tmp_path: Path, key: str, value: str) -> None:
    path = write(
        tmp_path,
        json.dumps({"id": "1", "text": "a", "choices": ["p", "q"], "gold": 0}),
        json.dumps({"id": "2", "text": "a", "choices": ["p", "q"], "gold": 1, key: value}),
    )
    with pytest.raises(UserInputError) as caught:
        load_task_file(TaskFile(path=str(path), kind="choice", prompt="Q: {text}"))
    assert (caught.value.line, caught.value.field) == (2, key)


def test_an_extract_field_name_with_a_control_character_is_refused(tmp_path: Path) -> None:
    good = json.dumps({"id": "1", "text": "a", "fields": {"city": "Paris"}})
    bad = json.dumps({"id": "2", "text": "b", "fields": {"city\u0000": "Rome"}})
    path = write(tmp_path, good, bad)  # line 2
    with pytest.raises(UserInputError) as caught:
        load_task_file(TaskFile(path=str(path), kind="extract", prompt="T: {text}"))
    assert (caught.value.line, caught.value.field) == (2, "fields.city\\x00")
    assert "U+0000" in caught.value.message


def test_a_label_with_a_control_character_is_refused_in_the_spec() -> None:
    with pytest.raises(ValueError, match="control or invisible"):
        TaskFile.model_validate({"path": "t.jsonl", **CLASSIFY, "labels": ["x", "x\x00"]})


# -- a key given twice in a line -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ('{"id": "2", "text": "a", "label": "x", "label": "y"}', "label"),
        ('{"id": "2", "id": "3", "text": "a", "label": "x"}', "id"),
    ],
)
def test_a_key_given_twice_in_a_line_is_refused_naming_it(
    tmp_path: Path, bad: str, field: str
) -> None:
    path = write(tmp_path, line("1"), bad)  # line 2
    err = error_of(path)
    assert (err.line, err.field) == (2, field) and "twice" in err.message


def test_a_key_given_twice_in_an_extract_items_fields_is_refused(tmp_path: Path) -> None:
    good = json.dumps({"id": "1", "text": "a", "fields": {"city": "Paris"}})
    bad = '{"id": "2", "text": "b", "fields": {"city": "Rome", "city": "Oslo"}}'
    path = write(tmp_path, good, bad)  # line 2
    with pytest.raises(UserInputError) as caught:
        load_task_file(TaskFile(path=str(path), kind="extract", prompt="T: {text}"))
    assert (caught.value.line, caught.value.field) == (2, "city")


def test_nan_is_not_json(tmp_path: Path) -> None:
    bad = '{"id": "2", "text": "q", "choices": ["p", "q"], "gold": NaN}'
    path = write(tmp_path, json.dumps({"id": "1", "text": "q", "choices": ["p", "q"], "gold": 0}),
                 bad)  # fmt: skip
    with pytest.raises(UserInputError) as caught:
        load_task_file(TaskFile(path=str(path), kind="choice", prompt="Q: {text}"))
    assert caught.value.line == 2 and "NaN" in caught.value.message


# -- the gold answer never reaches the prompt ------------------------------------------------------
def test_a_prompt_field_that_holds_every_items_gold_label_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, line("1", hint="x"), line("2", label="y", hint="y"))
    err = error_of(path, prompt="T: {text} (hint: {hint})")
    assert (err.file, err.field) == (str(path), "prompt")
    assert "{hint}" in err.message and "gold" in err.message


def test_a_prompt_field_that_holds_a_choice_items_answer_is_refused(tmp_path: Path) -> None:
    lines = [
        json.dumps({"id": "1", "text": "q", "choices": ["p", "q"], "gold": 1, "a": "q"}),
        json.dumps({"id": "2", "text": "q", "choices": ["p", "q"], "gold": 0, "a": "p"}),
    ]
    path = write(tmp_path, *lines)
    with pytest.raises(UserInputError) as caught:
        load_task_file(TaskFile(path=str(path), kind="choice", prompt="Q: {text} {a}"))
    assert caught.value.field == "prompt" and "{a}" in caught.value.message


def test_a_prompt_field_that_only_sometimes_equals_the_label_is_kept(tmp_path: Path) -> None:
    path = write(tmp_path, line("1", hint="x"), line("2", label="y", hint="x"))
    assert len(load(path, prompt="T: {text} (hint: {hint})").scored) == 2


# -- serving traces: the same reader's rules -------------------------------------------------------
def trace_line(t: float = 0, **extra: Any) -> str:
    row = {"timestamp": t, "input_length": 10, "output_length": 5, "hash_ids": [1], **extra}
    return json.dumps(row, ensure_ascii=False)


def trace_error(path: Path, n: int = 4) -> UserInputError:
    with pytest.raises(UserInputError) as caught:
        read_trace(str(path), n)
    err = caught.value
    assert err.file == str(path) and len(str(err)) < SHORT and "\n" not in str(err), str(err)
    return err


def test_a_trace_line_with_a_unicode_separator_stays_one_line(tmp_path: Path) -> None:
    # line 2 has a note with U+2028 (an ignored key); line 3 is bad: its line is 3
    bad = '{"timestamp": 2, "input_length": "ten", "output_length": 5, "hash_ids": [1]}'
    path = write(tmp_path, trace_line(0), trace_line(1, note="a\u2028b"), bad, trace_line(3))
    err = trace_error(path)
    assert (err.line, err.field) == (3, "input_length")


def test_a_trace_with_a_non_utf8_byte_names_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, trace_line(0), b'{"timestamp": 1, "note": "\xff"}', trace_line(2))
    assert trace_error(path, 3).line == 2


def test_a_trace_key_given_twice_is_refused(tmp_path: Path) -> None:
    bad = (
        '{"timestamp": 1, "input_length": 10, "input_length": 99999, "output_length": 5, '
        '"hash_ids": []}'
    )
    path = write(tmp_path, trace_line(0), bad, trace_line(2))
    err = trace_error(path, 3)
    assert (err.line, err.field) == (2, "input_length") and "twice" in err.message


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_trace_timestamp_that_is_not_finite_is_refused(tmp_path: Path, value: str) -> None:
    bad = f'{{"timestamp": {value}, "input_length": 10, "output_length": 5, "hash_ids": []}}'
    path = write(tmp_path, trace_line(0), bad, trace_line(2))
    assert trace_error(path, 3).line == 2


def test_a_long_bad_trace_value_is_quoted_short(tmp_path: Path) -> None:
    path = write(tmp_path, trace_line(0), trace_line(1, hash_ids="h" * 60_070))
    err = trace_error(path, 2)
    assert (err.line, err.field) == (2, "hash_ids")
