"""`SglangBackend`: SGLang's offline engine (`sglang.Engine`, python/sglang/srt/entrypoints/
engine.py) in the group's process, driven with token ids (the harness's tokenizer: the same ids
as every engine's), greedy. sglang is imported only inside `load`.

What it reads from the engine: each request's `output_ids` (the tokens it generated) and, for
quality, `meta_info.input_token_logprobs` / `input_top_logprobs` (a prompt's own log-probs from
`logprob_start_len` on). SGLang's offline engine gives no per-step timestamps: a generation's
`step_ms` is its end-to-end time only (its server's TTFT and TPOT are the load generator's).
Log-probs at the reference's ids are read from SGLang's own top LOOKUP_FACTOR × k (a reference
id outside them gets the smallest log-prob returned: an upper bound on it).
"""

from __future__ import annotations

import gc
import time
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from harness.backends.base import Backend, BackendOptions, Generation, MemoryFacts, WindowScores
from harness.backends.sglang.args import engine_kwargs, sampling_params
from harness.spec.scenario import GroupKey

LOOKUP_FACTOR = 4


class SglangBackend(Backend):
    name: ClassVar[str] = "sglang"

    def __init__(self, group: GroupKey, options: BackendOptions) -> None:
        super().__init__(group, options)
        self._kwargs = engine_kwargs(group, options)  # errors before any engine is touched
        self._engine: Any = None
        self.tokenizer: Any = None

    def load(self) -> None:
        import sglang
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(
            self.options.tokenizer_path or self.options.model_path
        )
        self._engine = sglang.Engine(**self._kwargs)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    def generate(self, prompts: list[list[int]], new_tokens: int) -> Generation:
        start = time.perf_counter()
        outs = self._engine.generate(input_ids=prompts, sampling_params=sampling_params(new_tokens))
        e2e_ms = (time.perf_counter() - start) * 1000
        return Generation(
            new_tokens=[len(o["output_ids"]) for o in outs], step_ms=[e2e_ms], e2e_ms=e2e_ms,
            timer="perf_counter",
        )  # fmt: skip

    def generate_text(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        params = {"temperature": 0.0, "max_new_tokens": max_new_tokens}
        outs = self._engine.generate(
            input_ids=[self.encode(p) for p in prompts], sampling_params=params
        )
        return [self.tokenizer.decode(o["output_ids"], skip_special_tokens=True) for o in outs]

    def score_windows(
        self, windows: list[list[int]], ref_topk_ids: NDArray[Any] | None, k: int
    ) -> WindowScores:
        """Each window's own log-probs from its second token on (SGLang's prompt log-probs),
        its top LOOKUP_FACTOR × k at each position."""
        top_n = k * LOOKUP_FACTOR if ref_topk_ids is not None else k
        outs = self._engine.generate(
            input_ids=windows, sampling_params={"temperature": 0.0, "max_new_tokens": 1},
            return_logprob=True, logprob_start_len=0, top_logprobs_num=top_n,
        )  # fmt: skip
        rows = [read_window(o["meta_info"], w, k) for o, w in zip(outs, windows, strict=True)]
        at_ref = None
        if ref_topk_ids is not None:
            at_ref = np.stack([
                lookup(o["meta_info"]["input_top_logprobs"][1:], ref_topk_ids[i])
                for i, o in enumerate(outs)
            ])  # fmt: skip
        return WindowScores(
            nll_sum=np.array([r[0] for r in rows], dtype=np.float64),
            tokens=np.full(len(windows), len(windows[0]) - 1, dtype=np.int64),
            argmax=np.stack([r[1] for r in rows]),
            topk_ids=np.stack([r[2] for r in rows]),
            topk_logprobs=np.stack([r[3] for r in rows]),
            logprobs_at_ref=at_ref,
        )

    def score_continuations(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Σ log p(continuation | context), context and continuation encoded apart and joined."""
        encoded = [(self.encode(c), self.encode(x)) for c, x in pairs]
        outs = self._engine.generate(
            input_ids=[c + x for c, x in encoded],
            sampling_params={"temperature": 0.0, "max_new_tokens": 1}, return_logprob=True,
            logprob_start_len=[len(c) for c, _ in encoded],
        )  # fmt: skip
        return [
            float(sum(lp for lp, _, _ in o["meta_info"]["input_token_logprobs"] if lp is not None))
            for o in outs
        ]

    def memory_facts(self) -> MemoryFacts:
        return MemoryFacts()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
        self._engine = None
        gc.collect()


def read_window(meta: dict[str, Any], window: list[int], k: int) -> tuple[Any, ...]:
    """(NLL sum, argmax, top-k ids, top-k log-probs) of one window's positions 1…T-1."""
    picked = [lp for lp, _, _ in meta["input_token_logprobs"][1:]]
    tops = meta["input_top_logprobs"][1:]
    ids = np.array([[t for _, t, _ in pos[:k]] for pos in tops], dtype=np.int32)
    logprobs = np.array([[lp for lp, _, _ in pos[:k]] for pos in tops], dtype=np.float32)
    return -float(np.sum(picked, dtype=np.float64)), ids[:, 0].copy(), ids, logprobs


def lookup(tops: list[list[tuple[float, int, Any]]], ref: NDArray[Any]) -> NDArray[Any]:
    """Own log-probs at the reference's ids per position ([T-1, k]), from SGLang's top lists."""
    out = np.empty(ref.shape, dtype=np.float32)
    for position, pos in enumerate(tops):
        own = {token: lp for lp, token, _ in pos}
        floor = min(own.values())
        out[position] = [own.get(int(t), floor) for t in ref[position]]
    return out
