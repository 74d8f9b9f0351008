"""Content in every key (issue 43, item 8): a local model folder's config and weights, and a
draft model folder's, enter the point's key as content, as task files and adapters do; each
group checks the task files it scores against the hashes it was planned with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness import corpus
from harness.errors import UserInputError
from harness.spec import inputs, models
from harness.spec import scenario as scen
from harness.tasks.spec import TaskFile, load_task_file

TINY = models.PACKAGE_DATA / "tiny-llama"
GRID = (
    "backend: [vllm]\nquantization: [none]\nkv_cache_dtype: [auto]\nbatch: [1]\n"
    "context: [32]\noutput_tokens: 4\ntargets: [cpu]\nrepeats: 1\nwarmups: 0\n"
    "quality: {window_tokens: 64, max_windows: 2, arc_items: 0}\n"
)


def copy_model(folder: Path) -> Path:
    shutil.copytree(TINY, folder)
    return folder


def point_keys(text: str) -> list[str]:
    grid = scen.expand(scen.parse(text))
    return sorted(p.key(corpus.corpus_hash()) for p in grid.points)


def weights_of(folder: Path) -> Path:
    (found,) = sorted(folder.glob("*.safetensors"))
    return found


def touch_a_weight(folder: Path) -> None:
    path = weights_of(folder)
    raw = path.read_bytes()
    path.write_bytes(raw[:-4] + b"\x00\x00\x80\x3f")  # the last float: 1.0


def test_a_local_model_folder_s_new_weights_give_its_points_other_keys(tmp_path: Path) -> None:
    folder = copy_model(tmp_path / "mine")
    text = f"name: m\nmodels: ['{folder}']\n{GRID}"
    before = point_keys(text)
    touch_a_weight(folder)
    after = point_keys(text)
    assert len(before) == len(after) == 1 and before != after


def test_a_local_model_folder_s_new_config_gives_its_points_other_keys(tmp_path: Path) -> None:
    folder = copy_model(tmp_path / "mine")
    text = f"name: m\nmodels: ['{folder}']\n{GRID}"
    before = point_keys(text)
    config = json.loads((folder / "config.json").read_text())
    config["rope_theta"] = float(config.get("rope_theta", 10000.0)) * 2  # a planning-neutral field
    (folder / "config.json").write_text(json.dumps(config))
    assert point_keys(text) != before


def test_a_draft_model_folder_s_new_weights_give_its_points_other_keys(tmp_path: Path) -> None:
    draft = copy_model(tmp_path / "draft")
    text = (
        f"name: d\nmodels: [tiny-llama]\n{GRID}"
        f"speculative: [{{method: draft, model: '{draft}', tokens: 2}}]\n"
    )
    before = point_keys(text)
    touch_a_weight(draft)
    assert point_keys(text) != before


def test_a_shipped_model_keeps_the_key_of_earlier_runs() -> None:
    assert inputs.model_folder_file("model", "tiny-llama") is None


# --- a task file edited while a run goes -----------------------------------------------------


def test_a_group_refuses_a_task_file_edited_since_it_was_planned(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = [
        {"id": "a", "text": "good", "label": "pos"},
        {"id": "b", "text": "bad", "label": "neg"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    entry = TaskFile.model_validate(
        {"path": str(path), "kind": "classify", "prompt": "{text} is", "labels": ["pos", "neg"]}
    )
    planned = inputs.pairs(inputs.task_files([entry]))
    inputs.check_planned([load_task_file(entry)], planned)  # unchanged: goes on
    path.write_text(path.read_text().replace('"neg"}', '"pos"}'))  # a gold label flipped
    with pytest.raises(UserInputError) as caught:
        inputs.check_planned([load_task_file(entry)], planned)
    err = caught.value
    assert err.file == str(path.resolve())
    assert "changed since this run planned it" in err.message
