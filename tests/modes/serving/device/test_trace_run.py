"""The production-like serving flow end to end on this CPU, with the real engine and generator:
`harness measure` of a scenario replaying the Mooncake trace (scaled) against a real
`vllm serve` with prefix caching on, then a search (LOW and HIGH probes only, to stay short);
prefix caching off, counters at 0, is checked in test_run.py.

What it checks is what the README's "All of it at once" run shows: every request accounted for,
the server's own prefix-cache counters > 0 with caching on (the trace's shared block 0, found by
every request after the first: a whole number of 128-token KV blocks), and a search row holding
its probes' outcome."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from harness.row import ResultRow
from harness.run import store

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]

REQUESTS = 24  # the trace's first 8 share one timestamp: no arrival rate to replay
BLOCK = 128  # the trace's 512-token block × length_scale 0.25: the CPU server's own KV block
SCENARIO = f"""\
name: trace-run-test
models: [tiny-llama]
backend: [vllm]
quantization: [fp32]
batch: [1]
context: [32]
output_tokens: 4
targets: [cpu]
repeats: 1
warmups: 0
reference: {{quantization: fp32, kv_cache_dtype: auto}}
quality: {{window_tokens: 64, max_windows: 2, arc_items: 0, bootstrap_samples: 100}}
engines: {{vllm: {{enforce_eager: true}}}}
serving:
  workload: {{trace: mooncake-conversation, time_scale: 1.0, length_scale: 0.25,
             max_requests: {REQUESTS}}}
  prefix_caching: [on]
  prompt_tokens: {{mean: 512, sd: 0}}
  output_tokens: {{mean: 8, sd: 0}}
  slo: {{ttft_ms_p99: 60000, tpot_ms_p99: 5000}}
  attainment: 0.5
  search: {{request_rate: [1.0, 8.0], max_probes: 2}}
"""


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[ResultRow]:
    folder = tmp_path_factory.mktemp("trace")
    scenario, run_dir = folder / "s.yaml", folder / "run"
    scenario.write_text(SCENARIO)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HARNESS_HISTORY": str(folder / "history.jsonl")}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "measure", str(scenario), "--out", str(run_dir)],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found, bad = store.read_rows(run_dir)
    assert not bad
    return found


def levels(rows: list[ResultRow]) -> list[ResultRow]:
    return [r for r in rows if r.mode == "serving" and r.requests_sent]


def test_every_level_and_probe_is_ok_and_accounts_for_every_request(
    rows: list[ResultRow],
) -> None:
    measured = levels(rows)
    # the trace's own level and the two probes
    assert len(measured) == 3
    for row in measured:
        assert row.status == "ok", row.error
        assert row.requests_sent == REQUESTS
        assert (row.requests_ok or 0) + (row.requests_failed or 0) == row.requests_sent


def test_the_hit_rate_is_the_servers_own(rows: list[ResultRow]) -> None:
    for row in levels(rows):
        hits, queried = row.prefix_cache_hit_tokens, row.prefix_cache_queried_tokens
        assert hits is not None and queried is not None and row.prefix_caching
        # block 0 is shared by every request; found at most once per later request
        assert 0 < hits <= (REQUESTS - 1) * BLOCK and hits % BLOCK == 0, hits
        assert row.prefix_cache_hit_rate == pytest.approx(hits / queried)


def test_each_search_row_holds_its_two_probes_outcome(rows: list[ResultRow]) -> None:
    searches = [r for r in rows if r.search_probes is not None]
    assert len(searches) == 1
    for row in searches:
        assert row.status == "ok", row.error
        assert row.search_probes == 2
        assert row.search_stop in ("low-fails", "high-meets", "max-probes")
        if row.search_stop != "low-fails":
            assert row.max_rate_at_slo in (1.0, 8.0)
