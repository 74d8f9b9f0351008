"""The serving caps hold whatever sets a level's requests: a workload, a search's LOW and HIGH,
min_requests, duration_s. Each refusal is one line naming the scenario file, the line of
`serving:` and the level, exit 2, at validation: nothing is drawn, nothing planned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.modes.serving.spec import (
    MAX_REQUESTS,
    MAX_SERVING_DURATION_S,
    Serving,
    draw_lengths,
    max_requests_at,
    over_cap,
)

BASE: dict[str, Any] = {
    "name": "caps", "models": ["tiny-llama"], "backend": ["vllm"], "quantization": ["fp32"],
    "batch": [1], "context": [32], "output_tokens": 8, "targets": ["cpu"], "repeats": 1,
    "warmups": 0, "quality": {"window_tokens": 64, "max_windows": 2, "arc_items": 0},
}  # fmt: skip
LENGTHS = {
    "prompt_tokens": {"mean": 32, "sd": 8}, "output_tokens": {"mean": 16, "sd": 4},
    "slo": {"ttft_ms_p99": 2000, "tpot_ms_p99": 200},
}  # fmt: skip
MULTI_TURN = {"multi_turn": {"conversations": 10, "turns": 2}}  # 10 × 2 = 20 requests


def plan(tmp_path: Path, serving: dict[str, Any]) -> tuple[int, str, Path]:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({**BASE, "serving": {**LENGTHS, **serving}}, indent=1))
    result = CliRunner().invoke(app, ["plan", str(path)])
    return result.exit_code, result.output, path


REFUSED: dict[str, dict[str, Any]] = {
    # 20 requests at 0.001/s span 20 / 0.001 = 20,000 s > 3,600 s (the workload used to skip it)
    "multi-turn rate level too slow": {"workload": MULTI_TURN, "request_rate": [0.001]},
    # 10,000 × 11 = 110,000 requests > 100,000 per level
    "multi-turn too many": {
        "workload": {"multi_turn": {"conversations": 10000, "turns": 11}}, "concurrency": [1],
    },
    # the trace's 100 requests at 0.01/s span 10,000 s
    "trace rate level too slow": {
        "workload": {"trace": "mooncake-conversation", "max_requests": 100},
        "request_rate": [0.01],
    },
    # a search's LOW probe: 16 requests at 0.001/s span 16,000 s
    "search LOW too slow": {
        "requests": 16, "search": {"request_rate": [0.001, 10.0], "max_probes": 4},
    },
    # a search's HIGH probe at duration_s 3,600: ⌈1,000 × 3,600⌉ = 3,600,000 requests
    "search HIGH too many": {
        "duration_s": 3600, "search": {"request_rate": [1.0, 1000.0], "max_probes": 4},
    },
    # the audit's case: ⌈100,000 × 3,600⌉ = 3.6 × 10⁸ requests (a MemoryError before)
    "search HIGH 3.6e8": {
        "duration_s": 3600, "search": {"request_rate": [1.0, 100000.0], "max_probes": 4},
    },
    # min_requests 50,000 at LOW 1/s: 50,000 s
    "min_requests at LOW": {
        "duration_s": 10,
        "search": {"request_rate": [1.0, 10.0], "max_probes": 4, "min_requests": 50000},
    },
    # a workload's 20 requests in a rate search from 0.001/s: 20,000 s
    "workload search LOW": {
        "workload": MULTI_TURN, "search": {"request_rate": [0.001, 1.0], "max_probes": 4},
    },
    # a duration_s level at 10⁻⁴/s: ⌈10⁻⁴ × 10⌉ = 1 request, spanning 1 / 10⁻⁴ = 10,000 s
    "duration_s rounds up to a long level": {"duration_s": 10, "request_rate": [0.0001]},
}  # fmt: skip


@pytest.mark.parametrize("serving", REFUSED.values(), ids=REFUSED.keys())
def test_a_level_or_probe_past_a_cap_is_refused_in_one_line(
    tmp_path: Path, serving: dict[str, Any]
) -> None:
    code, output, path = plan(tmp_path, serving)
    assert code == 2, output
    assert len(output.strip().splitlines()) == 1, output
    assert str(path) in output
    assert f"{MAX_SERVING_DURATION_S:g} s" in output or f"{MAX_REQUESTS:,}" in output, output


def test_the_refusal_names_the_serving_line_and_the_level(tmp_path: Path) -> None:
    code, output, path = plan(tmp_path, REFUSED["search LOW too slow"])
    assert code == 2
    # json.dumps(indent=1) puts "serving" on its own line: the 14th of the file
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if '"serving"' in t)
    assert f"{path}:{line}: serving" in output
    assert "search.request_rate LOW 0.001" in output
    assert "16 requests at 0.001/s take 16000 s" in output  # 16 / 0.001 = 16,000 s


ACCEPTED: dict[str, dict[str, Any]] = {
    # 20 requests at 1/s: 20 s
    "multi-turn rate level": {"workload": MULTI_TURN, "request_rate": [1.0]},
    # HIGH 20/s × 60 s = 1,200 requests; LOW 1/s × 60 s = 60 requests over 60 s
    "search within caps": {
        "duration_s": 60, "search": {"request_rate": [1.0, 20.0], "max_probes": 4},
    },
    # duration_s 3,600 at 0.5 req/s: 1,800 requests over 1,800 / 0.5 = 3,600 s, the cap itself
    "duration_s at the cap": {"duration_s": 3600, "request_rate": [0.5]},
    # 3,600 requests at 1/s: 3,600 s, the cap itself
    "requests at the cap": {"requests": 3600, "request_rate": [1.0]},
}  # fmt: skip


@pytest.mark.parametrize("serving", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_a_block_within_the_caps_still_validates(serving: dict[str, Any]) -> None:
    Serving.model_validate({**LENGTHS, **serving})


def test_the_cap_on_a_rate_is_the_requests_its_hour_holds() -> None:
    assert max_requests_at(1.0) == 3600  # 1 × 3,600
    assert max_requests_at(0.001) == 3  # ⌊3.6⌋: a fourth request would span 4,000 s
    assert max_requests_at(1e-9) == 0  # one request spans 10⁹ s
    assert max_requests_at(1000.0) == MAX_REQUESTS  # 3.6 × 10⁶, capped at 10⁵
    assert over_cap(3600, 1.0) is None
    assert over_cap(3601, 1.0) is not None
    assert over_cap(MAX_REQUESTS + 1, None) is not None


def test_the_trace_level_at_its_own_arrivals_is_capped_too(tmp_path: Path) -> None:
    # the shipped trace: 1,000 requests over 330 s; × time_scale 20 = 6,600 s > 3,600 s
    code, output, _ = plan(
        tmp_path,
        {"workload": {"trace": "mooncake-conversation", "max_requests": 1000, "time_scale": 20}},
    )
    assert code == 2, output
    assert "serving.workload.time_scale" in output and "3600 s" in output
    assert len(output.strip().splitlines()) == 1, output


def test_drawing_past_the_cap_is_refused_before_anything_is_drawn() -> None:
    lengths = Serving.model_validate({**LENGTHS, "requests": 1, "concurrency": [1]})
    with pytest.raises(ValueError, match="MAX_REQUESTS"):
        draw_lengths(lengths.prompt_tokens, lengths.output_tokens, 10**9, 0)
