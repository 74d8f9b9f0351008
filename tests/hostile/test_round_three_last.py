"""Round three's last cases (issue 43, item 11), by behaviour: `~` in task paths, an adapter's
config checked against its weights and its base, `gate: [tasks]` with nothing that scores a
task, a trace that is not a prefix tree, compare's matching, Ray's start in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness import plan as planner
from harness.cli.main import app
from harness.results.compare import compare
from harness.row import Provenance, ResultRow
from harness.spec import adapters, catalog, models
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Point
from harness.tasks.spec import TaskFile, load_task_file
from tests import factories as F
from tests.hostile.test_point_content import trace_scenario
from tests.spec.test_adapters import lora_safetensors, make_adapter, refusal

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


# --- an adapter's config, checked against its weights and its base ----------------------------


def adapter_with(tmp_path: Path, *, b_rank: int | None = None, **config: object) -> Path:
    folder = make_adapter(tmp_path / "lora", rank=8)
    path = folder / adapters.CONFIG
    written = json.loads(path.read_text())
    written.update(config)
    path.write_text(json.dumps(written))
    if b_rank is not None:
        (folder / adapters.WEIGHTS).write_bytes(lora_safetensors(8, b_rank))
        binding = json.loads((folder / adapters.BINDING).read_text())
        binding["adapter_sha256"] = adapters.weights_hash(folder)
        adapters.write_binding(folder, binding)
    return folder


@pytest.mark.parametrize("rank", [0, -4])
def test_a_rank_that_is_not_positive_is_refused(tmp_path: Path, rank: int) -> None:
    line = refusal(tmp_path, adapter_with(tmp_path, r=rank))
    assert f"r must be a positive integer (the LoRA rank), got {rank}" in line


def test_a_config_rank_other_than_the_weights_is_refused(tmp_path: Path) -> None:
    line = refusal(tmp_path, adapter_with(tmp_path, r=16))  # the weights hold rank 8
    assert "has rank 8; adapter_config.json says r = 16" in line


def test_weights_whose_b_matrix_has_another_rank_are_refused(tmp_path: Path) -> None:
    line = refusal(tmp_path, adapter_with(tmp_path, b_rank=4))
    assert "lora_B.weight' has rank 4" in line


def test_a_rank_above_the_linear_s_own_is_refused(tmp_path: Path) -> None:
    # tiny-llama: k_proj is 256 → 128 (2 KV heads × 64): rank 200 > min(256, 128) = 128
    folder = make_adapter(tmp_path / "big", rank=200)
    line = refusal(tmp_path, folder)
    assert "rank 200 exceeds min(in, out) = 128 of k_proj" in line


def test_a_target_module_the_base_lacks_is_refused_at_plan(tmp_path: Path) -> None:
    line = refusal(tmp_path, adapter_with(tmp_path, target_modules=["q_proj", "query_key_value"]))
    assert "target module 'query_key_value' is not a linear of 'tiny-llama'" in line


def test_all_linear_is_every_linear_of_the_decoder_as_peft_reads_it(tmp_path: Path) -> None:
    folder = adapter_with(tmp_path, target_modules="all-linear")
    arch = catalog.model("tiny-llama")
    fields = dict(model="tiny-llama", quantization="none", kv_cache_dtype="auto", batch=1,
                  context=64, output_tokens=8, target="cpu", backend="transformers")  # fmt: skip
    base = planner.inference_memory(Point(**fields), arch)[1]["weights"]
    with_lora = planner.inference_memory(Point(adapter=str(folder), **fields), arch)[1]["weights"]
    # rank 8 × Σ(in + out) over q 256+256, k 256+128, v 256+128, o 256+256, gate 256+i, up 256+i,
    # down i+256 (i = the intermediate size) × layers × 4 bytes (float32); before: 0 bytes
    i, layers = arch.intermediate_size, arch.num_layers
    expected = 8 * (512 + 384 + 384 + 512 + 3 * (256 + i)) * layers * 4
    assert with_lora - base == expected


# --- gate: [tasks] with nothing that scores a task --------------------------------------------


def test_a_gate_on_tasks_with_nothing_that_scores_a_task_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: g\nmodels: [tiny-llama]\nbackend: [transformers]\nquantization: [none]\n"
        "batch: [1]\ncontext: [32]\noutput_tokens: 4\ntargets: [cpu]\n"
        "quality: {arc_items: 0, gate: [tasks]}\n"
    )
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "quality" in line and "gate names tasks, but nothing scores a task" in line


def test_a_gate_on_tasks_with_arc_items_is_accepted() -> None:
    assert QualitySettings.model_validate({"gate": ["tasks"]}).gated() == ("tasks",)


# --- a trace that is not a prefix tree --------------------------------------------------------

SHIPPED_TRACE = models.PACKAGE_DATA / "traces" / "mooncake_conversation.jsonl"


def test_a_trace_that_is_not_a_prefix_tree_is_refused_at_plan_with_file_and_line(
    tmp_path: Path,
) -> None:
    lines = SHIPPED_TRACE.read_text().splitlines(keepends=True)[:12]
    first = json.loads(lines[0])
    fifth = json.loads(lines[4])
    # line 5 starts with line 1's second block: that block now follows the start here and
    # line 1's first block there, two parents (before the fix: planned, failed on the device)
    fifth["hash_ids"] = [first["hash_ids"][1], *fifth["hash_ids"][1:]]
    lines[4] = json.dumps(fifth) + "\n"
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(lines))
    result = CliRunner().invoke(app, ["plan", str(trace_scenario(tmp_path, trace))])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert f"{trace}:5" in line and "hash_ids" in line
    assert f"hash id {first['hash_ids'][1]} follows the start here" in line


# --- compare: an adapter by its content, a task by its content and items ---------------------


def compare_rows(run: str, **extra: object) -> list[ResultRow]:
    return [F.row(run=run, batch=b, decode_cv=0.02, **F.quality(100.0), **extra) for b in (1, 4)]


def with_provenance(**fields: str) -> Provenance:
    return Provenance(device_name="NVIDIA H100 80GB HBM3", harness="0.1.0", **fields)


def test_compare_matches_an_adapter_by_its_weights_not_its_path(tmp_path: Path) -> None:
    same = {"adapter": "loras/snips"}
    a = F.write_run(tmp_path / "a", compare_rows("a", **same,
                    provenance=with_provenance(adapter_sha256="aa" * 32)))  # fmt: skip
    b = F.write_run(tmp_path / "b", compare_rows("b", **same,
                    provenance=with_provenance(adapter_sha256="bb" * 32)))  # fmt: skip
    result = compare(a, b, threshold_pct=2.0)
    assert result.table.empty  # before: matched on the path, compared with no word
    assert len(result.only_a) == len(result.only_b) == 2
    (note,) = result.notes
    assert "adapter loras/snips: other weights in B (sha256:bbbb" in note
    assert "not compared" in note


def test_compare_matches_one_adapter_in_two_folders_by_its_weights(tmp_path: Path) -> None:
    sha = with_provenance(adapter_sha256="cc" * 32)
    a = F.write_run(tmp_path / "a", compare_rows("a", adapter="x/lora", provenance=sha))
    b = F.write_run(tmp_path / "b", compare_rows("b", adapter="y/lora", provenance=sha))
    result = compare(a, b, threshold_pct=2.0)
    assert len(result.table) > 0 and result.notes == []
    assert "adapter (by content)" in result.matched_on


def task(items: int, score: float) -> dict[str, object]:
    # classify: one unit per item, the unit rate the score
    return {"name": "mine", "kind": "classify", "items": items, "units": items,
            "score": score, "unit_rate": score}  # fmt: skip


def test_compare_says_a_task_scored_on_other_items_is_not_compared(tmp_path: Path) -> None:
    a = F.write_run(tmp_path / "a", compare_rows("a", tasks=[task(70, 0.8)]))
    b = F.write_run(tmp_path / "b", compare_rows("b", tasks=[task(210, 0.7)]))
    result = compare(a, b, threshold_pct=2.0)
    assert "task:mine" not in set(result.table["metric"])  # before: compared, 0.8 → 0.7
    assert result.notes == ["task mine: scored on 70 items in A, 210 in B: not compared"]


def test_compare_says_a_task_file_of_other_content_is_not_compared(tmp_path: Path) -> None:
    a = F.write_run(tmp_path / "a", compare_rows("a", tasks=[task(70, 0.8)],
                    provenance=with_provenance(inputs_sha256="task:mine=1111")))  # fmt: skip
    b = F.write_run(tmp_path / "b", compare_rows("b", tasks=[task(70, 0.7)],
                    provenance=with_provenance(inputs_sha256="task:mine=2222")))  # fmt: skip
    result = compare(a, b, threshold_pct=2.0)
    assert "task:mine" not in set(result.table["metric"])
    (note,) = result.notes
    assert "other task file content in B (sha256 2222) than in A (1111)" in note


def test_compare_still_compares_a_task_on_the_same_items_and_content(tmp_path: Path) -> None:
    prov = with_provenance(inputs_sha256="task:mine=1111")
    a = F.write_run(tmp_path / "a", compare_rows("a", tasks=[task(70, 0.8)], provenance=prov))
    b = F.write_run(tmp_path / "b", compare_rows("b", tasks=[task(70, 0.7)], provenance=prov))
    result = compare(a, b, threshold_pct=2.0)
    rows = result.table[result.table["metric"] == "task:mine"]
    assert list(rows["diff"].round(6)) == [-0.1, -0.1]  # 0.7 − 0.8 on both batches
    assert result.notes == []


# --- Ray cannot start: one line --------------------------------------------------------------


def test_a_temp_path_too_long_for_ray_s_sockets_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.run import driver

    long_dir = "/tmp/" + "d" * 60  # 65 bytes + "/ray" = 69; + 66 = 135 > 107
    monkeypatch.setenv("RAY_TMPDIR", long_dir)
    line = driver.socket_path_problem()
    assert line is not None and "\n" not in line
    assert f"under {long_dir}/ray would reach 135 bytes, over the 107" in line
    assert "at most 37 bytes" in line  # 107 − 66 − len("/ray")
    monkeypatch.setenv("RAY_TMPDIR", "/tmp")  # /tmp/ray: 8 + 66 = 74 bytes
    assert driver.socket_path_problem() is None


def test_ray_s_temp_dir_follows_ray_s_own_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.run import driver

    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", "/var/tmp/x")
    assert driver.ray_temp_dir() == "/var/tmp/x/ray"
    monkeypatch.delenv("TMPDIR")
    assert driver.ray_temp_dir() == "/tmp/ray"
