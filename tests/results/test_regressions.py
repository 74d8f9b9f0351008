"""Error analysis vs the reference: McNemar by hand, a planted regression found exactly per task
(a choice task and an extract one, whose units are its gold fields), an old run's ARC answers,
the published regressions.csv and report sections, and a real run of the tiny model."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.typing import NDArray

from harness import corpus
from harness.atomic import atomic_write_bytes
from harness.results import regressions as reg
from harness.results.aggregate import aggregate_run
from harness.results.publish import report
from harness.row import ResultRow
from harness.run.store import window_scores_path, write_row
from harness.tasks import metrics
from harness.tasks.arc import arc_task
from harness.tasks.spec import TaskItem, TaskSpec
from tests import factories as F

# --------------------------------------------------------------------------- McNemar by hand


def test_mcnemar_exact_equals_the_hand_computation() -> None:
    # b=7, c=1: 2 · P(X ≤ 1 | n=8, ½) = 2 · (1 + 8) / 256
    assert reg.mcnemar_exact(7, 1) == 0.0703125
    assert reg.mcnemar_exact(1, 7) == 0.0703125  # two-sided: symmetric
    assert reg.mcnemar_exact(10, 0) == 2 / 1024
    assert reg.mcnemar_exact(0, 0) == 1.0  # no discordant pair: no evidence
    assert reg.mcnemar_exact(5, 5) == 1.0  # capped at 1
    with pytest.raises(ValueError):
        reg.mcnemar_exact(-1, 2)


# --------------------------------------------------------------------------- a planted regression

WINDOW_TOKENS, WINDOWS = 64, 4
REF_NLL = np.array([300.0, 310.0, 320.0, 330.0])
OWN_NLL = np.array([300.0, 400.0, 321.0, 330.0])  # window at position 1 is 90 nats worse
TOKENS = np.full(WINDOWS, WINDOW_TOKENS - 1.0)
ARC = arc_task(6)  # six ARC items spread over the file; their ids are their file indices
ARC_IDS = [item.id for item in ARC.scored]
SLOTS = TaskSpec(name="slots", kind="extract", prompt="{text}", scored=(
    TaskItem("a", "all", {"text": "x"}, target_fields={"city": "Paris", "day": "monday"}),
    TaskItem("b", "all", {"text": "y"}, target_fields={"city": "Rome", "time": "noon"}),
))  # fmt: skip


def arc_outcome(right: list[int]) -> metrics.Outcome:
    """ARC's outcome where item i is answered right when right[i] (its gold choice has the
    highest log-likelihood), else wrong (the next choice has)."""
    loglik = []
    for item, ok in zip(ARC.scored, right, strict=True):
        pick = item.gold if ok else ((item.gold or 0) + 1) % len(item.choices or ())
        loglik.append([0.0 if k == pick else -1.0 for k in range(len(item.choices or ()))])
    return metrics.outcome_of(ARC, loglik)


def keep(run_dir: Path, group: str, nll: NDArray[Any], **outcomes: metrics.Outcome) -> None:
    """What the worker keeps for a group (harness.run.store.keep_scores): its window scores and
    each task's arrays (metrics.to_arrays)."""
    arrays: dict[str, Any] = {"nll_sum": nll, "tokens": TOKENS}
    for name, outcome in outcomes.items():
        arrays.update(metrics.to_arrays(name, outcome))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write_bytes(window_scores_path(run_dir, group), buffer.getvalue())


def write_pair(run_dir: Path) -> None:
    """A reference and one 4-bit configuration of it, rows only."""
    quality = {"window_tokens": WINDOW_TOKENS, "quality_windows": WINDOWS, "target": "cpu",
               "gpu": "cpu"}  # fmt: skip
    F.write_run(run_dir, [
        F.reference(group="ref", **quality),
        F.row(group="int4", quantization="quanto-int4", **{**F.quality(105.0), **quality}),
    ])  # fmt: skip


def planted_run(run_dir: Path) -> None:
    """ARC: reference right on items 0..5 = [1, 1, 1, 0, 1, 0], the configuration
    [0, 1, 0, 0, 1, 1]. Slots (extract, unit = gold field): the reference hits every field but
    b's time, the configuration only b's time. The configuration also scored a task its
    reference did not ("extra"): no flips row for it."""
    write_pair(run_dir)
    ref_slots = metrics.outcome_of(SLOTS, ['{"city": "Paris", "day": "monday"}',
                                           '{"city": "Rome", "time": "dusk"}'])  # fmt: skip
    own_slots = metrics.outcome_of(SLOTS, ['{"city": "Lyon", "day": "friday"}',
                                           '{"city": "Milan", "time": "noon"}'])  # fmt: skip
    keep(run_dir, "ref", REF_NLL, **{"arc-easy": arc_outcome([1, 1, 1, 0, 1, 0]),
                                     "slots": ref_slots})  # fmt: skip
    keep(run_dir, "int4", OWN_NLL, **{"arc-easy": arc_outcome([0, 1, 0, 0, 1, 1]),
                                      "slots": own_slots, "extra": own_slots})  # fmt: skip


def flips_of(run_dir: Path) -> dict[str, dict[str, Any]]:
    found = aggregate_run(run_dir).regressions
    assert found is not None
    return {str(r["task"]): {str(k): v for k, v in r.items()}
            for r in found.flips.to_dict(orient="records")}  # fmt: skip


@pytest.mark.engine  # the error analysis loads the model's tokenizer (transformers) for excerpts
def test_a_planted_regression_is_found_per_task_with_its_mcnemar_p(tmp_path: Path) -> None:
    planted_run(tmp_path)
    flips = flips_of(tmp_path)
    assert sorted(flips) == ["arc-easy", "slots"]  # "extra": the reference did not score it
    arc = flips["arc-easy"]
    assert (arc["group"], arc["reference_group"], arc["quantization"]) == (
        "int4",
        "ref",
        "quanto-int4",
    )
    # six items paired; right → wrong on items 0 and 2 (b = 2), wrong → right on 5 (c = 1)
    assert (arc["units_paired"], arc["right_to_wrong"], arc["wrong_to_right"]) == (6, 2, 1)
    assert arc["right_to_wrong_ids"] == f"arc-easy:{ARC_IDS[0]} arc-easy:{ARC_IDS[2]}"
    assert arc["wrong_to_right_ids"] == f"arc-easy:{ARC_IDS[5]}"
    # p = min(1, 2 · P(X ≤ 1)), X ~ Bin(3, ½): 2 · (1 + 3) / 8 = 1.0
    assert arc["mcnemar_p_exact"] == 1.0
    assert "McNemar exact" in arc["test"]


@pytest.mark.engine  # the error analysis loads the model's tokenizer (transformers) for excerpts
def test_an_extract_task_flips_its_gold_fields(tmp_path: Path) -> None:
    planted_run(tmp_path)
    slots = flips_of(tmp_path)["slots"]
    # units: a's city and day, b's city and time (4); the reference hit all but b's time, the
    # configuration only b's time: right → wrong a/city, a/day, b/city (b = 3), wrong → right
    # b/time (c = 1); p = 2 · P(X ≤ 1), X ~ Bin(4, ½) = 2 · (1 + 4) / 16 = 0.625
    assert (slots["units_paired"], slots["right_to_wrong"], slots["wrong_to_right"]) == (4, 3, 1)
    assert slots["right_to_wrong_ids"] == "slots:a/city slots:a/day slots:b/city"
    assert slots["wrong_to_right_ids"] == "slots:b/time"
    assert slots["mcnemar_p_exact"] == 0.625


@pytest.mark.engine  # the error analysis loads the model's tokenizer (transformers) for excerpts
def test_the_summary_keeps_the_windows_and_the_items_the_task_rows(tmp_path: Path) -> None:
    planted_run(tmp_path)
    found = aggregate_run(tmp_path).regressions
    assert found is not None
    assert list(found.summary.columns) == reg.SUMMARY_COLUMNS
    assert not {"arc_items_paired", "right_to_wrong", "mcnemar_p_exact"} & set(reg.SUMMARY_COLUMNS)
    (summary,) = found.summary.to_dict(orient="records")
    assert summary["windows_paired"] == WINDOWS
    # (300 + 400 + 321 + 330 − 300 − 310 − 320 − 330) / (4 · 63) = 91 / 252
    assert summary["dnll_nats_per_token"] == pytest.approx(91 / 252)
    assert "task" not in summary["note"]  # both kept task results
    kinds = set(found.items["kind"])
    assert kinds <= {"window", "task:arc-easy", "task:slots", "task:extra"} and "arc" not in kinds
    arc = found.items[found.items["kind"] == "task:arc-easy"]
    assert list(zip(arc["item"], arc["change"], strict=True)) == [
        (f"arc-easy:{ARC_IDS[0]}", "right_to_wrong"), (f"arc-easy:{ARC_IDS[2]}", "right_to_wrong"),
        (f"arc-easy:{ARC_IDS[5]}", "wrong_to_right"),
    ]  # fmt: skip
    # extract lists every item it got wrong: a and b (each has a field that differs)
    slots = found.items[found.items["kind"] == "task:slots"]
    assert list(slots["item"]) == ["slots:a", "slots:b"]


@pytest.mark.engine  # the excerpts decode windows with the model's transformers tokenizer
def test_the_worst_windows_come_first_with_their_text(tmp_path: Path) -> None:
    planted_run(tmp_path)
    found = aggregate_run(tmp_path).regressions
    assert found is not None
    windows = found.items[found.items["kind"] == "window"]
    assert len(windows) == WINDOWS  # fewer windows than TOP_WINDOWS: all of them, worst first
    deltas = windows["dnll_nats_per_token"].to_numpy()
    assert deltas[0] == pytest.approx(90 / 63) and list(deltas) == sorted(deltas, reverse=True)
    tokens = corpus.tokenize_eval(str(corpus.CORPUS_DIR.parent / "tiny-llama"))
    k = corpus.evenly_spaced(len(tokens) // WINDOW_TOKENS, WINDOWS)[1]
    assert windows["item"].iloc[0] == f"window:{k}"
    assert len(windows["excerpt"].iloc[0]) > 20
    (summary,) = found.summary.to_dict(orient="records")
    assert summary["dnll_nats_per_token"] == pytest.approx(91 / (4 * 63))
    assert summary["worst_window"] == f"window:{k}"


@pytest.mark.engine  # the error analysis loads the model's tokenizer (transformers) for excerpts
def test_regressions_are_published_as_csv_and_in_both_reports(tmp_path: Path) -> None:
    planted_run(tmp_path)
    published = report(tmp_path, None)
    table = pd.read_csv(published / "regressions.csv")
    assert set(table["item"]) >= {f"arc-easy:{ARC_IDS[0]}", f"arc-easy:{ARC_IDS[2]}"}
    assert {"right_to_wrong", "wrong_to_right", "largest_dnll"} <= set(table["change"])
    page = (published / "report.html").read_text()
    assert "Error analysis against the reference" in page and "McNemar exact" in page
    assert "Flips per task" in page
    readme = (published / "README.md").read_text()
    assert "## Error analysis against the reference" in readme and "### Flips per task" in readme
    assert "0.625" in readme  # the slots task's p


def test_a_run_without_kept_task_results_says_so(tmp_path: Path) -> None:
    quality = {"window_tokens": WINDOW_TOKENS, "quality_windows": WINDOWS}
    F.write_run(tmp_path, [F.reference(group="ref", **quality),
                           F.row(group="int4", quantization="quanto-int4", **quality)])  # fmt: skip
    found = aggregate_run(tmp_path).regressions
    assert found is not None
    (summary,) = found.summary.to_dict(orient="records")
    assert summary["note"].startswith("no per-item task results kept; no paired window scores")
    assert "ARC" not in summary["note"]
    assert found.flips.empty and list(found.flips.columns) == reg.FLIPS_COLUMNS
    assert found.items.empty


@pytest.mark.engine  # the error analysis loads the model's tokenizer (transformers) for excerpts
def test_a_reference_without_task_results_gives_no_flips_row_and_says_why(tmp_path: Path) -> None:
    write_pair(tmp_path)
    keep(tmp_path, "ref", REF_NLL)
    keep(tmp_path, "int4", OWN_NLL, **{"arc-easy": arc_outcome([1, 1, 1, 0, 1, 0])})
    found = aggregate_run(tmp_path).regressions
    assert found is not None
    assert found.flips.empty
    (summary,) = found.summary.to_dict(orient="records")
    assert summary["note"].startswith("no task scored by both it and its reference")


def keep_old_style(run_dir: Path, group: str, nll: NDArray[Any], right: list[int]) -> None:
    """A group's file as a run before ARC was a task kept it: window scores and per ARC item
    its file index and [acc, acc_norm] hits (no task arrays)."""
    hits = np.zeros((len(right), 2), dtype=bool)
    hits[:, 0] = right
    index = np.array([int(i) for i in ARC_IDS], dtype=np.int64)
    buffer = io.BytesIO()
    np.savez(buffer, nll_sum=nll, tokens=TOKENS, arc_index=index, arc_correct=hits)
    atomic_write_bytes(window_scores_path(run_dir, group), buffer.getvalue())


@pytest.mark.engine  # the error analysis loads the model's tokenizer (transformers) for excerpts
def test_an_old_runs_arc_answers_give_an_arc_easy_flips_row(tmp_path: Path) -> None:
    # needs harness.run.store.load_window_tasks to read arc_index / arc_correct as the
    # arc-easy task's arrays (the conversion of runs kept before ARC was a task)
    write_pair(tmp_path)
    keep_old_style(tmp_path, "ref", REF_NLL, [1, 1, 1, 0, 1, 0])
    keep_old_style(tmp_path, "int4", OWN_NLL, [0, 1, 0, 0, 1, 1])
    (arc,) = flips_of(tmp_path).values()
    # the same hits as the planted run: b = 2 (items 0, 2), c = 1 (item 5), p = 1.0
    assert arc["task"] == "arc-easy"
    assert (arc["units_paired"], arc["right_to_wrong"], arc["wrong_to_right"]) == (6, 2, 1)
    assert arc["right_to_wrong_ids"] == f"arc-easy:{ARC_IDS[0]} arc-easy:{ARC_IDS[2]}"
    assert arc["mcnemar_p_exact"] == 1.0


def test_flips_pair_by_unit_key_in_the_configurations_order() -> None:
    # the reference scored a, z, m; the configuration m, q, z, a: three paired (q is not)
    ref = item_outcome(["a", "z", "m"], [True, True, False])
    own = item_outcome(["m", "q", "z", "a"], [True, False, False, False])
    found = reg.unit_flips(ref, own)
    # z and a right → wrong, in the configuration's order (z before a); m wrong → right
    assert (found.paired, found.right_to_wrong, found.wrong_to_right) == (3, ["z", "a"], ["m"])
    # b = 2, c = 1: 2 · (1 + 3) / 8 = 1.0
    assert found.p_value == 1.0


def item_outcome(ids: list[str], correct: list[bool]) -> metrics.Outcome:
    """A classify outcome of items ``ids`` (the unit is the item)."""
    items = tuple(TaskItem(i, "x", {"text": "t"}, label="x") for i in ids)
    task = TaskSpec(name="t", kind="classify", prompt="{text}", labels=("x", "y"), scored=items)
    return metrics.outcome_of(task, [[0.0, -1.0] if ok else [-1.0, 0.0] for ok in correct])


# --------------------------------------------------------------------------- the real engine


@pytest.mark.engine
def test_a_real_tiny_model_run_gets_a_regressions_table(tmp_path: Path) -> None:
    """The worker on the shipped model: the reference and a 4-bit configuration, their rows
    written as a run writes them, aggregated and published."""
    from harness.run.contracts import WorkContext
    from harness.run.worker import measure_group
    from harness.spec.quality import QualitySettings
    from harness.spec.scenario import Reference
    from tests.run.test_worker import point

    quality = QualitySettings(window_tokens=64, max_windows=4, arc_items=16, bootstrap_samples=50)
    ctx = WorkContext(run_dir=str(tmp_path), run="t", reference=Reference(), quality=quality,
                      reference_backend="transformers")  # fmt: skip

    def write(row: ResultRow) -> None:
        write_row(tmp_path, row)

    for quantization in ("none", "quanto-int4"):
        p = point(quantization=quantization)
        measure_group(p.group, [p], ctx, write)
    published = report(tmp_path, None)
    table = pd.read_csv(published / "regressions.csv")
    found = aggregate_run(tmp_path).regressions
    assert found is not None
    (summary,) = found.summary.to_dict(orient="records")
    assert summary["quantization"] == "quanto-int4" and summary["windows_paired"] == 4
    (arc,) = found.flips[found.flips["task"] == "arc-easy"].to_dict(orient="records")
    assert arc["units_paired"] == 16
    b, c = int(arc["right_to_wrong"]), int(arc["wrong_to_right"])
    assert arc["mcnemar_p_exact"] == reg.mcnemar_exact(b, c)
    windows = table[table["kind"] == "window"]
    assert len(windows) == 4 and windows["excerpt"].str.len().min() > 20
    assert len(table[table["kind"] == "task:arc-easy"]) == b + c
