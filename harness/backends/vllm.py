"""vLLM backend: the offline engine (`vllm.LLM`) measured the way the transformers backend is.

vLLM is imported only inside `VllmBackend`'s methods; everything else here is pure and is what
the CPU test suite exercises: argument mapping (`engine_kwargs`, `sampling_params_kwargs`) and
result parsing (`parse_generation`, `parse_prompt_logprobs`, `continuation_logprob`,
`build_memory_facts`).

Written against vLLM 0.33.0's own source (the PyPI wheel): vllm/entrypoints/llm.py (`LLM.__init__`,
`generate`, `collective_rpc`, `get_tokenizer`), vllm/engine/arg_utils.py (`EngineArgs`),
vllm/sampling_params.py, vllm/inputs/llm.py (`TokensPrompt`), vllm/outputs.py (`RequestOutput`,
`CompletionOutput`), vllm/logprobs.py (`Logprob`), vllm/v1/engine/logprobs.py (prompt log-prob
layout), vllm/v1/metrics/stats.py (`RequestStateStats`), vllm/config/cache.py (`CacheDType`),
vllm/config/model.py (`ModelDType`, `max_logprobs`), vllm/config/parallel.py
(`distributed_executor_backend`), vllm/model_executor/layers/quantization/__init__.py
(`QuantizationMethods`), vllm/model_executor/model_loader/weight_utils.py (online FP8),
vllm/v1/engine/core_client.py (block figures synced to the front end), vllm/v1/worker/
gpu_worker.py and worker_base.py (memory profile, worker extensions),
vllm/distributed/parallel_state.py (`cleanup_dist_env_and_memory`).

Timing. `LLM.generate` returns when every request has finished, and `RequestOutput.metrics` is
None unless stats logging is on (the `LLM` class turns it off), so the offline engine gives no
per-step marks. `generate` therefore makes two calls on the same prompts: a prefill pass with
`max_tokens=1`, whose wall time is the batch's time to first token, then the full pass. It
returns `step_ms=[prefill_ms]` and the full pass's `e2e_ms`; the worker takes decode time as
e2e − prefill, as optimum-benchmark does for engines without per-token hooks
(optimum_benchmark/scenarios/inference/scenario.py). Prefix caching is switched off so that the
full pass computes its prefill again instead of reading the first pass's blocks.

Quality. Windows are scored with prompt log-probabilities: position 0 has none (vLLM puts None
there), every later position holds the actual token (with its true rank) and the top-k (ranks
1..k). The reference's top-k ids are scored exactly with `prompt_logprob_token_ids` (one row of
ids per position; it needs vLLM's V2 model runner, the default where supported); where the engine
refuses that, they are looked up in the returned top-k and are NaN where absent, and the worker
then reports KL as unmeasured for the point.

Memory. vLLM pre-allocates `gpu_memory_utilization` × the device's memory up front; that figure
is reported apart from what the weights and the KV blocks need, both read from the engine
(`num_gpu_blocks` × bytes per block; the worker's own weight figure through a worker extension
called by name, so nothing is pickled).

Ray. The group's actor already holds its GPU. With one GPU per engine the executor is "uni": the
GPU worker lives inside vLLM's engine-core process, which vLLM spawns as a plain child (inside a
Ray actor it forces the spawn start method and only passes RAY_ADDRESS on); vLLM chooses its Ray
executor only for world sizes > 1, and `close` never shuts Ray down.
"""

from __future__ import annotations

import gc
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from harness.backends.base import Backend, BackendOptions, Generation, MemoryFacts, WindowScores
from harness.errors import UserInputError
from harness.scenario import GroupKey, VllmOptions

# Our quantization name -> (vLLM `quantization`, vLLM `dtype`). vLLM's dtype "auto" is the
# checkpoint's own dtype, except that a float32 checkpoint is served in 16 bit.
# FP8 from a 16-bit checkpoint is vLLM's online FP8: "fp8_per_tensor" is what `quantization="fp8"`
# meant before 0.33 deprecated it for online use (weight_utils.py maps one to the other);
# an FP8-serialized checkpoint keeps "fp8".
FP8_ONLINE = "fp8_per_tensor"
QUANTIZATION_ARGS: dict[str, tuple[str | None, str]] = {
    "none": (None, "auto"),
    "bf16": (None, "bfloat16"),
    "fp16": (None, "float16"),
    "fp32": (None, "float32"),
    "fp8": (FP8_ONLINE, "auto"),
    "gptq-int4": ("gptq", "auto"),
}
# Our KV-cache name -> vLLM `kv_cache_dtype` (CacheDType). An explicit float16/bfloat16 must match
# the model dtype (CacheConfig.cache_dtype's doc).
KV_CACHE_DTYPE_ARGS: dict[str, str] = {
    "auto": "auto",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
}
_EXPLICIT_COMPUTE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# Top-k log-probs a request may ask for (vLLM's default max_logprobs is 20).
MAX_LOGPROBS = 64
# Checkpoint quantization methods that our names accept, when the checkpoint declares one.
_CHECKPOINT_METHODS: dict[str, frozenset[str]] = {
    "fp8": frozenset({"fp8"}),
    "gptq-int4": frozenset({"gptq"}),
}


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
    """`vllm.LLM(**kwargs)` for a group, or a UserInputError naming the field vLLM cannot serve."""
    if group.backend != "vllm":
        raise UserInputError(
            f"the vLLM backend was given a {group.backend!r} group", field="backend"
        )
    if group.target == "cpu" or options.device != "cuda":
        raise UserInputError(
            "vLLM runs on CUDA and ROCm GPUs here; CPU points use the transformers backend "
            f"(target={group.target!r}, device={options.device!r})",
            field="target",
        )
    if group.quantization not in QUANTIZATION_ARGS:
        raise UserInputError(
            f"vLLM 0.33 cannot serve {group.quantization!r} weights (bitsandbytes and quanto "
            f"are transformers integrations); expected one of: {', '.join(QUANTIZATION_ARGS)}",
            field="quantization",
        )
    if group.kv_cache_dtype not in KV_CACHE_DTYPE_ARGS:
        raise UserInputError(
            f"vLLM has no {group.kv_cache_dtype!r} KV cache of the kind the harness models "
            "(transformers' quantized cache); expected one of: "
            f"{', '.join(KV_CACHE_DTYPE_ARGS)}",
            field="kv_cache_dtype",
        )
    if group.target == "rocm" and group.kv_cache_dtype == "fp8_e5m2":
        raise UserInputError(
            "ROCm supports an fp8 KV cache only as fp8_e4m3 (use fp8 or fp8_e4m3)",
            field="kv_cache_dtype",
        )
    quantization, dtype = QUANTIZATION_ARGS[group.quantization]
    kv_dtype = KV_CACHE_DTYPE_ARGS[group.kv_cache_dtype]
    if kv_dtype in ("bfloat16", "float16") and dtype not in ("auto", kv_dtype):
        raise UserInputError(
            f"vLLM needs an explicit {kv_dtype} KV cache to match the model dtype, which is "
            f"{dtype} for {group.quantization!r}; use kv_cache_dtype 'auto'",
            field="kv_cache_dtype",
        )

    declared = checkpoint_quant_method(options.model_path)
    accepted = _CHECKPOINT_METHODS.get(group.quantization)
    if declared is not None and (accepted is None or declared not in accepted):
        raise UserInputError(
            f"the checkpoint at {options.model_path} is already quantized ({declared}), which "
            f"quantization {group.quantization!r} does not describe"
            + (f"; it expects {' or '.join(sorted(accepted))}" if accepted else ""),
            field="quantization",
        )
    local = Path(options.model_path).expanduser().is_dir()
    if group.quantization == "gptq-int4" and local and declared is None:
        raise UserInputError(
            f"gptq-int4 with vLLM needs a GPTQ checkpoint (config.json with "
            f"quantization_config.quant_method 'gptq'); {options.model_path} has none. "
            "Quantize it first (e.g. with gptqmodel) and point the model at that directory",
            field="quantization",
        )
    if group.quantization == "fp8" and declared == "fp8":
        quantization = "fp8"

    vllm_options = options.vllm or VllmOptions()
    kwargs: dict[str, Any] = {
        "model": options.model_path,
        "tokenizer": options.model_path,
        "dtype": dtype,
        "quantization": quantization,
        "kv_cache_dtype": kv_dtype,
        "max_model_len": vllm_options.max_model_len or options.max_context,
        "gpu_memory_utilization": vllm_options.gpu_memory_utilization,
        "enforce_eager": vllm_options.enforce_eager,
        "seed": options.seed,
        "tensor_parallel_size": 1,
        "distributed_executor_backend": "uni",
        "enable_prefix_caching": False,
        "max_logprobs": MAX_LOGPROBS,
        "trust_remote_code": False,
        "worker_extension_cls": f"{__name__}.HarnessWorkerExtension",
    }
    if not local and group.revision != "main":
        kwargs["revision"] = group.revision
    return kwargs


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


def parse_generation(
    outputs: Sequence[Any], e2e_ms: float, *, prefill_ms: float | None = None
) -> Generation:
    """A Generation from `LLM.generate`'s RequestOutputs: counts from `outputs[0].token_ids`.

    `prefill_ms` comes from a separate max_tokens=1 pass; one slower than the whole full pass
    (noise, on very short outputs) is capped at `e2e_ms` so the marks stay ordered.
    """
    new_tokens = [len(out.outputs[0].token_ids) if out.outputs else 0 for out in outputs]
    return Generation(
        new_tokens=new_tokens,
        step_ms=[] if prefill_ms is None else [min(prefill_ms, e2e_ms)],
        e2e_ms=e2e_ms,
        timer="perf_counter",
    )


def _position(plp: Sequence[Any] | None, pos: int, where: str) -> Mapping[int, Any]:
    if plp is None or pos >= len(plp) or plp[pos] is None:
        raise ValueError(f"{where}: vLLM returned no prompt log-probs at position {pos}")
    entry: Mapping[int, Any] = plp[pos]
    return entry


def _logprob(entry: Mapping[int, Any], token: int, where: str) -> float:
    if token not in entry:
        raise ValueError(f"{where}: the actual token {token} is missing from the prompt log-probs")
    return float(entry[token].logprob)


def parse_prompt_logprobs(
    prompt_logprobs: Sequence[Sequence[Any] | None],
    window_ids: Sequence[Sequence[int]],
    ref_topk_ids: NDArray[Any] | None,
    k: int,
    *,
    token_id_logprobs: Sequence[NDArray[Any] | None] | None = None,
) -> WindowScores:
    """WindowScores from the `prompt_logprobs` of W windows of T tokens each.

    `prompt_logprobs[w][p]` is vLLM's dict token id -> Logprob for position p (None at p = 0).
    Own top-k: the k highest log-probs of a position (the actual token's entry may add one more
    of lower rank). `logprobs_at_ref[w, p-1, j]` is our log-prob of the reference's j-th id,
    taken from `token_id_logprobs[w]` ([T-1, k], `RequestOutput.prompt_token_id_logprobs`) when
    the engine scored those ids, else from the returned top-k, NaN where absent.
    """
    if len(prompt_logprobs) != len(window_ids):
        raise ValueError(
            f"{len(prompt_logprobs)} prompt log-prob lists for {len(window_ids)} windows"
        )
    if not window_ids:
        raise ValueError("no windows to score")
    length = len(window_ids[0])
    if length < 2 or any(len(ids) != length for ids in window_ids):
        raise ValueError("windows must all have the same length, at least 2 tokens")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    n_windows, steps = len(window_ids), length - 1
    if ref_topk_ids is not None and ref_topk_ids.shape[:2] != (n_windows, steps):
        raise ValueError(
            f"ref_topk_ids has shape {ref_topk_ids.shape}, expected ({n_windows}, {steps}, k)"
        )
    nll = np.zeros(n_windows, dtype=np.float64)
    argmax = np.zeros((n_windows, steps), dtype=np.int64)
    topk_ids = np.full((n_windows, steps, k), -1, dtype=np.int64)
    topk_lp = np.full((n_windows, steps, k), -np.inf, dtype=np.float64)
    at_ref = None
    if ref_topk_ids is not None:
        at_ref = np.full(ref_topk_ids.shape, np.nan, dtype=np.float64)
    for w, (plp, ids) in enumerate(zip(prompt_logprobs, window_ids, strict=True)):
        scored = None if token_id_logprobs is None else token_id_logprobs[w]
        for pos in range(1, length):
            where = f"window {w}"
            entry = _position(plp, pos, where)
            nll[w] -= _logprob(entry, int(ids[pos]), where)
            ranked = sorted(
                entry.items(),
                key=lambda kv: (-kv[1].logprob, kv[1].rank if kv[1].rank is not None else 1 << 62),
            )[:k]
            argmax[w, pos - 1] = ranked[0][0]
            for j, (token, logprob) in enumerate(ranked):
                topk_ids[w, pos - 1, j] = token
                topk_lp[w, pos - 1, j] = logprob.logprob
            if at_ref is not None and ref_topk_ids is not None:
                if scored is not None:
                    at_ref[w, pos - 1] = np.asarray(scored[pos - 1], dtype=np.float64)
                else:
                    for j, token in enumerate(ref_topk_ids[w, pos - 1]):
                        if int(token) in entry:
                            at_ref[w, pos - 1, j] = float(entry[int(token)].logprob)
    return WindowScores(
        nll_sum=nll,
        tokens=np.full(n_windows, steps, dtype=np.int64),
        argmax=argmax,
        topk_ids=topk_ids,
        topk_logprobs=topk_lp,
        logprobs_at_ref=at_ref,
    )


def split_pair(
    encode: Callable[[str], list[int]], context: str, continuation: str
) -> tuple[list[int], int]:
    """Token ids of context + continuation, each encoded on its own, and the context's count.

    The transformers backend scores `encode(context) + encode(continuation)` the same way, so the
    two backends score the same token ids.
    """
    ids_context, ids_continuation = encode(context), encode(continuation)
    if not ids_context or not ids_continuation:
        raise ValueError(
            f"cannot score {context[-30:]!r} + {continuation[:30]!r}: the context and the "
            f"continuation need a token each ({len(ids_context)}, {len(ids_continuation)})"
        )
    return ids_context + ids_continuation, len(ids_context)


def continuation_logprob(
    prompt_logprobs: Sequence[Any] | None, token_ids: Sequence[int], n_context: int
) -> float:
    """Sum of log-probs (nats) of token_ids[n_context:] given what precedes each."""
    if not 1 <= n_context < len(token_ids):
        raise ValueError(f"n_context must be in [1, {len(token_ids)}), got {n_context}")
    where = "continuation"
    return sum(
        _logprob(_position(prompt_logprobs, pos, where), int(token_ids[pos]), where)
        for pos in range(n_context, len(token_ids))
    )


def kv_dtype_bytes(cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per KV element for a vLLM cache_dtype ('auto' = the model's dtype)."""
    if cache_dtype == "auto":
        return model_dtype_bytes
    if cache_dtype.startswith("fp8"):
        return 1
    if cache_dtype in ("bfloat16", "float16"):
        return 2
    raise ValueError(f"unknown vLLM kv_cache_dtype {cache_dtype!r}")


def kv_block_bytes(
    *, num_layers: int, num_kv_heads: int, head_size: int, block_size: int, dtype_bytes: int
) -> int:
    """Bytes of one KV block over all layers: 2 (K and V) × layers × kv_heads × head × tokens."""
    return 2 * num_layers * num_kv_heads * head_size * block_size * dtype_bytes


def build_memory_facts(
    *,
    num_gpu_blocks: int | None,
    block_bytes: int | None,
    gpu_memory_utilization: float,
    device_total_bytes: int | None,
    worker: Mapping[str, int] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> MemoryFacts:
    """The engine's memory figures, each None where the engine could not say.

    kv_cache_bytes = num_gpu_blocks × block_bytes; preallocated = utilization × device total
    (what vLLM takes up front, whatever the weights and blocks need); weights from the worker.
    """
    report = dict(worker or {})
    kv = num_gpu_blocks * block_bytes if num_gpu_blocks and block_bytes else None
    total = device_total_bytes or report.get("total_bytes")
    preallocated = math.ceil(total * gpu_memory_utilization) if total else None
    return MemoryFacts(
        weights_bytes=report.get("weights_bytes"),
        kv_cache_bytes=kv,
        preallocated_bytes=preallocated,
        extra={
            "num_gpu_blocks": num_gpu_blocks,
            "kv_block_bytes": block_bytes,
            "gpu_memory_utilization": gpu_memory_utilization,
            "device_total_bytes": total,
            **{f"worker_{key}": value for key, value in report.items()},
            **dict(extra or {}),
        },
    )


class HarnessWorkerExtension:
    """Mixed into vLLM's GPU worker (`worker_extension_cls`); called by name via collective_rpc.

    Reads the figures the worker computed while profiling (vllm/v1/worker/gpu_worker.py); each
    is absent where this vLLM version does not have it. Returns plain ints so nothing is pickled.
    """

    def harness_memory_report(self) -> dict[str, int]:
        runner = getattr(self, "model_runner", None)
        snapshot = getattr(self, "init_snapshot", None)
        figures = {
            "weights_bytes": getattr(runner, "model_memory_usage", None),
            "kv_available_bytes": getattr(self, "available_kv_cache_memory_bytes", None),
            "requested_bytes": getattr(self, "requested_memory", None),
            "total_bytes": getattr(snapshot, "total_memory", None),
            "peak_activation_bytes": getattr(self, "peak_activation_memory", None),
            "cudagraph_bytes": getattr(self, "cudagraph_memory_estimate", None),
        }
        report = {key: int(value) for key, value in figures.items() if value is not None}
        caches = getattr(runner, "kv_caches", None)
        if caches:
            storages: dict[int, int] = {}
            for tensor in caches:
                storage = getattr(tensor, "untyped_storage", None)
                if storage is not None:
                    s = storage()
                    storages[s.data_ptr()] = s.nbytes()
            if storages:
                report["kv_allocated_bytes"] = sum(storages.values())
        return report


class VllmBackend(Backend):
    name: ClassVar[str] = "vllm"

    def __init__(self, group: GroupKey, options: BackendOptions) -> None:
        super().__init__(group, options)
        self._kwargs = engine_kwargs(group, options)  # errors before any engine is touched
        self._llm: Any = None

    def load(self) -> None:
        from vllm import LLM

        self._llm = LLM(**self._kwargs)

    def _engine(self) -> Any:
        if self._llm is None:
            raise RuntimeError("VllmBackend.load() must be called first")
        return self._llm

    def encode(self, text: str) -> list[int]:
        return list(self._engine().get_tokenizer().encode(text, add_special_tokens=False))

    def _generate(self, prompts: Sequence[Sequence[int]], params: Any) -> list[Any]:
        from vllm.inputs import TokensPrompt

        requests = [TokensPrompt(prompt_token_ids=[int(t) for t in ids]) for ids in prompts]
        outputs: list[Any] = self._engine().generate(requests, params, use_tqdm=False)
        return outputs

    def generate(self, prompts: list[list[int]], new_tokens: int) -> Generation:
        from vllm import SamplingParams

        prefill_ms: float | None = None
        if new_tokens > 1:  # the prefill pass: time to the batch's first token
            start = time.perf_counter()
            self._generate(prompts, SamplingParams(**sampling_params_kwargs(1)))
            prefill_ms = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        outputs = self._generate(prompts, SamplingParams(**sampling_params_kwargs(new_tokens)))
        e2e_ms = (time.perf_counter() - start) * 1e3
        return parse_generation(outputs, e2e_ms, prefill_ms=prefill_ms or e2e_ms)

    def score_windows(
        self, windows: list[list[int]], ref_topk_ids: NDArray[Any] | None, k: int
    ) -> WindowScores:
        from vllm import SamplingParams

        if k > MAX_LOGPROBS:
            raise UserInputError(
                f"top-k of {k} exceeds the vLLM backend's max_logprobs ({MAX_LOGPROBS})",
                field="quality",
            )
        plain = SamplingParams(**sampling_params_kwargs(1, prompt_logprobs=k))
        outputs = None
        if ref_topk_ids is not None:
            from vllm.exceptions import VLLMValidationError

            per_window = [
                SamplingParams(
                    **sampling_params_kwargs(
                        1, prompt_logprobs=k, prompt_logprob_token_ids=ref_topk_ids[w]
                    )
                )
                for w in range(len(windows))
            ]
            try:
                outputs = self._generate(windows, per_window)
            except (VLLMValidationError, ValueError):
                outputs = None  # V1 model runner: look the ids up in the top-k instead
        scored: list[NDArray[Any] | None] | None = None
        if outputs is None:
            outputs = self._generate(windows, plain)
        else:
            scored = [getattr(out, "prompt_token_id_logprobs", None) for out in outputs]
            if any(s is None for s in scored):
                scored = None
        return parse_prompt_logprobs(
            [out.prompt_logprobs for out in outputs],
            windows,
            ref_topk_ids,
            k,
            token_id_logprobs=scored,
        )

    def score_continuations(self, pairs: list[tuple[str, str]]) -> list[float]:
        from vllm import SamplingParams

        split = [split_pair(self.encode, context, cont) for context, cont in pairs]
        params = SamplingParams(**sampling_params_kwargs(1, prompt_logprobs=0))
        outputs = self._generate([ids for ids, _ in split], params)
        return [
            continuation_logprob(out.prompt_logprobs, ids, n_context)
            for out, (ids, n_context) in zip(outputs, split, strict=True)
        ]

    def memory_facts(self) -> MemoryFacts:
        llm = self._engine()
        engine = llm.llm_engine
        vllm_config = engine.vllm_config
        cache = vllm_config.cache_config
        model_config = engine.model_config
        parallel = vllm_config.parallel_config
        block_bytes = None
        try:
            block_bytes = kv_block_bytes(
                num_layers=model_config.get_num_layers(parallel),
                num_kv_heads=model_config.get_num_kv_heads(parallel),
                head_size=model_config.get_head_size(),
                block_size=int(cache.block_size),
                dtype_bytes=kv_dtype_bytes(
                    str(cache.cache_dtype), int(model_config.dtype.itemsize)
                ),
            )
        except (AttributeError, TypeError, ValueError):
            block_bytes = None
        worker: dict[str, int] | None = None
        try:
            reports = llm.collective_rpc("harness_memory_report")
            worker = dict(reports[0]) if reports else None
        except Exception:  # an engine without the extension still reports blocks and totals
            worker = None
        return build_memory_facts(
            num_gpu_blocks=getattr(cache, "num_gpu_blocks", None),
            block_bytes=block_bytes,
            gpu_memory_utilization=float(cache.gpu_memory_utilization),
            device_total_bytes=_device_total_bytes(),
            worker=worker,
            extra={
                "block_size": getattr(cache, "block_size", None),
                "kv_cache_size_tokens": getattr(cache, "kv_cache_size_tokens", None),
                "cache_dtype": str(getattr(cache, "cache_dtype", "")),
                "max_model_len": getattr(model_config, "max_model_len", None),
            },
        )

    def close(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            shutdown = getattr(core, "shutdown", None)
            if callable(shutdown):
                shutdown()
            del llm, core, shutdown
        gc.collect()
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        except ImportError:
            pass
        else:
            cleanup_dist_env_and_memory(shutdown_ray=False)  # never the actor's own Ray
        try:
            import torch
        except ImportError:
            return
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _device_total_bytes() -> int | None:
    """Total memory of the engine's device, from NVML/amdsmi via vLLM (no CUDA context here)."""
    try:
        from vllm.platforms import current_platform

        return int(current_platform.get_device_total_memory(0))
    except Exception:
        pass
    try:
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)
    except Exception:
        return None
