"""A level's prompts, cut from the shipped corpus (`harness/data/corpus/wiki.test.raw`) with the
model's own tokenizer: consecutive token slices of drawn lengths, or a trace's or multi-turn
workload's prompt ids (harness.modes.serving.workload), decoded to text and written as the load
generator's `custom` JSONL dataset (`{"prompt", "output_tokens"}` per line).

The tokenizer is the model folder's `tokenizer.json` (the `tokenizers` package), else
transformers' AutoTokenizer; both are imported inside the function that needs them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.corpus import eval_text
from harness.modes.serving.spec import SPARE_TOKENS, Lengths, ServingLevel, draw_lengths
from harness.modes.serving.workload import (
    BlockBook,
    multi_turn_prompt_ids,
    scaled_requests,
    trace_prompt_ids,
)


class PromptSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str
    prompt_tokens: int  # as the model's tokenizer counts the prompt text
    output_tokens: int


def model_tokenizer(
    model_path: str,
) -> tuple[Callable[[str], list[int]], Callable[[list[int]], str]]:
    """encode / decode with the model's own tokenizer (no special tokens)."""
    local = Path(model_path).expanduser() / "tokenizer.json"
    if local.is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(local))
        return (
            lambda text: list(tok.encode(text, add_special_tokens=False).ids),
            lambda ids: str(tok.decode(ids)),
        )
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(model_path)
    return (
        lambda text: list(auto.encode(text, add_special_tokens=False)),
        lambda ids: str(auto.decode(ids)),
    )


def cut_prompts(
    model_path: str,
    n: int,
    prompt_tokens: Lengths,
    output_tokens: Lengths,
    *,
    seed: int = 0,
    max_model_len: int | None = None,
    text: str | None = None,
) -> list[PromptSpec]:
    """`n` prompts: consecutive, non-overlapping token slices of the corpus (from its start,
    wrapping around when it runs out), each of a drawn length, with a drawn output length
    (`spec.draw_lengths`, the plan's draw).

    With `max_model_len`, prompt + output fit it (the prompt is shortened; `SPARE_TOKENS` are
    kept spare for a decode/encode round trip that merges or splits a token).
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    lengths = draw_lengths(prompt_tokens, output_tokens, n, seed)
    if max_model_len is not None:
        if any(out + 1 + SPARE_TOKENS > max_model_len for _, out in lengths):
            raise ValueError(f"an output length does not fit max_model_len {max_model_len}")
        lengths = [(min(p, max_model_len - out - SPARE_TOKENS), out) for p, out in lengths]
    encode, decode = model_tokenizer(model_path)
    corpus = eval_text() if text is None else text
    needed = sum(p for p, _ in lengths)
    ids = encode(corpus[: min(len(corpus), needed * 8 + 10_000)])
    if len(ids) < needed and len(corpus) > needed * 8 + 10_000:
        ids = encode(corpus)
    if not ids:
        raise ValueError("the corpus text gave no tokens")
    prompts: list[PromptSpec] = []
    offset = 0
    for p_len, out_len in lengths:
        piece = [ids[(offset + k) % len(ids)] for k in range(p_len)]
        offset = (offset + p_len) % len(ids)
        prompt = decode(piece)
        prompts.append(
            PromptSpec(prompt=prompt, prompt_tokens=len(encode(prompt)), output_tokens=out_len)
        )
    return prompts


def workload_prompts(
    model_path: str, level: ServingLevel, *, max_model_len: int | None = None,
    text: str | None = None,
) -> list[PromptSpec]:  # fmt: skip
    """A level's prompts: a trace's or multi-turn workload's (harness.modes.serving.workload,
    from the corpus's token ids; each prompt cut to fit max_model_len with its output), else
    `cut_prompts` of its drawn lengths."""
    workload = level.workload
    if workload is None:
        return cut_prompts(model_path, level.requests, level.prompt_tokens, level.output_tokens,
                           seed=level.seed, max_model_len=max_model_len, text=text)  # fmt: skip
    encode, decode = model_tokenizer(model_path)
    book = BlockBook(encode(eval_text() if text is None else text), encode, decode)
    if workload.trace is not None:
        requests = scaled_requests(workload)
        outputs = [r.output_tokens for r in requests]
        room = _room(max_model_len, max(outputs))
        ids = trace_prompt_ids(requests, workload.block_tokens, book, room)
        pairs = list(zip(ids, outputs, strict=True))
    else:
        pairs = multi_turn_prompt_ids(level, book, None)
        pairs = [(p[: _room(max_model_len, o)], o) for p, o in pairs]
    specs = []
    for prompt_ids, out_len in pairs:
        prompt = decode(prompt_ids)
        specs.append(PromptSpec(prompt=prompt, prompt_tokens=len(encode(prompt)),
                                output_tokens=out_len))  # fmt: skip
    return specs


def _room(max_model_len: int | None, output_tokens: int) -> int | None:
    """The most prompt tokens that fit max_model_len beside `output_tokens` and the spare."""
    if max_model_len is None:
        return None
    room = max_model_len - output_tokens - SPARE_TOKENS
    if room < 1:
        raise ValueError(f"an output length does not fit max_model_len {max_model_len}")
    return room


def write_dataset(prompts: Sequence[PromptSpec], path: Path) -> Path:
    """The generator's `custom` dataset: one `{"prompt", "output_tokens"}` object per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for spec in prompts:
            line = {"prompt": spec.prompt, "output_tokens": spec.output_tokens}
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path
