"""Which (backend, quantization, KV dtype, target) combinations can run, as one table of data.

Each rule names the field values it forbids together and why. `rule_for` returns the first
rule that a combination breaks; model-dependent limits (max positions) are checked in
`scenario.expand` from the model's architecture.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    when: dict[str, frozenset[str]]
    reason: str

    def matches(self, fields: dict[str, object]) -> bool:
        return all(str(fields.get(k)) in allowed for k, allowed in self.when.items())


def _rule(id: str, reason: str, **when: set[str]) -> Rule:
    return Rule(id=id, reason=reason, when={k: frozenset(v) for k, v in when.items()})


RULES: tuple[Rule, ...] = (
    _rule(
        "vllm-no-int-kv",
        "vLLM stores the KV cache in the model dtype or FP8; it has no "
        "int8/int4 quantized KV cache",
        backend={"vllm"},
        kv_cache_dtype={"int8", "int4"},
    ),
    _rule(
        "vllm-16bit-kv-follows-model",
        "vLLM's 16-bit KV cache must be the model dtype; 'auto' selects it",
        backend={"vllm"},
        kv_cache_dtype={"fp16", "bf16"},
    ),
    _rule(
        "rocm-no-fp8-e5m2-kv",
        "an fp8_e5m2 KV cache is not supported on ROCm (use fp8 / fp8_e4m3)",
        target={"rocm"},
        kv_cache_dtype={"fp8_e5m2"},
    ),
    _rule(
        "bnb-transformers-only",
        "bitsandbytes runs only with the transformers backend in this harness",
        backend={"vllm"},
        quantization={"bnb-int8", "bnb-nf4", "bnb-fp4"},
    ),
    _rule(
        "quanto-transformers-only",
        "optimum-quanto is a transformers integration; vLLM cannot load it",
        backend={"vllm"},
        quantization={"quanto-int8", "quanto-int4", "quanto-int2"},
    ),
    _rule(
        "vllm-gpu-only",
        "vLLM runs on CUDA and ROCm GPUs here; CPU points use the transformers backend",
        backend={"vllm"},
        target={"cpu"},
    ),
    _rule(
        "fp8-weights-gpu-only",
        "FP8 weights need a GPU with FP8 support (CUDA or ROCm)",
        quantization={"fp8"},
        target={"cpu"},
    ),
    _rule(
        "fp8-weights-vllm-only",
        "FP8 weights are measured with the vLLM backend (on-the-fly FP8 is a vLLM feature)",
        quantization={"fp8"},
        backend={"transformers"},
    ),
    _rule(
        "transformers-no-fp8-kv",
        "the transformers backend offers int8/int4 quantized KV "
        "caches; FP8 KV caches are measured with vLLM",
        backend={"transformers"},
        kv_cache_dtype={"fp8", "fp8_e4m3", "fp8_e5m2"},
    ),
    _rule(
        "transformers-kv-follows-compute",
        "transformers keeps the KV cache in the compute dtype; use 'auto' for it",
        backend={"transformers"},
        kv_cache_dtype={"fp16", "bf16"},
    ),
)


def rule_for(fields: dict[str, object]) -> Rule | None:
    """The first compatibility rule that these point fields break, if any."""
    return next((rule for rule in RULES if rule.matches(fields)), None)
