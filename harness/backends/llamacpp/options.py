"""llama.cpp's options (the scenario's ``engines: {llamacpp: {...}}``), by llama-cpp-python's
own names (llama_cpp/llama.py, ``Llama.__init__``)."""

from __future__ import annotations

from pydantic import Field

from harness.spec.yamlinput import Input

MAX_BATCH_TOKENS = 1 << 16


class LlamaCppOptions(Input):
    """n_batch: the tokens one decode call takes at most (llama.cpp's logical batch, the prefill
    chunk: the planner's ``prefill_chunk_tokens``); flash_attn: llama.cpp's flash attention,
    which a quantized V cache (q8_0, q4_0) needs (on for every group, so that the KV dtypes
    differ only in their cache); n_threads: None for the group's cores."""

    n_batch: int = Field(512, gt=0, le=MAX_BATCH_TOKENS)
    flash_attn: bool = True
    n_threads: int | None = Field(None, gt=0, le=1024)

    @property
    def gpu_share(self) -> float | None:
        """It takes no share of a card up front (its KV is sized by n_ctx)."""
        return None
