"""ARC-Easy through the shipped ``arc-easy`` task gives today's answers item by item: the 100
items the default bench scores (``harness.tasks.arc.arc_task(100)``, ARC's prompt
"Question: …\\nAnswer:" and its " " + choice continuations, through the ``choice`` kind) on the
shipped tiny model (transformers, CPU) pick the same choice, plain and length-normalised, on
every item as the ARC path did before the kinds existed
(``tests/fixtures/arc_easy_tiny_golden.json``, its ``made_by`` says how it was made); and the
offline quality phase's ARC figures and kept answers are those."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.backends.base import BackendOptions, WindowScores
from harness.row import Quality
from harness.spec.scenario import GroupKey
from harness.tasks import metrics
from harness.tasks.arc import arc_task
from harness.tasks.kinds import kind_of
from harness.tasks.spec import render_prompt

pytestmark = pytest.mark.engine  # loads the tiny model on transformers

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "arc_easy_tiny_golden.json").read_text())


@pytest.fixture(scope="module")
def backend() -> Iterator[Any]:
    from harness.backends.transformers import TransformersBackend

    group = GroupKey(target="cpu", model="tiny-llama", revision="main", backend="transformers",
                     quantization="none", kv_cache_dtype="auto")  # fmt: skip
    tiny = ROOT / "harness" / "data" / "tiny-llama"
    loaded = TransformersBackend(group, BackendOptions(device="cpu", model_path=str(tiny)))
    loaded.load()
    yield loaded
    loaded.close()


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


def test_the_offline_quality_phase_fills_todays_arc_figures_and_answers(backend: Any) -> None:
    from harness.modes.offline.device.run import measure_arc

    empty = np.zeros(0)
    scores = WindowScores(nll_sum=empty, tokens=empty, argmax=empty, topk_ids=empty,
                          topk_logprobs=empty)  # fmt: skip
    out = Quality()
    measure_arc(backend, GOLDEN["arc_items"], out, scores)
    assert (out.arc_acc, out.arc_acc_norm, out.arc_items) == (0.28, 0.27, 100)  # 28, 27 of 100
    assert scores.arc_index is not None and scores.arc_index.tolist() == GOLDEN["index"]
    assert scores.arc_correct is not None
    assert scores.arc_correct[:, 0].tolist() == GOLDEN["correct"]
    assert scores.arc_correct[:, 1].tolist() == GOLDEN["correct_norm"]
