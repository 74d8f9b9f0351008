"""harness.spec.inputs: the files a point reads, by their content: hashed, recorded in the
manifest, and a resume refused (naming the file and both hashes) when one changed since."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from harness.errors import UserInputError
from harness.spec import inputs
from harness.spec.inputs import InputFile
from harness.spec.labels import adapter_label
from harness.tasks.spec import TaskFile

# sha256(b"abc"), the FIPS 180-2 example: its first 16 hex digits are what a key holds
ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_a_file_is_named_by_the_first_16_hex_digits_of_its_content_hash(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"abc")
    assert inputs.file_sha256(path) == ABC_SHA256
    (found,) = inputs.mode_files([("trace", path)])
    assert found == InputFile("trace", str(path.resolve()), ABC_SHA256)
    assert found.short == "ba7816bf8f01cfea"  # 16 of the 64 digits
    assert inputs.pairs([found]) == (("trace", "ba7816bf8f01cfea"),)


def test_another_content_is_another_hash_and_a_missing_file_one_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"abc")
    before = inputs.file_sha256(path)
    path.write_bytes(b"abd")  # another size or mtime: the cache does not answer the old hash
    assert inputs.file_sha256(path) == hashlib.sha256(b"abd").hexdigest() != before
    with pytest.raises(UserInputError, match="cannot be read") as caught:
        inputs.file_sha256(tmp_path / "nope.jsonl")
    assert caught.value.file == str(tmp_path / "nope.jsonl")


def test_an_adapter_is_hashed_by_its_weights_and_a_folder_without_them_refused(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "lora"
    folder.mkdir()
    with pytest.raises(UserInputError, match="no weight files"):
        inputs.adapter_file(str(folder))
    (folder / "adapter_model.safetensors").write_bytes(b"w")
    found = inputs.adapter_file(str(folder))
    # the adapters' rule: each weight file's name, a NUL, then its bytes
    expected = hashlib.sha256(b"adapter_model.safetensors\0w").hexdigest()
    assert found == InputFile(f"adapter:{adapter_label(str(folder))}", str(folder), expected)


def test_a_user_task_file_is_an_input_and_a_shipped_task_is_not(tmp_path: Path) -> None:
    path = tmp_path / "spam.jsonl"
    lines = [
        {"id": "1", "text": "buy now", "label": "spam"},
        {"id": "2", "text": "hi", "label": "ham"},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    entry = TaskFile.model_validate(
        {"path": str(path), "kind": "classify", "prompt": "{text}", "labels": ["spam", "ham"]}
    )
    (found,) = inputs.task_files(["snips-intent", entry])
    assert found == InputFile(
        "task:spam", str(path.resolve()), hashlib.sha256(path.read_bytes()).hexdigest()
    )


def files(**hashes: str) -> list[InputFile]:
    return [InputFile(what, f"/data/{what}", sha) for what, sha in hashes.items()]


def test_the_manifest_records_path_and_short_hash_and_the_latest_entry_is_read() -> None:
    now = inputs.record(files(trace="a" * 64))
    assert now == {"trace": {"path": "/data/trace", "sha256": "a" * 16}}
    runs: list[dict[str, Any]] = [
        {"inputs": {"trace": {"sha256": "old"}}},
        {"started": "x"},
        {"inputs": now},
    ]
    assert inputs.recorded(runs) == now
    assert inputs.recorded(runs[:2]) == {"trace": {"sha256": "old"}}  # the last that recorded any
    assert inputs.recorded([{"started": "x"}]) is None  # an earlier harness recorded none


def test_a_resume_with_the_same_files_or_none_goes_on() -> None:
    now = inputs.record(files(trace="a" * 64))
    assert inputs.changed(now, now) is None
    assert inputs.changed(None, {}) is None  # a point that reads no file
    assert inputs.changed({"other": {"sha256": "b" * 16}}, now) is None  # a new file: no history


def test_a_changed_file_is_refused_naming_it_both_hashes_and_how_many_more() -> None:
    before = inputs.record(files(trace="a" * 64, **{"task:spam": "c" * 64}))
    now = inputs.record(files(trace="b" * 64, **{"task:spam": "d" * 64}))
    error = inputs.changed(before, now)
    assert error is not None and error.file == "/data/trace"
    text = error.render()
    assert "trace of 'trace' changed since this run measured it" in text
    assert f"sha256 '{'a' * 16}' then, '{'b' * 16}' now" in text
    assert "(and 1 more input(s))" in text  # two moved: the first named, one more counted
    assert "\n" not in text and len(text) < 400


def test_a_run_that_recorded_no_hash_cannot_be_checked_and_says_so() -> None:
    error = inputs.changed(None, inputs.record(files(**{"task:spam": "c" * 64})))
    assert error is not None and error.file == "/data/task:spam"
    assert error.message.startswith("task file of 'task:spam': this run's earlier entries")
    assert "choose a new --out" in error.message
