"""`LlamaCppBackend`: llama.cpp through llama-cpp-python's C API (llama_cpp.llama_cpp), in the
group's own process, on the model folder converted to GGUF once per file type
(harness.backends.llamacpp.gguf).

One model and one context per group: the context holds its KV cache for `n_ctx` tokens from the
start (the plan's pool, harness.plan.kv_pool_bytes, over the cache's bytes per token), unified
over up to MAX_SEQUENCES sequences, so a batch of B prompts is decoded together (B sequences,
one token each per step), greedy (argmax of the logits, EOS ignored). The KV cache's ggml type is
the card's (`type_k` = `type_v`; "auto" is the compute dtype: f32 for f32 weights, else f16);
flash attention is on by default (llama.cpp needs it for a quantized V cache).

Token ids come from the model's own tokenizer.json through transformers' tokenizer (the ids the
transformers backend gets), never from llama.cpp's copy of the vocabulary.
llama_cpp and transformers are imported only inside `load`.
"""

from __future__ import annotations

import ctypes
import gc
import os
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from harness.backends.base import Backend, BackendOptions, Generation, MemoryFacts, WindowScores
from harness.backends.llamacpp.card import CARD, GGML_TYPE
from harness.backends.llamacpp.gguf import gguf_file
from harness.backends.llamacpp.options import LlamaCppOptions
from harness.errors import UserInputError
from harness.spec.capabilities import KV_CACHE_FORMATS, compute_dtype_bytes
from harness.spec.engine_options import options_for
from harness.spec.scenario import GroupKey

MAX_SEQUENCES = 64  # sequences one context decodes together (a larger batch goes in parts)
CTX_ALIGN = 256  # n_ctx is a multiple of this (llama.cpp pads the cache to 256 cells)
_LOG_CALLBACK: Any = None  # the one log callback given to llama.cpp, kept for the process


class LlamaCppBackend(Backend):
    name: ClassVar[str] = "llamacpp"

    def __init__(self, group: GroupKey, options: BackendOptions) -> None:
        super().__init__(group, options)
        check_served(group, options)
        own = options_for(options.engines, CARD.name)
        assert isinstance(own, LlamaCppOptions)
        self.own = own
        self.lib: Any = None
        self.tokenizer: Any = None
        self.model: Any = None
        self.ctx: Any = None
        self.batch: Any = None
        self.n_vocab = 0
        self.n_ctx = 0
        self.gguf_path: Path | None = None

    # --- the group's model ----------------------------------------------------------------

    def load(self) -> None:
        import llama_cpp
        from transformers import AutoTokenizer

        self.lib = llama_cpp
        self._quiet()
        llama_cpp.llama_backend_init()
        self.tokenizer = AutoTokenizer.from_pretrained(
            self.options.tokenizer_path or self.options.model_path
        )
        cache = Path(self.options.cache_dir or Path.home() / ".cache" / "harness" / "gguf")
        file_type = CARD.weights[self.group.quantization].file_type
        self.gguf_path = gguf_file(Path(self.options.model_path), file_type, cache)
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(
            str(self.gguf_path).encode(), model_params
        )
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {self.gguf_path}")
        self.n_ctx = context_tokens(self.options, self.kv_bytes_per_token())
        self.ctx = llama_cpp.llama_init_from_model(self.model, self._context_params())
        if not self.ctx:
            raise MemoryError(f"llama.cpp could not create a context of {self.n_ctx} tokens")
        vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self.batch = llama_cpp.llama_batch_init(self.own.n_batch, 0, MAX_SEQUENCES)

    def _quiet(self) -> None:
        """llama.cpp's own log (model load, every context) off: errors reach us as results.
        The callback lives as long as the process (llama.cpp keeps calling it after this
        backend is gone: a collected callback would be a dangling pointer)."""
        global _LOG_CALLBACK
        if _LOG_CALLBACK is None:
            _LOG_CALLBACK = self.lib.llama_log_callback(lambda level, text, data: None)
        self.lib.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))

    def _context_params(self) -> Any:
        lib = self.lib
        params = lib.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = params.n_ubatch = self.own.n_batch
        params.n_seq_max = MAX_SEQUENCES
        params.kv_unified = True  # one pool for every sequence, as the plan counts it
        threads = self.own.n_threads or len(os.sched_getaffinity(0))
        params.n_threads = params.n_threads_batch = threads
        kv_type = GGML_TYPE[self.kv_type_name()]
        params.type_k = params.type_v = kv_type
        params.flash_attn_type = (
            lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if self.own.flash_attn
            else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )  # fmt: skip
        return params

    def kv_type_name(self) -> str:
        """The ggml type of the cache: the card's name, or for "auto" the compute dtype."""
        name = CARD.kv_caches[self.group.kv_cache_dtype]
        if name is not None:
            return name
        return "f32" if self.compute_bytes() == 4 else "f16"

    def compute_bytes(self) -> int:
        import json

        config = json.loads((Path(self.options.model_path) / "config.json").read_text())
        own = str(config.get("dtype") or config.get("torch_dtype") or "float32")
        return compute_dtype_bytes(self.group.quantization, 4 if own == "float32" else 2)

    def kv_bytes_per_token(self) -> float:
        """2 (K, V) × layers × kv heads × head dim × bytes per element of the cache's type."""
        import json

        config = json.loads((Path(self.options.model_path) / "config.json").read_text())
        heads = config["num_attention_heads"]
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        elements = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim
        name = self.kv_type_name()
        per = {"f32": 4.0, "f16": 2.0, "bf16": 2.0}.get(name)
        if per is None:
            per = KV_CACHE_FORMATS[name].bytes_per_element or 2.0
        return float(elements * per)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    # --- decoding -------------------------------------------------------------------------

    def _clear(self) -> None:
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.ctx), True)

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> list[NDArray[np.float32]]:
        """Decode (token, position, sequence, wants logits) entries in chunks of n_batch; the
        logits of the entries that want them, in order."""
        out: list[NDArray[np.float32]] = []
        step = self.own.n_batch
        for start in range(0, len(entries), step):
            chunk = entries[start : start + step]
            batch = self.batch
            batch.n_tokens = len(chunk)
            for i, (token, position, sequence, wanted) in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = position
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = sequence
                batch.logits[i] = wanted
            status = self.lib.llama_decode(self.ctx, batch)
            if status == 1:
                raise MemoryError(
                    f"llama.cpp found no KV slot: the context's {self.n_ctx} tokens are full"
                )
            if status != 0:
                raise RuntimeError(f"llama_decode returned {status}")
            for i, (_, _, _, wanted) in enumerate(chunk):
                if wanted:
                    row = self.lib.llama_get_logits_ith(self.ctx, i)
                    out.append(np.ctypeslib.as_array(row, shape=(self.n_vocab,)).copy())
        return out

    def generate(self, prompts: list[list[int]], new_tokens: int) -> Generation:
        """Greedy, exactly `new_tokens` per row: the rows decoded together, MAX_SEQUENCES at a
        time; step_ms from the call's start to each step's logits (the first: the prefill)."""
        start = time.perf_counter()
        steps: list[float] = []
        for first in range(0, len(prompts), MAX_SEQUENCES):
            self._generate_part(prompts[first : first + MAX_SEQUENCES], new_tokens, start, steps)
        e2e_ms = (time.perf_counter() - start) * 1000
        return Generation(new_tokens=[new_tokens] * len(prompts), step_ms=steps, e2e_ms=e2e_ms,
                          timer="perf_counter")  # fmt: skip

    def _generate_part(
        self, rows: list[list[int]], new_tokens: int, start: float, steps: list[float]
    ) -> list[list[int]]:
        self._clear()
        entries = [
            (token, position, seq, position == len(row) - 1)
            for seq, row in enumerate(rows)
            for position, token in enumerate(row)
        ]
        logits = self._decode(entries)
        generated = [[int(np.argmax(x))] for x in logits]
        steps.append((time.perf_counter() - start) * 1000)
        for step in range(1, new_tokens):
            pairs = enumerate(zip(rows, generated, strict=True))
            entries = [(out[-1], len(row) + step - 1, seq, True) for seq, (row, out) in pairs]
            for out, x in zip(generated, self._decode(entries), strict=True):
                out.append(int(np.argmax(x)))
            steps.append((time.perf_counter() - start) * 1000)
        return generated

    def generate_text(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        """Greedy up to EOS or `max_new_tokens`, one prompt at a time."""
        eos = self.tokenizer.eos_token_id
        texts = []
        for prompt in prompts:
            row = self.encode(prompt)
            self._clear()
            x = self._decode([(t, p, 0, p == len(row) - 1) for p, t in enumerate(row)])[0]
            out: list[int] = []
            while len(out) < max_new_tokens:
                token = int(np.argmax(x))
                if token == eos:
                    break
                out.append(token)
                x = self._decode([(token, len(row) + len(out) - 1, 0, True)])[0]
            texts.append(self.tokenizer.decode(out, skip_special_tokens=True))
        return texts

    # --- quality --------------------------------------------------------------------------

    def _window_logprobs(self, window: list[int]) -> NDArray[np.float64]:
        """log-softmax over the vocabulary at positions 0…T-2 ([T-1, V], float64): the first
        half fills the KV cache, the second half is scored reading from it (as the transformers
        backend scores), so a quantized cache shows in the second half."""
        self._clear()
        half = len(window) // 2
        rows = self._decode([(t, p, 0, True) for p, t in enumerate(window[:half])])
        rows += self._decode([(t, half + p, 0, True) for p, t in enumerate(window[half:])])
        logits = np.stack(rows[:-1]).astype(np.float64)
        return log_softmax(logits)

    def score_windows(
        self, windows: list[list[int]], ref_topk_ids: NDArray[Any] | None, k: int
    ) -> WindowScores:
        nll, argmax, top_ids, top_lp, at_ref = [], [], [], [], []
        for index, window in enumerate(windows):
            logprobs = self._window_logprobs(window)
            targets = np.asarray(window[1:])
            nll.append(-float(logprobs[np.arange(len(targets)), targets].sum()))
            argmax.append(logprobs.argmax(-1).astype(np.int32))
            order = np.argsort(-logprobs, axis=-1, kind="stable")[:, :k]
            top_ids.append(order.astype(np.int32))
            top_lp.append(np.take_along_axis(logprobs, order, -1).astype(np.float32))
            if ref_topk_ids is not None:
                ref = np.asarray(ref_topk_ids[index], dtype=np.int64)
                at_ref.append(np.take_along_axis(logprobs, ref, -1).astype(np.float32))
        return WindowScores(
            nll_sum=np.array(nll, dtype=np.float64),
            tokens=np.full(len(windows), len(windows[0]) - 1, dtype=np.int64),
            argmax=np.stack(argmax), topk_ids=np.stack(top_ids), topk_logprobs=np.stack(top_lp),
            logprobs_at_ref=np.stack(at_ref) if ref_topk_ids is not None else None,
        )  # fmt: skip

    def score_continuations(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Σ log p(continuation | context) (nats), context and continuation encoded apart and
        joined, as the transformers backend encodes them."""
        scores = []
        for context, continuation in pairs:
            ctx, cont = self.encode(context), self.encode(continuation)
            row = ctx + cont
            self._clear()
            wanted = range(len(ctx) - 1, len(row) - 1)
            logits = self._decode([(t, p, 0, p in wanted) for p, t in enumerate(row)])
            logprobs = log_softmax(np.stack(logits).astype(np.float64))
            scores.append(float(logprobs[np.arange(len(cont)), cont].sum()))
        return scores

    # --- memory ---------------------------------------------------------------------------

    def memory_facts(self) -> MemoryFacts:
        """The model's tensors (llama_model_size) and the context's KV cache (n_ctx tokens)."""
        kv = int(self.n_ctx * self.kv_bytes_per_token())
        return MemoryFacts(
            weights_bytes=int(self.lib.llama_model_size(self.model)),
            kv_cache_bytes=kv, preallocated_bytes=kv,
            extra={"n_ctx": self.n_ctx, "gguf": self.gguf_path.name if self.gguf_path else None,
                   "type_k": self.kv_type_name()},
        )  # fmt: skip

    def close(self) -> None:
        if self.lib is not None:
            if self.batch is not None:
                self.lib.llama_batch_free(self.batch)
            if self.ctx:
                self.lib.llama_free(self.ctx)
            if self.model:
                self.lib.llama_model_free(self.model)
        self.batch = self.ctx = self.model = None
        gc.collect()


def log_softmax(logits: NDArray[np.float64]) -> NDArray[np.float64]:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    result: NDArray[np.float64] = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return result


def context_tokens(options: BackendOptions, bytes_per_token: float) -> int:
    """n_ctx: the plan's KV pool over the cache's bytes per token, at least the group's longest
    sequence, a multiple of CTX_ALIGN."""
    pool = options.kv_cache_bytes or 0
    tokens = max(options.max_context, int(pool // bytes_per_token))
    return -(-tokens // CTX_ALIGN) * CTX_ALIGN


def check_served(group: GroupKey, options: BackendOptions) -> None:
    """A UserInputError unless llama.cpp runs the group here (its card's formats and targets;
    the model's own weights, no adapter)."""
    for field, value, names in (
        ("quantization", group.quantization, CARD.weights),
        ("kv_cache_dtype", group.kv_cache_dtype, CARD.kv_caches),
        ("targets", group.target, CARD.targets),
    ):
        if value not in names:
            raise UserInputError(
                f"llama.cpp has no {value!r} here ({field}); expected one of: {', '.join(names)}",
                field=field,
            )
    if options.random_weights or options.adapter_path is not None:
        raise UserInputError(
            "llama.cpp runs a checkpoint's own weights here (no random weights, no LoRA adapter)",
            field="models",
        )
