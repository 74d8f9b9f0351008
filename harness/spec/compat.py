"""Which (backend, quantization, KV dtype, target) combinations can run, as one table of data.

Each rule names the field values it forbids together and why. Which engines and targets a
weight format or KV dtype runs on is the capability tables' fact (`capabilities`): the rules
below read their value sets from there and add the reason a person is shown, one per kind of
format. `rule_for` returns the first rule that a combination breaks; model-dependent limits (max
positions) are checked in `scenario.expand` from the model's architecture.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from harness.spec.capabilities import (
    KV_CACHE_FORMATS,
    WEIGHT_FORMATS,
    KvCacheFormat,
    WeightFormat,
)


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    when: dict[str, frozenset[str]]
    reason: str

    def matches(self, fields: dict[str, object]) -> bool:
        return all(str(fields.get(k)) in allowed for k, allowed in self.when.items())


def _rule(id: str, reason: str, **when: set[str]) -> Rule:
    return Rule(id=id, reason=reason, when={k: frozenset(v) for k, v in when.items()})


def _weights(test: Callable[[WeightFormat], bool]) -> set[str]:
    return {f.name for f in WEIGHT_FORMATS.values() if test(f)}


def _kv(test: Callable[[KvCacheFormat], bool]) -> set[str]:
    return {k.name for k in KV_CACHE_FORMATS.values() if test(k)}


def _kv_not_on(backend: str, family: str) -> set[str]:
    return _kv(lambda k: backend not in k.engines and k.family == family)


def _weights_not_on(backend: str, library: str) -> set[str]:
    return _weights(lambda f: backend not in f.engines and f.library == library)


RULES: tuple[Rule, ...] = (
    _rule(
        "vllm-no-int-kv",
        "vLLM stores the KV cache in the model dtype or FP8; it has no "
        "int8/int4 quantized KV cache",
        backend={"vllm"},
        kv_cache_dtype=_kv_not_on("vllm", "int"),
    ),
    _rule(
        "vllm-16bit-kv-follows-model",
        "vLLM's 16-bit KV cache must be the model dtype; 'auto' selects it",
        backend={"vllm"},
        kv_cache_dtype=_kv_not_on("vllm", "float16"),
    ),
    _rule(
        "rocm-no-fp8-e5m2-kv",
        "an fp8_e5m2 KV cache is not supported on ROCm (use fp8 / fp8_e4m3)",
        target={"rocm"},
        kv_cache_dtype=_kv(lambda k: "rocm" not in k.targets),
    ),
    _rule(
        "bnb-transformers-only",
        "bitsandbytes runs only with the transformers backend in this harness",
        backend={"vllm"},
        quantization=_weights_not_on("vllm", "bitsandbytes"),
    ),
    _rule(
        "quanto-transformers-only",
        "optimum-quanto is a transformers integration; vLLM cannot load it",
        backend={"vllm"},
        quantization=_weights_not_on("vllm", "optimum-quanto"),
    ),
    _rule(
        "fp8-weights-gpu-only",
        "FP8 weights need a GPU with FP8 support (CUDA or ROCm)",
        quantization=_weights(lambda f: "cpu" not in f.targets),
        target={"cpu"},
    ),
    _rule(
        "fp8-weights-vllm-only",
        "FP8 weights are measured with the vLLM backend (on-the-fly FP8 is a vLLM feature)",
        quantization=_weights_not_on("transformers", "vllm"),
        backend={"transformers"},
    ),
    _rule(
        "transformers-no-fp8-kv",
        "the transformers backend offers int8/int4 quantized KV "
        "caches; FP8 KV caches are measured with vLLM",
        backend={"transformers"},
        kv_cache_dtype=_kv_not_on("transformers", "fp8"),
    ),
    _rule(
        "transformers-kv-follows-compute",
        "transformers keeps the KV cache in the compute dtype; use 'auto' for it",
        backend={"transformers"},
        kv_cache_dtype=_kv_not_on("transformers", "float16"),
    ),
)


def rule_for(fields: dict[str, object]) -> Rule | None:
    """The first compatibility rule that these point fields break, if any."""
    return next((rule for rule in RULES if rule.matches(fields)), None)
