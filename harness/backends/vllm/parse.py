"""vLLM's outputs as the harness's results: a `Generation` from the engine's own timestamps, and
`WindowScores` / continuation log-probs from prompt log-probabilities. Pure: vLLM is not imported.

Timing. With stats on (`disable_log_stats=False`) every `RequestOutput.metrics` carries the
engine core's own monotonic timestamps (scheduled, first token, last token), on the same clock
as `time.monotonic()` in the backend because the core runs in its process. TTFT of a batch = its
last request's first token − the call's start; decode = last token − first token, per request
(TPOT) and for the batch.

Quality. Windows are scored with prompt log-probabilities: position 0 has none (vLLM puts None
there), every later position holds the actual token (with its true rank) and the top-k (ranks
1..k). Where the engine scores given ids (`prompt_logprob_token_ids`) the reference's top-k are
scored exactly; elsewhere they are looked up in the returned top-k and are NaN where absent, and
the worker then reports KL as unmeasured for the point.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from harness.backends.base import Generation, WindowScores


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
    n_windows, steps = _check_windows(len(prompt_logprobs), window_ids, ref_topk_ids, k)
    length = steps + 1
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


def _check_windows(
    n_lists: int, window_ids: Sequence[Sequence[int]], ref_topk_ids: NDArray[Any] | None, k: int
) -> tuple[int, int]:
    """(windows, scored positions per window), or a ValueError saying which shape is wrong."""
    if n_lists != len(window_ids):
        raise ValueError(f"{n_lists} prompt log-prob lists for {len(window_ids)} windows")
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
    return n_windows, steps


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
