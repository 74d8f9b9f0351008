"""The long-context generators: deterministic per seed, at the stated length (the shipped
tokenizer's count), the needle at its depth, the gold answer in the context, train and evaluation
seeds apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.tasks.longctx import (
    FAMILIES,
    frequent_words,
    multi_key,
    single_needle,
    variable_tracking,
)
from harness.tasks.longctx.base import EVAL_SEED_END, TRAIN_SEED_START
from harness.tasks.longctx.entry import LongContextEntry
from harness.tasks.longctx_task import context_label, context_of, longctx_task, token_counter
from harness.tasks.spec import render_prompt, render_target

ROOT = Path(__file__).resolve().parents[3]

TOKENIZER = str(ROOT / "harness" / "data" / "tiny-llama")


@pytest.fixture(scope="module")
def count():  # type: ignore[no-untyped-def]
    return token_counter(TOKENIZER)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_same_seed_gives_the_same_item_and_another_seed_another(family, count) -> None:  # type: ignore[no-untyped-def]
    make = FAMILIES[family]
    first = make(7, 512, 0.5, "text", "eval", count)
    assert make(7, 512, 0.5, "text", "eval", count) == first
    assert make(8, 512, 0.5, "text", "eval", count) != first


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("tokens", [256, 1024, 4096])
def test_an_item_fills_its_context_length_without_passing_it(family, tokens, count) -> None:  # type: ignore[no-untyped-def]
    item = FAMILIES[family](3, tokens, 0.25, "text", "eval", count)
    used = count(item.prompt() + item.answer)
    # the haystack takes the length less 1 % + 8 tokens of margin and the facts: at most
    # `tokens`, and within 10 % of it
    assert 0.9 * tokens <= used <= tokens


@pytest.mark.parametrize("depth", [0.0, 0.5, 1.0])
def test_the_needle_sits_at_its_depth(depth: float, count) -> None:  # type: ignore[no-untyped-def]
    item = single_needle.make(1, 2048, depth, "noise", "eval", count)
    needle = item.context.index("special magic number")
    # the noise filler is uniform, so the needle's character offset tracks its depth: within 5 %
    assert abs(needle / len(item.context) - depth) < 0.05


def test_a_single_needle_item_asks_for_the_number_its_needle_states(count) -> None:  # type: ignore[no-untyped-def]
    item = single_needle.make(0, 512, 0.5, "noise", "eval", count)
    key = item.prefix.split(" for ")[1].removesuffix(" is")
    assert f"The special magic number for {key} is {item.gold[0]}." in item.context
    assert item.answer == " " + item.gold[0] and len(item.gold[0]) == 4


def test_multi_key_decoys_are_other_keys_with_other_numbers(count) -> None:  # type: ignore[no-untyped-def]
    item = multi_key.make(5, 1024, 0.3, "text", "eval", count)
    assert item.context.count("The special magic number for") == multi_key.KEYS
    questions = multi_key.decoy_questions(item)
    assert questions[0] == (item.question, item.prefix, item.answer)
    assert len({q for q, _, _ in questions}) == multi_key.KEYS


def test_frequent_words_gold_is_the_three_most_frequent_most_first(count) -> None:  # type: ignore[no-untyped-def]
    item = frequent_words.make(2, 1024, 0.0, "text", "eval", count)
    words = item.context.replace(".", " ").split()
    ranked = sorted(set(words), key=words.count, reverse=True)
    assert item.gold == tuple(ranked[:3])
    assert words.count(ranked[2]) > words.count(ranked[3])  # strictly ahead of the fourth


def test_train_and_evaluation_seeds_never_meet() -> None:
    assert EVAL_SEED_END <= TRAIN_SEED_START
    with pytest.raises(ValueError, match="less than"):
        LongContextEntry(longctx="single_needle", contexts=[512], seed=EVAL_SEED_END,
                         tokenizer=TOKENIZER)  # fmt: skip


def test_a_task_has_one_category_per_context_and_renders_prompt_then_answer() -> None:
    entry = LongContextEntry(longctx="single_needle", contexts=[1024, 512], items=3,
                             tokenizer=TOKENIZER, haystack="noise")  # fmt: skip
    task = longctx_task(entry)
    assert entry.contexts == [512, 1024]  # sorted
    assert [i.category for i in task.scored] == ["ctx-512"] * 3 + ["ctx-1024"] * 3
    assert context_of(context_label(4096)) == 4096 and context_of("all") is None
    first = task.scored[0]
    prompt = render_prompt(task, first)
    assert prompt.endswith("\nAnswer: " + first.values["prefix"].split("Answer: ")[1])
    assert render_target(task, first) == first.label
    assert task.extra["seeds"] == [0, 3]


def test_an_entry_with_a_context_out_of_range_names_the_range() -> None:
    with pytest.raises(ValueError, match="expected 128 to 131,072 tokens"):
        LongContextEntry(longctx="single_needle", contexts=[64], tokenizer=TOKENIZER)


def test_the_leak_report_flags_a_task_whose_seeds_a_model_trained_on() -> None:
    from harness.modes.training import leakage

    trained = {"tiny-llama-retrieval": (TRAIN_SEED_START, TRAIN_SEED_START + 5000)}
    apart = leakage.seed_leaks([("longctx-a", (0, 20))], trained)
    assert apart[0]["shared"] == 0 and leakage.leaked_seeds(apart) == []
    # seeds [TRAIN_SEED_START + 4990, + 5010) share 10 with the training range's last 10
    start = TRAIN_SEED_START + 4990
    overlap = leakage.seed_leaks([("longctx-b", (start, start + 20))], trained)
    assert overlap[0]["shared"] == 10
    assert "uses 10 generator seed(s)" in leakage.leaked_seeds(overlap)[0]


def test_variable_tracking_gold_is_the_chain_from_the_number_in_order(count) -> None:  # type: ignore[no-untyped-def]
    item = variable_tracking.make(4, 1024, 0.2, "noise", "eval", count)
    number = item.question.split("value ")[1].removesuffix("?")
    first, second, third = item.gold
    assert f" VAR {first} = {number}." in item.context
    assert f" VAR {second} = VAR {first}." in item.context
    assert f" VAR {third} = VAR {second}." in item.context
    # the chain is written in order: each assignment after the one it reads
    assert item.context.index(f"VAR {second} =") > item.context.index(f"VAR {first} =")
