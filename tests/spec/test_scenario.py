"""Scenario files: the grid they expand to, and the exact error each malformed one yields."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.errors import UserInputError
from harness.spec import scenario

BASE = """name: t
models: [meta-llama/Llama-3.1-8B-Instruct]
backend: [transformers]
quantization: [bf16]
batch: [1]
context: [128]
output_tokens: 16
targets: [cuda]
"""


def replace(key: str, new: str) -> str:
    lines = [new if line.startswith(key + ":") else line for line in BASE.splitlines()]
    return "\n".join(lines) + "\n"


MALFORMED: dict[str, tuple[str, str]] = {
    "typo in a top-level key": (
        BASE.replace("batch:", "bacth:"),
        "bad.yaml:5: bacth: unknown field (did you mean 'batch'?); expected one of: name, models, backend, quantization, kv_cache_dtype, batch, context, output_tokens, targets, repeats, warmups, min_duration_s, seed, gpu, exclude, reference, quality, engines, serving, training, parallel, speculative",
    ),
    "unknown backend": (
        replace("backend", "backend: [transformer]"),
        "bad.yaml:3: backend[0]: 'transformer' is not allowed (did you mean 'transformers'?); expected one of: transformers, vllm, llamacpp, sglang",
    ),
    "unknown quantization": (
        replace("quantization", "quantization: [bnb-nf5]"),
        "bad.yaml:4: quantization[0]: 'bnb-nf5' is not allowed (did you mean 'bnb-nf4'?); expected one of: none, fp32, bf16, fp16, bnb-int8, bnb-nf4, bnb-fp4, gptq-int4, quanto-int8, quanto-int4, quanto-int2, fp8, gguf-q8_0, gguf-q4_k_m, "
        "fp8-block, nvfp4, mxfp4, w8a8-int8, w4a16",
    ),
    "unknown kv dtype": (
        BASE + "kv_cache_dtype: [fp9]\n",
        "bad.yaml:9: kv_cache_dtype[0]: 'fp9' is not allowed (did you mean 'fp8'?); expected one of: auto, fp16, bf16, fp8, fp8_e4m3, fp8_e5m2, int8, int4, q8_0, q4_0",
    ),
    "unknown target": (
        replace("targets", "targets: [cdua]"),
        "bad.yaml:8: targets[0]: 'cdua' is not allowed (did you mean 'cuda'?); expected one of: cpu, cuda, rocm",
    ),
    "negative batch": (
        replace("batch", "batch: [1, -4]"),
        "bad.yaml:5: batch[1]: Input should be greater than 0 (got -4)",
    ),
    "zero context": (
        replace("context", "context: [0]"),
        "bad.yaml:6: context[0]: Input should be greater than 0 (got 0)",
    ),
    "string batch": (
        replace("batch", "batch: [one]"),
        "bad.yaml:5: batch[0]: Input should be a valid integer (got 'one')",
    ),
    "missing output_tokens": (
        BASE.replace("output_tokens: 16\n", ""),
        "bad.yaml:1: output_tokens: required field is missing",
    ),
    "missing models": (
        BASE.replace("models: [meta-llama/Llama-3.1-8B-Instruct]\n", ""),
        "bad.yaml:1: models: required field is missing",
    ),
    "empty backend list": (
        replace("backend", "backend: []"),
        "bad.yaml:3: backend: List should have at least 1 item after validation, not 0 (got [])",
    ),
    "duplicate quantization": (
        replace("quantization", "quantization: [bf16, bf16]"),
        "bad.yaml:4: quantization: duplicate value 'bf16'; give each value once",
    ),
    "unknown model": (
        replace("models", "models: [meta-llama/Llama-3.1-8B-Instruc]"),
        "bad.yaml:2: models[0].id: unknown model 'meta-llama/Llama-3.1-8B-Instruc' (did you mean 'meta-llama/Llama-3.1-8B-Instruct'?): expected a catalog id (meta-llama/Llama-3.1-8B-Instruct, meta-llama/Llama-3.1-70B-Instruct, Qwen/Qwen2.5-7B-Instruct, Qwen/Qwen2.5-72B-Instruct, mistralai/Mistral-7B-v0.3, mistralai/Mixtral-8x7B-v0.1, google/gemma-2-9b, microsoft/Phi-3-mini-4k-instruct, meta-llama/Llama-2-7b-hf, meta-llama/Llama-2-70b-hf, meta-llama/Meta-Llama-3-8B, meta-llama/Meta-Llama-3-70B, mistralai/Mistral-7B-v0.1, Qwen/Qwen2-7B, Qwen/Qwen2-72B, Qwen/Qwen3-235B-A22B, openai/gpt-oss-120b, "
        "deepseek-ai/DeepSeek-V3, moonshotai/Kimi-K2-Instruct, Qwen/Qwen3-30B-A3B, openai/gpt-oss-20b, "
        "meta-llama/Llama-4-Scout-17B-16E-Instruct, tiny-llama, tiny-llama-retrieval, llama-3.1-8b, llama-3.2-1b, qwen2.5-0.5b, "
        "tiny-qwen2-moe) or a local directory containing config.json",
    ),
    "unknown model field": (
        replace("models", "models: [{id: tiny-llama, revison: main}]"),
        "bad.yaml:2: models[0].revison: unknown field (did you mean 'revision'?); expected one of: revision, id, weights, adapter",
    ),
    "empty model id": (
        replace("models", "models: [{id: ''}]"),
        "bad.yaml:2: models[0].id: String should have at least 1 character (got '')",
    ),
    "exclude with unknown field": (
        BASE + "exclude: [{quant: bf16}]\n",
        "bad.yaml:9: exclude[0].quant: unknown field; expected one of: model, backend, quantization, kv_cache_dtype, batch, context, target",
    ),
    "empty exclude entry": (
        BASE + "exclude: [{}]\n",
        "bad.yaml:9: exclude[0]: an exclude entry must name at least one field",
    ),
    "exclude with bad value": (
        BASE + "exclude: [{quantization: int3}]\n",
        "bad.yaml:9: exclude[0].quantization: 'int3' is not allowed; expected one of: none, fp32, bf16, fp16, bnb-int8, bnb-nf4, bnb-fp4, gptq-int4, quanto-int8, quanto-int4, quanto-int2, fp8, gguf-q8_0, gguf-q4_k_m, "
        "fp8-block, nvfp4, mxfp4, w8a8-int8, w4a16",
    ),
    "bad name": (
        replace("name", "name: 'my sweep!'"),
        "bad.yaml:1: name: String should match pattern '^[A-Za-z0-9][A-Za-z0-9_.-]*$' (got 'my sweep!')",
    ),
    "unknown gpu": (
        BASE + "gpu: H1000\n",
        "bad.yaml:9: gpu: unknown GPU 'H1000'; known: H100-SXM-80GB, H100-PCIe-80GB, H200-141GB, A100-SXM-40GB, A100-SXM-80GB, L40S, L4, RTX-4090, MI300X, MI325X, MI250X-GCD, cpu, GH200-96GB, MI250-GCD, B200, B300, GB200, GB300, H100-NVL-94GB, H200-NVL-141GB, GH200-144GB, "
        "RTX-PRO-6000-Blackwell-Server, RTX-5090, L40, A10G, H20, MI355X, MI350X",
    ),
    "repeats zero": (
        BASE + "repeats: 0\n",
        "bad.yaml:9: repeats: Input should be greater than 0 (got 0)",
    ),
    "negative warmups": (
        BASE + "warmups: -1\n",
        "bad.yaml:9: warmups: Input should be greater than or equal to 0 (got -1)",
    ),
    "reference unknown quantization": (
        BASE + "reference: {quantization: bf61}\n",
        "bad.yaml:9: reference.quantization: 'bf61' is not allowed (did you mean 'bf16'?); expected one of: none, fp32, bf16, fp16, bnb-int8, bnb-nf4, bnb-fp4, gptq-int4, quanto-int8, quanto-int4, quanto-int2, fp8, gguf-q8_0, gguf-q4_k_m, "
        "fp8-block, nvfp4, mxfp4, w8a8-int8, w4a16",
    ),
    "quality unknown field": (
        BASE + "quality: {max_window: 10}\n",
        "bad.yaml:9: quality.max_window: unknown field (did you mean 'max_windows'?); expected one of: window_tokens, max_windows, arc_items, bootstrap_samples, gate, tasks",
    ),
    "vllm utilisation above one": (
        BASE + "engines: {vllm: {gpu_memory_utilization: 1.5}}\n",
        "bad.yaml:9: engines.vllm.gpu_memory_utilization: Input should be less than or equal to 1 (got 1.5)",
    ),
    "unknown engine block": (
        BASE + "engines: {sglangg: {}}\n",
        "bad.yaml:9: engines.sglangg: unknown field (did you mean 'sglang'?); expected one of: transformers, vllm, llamacpp, sglang",
    ),
    "top level is a list": (
        "- name: t\n",
        "bad.yaml:1: expected a mapping of scenario fields at the top, found list",
    ),
    "invalid yaml": (
        BASE + "batch: [1, 2\n",
        "bad.yaml:10: not valid YAML: expected ',' or ']', but got '<stream end>'",
    ),
    "tab indentation": (
        "name: t\nmodels:\n\t- tiny\n",
        "bad.yaml:3: not valid YAML: found character '\\t' that cannot start any token",
    ),
    "output tokens as string": (
        replace("output_tokens", "output_tokens: lots"),
        "bad.yaml:7: output_tokens: Input should be a valid integer (got 'lots')",
    ),
    "context not a list": (
        replace("context", "context: {a: 1}"),
        "bad.yaml:6: context: Input should be a valid list (got {'a': 1})",
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_scenario_names_file_line_field_and_expectation(name: str) -> None:
    text, expected = MALFORMED[name]
    with pytest.raises(UserInputError) as caught:
        scenario.parse(text, "bad.yaml")
    assert caught.value.render() == expected


def test_there_are_at_least_25_malformed_cases() -> None:
    assert len(MALFORMED) >= 25


def test_the_cli_exits_2_on_a_malformed_scenario_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(replace("backend", "backend: [transformer]"))
    before = sorted(tmp_path.iterdir())
    result = CliRunner().invoke(app, ["plan", str(bad)])
    assert result.exit_code == 2
    assert "did you mean 'transformers'" in result.output
    assert sorted(tmp_path.iterdir()) == before


def test_a_grid_is_the_product_of_its_axes_minus_skips() -> None:
    text = replace("batch", "batch: [1, 8]").replace(
        "quantization: [bf16]", "quantization: [bf16, fp8]"
    )
    grid = scenario.expand(scenario.parse(text))
    # 2 quantizations × 2 batches; fp8 weights need vLLM, so those two are skipped with a reason
    assert len(grid.points) + len(grid.skipped) == 4
    assert {p.quantization for p in grid.points} == {"bf16"}
    assert all("fp8-weights-vllm-only" in s.reason for s in grid.skipped)


def test_exclusions_skip_matching_points_with_their_index() -> None:
    text = replace("batch", "batch: [1, 8]") + "exclude: [{batch: 8}]\n"
    grid = scenario.expand(scenario.parse(text))
    assert [p.batch for p in grid.points] == [1]
    assert grid.skipped[0].reason == "excluded by the scenario (exclude[0])"


def test_a_context_beyond_max_positions_is_skipped() -> None:
    text = replace("context", "context: [131072]")
    grid = scenario.expand(scenario.parse(text))
    assert not grid.points
    assert "exceeds the model's max_position_embeddings (131072)" in grid.skipped[0].reason


def test_a_point_key_changes_with_every_field_and_with_the_corpus() -> None:
    point = scenario.expand(scenario.parse(BASE)).points[0]
    keys = {point.key("c1"), point.key("c2"), point.model_copy(update={"batch": 2}).key("c1")}
    assert len(keys) == 3
    assert point.key("c1") == point.key("c1")


def test_points_of_one_configuration_share_a_group() -> None:
    grid = scenario.expand(scenario.parse(replace("context", "context: [128, 256]")))
    assert len({p.group for p in grid.points}) == 1


def test_shipped_scenarios_are_valid() -> None:
    root = Path(__file__).parents[2] / "scenarios"
    files = sorted(root.rglob("*.yaml"))
    assert files
    for path in files:
        scenario.expand(scenario.load(path))


def test_an_exclusion_may_list_several_values_per_field() -> None:
    text = replace("batch", "batch: [1, 2, 8]") + "exclude: [{batch: [1, 8]}]\n"
    grid = scenario.expand(scenario.parse(text))
    assert [p.batch for p in grid.points] == [2]
    assert len(grid.skipped) == 2


# --- random weights ----------------------------------------------------------------------------

RANDOM = replace("models", "models: [{id: qwen2.5-0.5b, weights: random}]").replace(
    "targets: [cuda]", "targets: [cpu]"
)


def test_random_weights_on_a_shipped_architecture_expand_to_random_points() -> None:
    grid = scenario.expand(scenario.parse(RANDOM))
    assert [(p.model, p.weights) for p in grid.points] == [("qwen2.5-0.5b", "random")]
    assert grid.points[0].group.weights == "random"
    assert "weights=random" in grid.points[0].group.label


def test_random_and_checkpoint_points_never_share_a_key_or_a_group() -> None:
    point = scenario.expand(scenario.parse(BASE)).points[0]
    random = point.model_copy(update={"weights": "random"})
    assert point.key("c") != random.key("c")
    assert point.group != random.group and point.group.label != random.group.label


def test_a_checkpoint_point_keeps_the_key_it_had_before_the_weights_field() -> None:
    point = scenario.expand(scenario.parse(BASE)).points[0]
    import hashlib
    import json

    from harness import __version__

    old = {
        k: v
        for k, v in point.model_dump().items()
        if k != "weights"
        and not (k in ("adapter", "serving", "training", "layout", "speculative") and v is None)
        and not (k == "inputs" and not v)  # a point that reads no file (spec.inputs)
    }
    payload = json.dumps({**old, "harness": __version__, "corpus": "c"}, sort_keys=True)
    assert point.key("c") == hashlib.sha256(payload.encode()).hexdigest()[:20]


def test_weights_is_strict() -> None:
    with pytest.raises(UserInputError, match="weights"):
        scenario.parse(RANDOM.replace("weights: random", "weights: randm"), "bad.yaml")


def test_random_weights_in_a_format_that_needs_a_checkpoint_are_skipped_with_the_rule() -> None:
    grid = scenario.expand(scenario.parse(RANDOM.replace("[bf16]", "[bf16, bnb-int8]")))
    assert [p.quantization for p in grid.points] == ["bf16"]
    assert "[rule random-weights-float]" in grid.skipped[0].reason
