"""SGLang's arguments (harness.backends.sglang.args) by its own ServerArgs names, and what its
backend reads from the engine's outputs (harness.backends.sglang.backend). No SGLang here: its
build needs CUDA; the GPU venv check (.ci/gpu_engine_args.py) builds the installed SGLang's own
ServerArgs and command-line parser from these arguments."""

from __future__ import annotations

import numpy as np
import pytest

from harness.backends.base import BackendOptions
from harness.backends.sglang.args import engine_kwargs, launch_args, sampling_params
from harness.backends.sglang.backend import lookup, read_window
from harness.errors import UserInputError
from harness.spec.capabilities import Layout
from harness.spec.engine_options import EngineBlocks
from harness.spec.scenario import GroupKey
from harness.spec.speculative import Draft

GROUP = GroupKey(target="cuda", model="m/x", revision="main", backend="sglang",
                 quantization="fp8", kv_cache_dtype="fp8")  # fmt: skip
OPTIONS = BackendOptions(device="cuda", model_path="m/x", max_context=4096, seed=3)


def test_a_group_becomes_sglang_s_own_server_args() -> None:
    kwargs = engine_kwargs(GROUP, OPTIONS)
    assert kwargs["model_path"] == "m/x" and kwargs["context_length"] == 4096
    assert kwargs["quantization"] == "fp8" and kwargs["kv_cache_dtype"] == "fp8_e4m3"
    assert kwargs["mem_fraction_static"] == 0.88  # SglangOptions' default
    assert kwargs["random_seed"] == 3 and kwargs["disable_radix_cache"] is True
    assert "tp_size" not in kwargs


def test_the_engines_block_and_the_layout_reach_sglang() -> None:
    options = OPTIONS.model_copy(
        update={
            "engines": EngineBlocks.model_validate(
                {
                    "sglang": {
                        "mem_fraction_static": 0.5,
                        "chunked_prefill_size": 2048,
                        "disable_cuda_graph": True,
                    }
                }
            )
        }
    )
    group = GROUP.model_copy(update={"layout": Layout(tensor=4, expert=True)})
    kwargs = engine_kwargs(group, options)
    assert kwargs["mem_fraction_static"] == 0.5 and kwargs["chunked_prefill_size"] == 2048
    assert kwargs["disable_prefill_cuda_graph"] and kwargs["disable_decode_cuda_graph"]
    assert (kwargs["tp_size"], kwargs["pp_size"], kwargs["ep_size"]) == (4, 1, 4)


def test_speculation_uses_sglang_s_algorithm_names() -> None:
    group = GROUP.model_copy(update={"speculative": Draft(model="tiny-llama", tokens=4)})
    kwargs = engine_kwargs(group, OPTIONS)
    assert kwargs["speculative_algorithm"] == "STANDALONE"
    assert kwargs["speculative_draft_model_path"].endswith("tiny-llama")  # its folder here
    # 4 draft tokens per step: 4 steps, 4 + 1 tokens verified (the bonus one)
    assert (kwargs["speculative_num_steps"], kwargs["speculative_num_draft_tokens"]) == (4, 5)


def test_launch_args_are_the_server_s_flags() -> None:
    args = launch_args({"model_path": "m/x", "disable_radix_cache": True,
                        "disable_cuda_graph": False, "tp_size": 2}, "127.0.0.1", 30000)  # fmt: skip
    assert args == ["--host", "127.0.0.1", "--port", "30000", "--model-path", "m/x",
                    "--disable-radix-cache", "--tp-size", "2"]  # fmt: skip


def test_sglang_refuses_the_cpu_and_formats_its_card_does_not_name() -> None:
    with pytest.raises(UserInputError, match="runs on GPUs"):
        engine_kwargs(GROUP.model_copy(update={"target": "cpu"}), OPTIONS)
    with pytest.raises(UserInputError, match="no 'bnb-nf4' quantization"):
        engine_kwargs(GROUP.model_copy(update={"quantization": "bnb-nf4"}), OPTIONS)
    assert sampling_params(3) == {"temperature": 0.0, "max_new_tokens": 3,
                                  "min_new_tokens": 3, "ignore_eos": True}  # fmt: skip


def test_a_window_is_read_from_sglang_s_prompt_logprobs() -> None:
    # a 3-token window: position 0 has no log-prob; positions 1, 2 are scored
    meta = {
        "input_token_logprobs": [(None, 5, None), (-1.0, 6, None), (-2.0, 7, None)],
        "input_top_logprobs": [None, [(-0.5, 9, None), (-1.0, 6, None)],
                               [(-0.25, 7, None), (-3.0, 1, None)]],
    }  # fmt: skip
    nll, argmax, ids, logprobs = read_window(meta, [5, 6, 7], k=2)
    assert nll == 3.0  # -(-1.0 + -2.0)
    assert argmax.tolist() == [9, 7] and ids.tolist() == [[9, 6], [7, 1]]
    assert logprobs.tolist() == [[-0.5, -1.0], [-0.25, -3.0]]
    # the reference's ids: found, or the smallest returned log-prob (an upper bound)
    at_ref = lookup(meta["input_top_logprobs"][1:], np.array([[6, 42], [1, 7]]))
    assert at_ref.tolist() == [[-1.0, -1.0], [-3.0, -0.25]]


def test_its_server_is_launch_server_with_the_same_server_args() -> None:
    from harness.backends.sglang.server import SglangServer

    command = SglangServer.command(GROUP, OPTIONS, "127.0.0.1", 30000, "harness")
    assert command[1:3] == ["-m", "sglang.launch_server"]
    assert command[-2:] == ["--served-model-name", "harness"]
    assert "--kv-cache-dtype" in command and "fp8_e4m3" in command
