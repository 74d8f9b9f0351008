"""What a point is includes the content of the files it reads (issue 35, causes 2 and 3).

A task file edited, an adapter retrained into the same folder or a trace replaced gives its points
other keys, and a resume into a run measured on the old content is refused in one line naming the
file and both hashes. Two adapter folders of one name get two labels (two groups, two windows
files); one folder written two ways is refused as listed twice. No engine: keys and labels only.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness import __version__, corpus
from harness.cli.main import app
from harness.errors import UserInputError
from harness.run import store, sweep
from harness.spec import adapters, models
from harness.spec import scenario as scen
from harness.spec.labels import configuration_label

SHIPPED_ADAPTER = models.PACKAGE_DATA / "adapters" / "tiny-llama-snips"
SHIPPED_TRACE = models.PACKAGE_DATA / "traces" / "mooncake_conversation.jsonl"
GRID = (
    "backend: [transformers]\nquantization: [none]\nkv_cache_dtype: [auto]\nbatch: [1]\n"
    "context: [32]\noutput_tokens: 4\ntargets: [cpu]\nrepeats: 1\nwarmups: 0\n"
    "quality: {window_tokens: 64, max_windows: 2, arc_items: 0"
)
TASK_LINES = [
    {"id": "a", "text": "good film", "label": "pos"},
    {"id": "b", "text": "bad film", "label": "neg"},
]


def write_task(path: Path, lines: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def task_scenario(tmp_path: Path, task: Path) -> Path:
    path = tmp_path / "tasks.yaml"
    path.write_text(
        f"name: t\nmodels: [tiny-llama]\n{GRID},\n"
        f"  tasks: [{{path: {task}, kind: classify, prompt: '{{text}} is',\n"
        "           labels: [pos, neg]}]}\n"
    )
    return path


def copy_adapter(folder: Path) -> Path:
    shutil.copytree(SHIPPED_ADAPTER, folder)
    return folder


def retrain(folder: Path) -> None:
    """New weights in the same folder, and the binding the training mode writes with them."""
    weights = folder / adapters.WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-4] + b"\x00\x00\x80\x3f")  # the last float: 1.0
    binding = json.loads((folder / adapters.BINDING).read_text())
    binding["adapter_sha256"] = adapters.weights_hash(folder)
    adapters.write_binding(folder, binding)


def adapter_scenario(tmp_path: Path, *folders: str) -> Path:
    entries = ", ".join(f"{{id: tiny-llama, adapter: '{f}'}}" for f in folders)
    path = tmp_path / "adapters.yaml"
    path.write_text(f"name: a\nmodels: [tiny-llama, {entries}]\n{GRID}}}\n")
    return path


def keys(scenario_path: Path) -> dict[str, str]:
    """Each point's key by its group label (one point per group in these grids)."""
    grid = scen.expand(scen.load(scenario_path))
    return {p.group.label: p.key(corpus.corpus_hash()) for p in grid.points}


# --- an edited task file ---------------------------------------------------------------------


def test_an_edited_task_file_gives_its_points_another_key(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t.jsonl", TASK_LINES)
    path = task_scenario(tmp_path, task)
    before = keys(path)
    write_task(task, [TASK_LINES[0], {**TASK_LINES[1], "label": "pos"}])  # one gold label flipped
    after = keys(path)
    assert before.keys() == after.keys() and len(before) == 1
    assert set(before.values()).isdisjoint(after.values())


def test_the_same_task_file_content_keeps_its_key(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t.jsonl", TASK_LINES)
    path = task_scenario(tmp_path, task)
    before = keys(path)
    write_task(task, TASK_LINES)  # written again, byte for byte: a new mtime, the same content
    assert keys(path) == before


def test_a_point_that_reads_no_file_keeps_the_key_of_earlier_runs() -> None:
    point = scen.Point(model="tiny-llama", backend="transformers", quantization="none",
                       kv_cache_dtype="auto", batch=1, context=32, output_tokens=4,
                       target="cpu")  # fmt: skip
    # the key as earlier runs wrote it: the dump without `inputs` (nor the other fields left
    # out when unset), the harness version and the corpus hash, sha256, 20 hex digits
    fields = point.model_dump(exclude={"weights", "adapter", "serving", "training", "inputs"})
    fields.pop("layout", None)
    fields.pop("speculative", None)
    payload = json.dumps({**fields, "harness": __version__, "corpus": "c"}, sort_keys=True)
    assert point.key("c") == hashlib.sha256(payload.encode()).hexdigest()[:20]


# --- an adapter retrained into the same folder -----------------------------------------------


def test_an_adapter_retrained_into_its_folder_gives_another_key(tmp_path: Path) -> None:
    folder = copy_adapter(tmp_path / "lora")
    path = adapter_scenario(tmp_path, str(folder))
    before = keys(path)
    retrain(folder)
    after = keys(path)
    assert before.keys() == after.keys() and len(before) == 2
    changed = {label for label in before if before[label] != after[label]}
    assert len(changed) == 1 and "adapter=lora#" in changed.pop()  # the base model's key stays


def test_adapter_weights_changed_without_their_binding_are_refused(tmp_path: Path) -> None:
    folder = copy_adapter(tmp_path / "lora")
    path = adapter_scenario(tmp_path, str(folder))
    (folder / adapters.WEIGHTS).write_bytes(b"other weights")
    with pytest.raises(UserInputError, match="the weights were changed after it was written"):
        scen.load(path)


# --- a replaced trace ------------------------------------------------------------------------


def trace_scenario(tmp_path: Path, trace: Path) -> Path:
    path = tmp_path / "trace.yaml"
    path.write_text(
        "name: s\nmodels: [tiny-llama]\nbackend: [vllm]\nquantization: [fp32]\nbatch: [1]\n"
        "context: [128]\noutput_tokens: 16\ntargets: [cpu]\nrepeats: 1\n"
        "reference: {quantization: fp32, kv_cache_dtype: auto}\n"
        "quality: {window_tokens: 64, max_windows: 2, arc_items: 0}\n"
        "serving:\n"
        f"  workload: {{trace: '{trace}', length_scale: 0.25, max_requests: 12}}\n"
        "  prompt_tokens: {mean: 64, sd: 0}\n  output_tokens: {mean: 16, sd: 0}\n"
        "  slo: {ttft_ms_p99: 10000, tpot_ms_p99: 500}\n  attainment: 0.9\n"
    )
    return path


def serving_keys(path: Path) -> list[str]:
    grid = scen.expand(scen.load(path))
    return [p.key(corpus.corpus_hash()) for p in grid.points if p.mode == "serving"]


def test_a_replaced_trace_gives_its_serving_points_another_key(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    lines = SHIPPED_TRACE.read_text().splitlines(keepends=True)
    trace.write_text("".join(lines[:12]))  # two distinct timestamps (0 and 3000 ms)
    path = trace_scenario(tmp_path, trace)
    before = serving_keys(path)
    last = json.loads(lines[11])
    # the last request's prefix blocks made its own: the prompts sent differ, the lengths and
    # arrivals (all a level's figures) do not
    last["hash_ids"] = [10_000 + i for i in range(len(last["hash_ids"]))]
    trace.write_text("".join([*lines[:11], json.dumps(last) + "\n"]))
    after = serving_keys(path)
    assert len(before) == len(after) == 1
    assert before != after


# --- a resume on changed content -------------------------------------------------------------


def start(scenario_path: Path, run_dir: Path) -> None:
    """A run begun (manifest and skip rows written; nothing measured)."""
    sweep.begin(scenario_path, run_dir, gpu=None, resume=True, mode="in-process")


def test_a_resume_after_the_task_file_changed_is_refused_naming_it(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t.jsonl", TASK_LINES)
    path, run = task_scenario(tmp_path, task), tmp_path / "run"
    start(path, run)
    old = hashlib.sha256(task.read_bytes()).hexdigest()[:16]
    write_task(task, TASK_LINES[::-1])
    new = hashlib.sha256(task.read_bytes()).hexdigest()[:16]
    entries = len(store.read_manifest(run)["runs"])
    with pytest.raises(UserInputError) as caught:
        start(path, run)
    line = str(caught.value)
    assert line.startswith(f"{task.resolve()}: task file of 'task:t' changed"), line
    assert old in line and new in line and "\n" not in line and len(line) < 600
    assert len(store.read_manifest(run)["runs"]) == entries  # nothing written on refusal


def test_a_resume_after_the_adapter_was_retrained_is_refused_naming_it(tmp_path: Path) -> None:
    folder = copy_adapter(tmp_path / "lora")
    path, run = adapter_scenario(tmp_path, str(folder)), tmp_path / "run"
    start(path, run)
    old = adapters.weights_hash(folder)
    retrain(folder)
    with pytest.raises(UserInputError) as caught:
        start(path, run)
    line = str(caught.value)
    assert line.startswith(f"{folder.resolve()}: adapter folder (its weights) of 'adapter:lora#")
    assert str(old)[:16] in line and str(adapters.weights_hash(folder))[:16] in line


def test_a_resume_on_unchanged_files_goes_on(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t.jsonl", TASK_LINES)
    path, run = task_scenario(tmp_path, task), tmp_path / "run"
    start(path, run)
    start(path, run)
    runs = store.read_manifest(run)["runs"]
    digest = hashlib.sha256(task.read_bytes()).hexdigest()[:16]
    assert [r["inputs"] for r in runs] == [{"task:t": {"path": str(task.resolve()),
                                                      "sha256": digest}}] * 2  # fmt: skip


def test_a_run_recorded_without_content_hashes_is_not_resumed_on_files(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t.jsonl", TASK_LINES)
    path, run = task_scenario(tmp_path, task), tmp_path / "run"
    start(path, run)
    manifest = store.read_manifest(run)
    for entry in manifest["runs"]:
        del entry["inputs"]  # as an earlier harness wrote it
    store.write_manifest(run, manifest)
    with pytest.raises(UserInputError, match="recorded no content hash"):
        start(path, run)


# --- two adapters of one name ----------------------------------------------------------------


def test_two_adapter_folders_of_one_name_get_two_labels_and_windows_files(tmp_path: Path) -> None:
    first, second = copy_adapter(tmp_path / "a" / "lora"), copy_adapter(tmp_path / "b" / "lora")
    grid = scen.expand(scen.load(adapter_scenario(tmp_path, str(first), str(second))))
    groups = {p.group for p in grid.points if p.adapter is not None}
    labels = {g.label for g in groups}
    assert len(groups) == 2 and len(labels) == 2
    assert len({store.window_scores_path(tmp_path, label) for label in labels}) == 2
    shown = {configuration_label(p.model_dump(), ("model", "backend")) for p in grid.points}
    assert len(shown) == 3  # the base model and each adapter, each its own label


def test_an_adapter_label_is_the_same_however_its_path_is_written() -> None:
    a = scen.GroupKey(target="cpu", model="m", revision="main", backend="transformers",
                      quantization="none", kv_cache_dtype="auto", adapter="x/lora")  # fmt: skip
    b = a.model_copy(update={"adapter": "./x/lora/"})
    assert a.label == b.label and "adapter=lora#" in a.label


# --- one folder listed twice -----------------------------------------------------------------


@pytest.mark.parametrize("second", ["./lora/", "lora/.", "link"])
def test_one_adapter_folder_written_two_ways_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second: str
) -> None:
    copy_adapter(tmp_path / "lora")
    (tmp_path / "link").symlink_to(tmp_path / "lora")
    monkeypatch.chdir(tmp_path)
    path = adapter_scenario(tmp_path, "lora", second)
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    expected = f"{path}:2: models[2].adapter: adapter '{second}' is the folder of models[1]"
    assert lines[0].startswith(f"error: {expected}.adapter ('lora')"), lines[0]
