"""The engine registry (harness.spec.engines): one line per engine naming its card in its own
folder, read by the planner, the budget, the compatibility rules and the process path."""

from __future__ import annotations

import pytest

from harness import budget, modes
from harness import plan as planner
from harness.spec.capabilities import (
    BACKENDS as BACKEND_NAMES,
)
from harness.spec.capabilities import (
    KV_CACHE_FORMATS,
    WEIGHT_FORMATS,
    kv_cache_formats_for,
    weight_formats_for,
)
from harness.spec.engines import REGISTRY, device_kind, engine, engines, load_ref
from harness.units import MIB


def test_every_registry_line_names_its_own_card_in_its_own_folder() -> None:
    assert set(BACKEND_NAMES) == set(REGISTRY)
    assert REGISTRY == {
        "transformers": "harness.backends.transformers.card:CARD",
        "vllm": "harness.backends.vllm.card:CARD",
        "llamacpp": "harness.backends.llamacpp.card:CARD",
        "sglang": "harness.backends.sglang.card:CARD",
    }
    for name in REGISTRY:
        card = engine(name)
        assert card.name == name
        # its backend, options and server live in its folder too
        for path in (card.backend, card.options, card.server):
            assert path is None or path.startswith(f"harness.backends.{name}.")


def test_every_card_names_only_formats_the_capability_tables_have() -> None:
    for card in engines().values():
        assert set(card.weights) <= set(WEIGHT_FORMATS), card.name
        assert set(card.kv_caches) <= set(KV_CACHE_FORMATS), card.name


def test_which_engines_run_a_format_is_read_from_the_engines_tables() -> None:
    assert WEIGHT_FORMATS["gguf-q4_k_m"].engines() == {"llamacpp"}
    assert WEIGHT_FORMATS["bnb-nf4"].engines() == {"transformers"}
    assert WEIGHT_FORMATS["fp8"].engines() == {"vllm", "sglang"}
    assert KV_CACHE_FORMATS["q4_0"].engines() == {"llamacpp"}
    assert KV_CACHE_FORMATS["auto"].engines() == set(REGISTRY)
    assert weight_formats_for("llamacpp") == [
        "none", "fp32", "bf16", "fp16", "gguf-q8_0", "gguf-q4_k_m",
    ]  # fmt: skip
    assert kv_cache_formats_for("llamacpp") == ["auto", "fp16", "q8_0", "q4_0"]


def test_each_card_s_backend_and_options_load_without_their_engine() -> None:
    for card in engines().values():
        assert load_ref(card.backend).__name__.endswith("Backend")
        assert card.options_model()().model_dump() is not None


def test_the_planner_reads_the_process_and_first_forward_bytes_from_the_table() -> None:
    # transformers on the CPU: 375 MiB its process + 36 MiB bitsandbytes
    assert planner.runtime_context_bytes("cpu", "transformers", "bnb-nf4") == (375 + 36) * MIB
    assert planner.runtime_context_bytes("cpu", "vllm", "none") == 800 * MIB
    # the GPU's context, whatever the engine
    assert planner.runtime_context_bytes("cuda", "vllm", "none") == 700 * MIB


def test_the_planner_asks_the_card_not_the_engine_s_name() -> None:
    # facts that were `backend == "vllm"` branches in the planner, now each engine's card
    assert engine("vllm").gpu_share and engine("sglang").gpu_share
    assert not engine("transformers").gpu_share and not engine("llamacpp").gpu_share
    assert engine("vllm").kv_pool_held_on == {"cpu"}
    assert engine("llamacpp").kv_pool_held_on == {"cpu", "cuda", "rocm"}  # n_ctx at creation
    assert engine("vllm").prefill_chunk_tokens == 8192
    assert engine("transformers").prefill_chunk_tokens is None
    assert engine("vllm").lora_slots and not engine("sglang").lora_slots
    assert engine("vllm").speculation["draft"] == "draft_model"
    assert engine("sglang").speculation["mtp"] == "NEXTN"
    assert engine("llamacpp").speculation == {}


def test_rocm_reads_the_cuda_figures() -> None:
    assert device_kind("rocm") == "cuda"
    assert engine("vllm").start_s.on(device_kind("rocm")) == 51.0


def test_an_unknown_engine_is_named() -> None:
    with pytest.raises(KeyError, match=r"no engine 'sglangg'.*did you mean 'sglang'"):
        engine("sglangg")


@pytest.mark.parametrize(
    ("backend", "names", "forks"),
    [
        ("transformers", {"offline"}, True),
        ("transformers", {"offline", "training"}, True),
        ("transformers", {"offline", "serving"}, False),  # the server is a process of its own
        ("vllm", {"offline"}, False),  # its engine core is a process of its own
        ("llamacpp", {"offline"}, True),  # the model in the group's own process
    ],
)
def test_a_group_forks_from_the_host_only_without_processes_of_its_own(
    backend: str, names: set[str], forks: bool
) -> None:
    assert modes.forks_from_host(backend, names) is forks


def test_the_budget_phases_keep_their_order_with_the_modes_phases() -> None:
    assert list(budget.PHASES) == [
        "cluster", "startup", "load", "quality", "measured", "server_start", "serving",
        "training",
    ]  # fmt: skip
