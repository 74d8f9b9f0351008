"""The transformers backend: eager HF models on CPU, CUDA or ROCm, quantized by bitsandbytes,
gptqmodel or optimum-quanto, with the model-dtype or a quantized (quanto int4 / hqq int8) KV cache.

torch, transformers and the quantization libraries are imported here only, inside methods.
Generation runs under torch.no_grad() (optimum-quanto int4/int2 fail under inference_mode).
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from harness.backends.base import Backend, Generation, MemoryFacts, WindowScores
from harness.backends.transformers.card import CARD
from harness.errors import UserInputError
from harness.measure.timing import StepClock, step_timestamps_processor
from harness.spec.capabilities import KV_CACHE_FORMATS, WEIGHT_FORMATS
from harness.units import MIB

SUPPORTED = frozenset(CARD.weights)
KV_CACHE_DTYPES = list(CARD.kv_caches)
GPTQ_CALIBRATION_SAMPLES = 64
LOGITS_BUDGET_BYTES = 256 * MIB  # fp32 log-probs held at once while scoring
TEXT_BATCH = 32  # prompts generated together by generate_text
GPTQ = WEIGHT_FORMATS["gptq-int4"]  # bits and group size: the planner's, from the table


def torch_dtype_name(quantization: str) -> str | None:
    """The dtype weights load in (None = the checkpoint's own)."""
    return CARD.weights[quantization].torch_dtype


def cache_settings(kv_cache_dtype: str) -> dict[str, Any] | None:
    """transformers' QuantizedCache arguments for a KV dtype (None: the model-dtype cache)."""
    settings = CARD.kv_caches.get(kv_cache_dtype)
    if settings is None:
        return None
    return {
        **settings.model_dump(exclude_none=True),
        "q_group_size": KV_CACHE_FORMATS[kv_cache_dtype].group_size,
    }


def quantization_config(quantization: str, compute_dtype: Any) -> Any:
    """The transformers quantization config of a format, or None for plain dtypes and GPTQ."""
    if quantization.startswith("bnb-"):
        from transformers import BitsAndBytesConfig

        if quantization == "bnb-int8":
            return BitsAndBytesConfig(load_in_8bit=True)
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=quantization.removeprefix("bnb-"),
            bnb_4bit_compute_dtype=compute_dtype,
        )
    if quantization.startswith("quanto-"):
        from transformers import QuantoConfig

        return QuantoConfig(weights=quantization.removeprefix("quanto-"))
    return None


def tensor_bytes(tensor: Any) -> int:
    """Bytes a (possibly quantized, subclassed) tensor really stores."""
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is not None:
        names, _ = flatten()
        return sum(tensor_bytes(getattr(tensor, name)) for name in names)
    return int(tensor.numel() * tensor.element_size())


def module_bytes(model: Any) -> int:
    seen: set[int] = set()
    total = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor_bytes(tensor)
    return total


def count_new_tokens(rows: list[list[int]], eos_id: int | None) -> list[int]:
    """Tokens each row really generated: up to and including its first EOS (padding after it
    is not output). With min_new_tokens = max_new_tokens no row stops early."""
    counts = []
    for row in rows:
        end = row.index(eos_id) + 1 if eos_id is not None and eos_id in row else len(row)
        counts.append(end)
    return counts


@dataclass
class SharedContext:
    """One context's tokens and its continuations: (pair index, continuation tokens)."""

    context: list[int]
    rows: list[tuple[int, list[int]]] = field(default_factory=list)


def shared_context_chunks(
    encoded: list[tuple[list[int], list[int]]], rows_per_chunk: int
) -> list[list[SharedContext]]:
    """The (context, continuation) pairs grouped by context (at most ``rows_per_chunk``
    continuations a group), shortest context first, in chunks of at most ``rows_per_chunk``
    continuations (a chunk's contexts all have a prefix before their last token, or none has)."""
    groups: dict[tuple[int, ...], list[SharedContext]] = {}
    for index, (context, continuation) in enumerate(encoded):
        if not context:
            raise ValueError(f"pair {index} has an empty context: nothing to condition on")
        pieces = groups.setdefault(tuple(context), [SharedContext(context)])
        if len(pieces[-1].rows) == rows_per_chunk:
            pieces.append(SharedContext(context))
        pieces[-1].rows.append((index, continuation))
    ordered = sorted(
        (g for pieces in groups.values() for g in pieces), key=lambda g: len(g.context)
    )
    chunks: list[list[SharedContext]] = []
    rows = 0
    for group in ordered:
        fits = chunks and rows + len(group.rows) <= rows_per_chunk
        if not fits or (len(chunks[-1][0].context) > 1) != (len(group.context) > 1):
            chunks.append([])
            rows = 0
        chunks[-1].append(group)
        rows += len(group.rows)
    return chunks


def right_padded(rows: list[list[int]], pad: int) -> tuple[list[list[int]], list[list[int]]]:
    """(token rows padded on the right to the longest, their attention mask: 1 real, 0 pad)."""
    width = max(map(len, rows))
    ids = [row + [pad] * (width - len(row)) for row in rows]
    mask = [[1] * len(row) + [0] * (width - len(row)) for row in rows]
    return ids, mask


class TransformersBackend(Backend):
    name = "transformers"

    def load(self) -> None:
        if self.group.quantization not in SUPPORTED:
            raise UserInputError(
                f"the transformers backend cannot load {self.group.quantization!r}; "
                f"it loads: {', '.join(sorted(SUPPORTED))}",
                field="quantization",
            )
        if self.group.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise UserInputError(
                f"the transformers backend has no {self.group.kv_cache_dtype!r} KV cache; "
                f"it offers: {', '.join(KV_CACHE_DTYPES)}",
                field="kv_cache_dtype",
            )
        import torch

        # bitsandbytes logs a cast warning on every int8 matmul; it is known and not actionable.
        logging.getLogger("bitsandbytes.autograd._functions").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", message=".*Failed to load CPU gemm_4bit.*")
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        torch.manual_seed(self.options.seed)
        self.torch = torch
        self.device = self.options.device
        self.tokenizer = self._load_tokenizer()
        quant = self.group.quantization
        if quant == "gptq-int4":
            self.model = self._load_gptq()
        else:
            self.model = self._load_hf(quant)
        self.model = self._with_adapter(self.model)
        self.model.eval()
        self.compute_dtype = next(
            (p.dtype for p in self.model.parameters() if p.dtype.is_floating_point), torch.float32
        )

    def _with_adapter(self, model: Any) -> Any:
        """The base with the group's LoRA adapter on it (peft), or the base alone. The adapter's
        base binding was checked before the load (harness.run.device.bound_adapter)."""
        if self.options.adapter_path is None:
            return model
        from peft import PeftModel

        return PeftModel.from_pretrained(model, self.options.adapter_path, is_trainable=False)

    def _load_tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.options.tokenizer_path or self.options.model_path)

    def _load_hf(self, quant: str) -> Any:
        import torch
        from transformers import AutoModelForCausalLM

        dtype_name = torch_dtype_name(quant)
        dtype = getattr(torch, dtype_name) if dtype_name else "auto"
        compute = dtype if dtype != "auto" else self._checkpoint_dtype()
        if self.options.random_weights:
            return self._random_model(compute, quant)
        return AutoModelForCausalLM.from_pretrained(
            self.options.model_path,
            dtype=dtype,
            device_map=self.device,
            quantization_config=quantization_config(quant, compute),
        )

    def _random_model(self, dtype: Any, quant: str) -> Any:
        """The architecture from config.json with random weights, built on the device directly."""
        from transformers import AutoConfig, AutoModelForCausalLM

        if quantization_config(quant, dtype) is not None:
            raise UserInputError(
                f"random weights are built in a float dtype; {quant!r} needs a checkpoint",
                field="quantization",
            )
        config = AutoConfig.from_pretrained(self.options.model_path)
        with self.torch.device(self.device):
            return AutoModelForCausalLM.from_config(config, dtype=dtype)

    def _checkpoint_dtype(self) -> Any:
        config = json.loads((Path(self.options.model_path) / "config.json").read_text())
        name = config.get("torch_dtype") or config.get("dtype") or "float32"
        return getattr(self.torch, name)

    def _load_gptq(self) -> Any:
        """GPTQ (bits and group size from the capability table) with gptqmodel, calibrated on
        wiki.valid (disjoint from the eval corpus); the quantized checkpoint is cached by model +
        calibration hash."""
        os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(max(2, os.cpu_count() or 2)))
        from gptqmodel import BACKEND, GPTQModel, QuantizeConfig

        from harness import corpus

        texts = corpus.calibration_texts(GPTQ_CALIBRATION_SAMPLES)
        out = self._gptq_cache_dir(texts)
        if not (out / "config.json").is_file():
            model = GPTQModel.load(
                self.options.model_path,
                QuantizeConfig(bits=int(GPTQ.bits or 4), group_size=GPTQ.group_size),
                device=self.device,
            )
            model.quantize(texts, batch_size=4)
            tmp = out.with_name(out.name + ".tmp")
            model.save(str(tmp))
            tmp.rename(out)
            del model
            gc.collect()
        loaded = GPTQModel.load(str(out), device=self.device, backend=BACKEND.AUTO)
        return loaded.model

    def _gptq_cache_dir(self, texts: list[str]) -> Path:
        digest = hashlib.sha256()
        digest.update(str(Path(self.options.model_path).resolve()).encode())
        for name in ("config.json", "model.safetensors"):
            path = Path(self.options.model_path) / name
            if path.is_file():
                digest.update(hashlib.sha256(path.read_bytes()).digest())
        digest.update("\n".join(texts).encode())
        digest.update(f"g{GPTQ.group_size}".encode())
        root = Path(self.options.cache_dir or Path.home() / ".cache" / "harness" / "gptq")
        root.mkdir(parents=True, exist_ok=True)
        return root / digest.hexdigest()[:20]

    # --- generation -----------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    def _cache_kwargs(self) -> dict[str, Any]:
        settings = cache_settings(self.group.kv_cache_dtype)
        if settings is None:
            return {}
        return {"cache_implementation": "quantized", "cache_config": settings}

    def _new_cache(self) -> Any:
        settings = cache_settings(self.group.kv_cache_dtype)
        if settings is None:
            from transformers import DynamicCache

            return DynamicCache(config=self.model.config)
        from transformers import QuantizedCache

        return QuantizedCache(config=self.model.config, **settings)

    def generate(self, prompts: list[list[int]], new_tokens: int) -> Generation:
        from transformers import LogitsProcessorList

        torch = self.torch
        ids = torch.tensor(prompts, dtype=torch.long, device=self.device)
        mask = torch.ones_like(ids)
        clock = StepClock(self.device)
        pad = self.tokenizer.pad_token_id
        with torch.no_grad():
            clock.start()
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                logits_processor=LogitsProcessorList([step_timestamps_processor(clock)]),
                pad_token_id=pad if pad is not None else 0,
                **self._cache_kwargs(),
            )
            clock.stop()
        # Random weights may emit a borrowed tokenizer's EOS (only the model's own is suppressed
        # until max_new_tokens): every generated token counts.
        eos = None if self.options.random_weights else self.tokenizer.eos_token_id
        counts = count_new_tokens(out[:, ids.shape[1] :].tolist(), eos)
        return Generation(
            new_tokens=counts, step_ms=clock.elapsed_ms(), e2e_ms=clock.total_ms(), timer=clock.name
        )

    def generate_text(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        """Greedy (do_sample False) up to EOS or ``max_new_tokens``, in batches of similar
        lengths, left-padded (the attention mask gives each row its own positions), with the
        group's KV cache."""
        encoded = [self.encode(p) for p in prompts]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        step = max(1, min(TEXT_BATCH, self._rows_per_chunk(max(map(len, encoded)) + 1)))
        out: dict[int, str] = {}
        for start in range(0, len(order), step):
            chunk = order[start : start + step]
            for i, text in zip(chunk, self._text_chunk([encoded[i] for i in chunk],
                                                       max_new_tokens), strict=True):  # fmt: skip
                out[i] = text
        return [out[i] for i in range(len(prompts))]

    def _text_chunk(self, rows: list[list[int]], max_new_tokens: int) -> list[str]:
        torch = self.torch
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        width = max(len(r) for r in rows)
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows],
                            device=self.device)  # fmt: skip
        with torch.no_grad():
            got = self.model.generate(
                input_ids=ids, attention_mask=mask, do_sample=False,
                max_new_tokens=max_new_tokens, pad_token_id=pad,
                eos_token_id=self.tokenizer.eos_token_id, **self._cache_kwargs(),
            )  # fmt: skip
        eos = self.tokenizer.eos_token_id
        texts = []
        for row in got[:, width:].tolist():
            end = row.index(eos) if eos is not None and eos in row else len(row)
            texts.append(self.tokenizer.decode(row[:end], skip_special_tokens=True))
        return texts

    # --- quality --------------------------------------------------------------------------

    def _rows_per_chunk(self, tokens_per_row: int) -> int:
        """Rows scored together, so that one chunk's fp32 log-probs stay near LOGITS_BUDGET."""
        per_row = tokens_per_row * int(self.model.config.vocab_size) * 4
        return max(1, LOGITS_BUDGET_BYTES // per_row)

    def score_windows(
        self, windows: list[list[int]], ref_topk_ids: NDArray[Any] | None, k: int
    ) -> WindowScores:
        """Teacher-forced scores, each window in two passes: the first half fills the KV cache
        (quantized when the group's KV dtype is), the second half is scored reading from it, so
        a quantized KV cache shows in the second half's NLL. Model-dtype caches give the same
        numbers as one pass. Windows are scored in batches (they all have the same length)."""
        step = self._rows_per_chunk(len(windows[0]))
        parts = [
            self._score_chunk(
                windows[i : i + step],
                None if ref_topk_ids is None else ref_topk_ids[i : i + step],
                k,
            )
            for i in range(0, len(windows), step)
        ]
        at_ref = [p[5] for p in parts if p[5] is not None]
        return WindowScores(
            nll_sum=np.concatenate([p[0] for p in parts]),
            tokens=np.concatenate([p[1] for p in parts]),
            argmax=np.concatenate([p[2] for p in parts]),
            topk_ids=np.concatenate([p[3] for p in parts]),
            topk_logprobs=np.concatenate([p[4] for p in parts]),
            logprobs_at_ref=np.concatenate(at_ref) if ref_topk_ids is not None else None,
        )

    def _score_chunk(
        self, windows: list[list[int]], ref_ids: NDArray[Any] | None, k: int
    ) -> tuple[Any, ...]:
        """One batch of windows. Each half's log-probs are computed and read on their own (the
        log-softmax is per position, so this equals one over both halves joined) and never
        joined: a chunk holds one half's log-probs at a time instead of four full copies."""
        torch = self.torch
        ids = torch.tensor(windows, dtype=torch.long, device=self.device)
        half = ids.shape[1] // 2
        with torch.no_grad():
            first = self.model(input_ids=ids[:, :half], past_key_values=self._new_cache())
            reads = [self._read_half(first.logits, ids[:, 1 : half + 1], ref_ids, 0, k)]
            second = self.model(input_ids=ids[:, half:], past_key_values=first.past_key_values)
            del first
            reads.append(self._read_half(second.logits[:, :-1], ids[:, half + 1 :], ref_ids,
                                         half, k))  # fmt: skip
            picked = torch.cat([r[0] for r in reads], dim=1)
            nll = -picked.double().sum(dim=1)
        return (
            nll.cpu().numpy(),
            np.full(len(windows), ids.shape[1] - 1, dtype=np.int64),
            *(np.concatenate([r[i] for r in reads], axis=1) for i in (1, 2, 3)),
            None if ref_ids is None else np.concatenate([r[4] for r in reads], axis=1),
        )

    def _read_half(
        self, logits: Any, targets: Any, ref_ids: NDArray[Any] | None, start: int, k: int
    ) -> tuple[Any, ...]:
        """(log-prob of each target, argmax, top-k ids, top-k log-probs, log-probs at the
        reference's ids) of the positions ``start…`` of a chunk's windows that ``logits`` hold."""
        torch = self.torch
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        top = logprobs.topk(k, dim=-1)
        at_ref = None
        if ref_ids is not None:
            ref = torch.as_tensor(ref_ids[:, start : start + logits.shape[1]], dtype=torch.long)
            at_ref = logprobs.gather(2, ref.to(logprobs.device)).cpu().numpy()
        return (
            logprobs.gather(2, targets[:, :, None]).squeeze(2),
            logprobs.argmax(-1).cpu().numpy().astype(np.int32),
            top.indices.cpu().numpy().astype(np.int32),
            top.values.cpu().numpy().astype(np.float32),
            at_ref,
        )

    def score_continuations(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Σ log p(continuation | context) (nats), with the context and the continuation encoded
        apart and joined. Each distinct context is run once: all its tokens but the last fill a
        model-dtype KV cache (as one pass over context + continuation would use, whatever the
        group's KV dtype), copied to each of its continuations, which are then scored together
        from the context's last token on. Contexts are batched by length with right padding
        (the attention mask hides the padding; position ids continue each row's own context)."""
        encoded = [(self.encode(ctx), self.encode(cont)) for ctx, cont in pairs]
        longest = max(len(c) + len(x) for c, x in encoded)
        scores: list[float] = [0.0] * len(pairs)
        for chunk in shared_context_chunks(encoded, self._rows_per_chunk(longest)):
            for index, score in self._score_shared_chunk(chunk):
                scores[index] = score
        return scores

    def _score_shared_chunk(self, chunk: list[SharedContext]) -> list[tuple[int, float]]:
        """(pair index, Σ log p) for every continuation of a chunk's contexts."""
        torch = self.torch
        pad = self.tokenizer.pad_token_id or 0
        owners = [g for g, shared in enumerate(chunk) for _ in shared.rows]
        prefixes = [shared.context[:-1] for shared in chunk]
        prefix_ids, prefix_mask = right_padded(prefixes, pad)
        tails = [[shared.context[-1], *cont] for shared in chunk for _, cont in shared.rows]
        tail_ids, tail_mask = right_padded(tails, pad)
        positions = [[len(prefixes[g]) + j for j in range(len(tail_ids[0]))] for g in owners]
        as_long = {"dtype": torch.long, "device": self.device}
        owner_index = torch.tensor(owners, **as_long)
        mask = torch.tensor(prefix_mask, **as_long)[owner_index]
        with torch.no_grad():
            cache = self._prefix_cache(
                torch.tensor(prefix_ids, **as_long), prefix_mask, owner_index
            )
            logits = self.model(
                input_ids=torch.tensor(tail_ids, **as_long),
                attention_mask=torch.cat([mask, torch.tensor(tail_mask, **as_long)], dim=1),
                position_ids=torch.tensor(positions, **as_long),
                past_key_values=cache,
            ).logits
            sums = self._tail_logliks(logits, tails, tail_ids)
        indices = [index for shared in chunk for index, _ in shared.rows]
        return list(zip(indices, sums, strict=True))

    def _tail_logliks(
        self, logits: Any, tails: list[list[int]], ids: list[list[int]]
    ) -> list[float]:
        """Σ log p of each tail's tokens after its first (the context's last), each read at the
        position before it: the log-softmax only at those positions, summed in float32."""
        torch = self.torch
        as_long = {"dtype": torch.long, "device": logits.device}
        row_at = torch.tensor([r for r, tail in enumerate(tails) for _ in tail[1:]], **as_long)
        step_at = torch.tensor([j for tail in tails for j in range(len(tail) - 1)], **as_long)
        logprobs = torch.log_softmax(logits[row_at, step_at].float(), dim=-1)
        targets = torch.tensor(ids, **as_long)[row_at, step_at + 1]
        picked = logprobs.gather(1, targets[:, None]).squeeze(1)
        return [float(s.sum().item()) for s in picked.split([len(t) - 1 for t in tails])]

    def _prefix_cache(self, ids: Any, mask: list[list[int]], owners: Any) -> Any:
        """A model-dtype KV cache of the contexts' prefixes, one row per continuation (None when
        every prefix is empty)."""
        if ids.shape[1] == 0:
            return None
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        attention = self.torch.tensor(mask, dtype=self.torch.long, device=self.device)
        self.model(input_ids=ids, attention_mask=attention, past_key_values=cache, logits_to_keep=1)
        cache.batch_select_indices(owners)
        return cache

    # --- memory ---------------------------------------------------------------------------

    def memory_facts(self) -> MemoryFacts:
        return MemoryFacts(weights_bytes=module_bytes(self.model))

    def close(self) -> None:
        self.model = None
        gc.collect()
        if self.options.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
