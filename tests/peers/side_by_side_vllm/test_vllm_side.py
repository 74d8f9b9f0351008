"""harness.peers.side_by_side_vllm.vllm_side: the `vllm bench` commands planned for a point, and
their output files read back (hand-written as vLLM writes them; no vLLM run here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.peers.side_by_side_vllm.parse import command_point
from harness.peers.side_by_side_vllm.vllm_side import BenchPlan, plan_commands, read_results

Files = dict[tuple[int, int], dict[str, Any]]


def plan(tmp_path: Path, latency_one: bool = True) -> tuple[list[dict[str, Any]], Files]:
    bench = BenchPlan(
        flags=["--dtype", "float32"], output_len=32, warmups=1, iterations=5, throughput_runs=2,
        latency_one=latency_one,
    )  # fmt: skip
    return plan_commands([(4, 512)], tmp_path, bench)


def test_each_point_gets_latency_at_o_and_at_one_and_one_throughput_per_run(
    tmp_path: Path,
) -> None:
    commands, files = plan(tmp_path)
    kinds = [c["argv"][:2] for c in commands]
    assert kinds == [["bench", "latency"]] * 2 + [["bench", "throughput"]] * 2
    assert all(command_point(c["argv"]) == (4, 512) for c in commands)
    latency, one = commands[0]["argv"], commands[1]["argv"]
    assert latency[latency.index("--output-len") + 1] == "32"
    assert one[one.index("--output-len") + 1] == "1"
    throughput = commands[2]["argv"]
    assert throughput[throughput.index("--random-output-len") + 1] == "32"
    assert "--input-len" not in throughput  # the random dataset ignores it
    assert all(c["argv"][-2:] == ["--dtype", "float32"] for c in commands)  # flags last
    assert files[(4, 512)]["latency"] == tmp_path / "lat_b4_c512.json"
    assert len(files[(4, 512)]["throughput"]) == 2


def test_without_latency_at_one_only_the_latency_at_o_is_planned(tmp_path: Path) -> None:
    commands, files = plan(tmp_path, latency_one=False)
    assert [c["argv"][1] for c in commands] == ["latency", "throughput", "throughput"]
    assert "latency_one" not in files[(4, 512)]


def write_outputs(files: Files, output_tokens: int) -> None:
    entry = files[(4, 512)]
    entry["latency"].write_text(json.dumps({"latencies": [0.2, 0.3, 0.25]}))
    entry["latency_one"].write_text(json.dumps({"latencies": [0.1, 0.1, 0.1]}))
    for path in entry["throughput"]:
        path.write_text(json.dumps({"elapsed_time": 0.5, "num_requests": 4,
                                    "total_num_tokens": 4 * 512 + output_tokens}))  # fmt: skip
        path.with_suffix(".stdout").write_text(
            f"Total num prompt tokens:  {4 * 512}\nTotal num output tokens:  {output_tokens}\n"
        )


def test_the_files_are_read_back_per_point(tmp_path: Path) -> None:
    _, files = plan(tmp_path)
    write_outputs(files, 4 * 32)
    result = read_results(files, output_len=32)[(4, 512)]
    assert result["latency"]["median_s"] == 0.25
    assert result["latency_one"]["median_s"] == 0.1
    assert [t["output_tok_s"] for t in result["throughput"]] == [256.0, 256.0]


def test_a_throughput_run_of_other_lengths_stops_the_comparison(tmp_path: Path) -> None:
    _, files = plan(tmp_path)
    write_outputs(files, 4 * 16)  # vLLM generated 16 tokens a request, not 32
    with pytest.raises(SystemExit):
        read_results(files, output_len=32)
