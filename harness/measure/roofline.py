"""Memory-bandwidth ceiling of decode: how many tokens/s reading the bytes each step needs allows.

One decode step of a batch reads every weight once and the whole KV cache of the batch once,
and yields one token per sequence. Bandwidth is in GB/s = 10^9 bytes/s (vendors' unit).
"""

from __future__ import annotations


def decode_ceiling_tok_s(
    bandwidth_gb_s: float, weight_bytes: float, kv_bytes_per_step: float, batch: int
) -> float:
    """Aggregate decode tok/s over the batch if every step were bound by memory reads:

        bandwidth_gb_s × 1e9 × batch / (weight_bytes + kv_bytes_per_step)

    `kv_bytes_per_step`: the KV cache of the whole batch read at one step. It grows by one
    token per step: use the mean context over decode, `mean_decode_context(...)` tokens per
    sequence (× batch × bytes per cached token). Example: 3.35 TB/s, 16 GB of weights, no KV,
    batch 1 → 3350e9 / 16e9 = 209.4 tok/s.
    """
    if bandwidth_gb_s <= 0:
        raise ValueError(f"bandwidth_gb_s must be > 0, got {bandwidth_gb_s}")
    if weight_bytes < 0 or kv_bytes_per_step < 0 or weight_bytes + kv_bytes_per_step <= 0:
        raise ValueError(
            f"weight_bytes ({weight_bytes}) and kv_bytes_per_step ({kv_bytes_per_step}) must be "
            ">= 0 with a positive sum"
        )
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    return bandwidth_gb_s * 1e9 * batch / (weight_bytes + kv_bytes_per_step)


def mean_decode_context(context_tokens: int, new_tokens: int) -> float:
    """Mean number of cached positions a decode step attends to: context_tokens + new_tokens / 2.

    The first token comes from prefill; decode step j (j = 1 .. new_tokens − 1) attends to
    context_tokens + j positions, whose mean is context_tokens + new_tokens / 2.
    """
    if context_tokens < 0 or new_tokens < 2:
        raise ValueError(
            f"need context_tokens >= 0 and new_tokens >= 2 (decode steps exist), "
            f"got {context_tokens} and {new_tokens}"
        )
    return context_tokens + new_tokens / 2


def fraction(measured: float, ceiling: float) -> float:
    """measured / ceiling: the share of the bandwidth ceiling a measured rate reaches."""
    if ceiling <= 0:
        raise ValueError(f"ceiling must be > 0, got {ceiling}")
    return measured / ceiling
