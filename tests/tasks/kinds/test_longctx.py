"""The longctx kind, checked by hand: exact match on generated items' gold words (frequent words
in any order), the paired answer NLL per context, and the cached scoring path's arithmetic."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from harness.tasks import metrics
from harness.tasks.kinds import kind_of
from harness.tasks.kinds.longctx import is_match, split_prompt, with_answer_nll
from harness.tasks.longctx.entry import LongContextEntry
from harness.tasks.longctx_task import longctx_task

TOKENIZER = str(Path(__file__).resolve().parents[3] / "harness" / "data" / "tiny-llama")


def task(family: str = "single_needle", question: str = "after"):  # type: ignore[no-untyped-def]
    entry = LongContextEntry(longctx=family, contexts=[256, 512], items=2, haystack="noise",  # type: ignore[arg-type]
                             tokenizer=TOKENIZER, question=question)  # type: ignore[arg-type]  # fmt: skip
    return longctx_task(entry)


def test_exact_match_reads_the_first_gold_words_of_the_output() -> None:
    assert is_match(" 4368. The", ("4368",), orderless=False)
    assert is_match("4368", ("4368",), orderless=False)
    assert not is_match(" 436", ("4368",), orderless=False)
    assert not is_match(" 43688", ("4368",), orderless=False)
    assert is_match(" AJH UUK UEM.", ("AJH", "UUK", "UEM"), orderless=False)
    assert not is_match(" UUK AJH UEM", ("AJH", "UUK", "UEM"), orderless=False)
    assert is_match(" pepper, castle fabric", ("castle", "pepper", "fabric"), orderless=True)


def test_the_outcome_of_generated_items_by_hand() -> None:
    t = task()
    golds = [t.extra["gold_words"][i.id][0] for i in t.scored]
    # item 0 right, item 1 a wrong number, item 2 right with a trailing sentence, item 3 empty
    outputs = [f" {golds[0]}", " 0000", f" {golds[2]}. The", ""]
    outcome = kind_of("longctx").outcome(t, outputs)
    assert outcome.correct.tolist() == [True, False, True, False]
    assert outcome.category.tolist() == ["ctx-256", "ctx-256", "ctx-512", "ctx-512"]
    assert outcome.gold.tolist() == golds


def test_the_question_variants_split_what_the_cache_holds() -> None:
    after, agnostic = task(question="after"), task(question="agnostic")
    item = after.scored[0]
    v = item.values
    assert split_prompt(after, item) == (v["context"] + v["question"], v["prefix"])
    assert split_prompt(agnostic, agnostic.scored[0]) == (v["context"], v["question"] + v["prefix"])


def test_the_paired_answer_nll_per_context_by_hand() -> None:
    t = task()
    ref = kind_of("longctx").outcome(t, [" x"] * 4)
    cand = kind_of("longctx").outcome(t, [" x"] * 4)
    tokens = np.array([4, 4, 2, 2])
    ref = with_answer_nll(ref, np.array([4.0, 8.0, 2.0, 2.0]), tokens)
    cand = with_answer_nll(cand, np.array([4.0, 8.0, 4.0, 6.0]), tokens)
    score = metrics.summarize(t.name, t, cand, ref)
    by = {c.category: c for c in score.categories}
    # ctx-256: both items unchanged → ΔNLL 0; its NLL (4 + 8) / (4 + 4) = 1.5 nats/token
    assert by["ctx-256"].dnll == 0.0 and by["ctx-256"].answer_nll == pytest.approx(1.5)
    # ctx-512: (4 − 2 + 6 − 2) / (2 + 2) = 1.5 nats/token worse; NLL (4 + 6) / 4 = 2.5
    assert by["ctx-512"].dnll == pytest.approx(1.5)
    assert by["ctx-512"].answer_nll == pytest.approx(2.5)
    # overall: (0 + 0 + 2 + 4) / (4 + 4 + 2 + 2) = 0.5
    assert score.dnll == pytest.approx(0.5)
    assert by["ctx-512"].dnll_ci90_low is not None and by["ctx-512"].dnll_ci90_low > 0


def test_answer_nll_survives_the_run_folder_arrays() -> None:
    t = task()
    made = with_answer_nll(kind_of("longctx").outcome(t, [" x"] * 4),
                           np.array([1.0, 2.0, 3.0, 4.0]), np.array([1, 1, 2, 2]))  # fmt: skip
    back = metrics.from_arrays(metrics.to_arrays(t.name, made))[t.name]
    assert back.answer_nll is not None and back.answer_nll.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert back.answer_tokens is not None and back.answer_tokens.tolist() == [1, 1, 2, 2]


@pytest.mark.engine
def test_cached_scoring_of_a_uniform_model_is_n_times_ln_vocab() -> None:
    """A model whose logits are all zero gives every token log p = −ln V: the answer's NLL is
    its tokens × ln V, by hand, whatever the cache holds."""
    import torch

    from harness.tasks.longctx import engine

    class Flat:
        vocab = 8

        def __call__(self, input_ids, past_key_values=None, logits_to_keep=0):  # type: ignore[no-untyped-def]
            n = 1 if logits_to_keep else input_ids.shape[1]
            return type("Out", (), {"logits": torch.zeros(1, n, self.vocab)})()

    backend = type("B", (), {})()
    backend.torch, backend.device, backend.model = torch, "cpu", Flat()
    backend.encode = lambda text: [1] * len(text.split())
    backend._new_cache = lambda: None
    got = engine.score_cached(backend, [("a b c", "d e", "f g h")])
    # the answer "f g h" is 3 tokens: 3 × ln 8 = 6.238 nats
    assert got == [(pytest.approx(3 * math.log(8)), 3)]
