"""harness.peers.side_by_side_vllm.run: a point's figures from both tools' runs (medians over
repetitions), the subprocess engine's figures, and the notes under the table; on hand-made runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.peers.side_by_side_vllm.run import (
    arc_figures,
    notes,
    point_figures,
    subprocess_figures,
)

POINT = (4, 512)


def harness_run(e2e_ms: float, share: float, key: str) -> dict[str, Any]:
    row = {"key": key, "status": "ok", "e2e_ms_p50": e2e_ms, "generated_tokens": 128,
           "total_tok_s": 1000.0, "decode_tok_s": 700.0,
           "provenance": {"load_average": 0.5}}  # fmt: skip
    return {"point": POINT, "rows": [row], "foreign_share": share}


def vllm_run(latency_s: float, share: float) -> dict[str, Any]:
    result = {
        "latency": {"median_s": latency_s, "latencies_s": [latency_s]},
        "latency_one": {"median_s": latency_s / 4, "latencies_s": [latency_s / 4]},
        "throughput": [{"output_tok_s": 600.0, "total_tok_s": 9000.0, "elapsed_s": 0.2}],
    }
    timings = [{"argv": ["bench", "latency", "--output-len", "32"], "wall_s": 9.0,
                "load_before": 1.25}]  # fmt: skip
    return {"point": POINT, "results": {POINT: result}, "timings": timings, "foreign_share": share}


def test_each_tool_is_the_median_of_its_repetitions_and_the_worst_share_is_kept() -> None:
    harness = [harness_run(200.0, 0.05, "a"), harness_run(100.0, 0.20, "b"),
               harness_run(400.0, 0.0, "c")]  # fmt: skip
    vllm = [vllm_run(0.2, 0.1), vllm_run(0.4, 0.3), vllm_run(0.3, 0.0)]
    entry = point_figures(POINT, 32, harness, vllm)
    assert entry["label"] == "b4 c512 o32"
    assert entry["harness"]["latency_s"] == pytest.approx(0.2)
    assert entry["vllm"]["latency_s"] == pytest.approx(0.3)
    # decode from latency(O) − latency(O)/4, per repetition, then the median
    assert entry["vllm"]["decode_tok_s"] == pytest.approx(4 * 31 / (0.75 * 0.3))
    assert entry["others_cpu_share"] == {"vllm": 0.3, "harness": 0.2}
    assert entry["load"] == "30 % / 20 %; 1.2 / 0.5"
    assert entry["harness_row_keys"] == ["a", "b", "c"]


def test_the_subprocess_engine_is_compared_with_the_in_process_latency_at_o() -> None:
    inproc = vllm_run(0.2, 0.0)
    sub = {**vllm_run(0.3, 0.1), "load_before": 1.0, "load_after": 2.0}
    sub["timings"] = [{"wall_s": 20.0}]
    mp = subprocess_figures(inproc, sub, POINT, 32)
    assert mp["latency_ratio_subprocess_in_process"] == pytest.approx(1.5)
    assert (mp["command_wall_s_in_process"], mp["command_wall_s_subprocess"]) == (9.0, 20.0)


def test_the_harness_quality_names_arc_easy_s_accuracy_from_the_row_s_tasks() -> None:
    row = {"tasks": [{"name": "snips-intent", "score": 0.9, "items": 210},
                     {"name": "arc-easy", "score": 0.3, "items": 20}]}  # fmt: skip
    assert arc_figures(row) == {"arc_acc": 0.3, "arc_items": 20}
    assert arc_figures({"tasks": None}) == {"arc_acc": None, "arc_items": None}


def test_the_notes_name_the_points_still_shared_with_others() -> None:
    report = {
        "harness_quality": {"ppl": 250.0, "ppl_ci_low": 240.0, "ppl_ci_high": 260.0,
                            "arc_acc": 0.3, "arc_items": 20},
        "engine_args_differ": {"dtype": ["float32", "bfloat16"]},
        "load_average": {"min": 0.5, "max": 1.5},
        "points": [{"label": "b1 c128 o32", "others_cpu_share": {"vllm": 0.4, "harness": 0.0}},
                   {"label": "b4 c128 o32", "others_cpu_share": {"vllm": 0.1, "harness": 0.2}}],
        "batches": [1, 4], "contexts": [128], "reps": 1, "cores": 2, "attempts": [{}] * 3,
        "subprocess_engine": None,
    }  # fmt: skip
    said = notes(report, max_foreign=0.25)
    assert len(said) == 3
    assert said[1].endswith("dtype 'float32' vs 'bfloat16'")
    assert "3 attempts for 2 point measurements; still shared with others: b1 c128 o32." in said[2]


def test_points_narrow_the_scenario_and_refuse_others() -> None:
    from harness.peers.side_by_side_vllm.run import Setup, chosen_points

    setup = Setup(scenario={}, quant="fp32", model=Path("m"), vocab_size=4096, output_len=32,
                  batches=[1, 4], contexts=[128, 512], warmups=2, repeats=5, seed=0)  # fmt: skip
    assert chosen_points(setup, None) == [(1, 128), (1, 512), (4, 128), (4, 512)]
    assert chosen_points(setup, "4:512, 1:128") == [(4, 512), (1, 128)]
    with pytest.raises(SystemExit, match="among the scenario's"):
        chosen_points(setup, "2:512")
    with pytest.raises(SystemExit, match="is not B:C"):
        chosen_points(setup, "4x512")
