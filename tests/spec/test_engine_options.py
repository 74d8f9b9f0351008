"""The scenario's `engines:` block (harness.spec.engine_options): each engine's options typed by
its own options model (harness.backends.vllm.options, harness.backends.sglang.options,
harness.backends.llamacpp.options, harness.backends.transformers.options), and the old `vllm:`
key read as `engines: {vllm: ...}` with a warning that says so."""

from __future__ import annotations

import pytest

from harness.backends.llamacpp.options import LlamaCppOptions
from harness.backends.sglang.options import SglangOptions
from harness.backends.transformers.options import TransformersOptions
from harness.backends.vllm.options import VllmOptions
from harness.errors import UserInputError
from harness.spec import scenario
from harness.spec.engine_options import EngineBlocks, gpu_share, options_for

BASE = """name: t
models: [tiny-llama]
backend: [transformers, vllm]
quantization: [none]
batch: [1]
context: [32]
output_tokens: 4
targets: [cpu]
"""


def test_each_block_is_its_engine_s_own_options_model() -> None:
    parsed = scenario.parse(
        BASE + "engines: {vllm: {enforce_eager: true}, llamacpp: {n_batch: 128}}\n"
    )
    assert parsed.engines.vllm == VllmOptions(enforce_eager=True)
    assert options_for(parsed.engines, "llamacpp") == LlamaCppOptions(n_batch=128)
    # an engine left out runs with its defaults
    assert options_for(parsed.engines, "sglang") == SglangOptions()
    assert options_for(parsed.engines, "transformers") == TransformersOptions()


def test_the_old_vllm_key_is_read_and_said_to_be_renamed() -> None:
    with pytest.warns(FutureWarning, match="`vllm:` is renamed `engines: {vllm: ...}`"):
        parsed = scenario.parse(BASE + "vllm: {gpu_memory_utilization: 0.5}\n")
    assert parsed.engines.vllm == VllmOptions(gpu_memory_utilization=0.5)


def test_the_old_key_and_the_new_block_together_are_refused() -> None:
    with pytest.raises(UserInputError, match="both given"):
        scenario.parse(BASE + "vllm: {enforce_eager: true}\nengines: {vllm: {}}\n")


def test_the_gpu_share_is_the_engine_s_own_option_where_its_card_pre_allocates() -> None:
    blocks = EngineBlocks.model_validate(
        {"vllm": {"gpu_memory_utilization": 0.5}, "sglang": {"mem_fraction_static": 0.7}}
    )
    assert gpu_share(blocks, "vllm") == 0.5
    assert gpu_share(blocks, "sglang") == 0.7
    assert gpu_share(blocks, "transformers") == 1.0  # it pre-allocates nothing
    assert gpu_share(None, "vllm") == 0.9  # vLLM's own default
