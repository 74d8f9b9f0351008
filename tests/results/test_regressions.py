"""Error analysis vs the reference: McNemar by hand, a planted regression found exactly, the
published regressions.csv and report sections, and a real run of the tiny model."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import corpus
from harness.atomic import atomic_write_bytes
from harness.results import regressions as reg
from harness.results.aggregate import aggregate_run
from harness.results.publish import report
from harness.run.store import window_scores_path, write_row
from harness.tasks.arc import arc_rows, arc_task
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

N_ARC = 20
WINDOW_TOKENS, WINDOWS = 64, 4
REF_NLL = np.array([300.0, 310.0, 320.0, 330.0])
OWN_NLL = np.array([300.0, 400.0, 321.0, 330.0])  # window at position 1 is 90 nats worse
TOKENS = np.full(WINDOWS, WINDOW_TOKENS - 1.0)


def arc_index(n: int) -> list[int]:
    """The file indices of the ARC items a bench of ``n`` scores."""
    return [int(item.id) for item in arc_task(n).scored]


def keep(run_dir: Path, group: str, nll: np.ndarray, hits: np.ndarray) -> None:
    """What the worker keeps for a group (harness.run.store.keep_scores), written by hand."""
    buffer = io.BytesIO()
    index = np.asarray(arc_index(N_ARC))
    np.savez(buffer, nll_sum=nll, tokens=TOKENS, arc_index=index, arc_correct=hits)
    atomic_write_bytes(window_scores_path(run_dir, group), buffer.getvalue())


def planted_run(run_dir: Path) -> tuple[list[int], list[int]]:
    """Reference right on items 0-11; the configuration flips 7 of them to wrong and one wrong
    item to right (b=7, c=1). Its length-normalised answers differ elsewhere, which must not
    count: the flips are on arc_acc's criterion."""
    index = arc_index(N_ARC)
    ref = np.zeros((N_ARC, 2), dtype=bool)
    ref[:12, 0] = True
    own = ref.copy()
    right_to_wrong, wrong_to_right = [1, 2, 3, 5, 8, 10, 11], [15]
    own[right_to_wrong, 0] = False
    own[wrong_to_right, 0] = True
    own[16:, 1] = True  # acc_norm flips only
    quality = {"window_tokens": WINDOW_TOKENS, "quality_windows": WINDOWS, "target": "cpu",
               "gpu": "cpu"}  # fmt: skip
    F.write_run(run_dir, [
        F.reference(group="ref", **quality),
        F.row(group="int4", quantization="quanto-int4", **{**F.quality(105.0), **quality}),
    ])  # fmt: skip
    keep(run_dir, "ref", REF_NLL, ref)
    keep(run_dir, "int4", OWN_NLL, own)
    return [index[i] for i in right_to_wrong], [index[i] for i in wrong_to_right]


def test_a_planted_regression_is_found_exactly_with_its_mcnemar_p(tmp_path: Path) -> None:
    right_to_wrong, wrong_to_right = planted_run(tmp_path)
    found = aggregate_run(tmp_path).regressions
    assert found is not None
    (summary,) = found.summary.to_dict(orient="records")
    assert summary["group"] == "int4" and summary["reference_group"] == "ref"
    assert summary["arc_items_paired"] == N_ARC
    assert (summary["right_to_wrong"], summary["wrong_to_right"]) == (7, 1)
    assert summary["right_to_wrong_ids"].split() == [f"arc-easy:{i}" for i in right_to_wrong]
    assert summary["wrong_to_right_ids"].split() == [f"arc-easy:{i}" for i in wrong_to_right]
    assert summary["mcnemar_p_exact"] == 0.0703125
    assert "McNemar exact" in summary["test"]
    arc = found.items[found.items["kind"] == "arc"]
    assert sorted(arc["item"]) == sorted(f"arc-easy:{i}" for i in right_to_wrong + wrong_to_right)
    query = arc_rows()[right_to_wrong[0]].values["query"]
    question = query.removeprefix("Question:").strip()
    first = arc[arc["item"] == f"arc-easy:{right_to_wrong[0]}"]["excerpt"].iloc[0]
    assert question.startswith(first.rstrip("…"))


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


def test_regressions_are_published_as_csv_and_in_both_reports(tmp_path: Path) -> None:
    right_to_wrong, _ = planted_run(tmp_path)
    published = report(tmp_path, None)
    table = pd.read_csv(published / "regressions.csv")
    assert set(table["item"]) >= {f"arc-easy:{i}" for i in right_to_wrong}
    assert set(table["change"]) == {"right_to_wrong", "wrong_to_right", "largest_dnll"}
    page = (published / "report.html").read_text()
    assert "Error analysis against the reference" in page and "McNemar exact" in page
    readme = (published / "README.md").read_text()
    assert "## Error analysis against the reference" in readme and "0.07031" in readme


def test_a_run_without_kept_answers_says_so(tmp_path: Path) -> None:
    quality = {"window_tokens": WINDOW_TOKENS, "quality_windows": WINDOWS}
    F.write_run(tmp_path, [F.reference(group="ref", **quality),
                           F.row(group="int4", quantization="quanto-int4", **quality)])  # fmt: skip
    found = aggregate_run(tmp_path).regressions
    assert found is not None
    (summary,) = found.summary.to_dict(orient="records")
    assert "no per-item ARC answers kept" in summary["note"]
    assert found.items.empty


# --------------------------------------------------------------------------- the real engine


@pytest.mark.engine
def test_a_real_tiny_model_run_gets_a_regressions_table(tmp_path: Path) -> None:
    """The worker on the shipped model: the reference and a 4-bit configuration, their rows
    written as a run writes them, aggregated and published."""
    from harness.run.contracts import WorkContext
    from harness.run.worker import measure_group
    from harness.spec.scenario import QualitySettings, Reference, VllmOptions
    from tests.run.test_worker import point

    quality = QualitySettings(window_tokens=64, max_windows=4, arc_items=16, bootstrap_samples=50)
    ctx = WorkContext(run_dir=str(tmp_path), run="t", reference=Reference(), quality=quality,
                      vllm=VllmOptions(), reference_backend="transformers")  # fmt: skip
    for quantization in ("none", "quanto-int4"):
        p = point(quantization=quantization)
        measure_group(p.group, [p], ctx, lambda row: write_row(tmp_path, row))
    published = report(tmp_path, None)
    table = pd.read_csv(published / "regressions.csv")
    found = aggregate_run(tmp_path).regressions
    assert found is not None
    (summary,) = found.summary.to_dict(orient="records")
    assert summary["quantization"] == "quanto-int4" and summary["arc_items_paired"] == 16
    assert summary["windows_paired"] == 4
    b, c = int(summary["right_to_wrong"]), int(summary["wrong_to_right"])
    assert summary["mcnemar_p_exact"] == reg.mcnemar_exact(b, c)
    windows = table[table["kind"] == "window"]
    assert len(windows) == 4 and windows["excerpt"].str.len().min() > 20
    assert len(table[table["kind"] == "arc"]) == b + c
