"""A level's prompts (harness.modes.serving.prompts): token slices of the shipped corpus with
drawn lengths, cut with the tiny model's own tokenizer, and the generator's dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.modes.serving.prompts import cut_prompts, write_dataset
from harness.modes.serving.spec import Lengths

REPO = Path(__file__).resolve().parents[3]
TINY_MODEL = str(REPO / "harness" / "data" / "tiny-llama")


def test_prompts_are_cut_from_the_corpus_with_drawn_lengths(tmp_path: Path) -> None:
    prompts = cut_prompts(TINY_MODEL, 24, Lengths(mean=48, sd=12), Lengths(mean=16, sd=4),
                          seed=3, max_model_len=96)  # fmt: skip
    again = cut_prompts(TINY_MODEL, 24, Lengths(mean=48, sd=12), Lengths(mean=16, sd=4),
                        seed=3, max_model_len=96)  # fmt: skip
    assert prompts == again  # deterministic per seed
    assert len({p.prompt for p in prompts}) == 24  # non-overlapping slices
    assert all(p.prompt_tokens + p.output_tokens <= 96 for p in prompts)
    assert len({p.output_tokens for p in prompts}) > 1  # drawn, not constant
    corpus = (REPO / "harness" / "data" / "corpus" / "wiki.test.raw").read_text(encoding="utf-8")
    assert prompts[0].prompt.strip()[:20] in corpus
    path = write_dataset(prompts, tmp_path / "d.jsonl")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines[0] == {"prompt": prompts[0].prompt, "output_tokens": prompts[0].output_tokens}


def test_prompts_wrap_around_a_short_text_and_reject_impossible_lengths() -> None:
    prompts = cut_prompts(TINY_MODEL, 5, Lengths(mean=30), Lengths(mean=4),
                          text="The quick brown fox jumps over the lazy dog. ")  # fmt: skip
    assert len(prompts) == 5 and all(p.output_tokens == 4 for p in prompts)
    with pytest.raises(ValueError, match="max_model_len"):
        cut_prompts(TINY_MODEL, 2, Lengths(mean=8), Lengths(mean=64), max_model_len=32)
