"""An MoE model runs here (issue 46): the shipped tiny Qwen2-MoE architecture (4 routed experts
of 32, top-2, a gated shared expert of 64, 2 layers, hidden 64), made into a seeded random
checkpoint with tiny-llama's tokenizer, measured end to end with `harness measure` on this CPU:
planned against measured memory, and bf16 gated against its own fp32 reference."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.plan import bytes as planbytes
from harness.spec import catalog

ROOT = Path(__file__).resolve().parents[2]
TINY_MOE = ROOT / "harness" / "spec" / "catalog" / "configs" / "tiny-qwen2-moe"
TOKENIZER = ROOT / "harness" / "data" / "tiny-llama"


def test_the_tiny_moe_plans_every_parameter_transformers_builds() -> None:
    # embeddings = lm_head = 4096·64 = 262,144. Per layer: q 64·64 + k, v 64·32 + o 64·64 =
    # 12,288; router 4·64 = 256; routed experts 4·(64·64 gate+up + 64·32 down) = 24,576; shared
    # expert 3·64·64 = 12,288 and its gate 64 → linears 49,472; q/k/v biases 64 + 32 + 32 = 128;
    # 2 norms of 64 = 128. Two layers + the final norm: 2·49,728 + 64 = 99,520.
    # Total 99,520 + 2·262,144 = 623,808 (what Qwen2MoeForCausalLM(config) counts).
    counts = planbytes.param_counts(catalog.model("tiny-qwen2-moe"))
    assert counts.linear == 2 * 49_472 and counts.routed_experts == 2 * 24_576
    assert counts.total == 623_808
    # active per token: attention + 2 of 4 experts + shared + gates = 12,288 + 12,288 + 12,288
    # + 256 + 64 = 37,184 a layer
    assert counts.active_linear == 2 * 37_184


def build_checkpoint(folder: Path) -> Path:
    """The shipped config on seeded random weights, saved with tiny-llama's tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(TINY_MOE))
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, folder / name)
    return folder


def scenario(tmp_path: Path, model: Path) -> Path:
    path = tmp_path / "tiny-moe.yaml"
    path.write_text(
        f"""name: tiny-moe
models: [{model}]
backend: [transformers]
quantization: [fp32, bf16]
batch: [1]
context: [16]
output_tokens: 4
targets: [cpu]
repeats: 1
warmups: 0
reference: {{quantization: fp32}}
quality: {{window_tokens: 64, max_windows: 16, arc_items: 2, bootstrap_samples: 200, gate: [ppl]}}
"""
    )
    return path


@pytest.mark.engine
@pytest.mark.slow
def test_a_tiny_moe_runs_here_with_memory_planned_and_gated_on_its_reference(
    tmp_path: Path,
) -> None:
    from harness.results.aggregate import aggregate_run

    model = build_checkpoint(tmp_path / "tiny-moe")
    out = tmp_path / "run"
    # in a fresh interpreter: the measured peak is the process's, and a test session's process
    # holds what earlier tests left (1,337 MiB in a full `make test`)
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "measure", str(scenario(tmp_path, model)), "--out",
         str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]
    assert sorted(r["status"] for r in rows) == ["ok", "ok"], [r.get("error") for r in rows]
    for row in rows:  # the plan holds the measured peak within a quarter (measured here: -1 %
        # fp32, -13 % bf16, the bf16 cast's transient)
        assert row["predicted_peak_mib"] == pytest.approx(row["peak_mib_decode"], rel=0.25)
    points = aggregate_run(out).points.set_index("quantization")
    assert bool(points.loc["fp32", "is_reference"])
    assert points.loc["bf16", "verdict_99"] == "pass"  # paired ΔNLL against fp32
