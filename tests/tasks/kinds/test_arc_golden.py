"""ARC-Easy through the choice kind gives today's answers item by item: the 100 items the
default bench scores (``corpus.arc_items(100)``), as a ``choice`` task with ARC's prompt
("Question: …\\nAnswer:") and its " " + choice continuations, scored on the shipped tiny model
(transformers, CPU), pick the same choice on every item as the ARC path did before the kinds
existed (``tests/fixtures/arc_easy_tiny_golden.json``, its ``made_by`` says how it was made)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import corpus
from harness.backends.base import BackendOptions
from harness.spec.scenario import GroupKey
from harness.tasks import metrics
from harness.tasks.kinds import kind_of
from harness.tasks.spec import TaskItem, TaskSpec, render_prompt

pytestmark = pytest.mark.engine  # loads the tiny model on transformers

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "arc_easy_tiny_golden.json").read_text())


def arc_as_choice_task(n: int) -> TaskSpec:
    items = tuple(
        TaskItem(str(index), "all", {"query": item.query}, choices=tuple(item.choices),
                 gold=item.gold)
        for index, item in zip(corpus.arc_indices(n), corpus.arc_items(n), strict=True)
    )  # fmt: skip
    return TaskSpec(name="arc-easy", kind="choice", prompt="{query}\nAnswer:", scored=items)


def test_arc_through_the_choice_kind_picks_todays_answer_on_every_item() -> None:
    from harness.backends.transformers import TransformersBackend

    group = GroupKey(target="cpu", model="tiny-llama", revision="main", backend="transformers",
                     quantization="none", kv_cache_dtype="auto")  # fmt: skip
    tiny = ROOT / "harness" / "data" / "tiny-llama"
    backend = TransformersBackend(group, BackendOptions(device="cpu", model_path=str(tiny)))
    backend.load()
    task = arc_as_choice_task(GOLDEN["arc_items"])
    assert [int(i.id) for i in task.scored] == GOLDEN["index"]
    assert [i.gold for i in task.scored] == GOLDEN["gold"]
    prompts = [render_prompt(task, item) for item in task.scored]
    got = kind_of("choice").score(backend, task, prompts)
    assert [int(p) for p in got.predicted] == GOLDEN["pick"]
    assert got.correct.tolist() == GOLDEN["correct"]
    assert metrics.rate(got.correct) == pytest.approx(GOLDEN["acc"])  # 28 of 100 = 0.28
