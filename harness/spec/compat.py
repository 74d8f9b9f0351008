"""Which (backend, quantization, KV dtype, target) combinations can run, as one table of data.

Each rule names the field values it forbids together and why. Which engines and targets a
weight format or KV dtype runs on is the capability tables' fact (`capabilities`): the rules
below read their value sets from there and add the reason a person is shown, one per kind of
format. `rule_for` returns the first rule that a combination breaks; model-dependent limits (max
positions) are checked in `scenario.expand` from the model's architecture.

A layout over several cards (`capabilities.Layout`) has rules of its own, `LAYOUT_RULES`: each
reads the layout, the model's architecture and the engine's parallelism row, and says why.
`layout_rule_for` returns the first one broken. How many cards a node or the cluster has is the
scenario's `parallel` block's own check (an error, not a skip).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from harness.spec.capabilities import (
    KV_CACHE_FORMATS,
    TARGETS,
    WEIGHT_FORMATS,
    KvCacheFormat,
    Layout,
    WeightFormat,
)
from harness.spec.catalog import ModelArch
from harness.spec.engines import engine, engines


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
    return _kv(lambda k: backend not in k.engines() and k.family == family)


def _weights_not_on(backend: str, library: str) -> set[str]:
    return _weights(lambda f: backend not in f.engines() and f.library == library)


def _engine_rules() -> tuple[Rule, ...]:
    """Per engine of the registry, after the rules above (which give a format's own reason):
    the targets, weight formats and KV-cache dtypes its card does not name."""
    rules: list[Rule] = []
    for name, card in engines().items():
        rules += [
            _rule(
                f"{name}-targets",
                f"the {name} engine runs on {', '.join(sorted(card.targets))} in this harness",
                backend={name}, target=set(TARGETS) - card.targets,
            ),
            _rule(
                f"{name}-weights",
                f"the {name} engine runs the weight formats {', '.join(card.weights)}",
                backend={name}, quantization=set(WEIGHT_FORMATS) - set(card.weights),
            ),
            _rule(
                f"{name}-kv",
                f"the {name} engine runs the KV-cache dtypes {', '.join(card.kv_caches)}",
                backend={name}, kv_cache_dtype=set(KV_CACHE_FORMATS) - set(card.kv_caches),
            ),
        ]  # fmt: skip
    return tuple(rules)


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
    *(
        _rule(
            f"{f.name}-not-on-cpu",
            f"{f.name} on the CPU: {f.why_not_cpu}",
            quantization={f.name},
            target={"cpu"},
        )
        for f in WEIGHT_FORMATS.values()
        if f.why_not_cpu
    ),
    _rule(
        "nvfp4-not-on-rocm",
        "NVFP4 is NVIDIA's block format; ROCm has no NVFP4 kernels (CDNA 4 runs MXFP4)",
        quantization=_weights(lambda f: f.card_flavour == "nvfp4"),
        target={"rocm"},
    ),
    _rule(
        "checkpoint-formats-vllm-only",
        "NVFP4, MXFP4, block FP8 and compressed-tensors checkpoints are loaded with the vLLM "
        "backend in this harness (the transformers backend quantizes on load: bnb, quanto, GPTQ)",
        quantization=_weights(lambda f: f.checkpoint_only and "transformers" not in f.engines()),
        backend={"transformers"},
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
    *_engine_rules(),
)


def rule_for(fields: dict[str, object]) -> Rule | None:
    """The first compatibility rule that these point fields break, if any."""
    return next((rule for rule in RULES if rule.matches(fields)), None)


class LayoutRule(BaseModel):
    """A layout a model or an engine cannot run, and why (``breaks`` reads the facts)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    id: str
    breaks: Callable[[Layout, ModelArch, str], bool]
    reason: Callable[[Layout, ModelArch, str], str]


def _kv_heads_do_not_split(layout: Layout, arch: ModelArch, backend: str) -> bool:
    """vLLM shards KV heads over the tensor ranks, and replicates them when TP exceeds them:
    either TP divides the KV heads, or the KV heads divide TP."""
    tp, kv = layout.tensor, arch.num_kv_heads
    return (kv % tp != 0) if tp <= kv else (tp % kv != 0)


LAYOUT_RULES: tuple[LayoutRule, ...] = (
    LayoutRule(
        id="engine-tensor-parallel",
        breaks=lambda lay, arch, be: lay.tensor > 1 and not engine(be).parallelism.tensor,
        reason=lambda lay, arch, be: engine(be).parallelism.why_not,
    ),
    LayoutRule(
        id="engine-pipeline-parallel",
        breaks=lambda lay, arch, be: lay.pipeline > 1 and not engine(be).parallelism.pipeline,
        reason=lambda lay, arch, be: engine(be).parallelism.why_not,
    ),
    LayoutRule(
        id="engine-expert-parallel",
        breaks=lambda lay, arch, be: lay.expert and not engine(be).parallelism.expert,
        reason=lambda lay, arch, be: engine(be).parallelism.why_not,
    ),
    LayoutRule(
        id="tp-divides-heads",
        breaks=lambda lay, arch, be: arch.num_heads % lay.tensor != 0,
        reason=lambda lay, arch, be: (
            f"tensor parallelism splits the attention heads: tp={lay.tensor} does not divide "
            f"{arch.num_heads} heads"
        ),
    ),
    LayoutRule(
        id="tp-kv-heads",
        breaks=_kv_heads_do_not_split,
        reason=lambda lay, arch, be: (
            f"tp={lay.tensor} and {arch.num_kv_heads} KV heads: TP must divide the KV heads, or "
            "be a multiple of them (then each KV head is replicated on tp / kv_heads ranks)"
        ),
    ),
    LayoutRule(
        id="pp-within-layers",
        breaks=lambda lay, arch, be: lay.pipeline > arch.num_layers,
        reason=lambda lay, arch, be: (
            f"pipeline parallelism splits the layers: pp={lay.pipeline} exceeds the model's "
            f"{arch.num_layers} layers"
        ),
    ),
    LayoutRule(
        id="ep-moe-only",
        breaks=lambda lay, arch, be: lay.expert and arch.num_experts == 1,
        reason=lambda lay, arch, be: (
            f"expert parallelism spreads a mixture of experts' experts; {arch.id} is dense"
        ),
    ),
    LayoutRule(
        id="ep-needs-ranks",
        breaks=lambda lay, arch, be: lay.expert and lay.tensor == 1,
        reason=lambda lay, arch, be: (
            "expert parallelism spreads the experts over the tensor ranks; tp=1 has one rank"
        ),
    ),
)


def layout_rule_for(layout: Layout, arch: ModelArch, backend: str) -> tuple[str, str] | None:
    """(rule id, reason) of the first layout rule broken, if any."""
    for rule in LAYOUT_RULES:
        if rule.breaks(layout, arch, backend):
            return rule.id, rule.reason(layout, arch, backend)
    return None
