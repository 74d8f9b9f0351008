"""A refusal found in a serving trace names the scenario's file and line besides the trace's
(issue 43, item 9): the trace is read once the grid is expanded, after the scenario's own lines
are gone, so `expand` puts them back (harness.spec.yamlinput.fields_of)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app

GOOD = '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
SCENARIO = """name: trace
models: [tiny-llama]
backend: [vllm]
quantization: [fp32]
batch: [1]
context: [128]
output_tokens: 16
targets: [cpu]
quality: {{window_tokens: 256, max_windows: 4, arc_items: 0}}
serving:
  workload:
    trace: {trace}
    max_requests: {requests}
  prompt_tokens: {{mean: 512, sd: 0}}
  output_tokens: {{mean: 64, sd: 0}}
  slo: {{ttft_ms_p99: 10000, tpot_ms_p99: 500}}
"""
TRACE_LINE, REQUESTS_LINE = 12, 13  # the lines of `trace:` and `max_requests:` above


def refusal(tmp_path: Path, trace_text: str | None, requests: int) -> tuple[str, Path, Path]:
    trace = tmp_path / "trace.jsonl"
    if trace_text is not None:
        trace.write_text(trace_text)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(trace=trace, requests=requests))
    result = CliRunner().invoke(app, ["plan", str(scenario)])
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.output.splitlines() if x.strip()]
    return line, scenario, trace


def test_a_bad_trace_line_names_the_scenario_line_and_the_trace_line(tmp_path: Path) -> None:
    line, scenario, trace = refusal(tmp_path, GOOD + '{"timestamp": "x"}\n', 2)
    assert line.startswith(f"error: {scenario}:{TRACE_LINE}: serving.workload.trace: ")
    assert f"in the trace {trace}:2: timestamp: " in line


@pytest.mark.parametrize(
    ("text", "requests", "field", "at"),
    [
        (GOOD, 5, "serving.workload.max_requests", REQUESTS_LINE),  # 1 request of 5
        (None, 1, "serving.workload.trace", TRACE_LINE),  # no such file
        (GOOD, 1, "serving.workload.max_requests", REQUESTS_LINE),  # one arrival: no rate
    ],
    ids=["short trace", "missing trace", "one arrival"],
)
def test_every_trace_refusal_names_the_scenario_file_and_line(
    tmp_path: Path, text: str | None, requests: int, field: str, at: int
) -> None:
    line, scenario, _ = refusal(tmp_path, text, requests)
    assert line.startswith(f"error: {scenario}:{at}: {field}: "), line
