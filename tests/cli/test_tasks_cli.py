"""Tasks through the command line: `harness measure` scores the shipped tasks and a user's task
file on the real engine (transformers, the tiny model); a bad task line is exit 2 in one line; a
task file that shares 13-grams with the text the tiny model was trained on is warned about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness import corpus
from harness.cli.main import app
from harness.run.store import read_rows

SCENARIO = """name: tasks-cli
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
  window_tokens: 64
  max_windows: 2
  arc_items: 0
  bootstrap_samples: 50
  tasks:
    - {{name: snips-intent, per_category: 1}}
    - {{name: snips-slots, per_category: 1}}
    - {{path: {path}, kind: classify, prompt: "Text: {{text}}\\nTopic:", labels: [wiki, other]}}
"""


def leaked_sentence() -> str:
    """A 20-word run of the tiny model's training text (wiki.valid.raw)."""
    words = corpus.CALIBRATION_FILE.read_text(encoding="utf-8").split()
    return " ".join(w for w in words[1000:1040] if w.isalpha())


def write_task(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "my_task.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def scenario(tmp_path: Path, task: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(path=json.dumps(str(task))), encoding="utf-8")
    return path


def test_a_bad_task_line_is_exit_2_naming_file_line_and_field(tmp_path: Path) -> None:
    task = write_task(
        tmp_path,
        json.dumps({"id": "1", "text": "a", "label": "wiki"}),
        json.dumps({"id": "2", "text": "b", "label": "sport"}),
    )
    result = CliRunner().invoke(app, ["plan", str(scenario(tmp_path, task))])
    assert result.exit_code == 2
    line = result.output
    assert f"{task}:2: label: 'sport' is not in the task's labels" in line


@pytest.mark.engine
def test_measure_scores_tasks_on_the_engine_and_warns_of_leaked_text(tmp_path: Path) -> None:
    task = write_task(
        tmp_path,
        json.dumps({"id": "a", "text": leaked_sentence(), "label": "wiki"}),
        json.dumps({"id": "b", "text": "book a table for two tonight", "label": "other"}),
    )
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["measure", str(scenario(tmp_path, task)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    output = result.output
    assert "warning" in output and "task my-task shares" in output
    assert "tiny-llama pretraining" in output
    (row,), _ = read_rows(out)
    assert row.tasks is not None
    by = {t.name: t for t in row.tasks}
    assert set(by) == {"snips-intent", "snips-slots", "my-task"}
    assert len(by["snips-intent"].categories) == 7 and by["snips-intent"].items == 7
    assert by["snips-slots"].json_valid is not None and by["snips-slots"].field_f1 is not None
    assert by["my-task"].items == 2 and by["my-task"].paired_units == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["runs"][-1]["quality_gate"] == ["ppl", "tasks"]
