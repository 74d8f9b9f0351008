"""Long-context items on a transformers engine, read from the group's own KV cache: the cached
part of each prompt fills a new cache of the group's KV dtype (``backend._new_cache()``: the
model-dtype or a quantized cache), then the rest is read from it, so what the cache did to the
context shows in what follows. One item at a time (a 4k-token row is a batch of its own here).
torch is imported by the backend that calls these."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _prefill(backend: Any, text: str) -> Any:
    """A new cache of the group's KV dtype holding ``text``."""
    torch = backend.torch
    ids = torch.tensor([backend.encode(text)], dtype=torch.long, device=backend.device)
    cache = backend._new_cache()
    backend.model(input_ids=ids, past_key_values=cache, logits_to_keep=1)
    return cache


def score_cached(backend: Any, triples: Sequence[tuple[str, str, str]]) -> list[tuple[float, int]]:
    """(−Σ log p of the answer (nats), its tokens) per (cached, rest, answer): the answer
    teacher-forced after the rest, both read from the cache that holds ``cached``."""
    torch = backend.torch
    out: list[tuple[float, int]] = []
    with torch.no_grad():
        for cached, rest, answer in triples:
            cache = _prefill(backend, cached)
            head, tail = backend.encode(rest), backend.encode(answer)
            ids = torch.tensor([head + tail], dtype=torch.long, device=backend.device)
            logits = backend.model(input_ids=ids, past_key_values=cache).logits[0]
            picked = logits[len(head) - 1 : len(head) + len(tail) - 1].float().log_softmax(-1)
            target = torch.tensor(tail, dtype=torch.long, device=picked.device)
            nll = -picked.gather(1, target[:, None]).sum()
            out.append((float(nll), len(tail)))
    return out


def generate_cached(backend: Any, pairs: Sequence[tuple[str, str]], max_new: int) -> list[str]:
    """Greedy text (at most ``max_new`` tokens, up to the end-of-sequence token) after the rest,
    per (cached, rest), read from the cache that holds ``cached``."""
    torch = backend.torch
    eos = backend.tokenizer.eos_token_id
    texts: list[str] = []
    with torch.no_grad():
        for cached, rest in pairs:
            cache = _prefill(backend, cached)
            ids = torch.tensor([backend.encode(rest)], dtype=torch.long, device=backend.device)
            made: list[int] = []
            for _ in range(max_new):
                logits = backend.model(input_ids=ids, past_key_values=cache).logits[0, -1]
                token = int(logits.argmax())
                if token == eos:
                    break
                made.append(token)
                ids = torch.tensor([[token]], dtype=torch.long, device=backend.device)
            texts.append(backend.tokenizer.decode(made, skip_special_tokens=True))
    return texts
