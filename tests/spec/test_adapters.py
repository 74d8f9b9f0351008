"""An adapter is bound to its base: id, revision and weights hash are checked, a mismatch refused
in one line (exit 2), and the planner counts its bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harness import plan as planner
from harness.cli.main import app
from harness.errors import UserInputError
from harness.spec import adapters, catalog, models
from harness.spec.scenario import Point

BASE = models.PACKAGE_DATA / "tiny-llama"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def lora_safetensors(rank: int, b_rank: int | None = None) -> bytes:
    """A safetensors file of one LoRA pair on q_proj (A: r × 256, B: 256 × r, float32 zeros):
    the header the harness reads, then the bytes it names."""
    shapes = {"q_proj.lora_A.weight": [rank, 256], "q_proj.lora_B.weight": [256, b_rank or rank]}
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = shape[0] * shape[1] * 4
        header[f"base_model.model.model.layers.0.self_attn.{name}"] = {
            "dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size],
        }  # fmt: skip
        offset += size
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + bytes(offset)


def make_adapter(folder: Path, rank: int = 8, **binding: Any) -> Path:
    """A PEFT-shaped folder (its weights are bytes only: nothing here loads them) with a binding
    to the shipped tiny model, overridden by `binding`."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 2 * rank,
        "target_modules": TARGETS,
        "base_model_name_or_path": binding.get("base_model", "tiny-llama"),
    }
    (folder / adapters.CONFIG).write_text(json.dumps(config))
    (folder / adapters.WEIGHTS).write_bytes(lora_safetensors(rank))
    record = adapters.binding_for(folder, "tiny-llama", "main", BASE, None)
    record.update(binding)
    adapters.write_binding(folder, record)
    return folder


def scenario(tmp_path: Path, adapter: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: a\n"
        f"models: [tiny-llama, {{id: tiny-llama, adapter: {adapter}}}]\n"
        "backend: [transformers, vllm]\nquantization: [none]\nkv_cache_dtype: [auto]\n"
        "batch: [1]\ncontext: [64]\noutput_tokens: 8\ntargets: [cpu]\n"
    )
    return path


def refusal(tmp_path: Path, adapter: Path) -> str:
    result = CliRunner().invoke(app, ["plan", str(scenario(tmp_path, adapter))])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "models" in lines[0] and "adapter" in lines[0]
    return lines[0]


def test_an_adapter_bound_to_its_base_plans(tmp_path: Path) -> None:
    adapter = make_adapter(tmp_path / "lora")
    result = CliRunner().invoke(app, ["plan", str(scenario(tmp_path, adapter))])
    assert result.exit_code == 0, result.output
    assert "tiny-llama+lora" in result.output


def test_an_adapter_of_another_model_is_refused(tmp_path: Path) -> None:
    line = refusal(tmp_path, make_adapter(tmp_path / "lora", base_model="qwen2.5-0.5b"))
    assert "trained on 'qwen2.5-0.5b'" in line and "'tiny-llama'" in line


def test_an_adapter_of_another_revision_is_refused(tmp_path: Path) -> None:
    line = refusal(tmp_path, make_adapter(tmp_path / "lora", base_revision="v2"))
    assert "revision 'v2'" in line and "revision 'main'" in line


def test_an_adapter_trained_on_other_base_weights_is_refused(tmp_path: Path) -> None:
    line = refusal(tmp_path, make_adapter(tmp_path / "lora", base_weights_sha256="0" * 64))
    assert "base weights" in line and "0000000000000000" in line


def test_adapter_weights_changed_after_the_binding_are_refused(tmp_path: Path) -> None:
    folder = make_adapter(tmp_path / "lora")
    (folder / adapters.WEIGHTS).write_bytes(b"other bytes")
    assert "weights were changed" in refusal(tmp_path, folder)


def test_a_folder_without_a_binding_is_refused(tmp_path: Path) -> None:
    folder = make_adapter(tmp_path / "lora")
    (folder / adapters.BINDING).unlink()
    assert adapters.BINDING in refusal(tmp_path, folder)


def test_a_binding_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    import os

    folder = make_adapter(tmp_path / "lora")
    (folder / adapters.BINDING).unlink()
    os.mkfifo(folder / adapters.BINDING)
    with pytest.raises(UserInputError, match="not a regular file"):
        adapters.read_adapter(folder)


def test_the_planner_counts_the_adapter_and_vllm_lora_slots(tmp_path: Path) -> None:
    folder = make_adapter(tmp_path / "lora", rank=8)
    arch = catalog.model("tiny-llama")
    fields = dict(model="tiny-llama", quantization="none", kv_cache_dtype="auto", batch=1,
                  context=64, output_tokens=8, target="cpu")  # fmt: skip
    per_value = 4  # the tiny model is float32
    layers = arch.num_layers
    shapes = arch.linear_shapes()
    own = 8 * sum(sum(shapes[t]) for t in TARGETS) * layers * per_value
    slots = 8 * sum(sum(s) for s in shapes.values()) * layers * per_value
    for backend, extra in (("transformers", own), ("vllm", own + slots)):
        base = planner.inference_memory(Point(backend=backend, **fields), arch)[1]["weights"]
        with_lora = Point(backend=backend, adapter=str(folder), **fields)
        assert planner.inference_memory(with_lora, arch)[1]["weights"] - base == extra
    assert own == 8 * (512 + 384 + 384 + 512) * 4 * 4  # r × Σ(in + out) × layers × 4 bytes


def test_vllm_serves_an_adapter_under_the_smallest_rank_that_holds_it() -> None:
    assert adapters.vllm_slot_rank(8) == 8
    assert adapters.vllm_slot_rank(9) == 16
    assert adapters.vllm_slot_rank(513) is None


def test_an_adapter_offline_on_vllm_is_skipped_with_the_upstream_reason(tmp_path: Path) -> None:
    """vLLM V1 scores no prompt log-probs with a LoRA adapter (vllm#29955): the adapter's
    offline vLLM point is a plan-time skip with that reason; on transformers it runs."""
    from harness.spec import scenario as scen

    grid = scen.expand(scen.load(scenario(tmp_path, make_adapter(tmp_path / "lora"))))
    with_adapter = [p for p in grid.points if p.adapter is not None]
    assert [p.backend for p in with_adapter] == ["transformers"]
    (skip,) = [s for s in grid.skipped if s.point.adapter is not None]
    assert skip.point.backend == "vllm"
    assert "vllm-lora-no-prompt-logprobs" in skip.reason and "29955" in skip.reason
    assert {p.backend for p in grid.points if p.adapter is None} == {"transformers", "vllm"}
