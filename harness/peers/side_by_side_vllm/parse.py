"""Reading what vLLM writes: `vllm bench latency|throughput` output, and the engine arguments it
logs when an engine starts (turned into `vllm bench` flags and compared). Pure functions."""

from __future__ import annotations

import ast
import itertools
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

_TOKENS_LINE = re.compile(r"^Total num (prompt|output) tokens:\s*(\d+)\s*$", re.MULTILINE)
_ENGINE_ARGS_LINE = re.compile(r"non-default args: (\{.*\})\s*$", re.MULTILINE)
# Engine arguments of the harness's that change nothing measured and `vllm bench` has no flag for.
HARNESS_ONLY_ARGS = frozenset({"worker_extension_cls"})
# What `vllm bench` lists among its non-default arguments without being an engine setting.
BENCH_BOOKKEEPING_ARGS = frozenset({"logging_config", "mm_device_do_normalize", "enable_lora",
                                    "reasoning_parser_plugin"})  # fmt: skip


def command_point(argv: Sequence[str]) -> tuple[int, int]:
    """(batch, context) of a `vllm bench latency|throughput` argv as `vllm_side` writes them."""
    args = dict(itertools.pairwise(argv))
    if list(argv[:2]) == ["bench", "latency"]:
        return int(args["--batch-size"]), int(args["--input-len"])
    return int(args["--num-prompts"]), int(args["--random-input-len"])


def parse_latency_json(data: Mapping[str, Any]) -> dict[str, Any]:
    """`vllm bench latency --output-json`: its iterations, their mean (vLLM's `avg_latency`),
    median and count, in seconds."""
    latencies = [float(x) for x in data.get("latencies") or []]
    if not latencies or not all(math.isfinite(x) and x > 0 for x in latencies):
        raise ValueError(f"vllm bench latency JSON has no usable latencies: {data!r:.200}")
    return {
        "latencies_s": latencies,
        "avg_s": float(data.get("avg_latency", statistics.fmean(latencies))),
        "median_s": statistics.median(latencies),
        "iterations": len(latencies),
    }


def parse_throughput_stdout(text: str) -> dict[str, int]:
    """The token totals `vllm bench throughput` prints ("Total num prompt tokens:  N", "Total
    num output tokens:  N"); its JSON has only their sum. Empty where they are absent."""
    return {f"{kind}_tokens": int(value) for kind, value in _TOKENS_LINE.findall(text)}


def parse_throughput_json(
    data: Mapping[str, Any], *, output_len: int, stdout: str = ""
) -> dict[str, Any]:
    """`vllm bench throughput --output-json` (one timed pass): elapsed s, requests, tokens and
    the rates. Output tokens are the printed total when given, else requests × output_len
    (exact: the benchmark ignores EOS)."""
    elapsed = float(data["elapsed_time"])
    requests = int(data["num_requests"])
    total = int(data["total_num_tokens"])
    if not elapsed > 0 or requests < 1:
        raise ValueError(f"vllm bench throughput JSON is not a timed run: {data!r:.200}")
    printed = parse_throughput_stdout(stdout)
    output = printed.get("output_tokens", requests * output_len)
    prompt = printed.get("prompt_tokens", total - output)
    if prompt + output != total:
        raise ValueError(
            f"vllm bench throughput: prompt {prompt} + output {output} tokens != total {total}"
        )
    return {
        "elapsed_s": elapsed,
        "num_requests": requests,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "total_tokens": total,
        "output_tok_s": output / elapsed,
        "total_tok_s": float(data.get("tokens_per_second", total / elapsed)),
        "requests_per_s": float(data.get("requests_per_second", requests / elapsed)),
    }


def parse_engine_args(text: str) -> dict[str, Any] | None:
    """The engine arguments vLLM logged last in `text` ("non-default args: {...}", written by
    vllm/entrypoints/utils/api_utils.py when an engine starts); literal values as Python values,
    anything else (e.g. a config object) as its source text. None when no such line."""
    found = _ENGINE_ARGS_LINE.findall(text)
    if not found:
        return None
    node = ast.parse(found[-1], mode="eval").body
    if not isinstance(node, ast.Dict):
        raise ValueError(f"vLLM's non-default args are not a dict: {found[-1][:200]}")
    args: dict[str, Any] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if key is None:
            continue
        try:
            args[str(ast.literal_eval(key))] = ast.literal_eval(value)
        except ValueError:
            args[str(ast.literal_eval(key))] = ast.unparse(value)
    return args


def engine_flags(harness_args: Mapping[str, Any]) -> list[str]:
    """`vllm bench` engine flags that give its engine the arguments the harness's engine got
    (`harness_args`: what vLLM logged for the harness's engine): --key value; a bool as --key /
    --no-key; None and harness-only arguments left out."""
    flags: list[str] = []
    for key, value in harness_args.items():
        if key in HARNESS_ONLY_ARGS or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, (int, float, str)):
            flags += [flag, str(value)]
        else:
            raise ValueError(f"engine argument {key}={value!r} has no command-line form here")
    return flags


def engine_args_differ(
    harness_args: Mapping[str, Any], bench_args: Mapping[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """Engine arguments that differ between the two engines, {key: (harness, vllm bench)},
    besides the harness-only ones and the benchmark's bookkeeping."""
    keys = (set(harness_args) | set(bench_args)) - HARNESS_ONLY_ARGS - BENCH_BOOKKEEPING_ARGS
    return {
        k: (harness_args.get(k), bench_args.get(k))
        for k in sorted(keys)
        if harness_args.get(k) != bench_args.get(k)
    }
