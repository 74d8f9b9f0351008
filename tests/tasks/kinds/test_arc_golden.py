"""ARC-Easy through the shipped ``arc-easy`` task gives today's answers item by item: the 100
items the default bench scores (``harness.tasks.arc.arc_task(100)``, ARC's prompt
"Question: …\\nAnswer:" and its " " + choice continuations, through the ``choice`` kind) on the
shipped tiny model (transformers, CPU) pick the same choice, plain and length-normalised, on
every item as the ARC path did before the kinds existed
(``tests/fixtures/arc_easy_tiny_golden.json``, its ``made_by`` says how it was made); and the
offline quality phase, which scores ARC as a task like any other, keeps those figures and
answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.spec.quality import QualitySettings
from harness.tasks import metrics
from harness.tasks.arc import arc_task
from harness.tasks.kinds import kind_of
from harness.tasks.spec import render_prompt

pytestmark = pytest.mark.engine  # loads the tiny model on transformers

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "arc_easy_tiny_golden.json").read_text())


@pytest.fixture
def backend(tiny_backend: Any) -> Any:
    return tiny_backend


def test_arc_through_the_choice_kind_picks_todays_answer_on_every_item(backend: Any) -> None:
    task = arc_task(GOLDEN["arc_items"])
    assert [int(i.id) for i in task.scored] == GOLDEN["index"]
    assert [i.gold for i in task.scored] == GOLDEN["gold"]
    prompts = [render_prompt(task, item) for item in task.scored]
    got = kind_of("choice").score(backend, task, prompts)
    assert [int(p) for p in got.predicted] == GOLDEN["pick"]
    assert got.correct.tolist() == GOLDEN["correct"]
    assert got.correct_norm is not None and got.correct_norm.tolist() == GOLDEN["correct_norm"]
    assert metrics.rate(got.correct) == pytest.approx(GOLDEN["acc"])  # 28 of 100 = 0.28
    assert metrics.rate(got.correct_norm) == pytest.approx(GOLDEN["acc_norm"])  # 27 of 100


def test_the_offline_quality_phase_scores_arc_as_a_task_with_todays_figures(backend: Any) -> None:
    """The scenario's ``arc_items`` becomes the ``arc-easy`` task, scored and kept like any task
    (the reference's own group: paired with itself, no drop)."""
    from harness.modes.offline.device.run import measure_tasks

    tasks = QualitySettings(arc_items=GOLDEN["arc_items"]).scored_tasks()
    part, arrays = measure_tasks(backend, tasks, None, reference=True)
    assert part.tasks is not None
    (arc,) = part.tasks
    assert (arc.name, arc.kind, arc.items) == ("arc-easy", "choice", 100)
    assert (arc.score, arc.acc_norm) == (0.28, 0.27)  # 28 and 27 of 100
    assert (arc.diff, arc.paired_units, arc.ref_rate) == (0.0, 100, 0.28)
    (kept,) = metrics.from_arrays(arrays).values()
    assert [int(i) for i in kept.item_id] == GOLDEN["index"]
    assert kept.correct.tolist() == GOLDEN["correct"]
    assert kept.correct_norm is not None and kept.correct_norm.tolist() == GOLDEN["correct_norm"]
