"""harness.peers.scaling: a sweep's figures from its rows (overhead per point, measured share),
and the contract line; on hand-made rows."""

from __future__ import annotations

from typing import Any

import pytest

from harness.peers.scaling import summary_lines, sweep_figures


def row(group: str, node: str, **fields: Any) -> dict[str, Any]:
    base = {"group": group, "quantization": group, "status": "ok", "measured_s": 2.0,
            "load_s": 1.0, "quality_s": 0.5, "decode_tok_s": 40.0,
            "provenance": {"node_id": node}}  # fmt: skip
    return {**base, **fields}


def test_overhead_is_wall_minus_measured_minus_load_once_per_group_per_point() -> None:
    rows = [row("none", "n1"), row("none", "n1"), row("nf4", "n2"), row("fp4", "n2", status="oom")]
    figures = sweep_figures(rows, wall=10.0)
    assert (figures["points"], figures["points_ok"]) == (4, 3)
    assert figures["measured_s"] == 6.0
    assert figures["load_s"] == 2.0  # none and nf4, once each; the failed group not at all
    assert figures["overhead_ms"] == pytest.approx(1e3 * (10.0 - 6.0 - 2.0) / 4)
    assert figures["share"] == pytest.approx(0.6)
    assert figures["nodes_used"] == 2
    assert figures["per_group"]["nf4"] == (1.0, 0.5, 2.0, 40.0)


def test_the_contract_line_takes_the_one_node_figures() -> None:
    results = [
        {"workers": 1, "wall_s": 40.0, "overhead_ms": 500.0, "share": 0.5},
        {"workers": 2, "wall_s": 30.0, "overhead_ms": 900.0, "share": 0.7},
    ]
    assert summary_lines(results)[-1] == (
        "scaling: 1 node 40.0 s, 2 nodes 30.0 s, ratio 0.75; ray overhead 500 ms/point; "
        "measured share 50.0 %"
    )
