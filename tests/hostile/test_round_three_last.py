"""Round three's last cases (issue 43, item 11), by behaviour: `~` in task paths, an adapter's
config checked against its weights and its base, `gate: [tasks]` with nothing that scores a
task, a trace that is not a prefix tree, compare's matching, Ray's start in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.tasks.spec import TaskFile, load_task_file

CLASSIFY = {"kind": "classify", "prompt": "T: {text}", "labels": ["x", "y"]}


def test_a_task_path_with_a_tilde_is_read_from_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    lines = [json.dumps({"id": str(i), "text": "a", "label": "x"}) for i in range(3)]
    (tmp_path / "mine.jsonl").write_text("\n".join(lines) + "\n")
    task = load_task_file(TaskFile.model_validate({"path": "~/mine.jsonl", **CLASSIFY}))
    assert len(task.scored) == 3
    assert task.source == str(tmp_path / "mine.jsonl")
