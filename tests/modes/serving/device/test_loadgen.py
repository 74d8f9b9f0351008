"""The load generator's side without a server: the `vllm bench serve` command line, and its JSON
(recorded from real runs here, see fixtures/README.md) parsed into per-level records whose figures
match the generator's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from harness.modes.serving.device.loadgen import (
    LevelResult,
    LevelRun,
    bench_argv,
    error_result,
    generator_version,
    level_result,
    load_args,
    mark_saturation,
    parse_bench_json,
    run_level,
)
from harness.modes.serving.device.server import ServerConfig, VllmServer
from harness.modes.serving.slo import meets
from harness.modes.serving.spec import Lengths, Load, SloTargets

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = Path(__file__).resolve().parents[4]
TINY_MODEL = str(REPO / "harness" / "data" / "tiny-llama")
RECORDED_SLO = SloTargets(ttft_ms_p99=500, tpot_ms_p99=50)  # what the fixtures were recorded with


def recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


@pytest.mark.parametrize(("name", "concurrency"), [("bench-c1.json", 1), ("bench-c4.json", 4)])
def test_parsed_level_matches_the_generators_own_figures(name: str, concurrency: int) -> None:
    data = recorded(name)
    run = parse_bench_json(data)
    result = level_result(Load(concurrency=concurrency), run, RECORDED_SLO,
                          sent=data["num_prompts"])  # fmt: skip
    assert result.status == "ok" and result.concurrency == concurrency
    assert result.requests_ok == data["completed"] and result.requests_failed == data["failed"]
    assert result.requests_ok + result.requests_failed == result.requests_sent == 16
    assert result.request_throughput == pytest.approx(data["request_throughput"])
    assert result.output_tok_s == pytest.approx(data["output_throughput"])
    for ours, theirs in (("ttft", "ttft"), ("tpot", "tpot"), ("e2e", "e2el")):
        for p in (50, 99):
            assert getattr(result, f"{ours}_ms_p{p}") == pytest.approx(data[f"p{p}_{theirs}_ms"])
    assert result.itl_ms_p99 == pytest.approx(data["p99_itl_ms"])
    # Goodput recomputed per request equals the generator's own (--goodput ttft:500 tpot:50).
    assert result.goodput_rps == pytest.approx(data["request_goodput"])
    assert result.goodput_rps is not None and result.request_throughput is not None
    assert result.goodput_rps <= result.request_throughput
    assert result.generator.startswith("vllm bench serve ")
    # the load window and the tokens energy per token divides by
    assert result.output_tokens == data["total_output_tokens"] == 237
    assert result.window_start_s == min(data["start_times"])


def test_a_json_without_start_times_has_no_load_window() -> None:
    data = recorded("bench-c1.json")
    del data["start_times"]
    assert parse_bench_json(data).first_request_s is None


def test_a_json_without_latencies_as_vllm_026_writes_it_takes_ttft_plus_itls() -> None:
    data = recorded("bench-c4.json")
    ours = parse_bench_json(data)
    del data["latencies"]  # vLLM 0.26 (the GPU bundle) saves ttfts and itls, no latencies
    derived = parse_bench_json(data)
    for before, after in zip(ours.requests, derived.requests, strict=True):
        assert after.e2e_ms == pytest.approx(after.ttft_ms + sum(after.itl_ms))
        assert after.e2e_ms == pytest.approx(before.e2e_ms, rel=0.05)  # detokenize/stream tail
    with pytest.raises(KeyError):
        del data["ttfts"]
        parse_bench_json(data)


def test_attainment_is_recomputed_from_each_request() -> None:
    data = recorded("bench-c4.json")
    run = parse_bench_json(data)
    ttft_ms = [t * 1000 for t in data["ttfts"]]
    # 8 of 16 meet TTFT
    strict = SloTargets(ttft_ms_p99=sorted(ttft_ms)[7] + 1e-6, tpot_ms_p99=1000)
    result = level_result(Load(concurrency=4), run, strict, sent=16)
    assert result.slo_attainment == pytest.approx(8 / 16)
    assert sum(meets(r, strict) for r in run.requests) == 8
    assert result.goodput_rps == pytest.approx(8 / run.duration_s)
    assert result.request_throughput is not None and result.goodput_rps < result.request_throughput


def test_a_level_whose_server_was_killed_accounts_for_every_request() -> None:
    data = recorded("bench-c4-server-killed.json")
    run = parse_bench_json(data)
    assert (run.completed, run.failed) == (30, 370)
    result = level_result(Load(concurrency=4), run, RECORDED_SLO, sent=400, status="error",
                          error="the server died", server_log_tail=["last line"])  # fmt: skip
    assert (result.requests_ok, result.requests_failed, result.requests_sent) == (30, 370, 400)
    assert result.slo_attainment == pytest.approx(30 / 400)  # failed requests miss the SLO
    assert result.server_log_tail == ["last line"] and result.status == "error"
    failed = [r for r in run.requests if not r.ok]
    assert all(r.error and r.output_tokens == 0 for r in failed)
    assert any("Cannot connect" in r.error for r in failed)


def test_requests_the_generator_did_not_report_count_as_failed() -> None:
    run = parse_bench_json(recorded("bench-c1.json"))
    result = level_result(Load(concurrency=1), run, RECORDED_SLO, sent=20)
    assert (result.requests_ok, result.requests_failed) == (16, 4)
    assert result.slo_attainment == pytest.approx(16 / 20)
    with pytest.raises(ValueError, match="16 requests, 10 were sent"):
        level_result(Load(concurrency=1), run, RECORDED_SLO, sent=10)


def test_a_json_with_uneven_per_request_lists_is_refused() -> None:
    data = recorded("bench-c1.json")
    data["ttfts"] = data["ttfts"][:-1]
    with pytest.raises(ValueError, match="ttfts has 15 entries"):
        parse_bench_json(data)


def test_an_error_level_without_output() -> None:
    result = error_result(Load(request_rate=2.0), RECORDED_SLO, sent=16, error="no server")
    assert result.mode == "request_rate" and result.request_rate == 2.0
    assert (result.requests_ok, result.requests_failed, result.slo_attainment) == (0, 16, 0.0)
    assert result.output_tok_s is None


# --- levels, saturation -------------------------------------------------------------------------


def test_a_load_level_has_exactly_one_kind() -> None:
    assert Load(concurrency=4).label == "c4"
    assert Load(request_rate=2.5).label == "r2.5"
    assert load_args(Load(request_rate=2.5)) == [
        "--request-rate", "2.5", "--burstiness", "1.0"]  # fmt: skip
    with pytest.raises(ValidationError):
        Load()
    with pytest.raises(ValidationError):
        Load(concurrency=1, request_rate=1.0)
    with pytest.raises(ValidationError):
        Load(concurrency=0)


def synthetic(c: int, tok_s: float, e2e_p50: float, status: str = "ok") -> LevelResult:
    return LevelResult(status=status, mode="concurrency", concurrency=c, requests_sent=16,  # type: ignore[arg-type]
                       requests_ok=16, requests_failed=0, output_tok_s=tok_s, e2e_ms_p50=e2e_p50,
                       slo_ttft_ms=1, slo_tpot_ms=1, generator="g")  # fmt: skip


def test_mark_saturation_per_series() -> None:
    levels = [synthetic(1, 100, 50), synthetic(4, 350, 60), synthetic(16, 355, 200),
              synthetic(32, 10, 900, status="error")]  # fmt: skip
    marked = mark_saturation(levels)
    assert [r.saturated for r in marked] == [False, False, True, False]
    assert [r.saturated for r in levels] == [False] * 4  # inputs untouched


# --- the command line --------------------------------------------------------------------------


def test_bench_command_line(tmp_path: Path) -> None:
    server = VllmServer(ServerConfig(model=TINY_MODEL, served_model_name="tiny"),
                        log_path=tmp_path / "s.log", port=8123)  # fmt: skip
    slo = SloTargets(ttft_ms_p99=2000, tpot_ms_p99=100)
    run = LevelRun(tmp_path / "d.jsonl", tmp_path, slo, requests=16)
    argv = bench_argv(server, Load(concurrency=4), run, "c4.json")
    joined = " ".join(argv)
    assert argv[argv.index("bench") + 1] == "serve"
    for part in (
        "--backend vllm", "--base-url http://127.0.0.1:8123", "--served-model-name tiny",
        "--dataset-name custom", "--custom-output-len -1", "--num-prompts 16",
        "--max-concurrency 4", "--ignore-eos", "--save-result", "--save-detailed",
        f"--result-dir {tmp_path}", "--result-filename c4.json", "--goodput ttft:2000 tpot:100",
    ):  # fmt: skip
        assert part in joined, part
    assert generator_version().startswith("vllm bench serve ")


# --- workloads and the prefix cache -------------------------------------------------------------


def serving_level(**fields: Any) -> Any:
    from harness.modes.serving.spec import ServingLevel

    base: dict[str, Any] = {
        "request_rate": 2.0, "requests": 8, "prompt_tokens": Lengths(mean=16),
        "output_tokens": Lengths(mean=4), "slo": RECORDED_SLO, "attainment": 0.9,
    }  # fmt: skip
    return ServingLevel(**{**base, **fields})


def test_a_trace_level_arrives_with_the_traces_burstiness_and_skips_the_test_request() -> None:
    from harness.modes.serving.device.loadgen import caching_args

    bursty = serving_level(burstiness=0.25, prefix_caching=True)
    assert load_args(bursty) == ["--request-rate", "2.0", "--burstiness", "0.25"]
    assert load_args(serving_level()) == ["--request-rate", "2.0", "--burstiness", "1.0"]
    assert caching_args(bursty) == ["--ready-check-timeout-sec", "0"]
    assert caching_args(serving_level(prefix_caching=False)) == ["--ready-check-timeout-sec", "0"]
    assert caching_args(serving_level()) == []  # no axis: the generator's own test request


def test_a_levels_hit_rate_is_the_difference_of_the_counters() -> None:
    from harness.modes.serving.device.loadgen import cache_fields

    on = serving_level(prefix_caching=True)
    fields = cache_fields(on, (1000.0, 100.0), (5000.0, 1100.0))
    assert fields == {
        "prefix_caching": True,
        "prefix_cache_queried_tokens": 4000,
        "prefix_cache_hit_tokens": 1000,
        "prefix_cache_hit_rate": 0.25,
    }
    off = cache_fields(serving_level(prefix_caching=False), (0.0, 0.0), (0.0, 0.0))
    assert off["prefix_cache_hit_rate"] == 0.0 and off["prefix_cache_queried_tokens"] == 0
    assert "prefix_cache_hit_rate" not in cache_fields(on, None, (1.0, 1.0))  # unreadable
    assert "prefix_cache_hit_rate" not in cache_fields(on, (9.0, 9.0), (1.0, 1.0))  # restarted


class DeadServer:
    """A server whose process has ended (killed: 137), with the last lines of its log."""

    def alive(self) -> bool:
        return False

    def returncode(self) -> int:
        return 137

    def log_tail(self) -> list[str]:
        return ["engine core died"]


def test_a_level_against_a_dead_server_is_an_error_record_and_never_runs(tmp_path: Path) -> None:
    run = LevelRun(dataset=tmp_path / "prompts.jsonl", out_dir=tmp_path / "levels",
                   slo=RECORDED_SLO, requests=16, command=("false",))  # fmt: skip
    got = run_level(DeadServer(), Load(concurrency=4), run)  # type: ignore[arg-type]
    assert got.status == "error" and got.requests_failed == 16 and got.requests_ok == 0
    assert got.error == "the server was not running (exit code 137); level not run"
    assert got.server_log_tail == ["engine core died"]
    assert list((tmp_path / "levels").iterdir()) == []  # no generator was started
