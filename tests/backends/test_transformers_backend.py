"""The transformers backend: format mapping, token counts, each quantizer on the tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import plan
from harness.backends.base import BackendOptions
from harness.backends.transformers.backend import (
    TransformersBackend,
    count_new_tokens,
    module_bytes,
    quantization_config,
    tensor_bytes,
)
from harness.corpus import calibration_texts, eval_text
from harness.errors import UserInputError
from harness.spec import catalog
from harness.spec.capabilities import KV_CACHE_FORMATS, WEIGHT_FORMATS
from harness.spec.scenario import GroupKey

TINY = Path(__file__).resolve().parents[2] / "harness" / "data" / "tiny-llama"


def backend(
    quantization: str = "none", kv: str = "auto", tmp: Path | None = None
) -> TransformersBackend:
    group = GroupKey(
        target="cpu",
        model="tiny-llama",
        revision="main",
        backend="transformers",
        quantization=quantization,
        kv_cache_dtype=kv,
    )  # type: ignore[arg-type]
    options = BackendOptions(device="cpu", model_path=str(TINY),
                             cache_dir=str(tmp) if tmp else None)  # fmt: skip
    return TransformersBackend(group, options)


def test_new_tokens_are_counted_up_to_and_including_the_first_eos() -> None:
    assert count_new_tokens([[5, 6, 7], [5, 2, 0]], eos_id=2) == [3, 2]
    assert count_new_tokens([[5, 6]], eos_id=None) == [2]


@pytest.mark.engine
def test_formats_map_to_their_library_configs() -> None:
    import torch

    int8 = quantization_config("bnb-int8", torch.float32)
    nf4 = quantization_config("bnb-nf4", torch.bfloat16)
    assert int8.load_in_8bit and not int8.load_in_4bit
    assert nf4.load_in_4bit and nf4.bnb_4bit_quant_type == "nf4"
    assert nf4.bnb_4bit_compute_dtype == torch.bfloat16
    assert quantization_config("quanto-int4", torch.float32).weights == "int4"
    assert quantization_config("bf16", torch.float32) is None


@pytest.mark.engine
def test_tensor_bytes_counts_storage_of_plain_tensors() -> None:
    import torch

    assert tensor_bytes(torch.zeros(10, 4, dtype=torch.float16)) == 80
    assert module_bytes(torch.nn.Linear(4, 2, bias=False)) == 32


def test_an_unknown_format_or_kv_cache_is_refused_before_loading() -> None:
    with pytest.raises(UserInputError, match="cannot load 'fp8'"):
        backend("fp8").load()
    with pytest.raises(UserInputError, match="no 'fp8' KV cache"):
        backend(kv="fp8").load()


@pytest.mark.engine
def test_greedy_generation_makes_exactly_the_requested_tokens_per_row() -> None:
    b = backend()
    b.load()
    prompt = b.encode(eval_text()[:2000])[:24]
    gen = b.generate([prompt, prompt], 6)
    assert gen.new_tokens == [6, 6]
    assert len(gen.step_ms) == 6 and gen.step_ms == sorted(gen.step_ms)
    assert gen.e2e_ms >= gen.step_ms[-1]
    b.close()


@pytest.mark.slow
@pytest.mark.parametrize("quantization", ["quanto-int8", "quanto-int4"])
def test_quanto_weights_load_and_generate(quantization: str) -> None:
    b = backend(quantization)
    b.load()
    gen = b.generate([b.encode("The history of the city")], 4)
    assert gen.new_tokens == [4]
    b.close()


@pytest.mark.slow
def test_an_int4_quanto_kv_cache_changes_scores_but_not_shapes() -> None:
    from harness.corpus import windows

    ref, kv4 = backend(), backend(kv="int4")
    ref.load()
    kv4.load()
    wins = windows(ref.encode(eval_text()[:40000]), 128, 2)
    a = ref.score_windows(wins, None, 4)
    b = kv4.score_windows(wins, a.topk_ids, 4)
    assert a.nll_sum.shape == b.nll_sum.shape == (2,)
    assert b.logprobs_at_ref is not None and b.logprobs_at_ref.shape == (2, 127, 4)
    assert (a.nll_sum != b.nll_sum).any()  # the second half of each window reads a 4-bit cache


@pytest.mark.engine
def test_the_plan_assumes_the_gptq_group_size_the_backend_quantizes_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One value (the capability table's), read by gptqmodel's QuantizeConfig and the planner."""
    import gptqmodel

    seen: dict[str, int] = {}

    class Stop(Exception):
        pass

    def load(path: str, config: object = None, **kwargs: object) -> None:
        seen["group_size"] = config.group_size  # type: ignore[attr-defined]
        seen["bits"] = config.bits  # type: ignore[attr-defined]
        raise Stop

    monkeypatch.setattr(gptqmodel.GPTQModel, "load", load)
    with pytest.raises(Stop):
        backend("gptq-int4", tmp=tmp_path).load()
    group = seen["group_size"]
    assert group == WEIGHT_FORMATS["gptq-int4"].group_size == 64
    arch = catalog.model("meta-llama/Llama-3.1-8B-Instruct")
    counts = plan.param_counts(arch)
    scale_and_zero_bits = 16 + 4
    linear = counts.linear * (seen["bits"] + scale_and_zero_bits / group) / 8
    kept = (counts.embeddings + counts.lm_head + counts.other) * 2
    assert plan.weights_bytes(arch, "gptq-int4") == linear + kept


def test_quantized_kv_caches_use_the_tables_group_size() -> None:
    from harness.backends.transformers.backend import cache_settings

    assert cache_settings("auto") is None
    for name in ("int8", "int4"):
        settings = cache_settings(name)
        assert settings is not None
        assert settings["q_group_size"] == KV_CACHE_FORMATS[name].group_size == 64
        assert settings["nbits"] == KV_CACHE_FORMATS[name].bits


@pytest.mark.slow
def test_gptq_quantizes_once_on_calibration_text_and_reuses_the_cache(tmp_path: Path) -> None:
    assert all(text not in eval_text() for text in calibration_texts(8))
    b = backend("gptq-int4", tmp=tmp_path)
    b.load()
    gen = b.generate([b.encode("The history of the city")], 4)
    assert gen.new_tokens == [4]
    cached = list(tmp_path.iterdir())
    assert len(cached) == 1 and (cached[0] / "config.json").is_file()
    b.close()


@pytest.mark.engine
def test_text_generation_is_greedy_and_the_same_batched_as_alone() -> None:
    from harness.tasks.builtin import builtin_task
    from harness.tasks.spec import render_prompt

    task = builtin_task("snips-intent")
    prompts = [render_prompt(task, item) for item in task.scored[:3]]  # three lengths
    b = backend()
    b.load()
    try:
        together = b.generate_text(prompts, 8)
        alone = [b.generate_text([p], 8)[0] for p in prompts]
        again = b.generate_text(prompts, 8)
    finally:
        b.close()
    assert together == alone == again  # left padding and batching change nothing
    assert all(isinstance(t, str) and t for t in together)
    assert all(len(b.encode(t)) <= 8 + 1 for t in together)  # at most 8 tokens (re-encoded)
