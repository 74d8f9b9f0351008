"""The causes of the differences between the harness and `vllm bench`: factors from the calls
measured in one engine, the "why" cell, the counts sentence, the call plan of a point."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.peers.side_by_side_vllm import explain
from harness.peers.side_by_side_vllm.table import comparison_rows, markdown_table

B, OUT = 4, 32


def call(wall: float, e2e: float | None = None, ttft: float = 0.1, **counts: Any) -> dict[str, Any]:
    return {
        "wall_s": wall, "e2e_s": wall if e2e is None else e2e, "ttft_s": ttft,
        "prompt_tokens": counts.get("prompt_tokens", B * 512), "new_tokens": B * OUT,
        "steps": counts.get("steps", OUT), "first_steps": [B * 512, B, B],
    }  # fmt: skip


def point(**over: Any) -> dict[str, Any]:
    """Calls where the harness's take 1.0 s (timestamps 0.98 s), bench latency's 1.2 s, its
    1-token calls 0.3 s, bench throughput's 1.1 s, and its 2nd pass at a shape 1.32 s."""
    base = {
        "first_passes": [call(5.0), call(1.32)],
        "harness_O": [call(1.0, 0.98), call(1.0, 0.98), call(9.0, 8.98)],
        "latency_O": [call(1.2), call(1.2), call(1.2)],
        "throughput_O": [call(1.1), call(1.1), call(1.1)],
        "harness_1": [call(0.1)] * 3,
        "latency_1": [call(0.3)] * 3,
    }
    return base | over


def test_factors_are_ratios_of_medians_and_predict_each_figure() -> None:
    f = explain.factors(point(), B, OUT)
    x = f["factors"]
    assert x["clock"] == pytest.approx(1.0 / 0.98)
    assert x["prompts_latency"] == pytest.approx(1.2)
    assert x["prompts_throughput"] == pytest.approx(1.1)
    assert x["warmup"] == pytest.approx(1.2)
    # derived from 1.2 − 0.3 s; measured from 1.2 − 0.1 s on the same calls
    assert x["derivation"] == pytest.approx((1.2 - 0.1) / (1.2 - 0.3))
    # the harness's decode (median over its calls) ÷ bench latency's
    assert x["prompts_decode"] == pytest.approx((1.2 - 0.1) / (0.98 - 0.1))
    e = f["expected"]
    assert e["latency_s"] == pytest.approx(0.98 / 1.2)
    assert e["output_tok_s"] == pytest.approx(1.1 * 1.2 / 0.98)
    assert e["total_tok_s"] == e["output_tok_s"]
    assert e["decode_tok_s"] == pytest.approx(x["prompts_decode"] / x["derivation"])


def test_a_second_engine_instance_gives_the_spread_shown_beside_each_cell() -> None:
    assert explain.factors(point(), B, OUT)["instance"] is None
    second = explain.factors(point(second_instance=[call(1.3)] * 3), B, OUT)
    assert second["instance"] == pytest.approx(1.3)
    assert explain.why("decode_tok_s", second, 1.0).endswith("(2nd engine ×1.300)")


def test_no_derived_decode_where_one_token_takes_as_long() -> None:
    f = explain.factors(point(latency_1=[call(1.2)] * 3), B, OUT)
    assert f["factors"]["derivation"] is None
    assert f["expected"]["decode_tok_s"] is None


def test_why_cell_names_the_factors_the_prediction_and_the_rest() -> None:
    f = explain.factors(point(), B, OUT)
    cell = explain.why("latency_s", f, 0.5)
    assert cell.startswith("clock ×1.020, prompts_latency ×1.200 → ×0.817")
    assert cell.endswith(f"rest ×{0.5 / (0.98 / 1.2):.3f}")
    assert explain.why("latency_s", None, 0.5) == "–"


def test_the_table_carries_the_why_column_when_explained() -> None:
    f = explain.factors(point(), B, OUT)
    figures = {"latency_s": 1.0, "output_tok_s": 100.0, "total_tok_s": 2000.0, "decode_tok_s": 90.0}
    pts = [{"label": "b4 c512 o32", "vllm": figures, "harness": figures, "explained": f}]
    rows = comparison_rows(pts)
    assert all(r["why"] != "–" for r in rows)
    md = markdown_table(rows)
    assert "why: factors → predicted ratio; rest" in md.splitlines()[0]
    assert "warmup ×1.200" in md
    plain = markdown_table(comparison_rows([{**pts[0], "explained": None}]))
    assert "why" not in plain


def test_counts_note_says_where_the_kinds_differ() -> None:
    same = explain.factors(point(), B, OUT)
    assert "the same for the harness's" in explain.counts_note({"b4 c512 o32": same})
    other = point(throughput_O=[call(1.1, prompt_tokens=B * 511)] * 3)
    note = explain.counts_note({"b4 c512 o32": explain.factors(other, B, OUT)})
    assert note.startswith("Counts that differ") and "2044" in note


def test_a_point_measures_first_passes_warmups_then_rounds_of_every_kind() -> None:
    asked: list[tuple[str, int]] = []

    def run(kind: str, new: int) -> dict[str, Any]:
        asked.append((kind, new))
        return call(1.0)

    out = explain.measure_point(run, reps=2, output_len=OUT, warmups=1)
    assert asked[:2] == [("throughput", OUT)] * 2  # a fresh shape's first passes come first
    assert asked[2:5] == [(k, OUT) for k in explain.KINDS]
    one_round = [(k, OUT) for k in explain.KINDS] + [("harness", 1), ("latency", 1)]
    assert asked[5:] == one_round * 2
    assert {k: len(v) for k, v in out.items()} == {
        "first_passes": 2, "harness_O": 2, "latency_O": 2, "throughput_O": 2, "harness_1": 2,
        "latency_1": 2,
    }  # fmt: skip


def test_a_failing_explain_pass_writes_its_error_not_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(plan: Any, per_point: Any) -> dict[str, Any]:
        raise RuntimeError("engine would not start")

    monkeypatch.setattr(explain, "_in_engine", broken)
    result = tmp_path / "explain.json"
    explain.measure({"result": str(result)})
    assert json.loads(result.read_text()) == {"error": "RuntimeError: engine would not start"}


@pytest.mark.vllm
@pytest.mark.slow
def test_in_one_engine_every_kind_sends_the_same_tokens(tmp_path: Path) -> None:
    """The real engine on the shipped model: the three kinds send the point's prompt tokens,
    get O new tokens each, in O engine steps, the prefill in one step (no chunking here)."""
    pytest.importorskip("vllm")
    from harness.peers.machine import child_env
    from harness.peers.side_by_side_vllm.run import IN_PROCESS
    from harness.peers.side_by_side_vllm.vllm_side import VllmWorker, explain_pass
    from harness.spec.models import PACKAGE_DATA

    model = PACKAGE_DATA / "tiny-llama"
    args = {"model": str(model), "tokenizer": str(model), "dtype": "float32",
            "max_model_len": 256, "distributed_executor_backend": "uni",
            "enable_prefix_caching": False, "kv_cache_memory_bytes": 16 << 20,
            "enforce_eager": True}  # fmt: skip
    worker = VllmWorker(child_env({**IN_PROCESS, **os.environ}), tmp_path / "w.log")
    try:
        got = explain_pass(
            worker, [(2, 64)], args, out=tmp_path, model=model, output_len=4, warmups=0,
            reps=1, seed=0,
        )  # fmt: skip
    finally:
        worker.close()
    f = explain.factors(got["points"]["2:64"], 2, 4)
    for kind in explain.KINDS:
        c = f["counts"][kind]
        assert c == {"prompt_tokens": 128, "new_tokens": 8, "steps": 4, "first_steps": [128, 2, 2]}
    assert f["factors"]["clock"] >= 1.0  # perf_counter around the call ends after its last token
    assert len(got["points"]["2:64"]["second_instance"]) == 1 and f["instance"] > 0
