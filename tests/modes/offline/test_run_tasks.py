"""Tasks scored on the group's own engine (the shipped tiny model, transformers): rows carry
per-category figures, the per-item results travel beside the window scores, and a candidate
pairs with the reference item by item (classify) and field by field (extract)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.row import ResultRow
from harness.run.contracts import WorkContext
from harness.run.store import load_scores, load_window_tasks, reference_artifact
from harness.run.worker import measure_group
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Point, Reference
from harness.tasks import metrics
from harness.tasks.builtin import SNIPS_INTENTS

# Loads an engine or starts Ray: not in `make test-fast` (tests/conftest.py).
pytestmark = pytest.mark.engine

QUALITY = QualitySettings.model_validate(
    {
        "window_tokens": 64,
        "max_windows": 2,
        "arc_items": 0,
        "bootstrap_samples": 50,
        "tasks": [
            {"name": "snips-intent", "per_category": 2},
            {"name": "snips-slots", "per_category": 1},
        ],
    }
)


def context(tmp_path: Path) -> WorkContext:
    return WorkContext(
        run_dir=str(tmp_path),
        run="t",
        reference=Reference(),
        quality=QUALITY,
        reference_backend="transformers",
    )


def point(**kw: Any) -> Point:
    base: dict[str, Any] = dict(
        model="tiny-llama",
        backend="transformers",
        quantization="none",
        kv_cache_dtype="auto",
        batch=1,
        context=16,
        output_tokens=2,
        target="cpu",
        repeats=1,
        warmups=0,
        window_tokens=QUALITY.window_tokens,
        max_windows=QUALITY.max_windows,
    )
    return Point.model_validate({**base, **kw})


def run(tmp_path: Path, p: Point) -> ResultRow:
    (row,) = measure_group(p.group, [p], context(tmp_path), lambda _: None)
    assert row.status == "ok", row.error
    return row


def test_tasks_are_scored_paired_and_kept_beside_the_window_scores(tmp_path: Path) -> None:
    ref = run(tmp_path, point())
    assert ref.tasks is not None
    intent, slots = ref.tasks
    assert intent.name == "snips-intent" and intent.items == 14 and slots.items == 7
    assert [c.category for c in intent.categories] == sorted(SNIPS_INTENTS)
    assert all(c.items == 2 for c in intent.categories)
    assert intent.score is not None and 0.0 <= intent.score <= 1.0
    assert intent.confusion is not None and sum(map(sum, intent.confusion)) == 14
    assert slots.json_valid is not None and 0.0 <= slots.json_valid <= 1.0
    assert slots.field_f1 is not None and slots.required_present is not None
    # the reference against itself: no change, every unit paired
    assert intent.diff == 0.0 and intent.paired_units == 14
    assert slots.diff == 0.0 and slots.paired_units == slots.units
    saved = load_scores(reference_artifact(context(tmp_path), point().group))
    assert saved is not None and saved.task_arrays is not None
    stored = metrics.from_arrays(saved.task_arrays)
    assert set(stored) == {"snips-intent", "snips-slots"}
    assert stored["snips-slots"].predicted.size == 7  # the outputs, for the error analysis

    cand = run(tmp_path, point(kv_cache_dtype="int8"))
    assert cand.tasks is not None
    c_intent, c_slots = cand.tasks
    assert c_intent.paired_units == 14 and c_intent.ref_rate == intent.unit_rate
    assert c_slots.paired_units == slots.units  # one unit per gold field
    assert c_intent.diff_ci90_low is not None and c_intent.diff_ci90_high is not None
    assert c_intent.diff_ci90_low <= (c_intent.diff or 0.0) <= c_intent.diff_ci90_high
    assert c_intent.worst_category in SNIPS_INTENTS
    kept = load_window_tasks(tmp_path, cand.group or "")
    assert kept is not None and "task__snips-intent__correct" in kept
