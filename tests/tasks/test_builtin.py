"""The shipped SNIPS tasks: disjoint splits of the stated sizes, the one rendering of prompts."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from harness.errors import UserInputError
from harness.tasks.builtin import SNIPS_INTENTS, builtin_task, snips_split, tasks_of
from harness.tasks.spec import BuiltinEntry, render_prompt, render_target


def test_the_three_splits_are_disjoint_and_of_the_stated_sizes() -> None:
    ids = {name: {i.id for i in snips_split(name)} for name in ("fewshot", "scored", "train")}
    assert {k: len(v) for k, v in ids.items()} == {"fewshot": 70, "scored": 210, "train": 420}
    assert not ids["fewshot"] & ids["scored"]
    assert not ids["train"] & (ids["scored"] | ids["fewshot"])
    per_intent = Counter(i.category for i in snips_split("scored"))
    assert per_intent == dict.fromkeys(SNIPS_INTENTS, 30)


def test_the_splits_follow_the_file_order_within_each_intent() -> None:
    scored = [i.id for i in snips_split("scored") if i.category == "GetWeather"]
    assert scored[0] == "GetWeather-010" and scored[-1] == "GetWeather-039"
    assert snips_split("train")[0].id == "AddToPlaylist-040"


def test_an_unknown_split_is_refused() -> None:
    with pytest.raises(ValueError, match="train"):
        snips_split("test")  # type: ignore[arg-type]


def test_the_intent_prompt_and_answer() -> None:
    task = builtin_task("snips-intent")
    item = task.scored[0]
    assert render_prompt(task, item) == f"Utterance: {item.values['text']}\nIntent:"
    assert render_target(task, item) == " AddToPlaylist"
    assert task.labels == SNIPS_INTENTS


def test_the_slots_answer_is_sorted_json_with_non_ascii_kept() -> None:
    task = builtin_task("snips-slots")
    item = next(i for i in task.scored if "á" in json.dumps(i.target_fields, ensure_ascii=False))
    target = render_target(task, item)
    assert target.startswith(" {") and "á" in target
    assert json.loads(target) == item.target_fields
    assert list(json.loads(target)) == sorted(item.target_fields or {})
    assert task.required_of(item) == tuple(item.target_fields or {})


def test_few_shot_examples_come_round_robin_from_the_pool() -> None:
    task = builtin_task("snips-intent", shots=8)
    shots = task.shot_items()
    assert [s.category for s in shots[:7]] == list(SNIPS_INTENTS)
    assert shots[7].category == SNIPS_INTENTS[0]
    assert not {s.id for s in shots} & {i.id for i in task.scored}


def test_a_scenario_may_score_fewer_items_per_intent() -> None:
    (task,) = tasks_of([BuiltinEntry(name="snips-slots", per_category=2)])
    assert len(task.scored) == 14 and Counter(i.category for i in task.scored)["RateBook"] == 2


def test_two_tasks_of_one_name_are_refused() -> None:
    with pytest.raises(UserInputError, match="two tasks"):
        tasks_of(["snips-intent", BuiltinEntry(name="snips-intent", shots=1)])
