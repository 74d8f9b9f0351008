"""A group and its options as SGLang's arguments, by its own ServerArgs names
(python/sglang/srt/arg_groups/fields/, sglang 0.5.23): `engine_kwargs` for
`sglang.Engine(**kwargs)` (the offline engine), `launch_args` for
`python -m sglang.launch_server ...` (its OpenAI-compatible server), `sampling_params` for a
request. Pure: sglang is not imported here; the GPU venv check (.ci/gpu_engine_args.py) builds
the installed SGLang's own ServerArgs and command-line parser from these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.backends.base import BackendOptions
from harness.backends.sglang.card import CARD
from harness.backends.sglang.options import SglangOptions
from harness.errors import UserInputError
from harness.spec import models
from harness.spec.engine_options import options_for
from harness.spec.scenario import GroupKey
from harness.spec.speculative import Draft, Eagle, method_of


def engine_kwargs(group: GroupKey, options: BackendOptions) -> dict[str, Any]:
    """`sglang.Engine(**kwargs)` for a group (ServerArgs fields), or a UserInputError naming the
    field SGLang cannot serve."""
    check_served(group)
    weights = CARD.weights[group.quantization]
    own = options_for(options.engines, CARD.name)
    assert isinstance(own, SglangOptions)
    kwargs: dict[str, Any] = {
        "model_path": options.model_path,
        "tokenizer_path": options.tokenizer_path or options.model_path,
        "dtype": weights.dtype,
        "kv_cache_dtype": CARD.kv_caches[group.kv_cache_dtype],
        "context_length": options.max_context,
        "mem_fraction_static": own.mem_fraction_static,
        "random_seed": options.seed,
        "disable_radix_cache": True,  # as offline: every prompt computed in full
        "skip_tokenizer_init": False,
        "trust_remote_code": False,
        "log_level": "error",
    }
    if weights.quantization is not None:
        kwargs["quantization"] = weights.quantization
    if own.disable_cuda_graph:  # fields/exec_.py: the two phases' flags (the joint one has no CLI)
        kwargs["disable_prefill_cuda_graph"] = kwargs["disable_decode_cuda_graph"] = True
    if own.chunked_prefill_size is not None:
        kwargs["chunked_prefill_size"] = own.chunked_prefill_size
    if options.random_weights:
        kwargs["load_format"] = "dummy"
    if not Path(options.model_path).expanduser().is_dir() and group.revision != "main":
        kwargs["revision"] = group.revision
    if group.layout is not None:
        kwargs["tp_size"] = group.layout.tensor
        kwargs["pp_size"] = group.layout.pipeline
        if group.layout.expert:
            kwargs["ep_size"] = group.layout.tensor
    if options.adapter_path is not None:
        kwargs.update(enable_lora=True, lora_paths=[options.adapter_path],
                      max_lora_rank=options.adapter_rank or 8)  # fmt: skip
    if group.speculative is not None:
        kwargs.update(speculative_kwargs(group))
    return kwargs


def speculative_kwargs(group: GroupKey) -> dict[str, Any]:
    """ServerArgs' speculative fields (fields/spec.py) for the group's speculation."""
    spec = group.speculative
    assert spec is not None
    out: dict[str, Any] = {
        "speculative_algorithm": CARD.speculation[method_of(spec).name],
        "speculative_num_draft_tokens": spec.tokens + 1,  # the draft tokens and the bonus one
        "speculative_num_steps": spec.tokens,
        "speculative_eagle_topk": 1,  # one chain: greedy drafts
    }
    if isinstance(spec, Draft | Eagle):  # by its files on this machine (harness.spec.models)
        out["speculative_draft_model_path"] = str(models.resolve(spec.model, spec.revision).path)
    # SGLang's NGRAM drafts from a trie of earlier tokens (speculative_ngram_*), not from a
    # prompt-lookup window: an Ngram entry's `lookup` has no SGLang field and is not passed
    return out


def launch_args(kwargs: dict[str, Any], host: str, port: int) -> list[str]:
    """`python -m sglang.launch_server` arguments for engine kwargs: each field as its flag
    (`--field-name value`; a true bool as the bare flag, a false one left out)."""
    args = ["--host", host, "--port", str(port)]
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, list):
            args += [flag, *map(str, value)]
        else:
            args += [flag, str(value)]
    return args


def sampling_params(new_tokens: int) -> dict[str, Any]:
    """A request's sampling params: greedy, exactly `new_tokens` tokens, EOS ignored."""
    if new_tokens < 1:
        raise ValueError(f"new_tokens must be at least 1, got {new_tokens}")
    return {"temperature": 0.0, "max_new_tokens": new_tokens, "min_new_tokens": new_tokens,
            "ignore_eos": True}  # fmt: skip


def check_served(group: GroupKey) -> None:
    """A UserInputError unless the group is an SGLang group with formats SGLang has."""
    if group.backend != CARD.name:
        raise UserInputError(f"the SGLang backend was given a {group.backend!r} group",
                             field="backend")  # fmt: skip
    for field, value, names in (
        ("quantization", group.quantization, CARD.weights),
        ("kv_cache_dtype", group.kv_cache_dtype, CARD.kv_caches),
    ):
        if value not in names:
            raise UserInputError(
                f"SGLang has no {value!r} {field}; expected one of: {', '.join(names)}",
                field=field,
            )
    if group.target == "cpu":
        raise UserInputError(
            "SGLang runs on GPUs in this harness (its PyPI build's kernels are CUDA's)",
            field="targets",
        )
