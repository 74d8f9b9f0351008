"""A group and its options as vLLM's arguments: `engine_kwargs` for `vllm.LLM(**kwargs)`,
`sampling_params_kwargs` for `SamplingParams(**kwargs)`. Pure: vLLM is not imported here.

Our names map to vLLM's through the capability table (one home per fact); what a build of the
engine accepts of these is the dialect's business (`dialect.EngineDialect.adapt`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from harness.backends.base import BackendOptions
from harness.backends.vllm.card import CARD
from harness.backends.vllm.memory import HarnessWorkerExtension
from harness.backends.vllm.options import VllmOptions
from harness.errors import UserInputError
from harness.spec import adapters, models
from harness.spec.capabilities import layout_executor
from harness.spec.engine_options import options_for
from harness.spec.scenario import GroupKey
from harness.spec.speculative import Draft, Eagle, Mtp, Ngram, method_of

# Our names -> vLLM's arguments, from the capability table (one home per fact). vLLM's dtype
# "auto" is the checkpoint's own dtype, except that a float32 checkpoint is served in 16 bit. FP8
# from a 16-bit checkpoint is vLLM's online FP8, named by the engine's dialect; an FP8-serialized
# checkpoint keeps "fp8".
QUANTIZATION_ARGS: dict[str, tuple[str | None, str]] = {
    name: (w.quantization, w.dtype) for name, w in CARD.weights.items()
}
KV_CACHE_DTYPE_ARGS: dict[str, str] = dict(CARD.kv_caches)
# Checkpoint quantization methods that our names accept, when the checkpoint declares one.
_CHECKPOINT_METHODS: dict[str, frozenset[str]] = {
    name: w.checkpoint_methods for name, w in CARD.weights.items() if w.checkpoint_methods
}
# Top-k log-probs a request may ask for (vLLM's default max_logprobs is 20).
MAX_LOGPROBS = 64
LORA_NAME = "adapter"  # the one adapter's name in the engine (and the served model's name)
# The worker extension by its import path: vLLM imports it by name, so nothing is pickled.
WORKER_EXTENSION = f"{HarnessWorkerExtension.__module__}.{HarnessWorkerExtension.__qualname__}"


def checkpoint_quant_method(model_path: str) -> str | None:
    """The `quantization_config.quant_method` a local checkpoint declares (None if none/unknown)."""
    config = Path(model_path).expanduser() / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    quant = data.get("quantization_config") if isinstance(data, dict) else None
    if not isinstance(quant, dict):
        return None
    method = quant.get("quant_method")
    return str(method).lower() if method else None


def engine_kwargs(group: GroupKey, options: BackendOptions) -> dict[str, Any]:
    """`vllm.LLM(**kwargs)` for a group, or a UserInputError naming the field vLLM cannot serve.

    What a scenario may combine is the compatibility table's business (the plan refuses it
    first); this adds only what needs the model's files (a checkpoint's own quantization).
    """
    _check_served(group)
    local = Path(options.model_path).expanduser().is_dir()
    quantization, dtype = _weight_args(group, options.model_path, local=local)
    vllm_options = options_for(options.engines, CARD.name)
    assert isinstance(vllm_options, VllmOptions)
    kwargs: dict[str, Any] = {
        "model": options.model_path,
        "tokenizer": options.tokenizer_path or options.model_path,
        "dtype": dtype,
        "quantization": quantization,
        "kv_cache_dtype": KV_CACHE_DTYPE_ARGS[group.kv_cache_dtype],
        "max_model_len": vllm_options.max_model_len or options.max_context,
        "enforce_eager": vllm_options.enforce_eager,
        "seed": options.seed,
        **layout_kwargs(group),
        "enable_prefix_caching": False,
        "disable_log_stats": False,  # per-request timestamps in RequestOutput.metrics
        "max_logprobs": MAX_LOGPROBS,
        "trust_remote_code": False,
        "worker_extension_cls": WORKER_EXTENSION,
    }
    if options.device == "cpu":
        if options.kv_cache_bytes is None:
            raise ValueError("a vLLM group on the CPU needs its KV pool size from the plan")
        kwargs["kv_cache_memory_bytes"] = options.kv_cache_bytes
    else:
        kwargs["gpu_memory_utilization"] = vllm_options.gpu_memory_utilization
    if options.random_weights:
        kwargs["load_format"] = "dummy"
    if not local and group.revision != "main":
        kwargs["revision"] = group.revision
    if options.adapter_path is not None:
        kwargs.update(lora_kwargs(options.adapter_rank or 1))
    if group.speculative is not None:
        kwargs["speculative_config"] = speculative_kwargs(group)
    return kwargs


def speculative_config(spec: Ngram | Draft | Eagle | Mtp) -> dict[str, Any]:
    """vLLM's ``speculative_config`` (vllm/config/speculative.py, SpeculativeConfig): greedy
    drafts, the standard rejection sampler (strict under greedy sampling: a draft token is kept
    only where it is the target's argmax), or the synthetic one replaying L."""
    config: dict[str, Any] = {
        "method": CARD.speculation[method_of(spec).name],
        "num_speculative_tokens": spec.tokens,
    }
    if isinstance(spec, Ngram):
        config["prompt_lookup_min"], config["prompt_lookup_max"] = spec.lookup
    if isinstance(spec, Draft | Eagle):
        config["model"] = spec.model
        if spec.revision != "main":
            config["revision"] = spec.revision
    if spec.synthetic is not None:
        config["rejection_sample_method"] = "synthetic"
        config["synthetic_acceptance_length"] = spec.synthetic
    return config


def speculative_kwargs(group: GroupKey) -> dict[str, Any]:
    """vLLM's ``speculative_config`` for the group (``speculative_config``), a draft model or
    head named by its files on this machine (harness.spec.models)."""
    spec = group.speculative
    assert spec is not None
    config = speculative_config(spec)
    if "model" in config:
        config["model"] = str(models.resolve(config["model"], config.get("revision", "main")).path)
        config.pop("revision", None)  # the resolved folder is that revision's
    return config


def layout_kwargs(group: GroupKey) -> dict[str, Any]:
    """vLLM's ParallelConfig for the group's layout: tensor and pipeline ranks, experts spread
    over the tensor ranks, and the executor that starts the ranks
    (harness.spec.capabilities.layout_executor: "uni" in this process on one card, "mp" a
    process per rank on this node, "ray" a rank per bundle of the group's placement group)."""
    layout = group.layout
    executor = layout_executor(layout, group.target)
    if layout is None:
        return {"tensor_parallel_size": 1, "distributed_executor_backend": executor}
    kwargs: dict[str, Any] = {
        "tensor_parallel_size": layout.tensor,
        "pipeline_parallel_size": layout.pipeline,
        "distributed_executor_backend": executor,
    }
    if layout.expert:
        kwargs["enable_expert_parallel"] = True
    return kwargs


def cpu_thread_binding(ranks: int, cores: Sequence[int]) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `ranks` CPU workers over `cores`: an equal run of cores per
    rank, ranks separated by "|" ("0|1" for 2 ranks on cores 0 and 1; "0-1|2-3" on 4). Without
    it vLLM CPU refuses more ranks than NUMA nodes (docs/guide/parallelism.md)."""
    ordered = sorted(cores)
    if ranks < 1 or len(ordered) < ranks:
        raise ValueError(f"{ranks} CPU ranks need at least {ranks} cores, got {len(ordered)}")
    per = len(ordered) // ranks
    runs = [ordered[i * per : (i + 1) * per] for i in range(ranks)]
    return "|".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def engine_environment(group: GroupKey, device: str, cores: Sequence[int]) -> dict[str, str]:
    """What the engine must see in its environment for the group's layout: on the CPU, each
    rank's cores (cpu_thread_binding); nothing on one card or on a GPU."""
    if group.layout is None or group.layout.cards < 2 or device != "cpu":
        return {}
    return {"VLLM_CPU_OMP_THREADS_BIND": cpu_thread_binding(group.layout.cards, cores)}


def max_lora_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds `rank` (a UserInputError above all)."""
    slot = adapters.vllm_slot_rank(rank)
    if slot is None:
        raise UserInputError(
            f"vLLM serves LoRA ranks up to {adapters.VLLM_LORA_RANKS[-1]}; the adapter's rank "
            f"is {rank}",
            field="models.adapter",
        )
    return slot


def lora_kwargs(rank: int) -> dict[str, Any]:
    """What `vllm.LLM` needs to serve one LoRA adapter of `rank` (the request names it)."""
    return {"enable_lora": True, "max_loras": 1, "max_lora_rank": max_lora_rank(rank)}


def _check_served(group: GroupKey) -> None:
    """A UserInputError unless the group is a vLLM group with weights and a KV cache vLLM has."""
    if group.backend != "vllm":
        raise UserInputError(
            f"the vLLM backend was given a {group.backend!r} group", field="backend"
        )
    if group.quantization not in QUANTIZATION_ARGS:
        raise UserInputError(
            f"vLLM cannot serve {group.quantization!r} weights; expected one of: "
            f"{', '.join(QUANTIZATION_ARGS)}",
            field="quantization",
        )
    if group.kv_cache_dtype not in KV_CACHE_DTYPE_ARGS:
        raise UserInputError(
            f"vLLM has no {group.kv_cache_dtype!r} KV cache; expected one of: "
            f"{', '.join(KV_CACHE_DTYPE_ARGS)}",
            field="kv_cache_dtype",
        )


def _weight_args(group: GroupKey, model_path: str, *, local: bool) -> tuple[str | None, str]:
    """vLLM's `quantization` and `dtype` for the group's weights, checked against what the
    checkpoint at `model_path` declares (a UserInputError where the two disagree)."""
    quantization, dtype = QUANTIZATION_ARGS[group.quantization]
    declared = checkpoint_quant_method(model_path)
    accepted = _CHECKPOINT_METHODS.get(group.quantization)
    if declared is not None and (accepted is None or declared not in accepted):
        raise UserInputError(
            f"the checkpoint at {model_path} is already quantized ({declared}), which "
            f"quantization {group.quantization!r} does not describe"
            + (f"; it expects {' or '.join(sorted(accepted))}" if accepted else ""),
            field="quantization",
        )
    if group.quantization == "gptq-int4" and local and declared is None:
        raise UserInputError(
            f"gptq-int4 with vLLM needs a GPTQ checkpoint (config.json with "
            f"quantization_config.quant_method 'gptq'); {model_path} has none. "
            "Quantize it first (e.g. with gptqmodel) and point the model at that directory",
            field="quantization",
        )
    if group.quantization == "fp8" and declared == "fp8":
        quantization = "fp8"
    return quantization, dtype


def sampling_params_kwargs(
    new_tokens: int,
    *,
    prompt_logprobs: int | None = None,
    prompt_logprob_token_ids: Sequence[Sequence[int]] | NDArray[Any] | None = None,
) -> dict[str, Any]:
    """`SamplingParams(**kwargs)`: greedy, exactly `new_tokens` tokens, EOS ignored, no text."""
    if new_tokens < 1:
        raise ValueError(f"new_tokens must be at least 1 (vLLM's max_tokens), got {new_tokens}")
    if prompt_logprobs is not None and not 0 <= prompt_logprobs <= MAX_LOGPROBS:
        raise ValueError(f"prompt_logprobs must be in [0, {MAX_LOGPROBS}], got {prompt_logprobs}")
    kwargs: dict[str, Any] = {
        "n": 1,
        "temperature": 0.0,
        "max_tokens": new_tokens,
        "min_tokens": new_tokens,
        "ignore_eos": True,
        "detokenize": False,
    }
    if prompt_logprobs is not None:
        kwargs["prompt_logprobs"] = prompt_logprobs
    if prompt_logprob_token_ids is not None:
        kwargs["prompt_logprob_token_ids"] = np.asarray(prompt_logprob_token_ids, dtype=np.int64)
    return kwargs


def text_params_kwargs(max_new_tokens: int) -> dict[str, Any]:
    """`SamplingParams(**kwargs)` of a text generation: greedy, stopping at EOS or after
    `max_new_tokens`, special tokens left out of the text (extract tasks)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    return {"n": 1, "temperature": 0.0, "max_tokens": max_new_tokens,
            "skip_special_tokens": True}  # fmt: skip
