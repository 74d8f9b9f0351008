"""The server wrapper without vLLM: argument mapping, and the process-group life cycle driven with
a stand-in server (a few lines of Python that answer /health and /v1/models, and leave a child
that ignores SIGTERM), so start, health check, failure with the log's tail, and stop (SIGTERM,
then SIGKILL) are tested in seconds. The real `vllm serve` is in test_run.py (the serving runner
end to end)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.backends.base import BackendOptions
from harness.backends.vllm import args as vb
from harness.backends.vllm.options import VllmOptions
from harness.measure.speculation import Counters, from_prometheus
from harness.modes.serving.device.server import (
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    ServerConfig,
    ServerError,
    VllmServer,
    counter_total,
    free_port,
    group_members,
    metric_samples,
    port_in_use,
    tail_lines,
)
from harness.spec.engine_options import EngineBlocks
from harness.spec.scenario import GroupKey

REPO = Path(__file__).resolve().parents[4]
TINY_MODEL = str(REPO / "harness" / "data" / "tiny-llama")

# A stand-in for `vllm serve`: serves /health and /v1/models on --port after `delay` seconds,
# and starts a child (same process group) that ignores SIGTERM, as a stuck engine core would.
FAKE_SERVER = r"""
import http.server, json, signal, subprocess, sys, time
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
name = args[args.index("--served-model-name") + 1]
mode = {mode!r}
print("fake server starting", flush=True)
if mode == "crash":
    print("ValueError: something the engine refused", flush=True)
    sys.exit(3)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
if mode == "never-ready":
    time.sleep(600)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"" if self.path == "/health" else json.dumps({{"data": [{{"id": name}}]}}).encode()
        self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def fake_command(mode: str) -> tuple[str, ...]:
    return (sys.executable, "-c", FAKE_SERVER.format(mode=mode), "--")


def config(**fields: Any) -> ServerConfig:
    return ServerConfig(**{"model": TINY_MODEL, "served_model_name": "tiny", **fields})


# --- arguments ----------------------------------------------------------------------------------


def test_serve_args_carry_the_configuration() -> None:
    args = config(
        dtype="float32",
        kv_cache_dtype="fp8_e5m2",
        quantization="fp8",
        max_model_len=256,
        enforce_eager=True,
        kv_cache_memory_bytes=32 * 2**20,
        max_num_seqs=8,
    ).serve_args("127.0.0.1", 8123)
    joined = " ".join(args)
    assert args[0] == TINY_MODEL
    for part in (
        "--host 127.0.0.1",
        "--port 8123",
        "--served-model-name tiny",
        "--dtype float32",
        "--kv-cache-dtype fp8_e5m2",
        "--quantization fp8",
        "--max-model-len 256",
        "--enforce-eager",
        "--kv-cache-memory-bytes 33554432",
        "--max-num-seqs 8",
        "--no-enable-prefix-caching",
        f"--tokenizer {TINY_MODEL}",
    ):
        assert part in joined, part
    assert "--gpu-memory-utilization" not in joined


def test_config_from_the_offline_engine_kwargs_runs_the_same_configuration() -> None:
    group = GroupKey(
        target="cpu",
        model="tiny-llama",
        revision="main",
        backend="vllm",
        quantization="fp32",
        kv_cache_dtype="fp8_e4m3",
    )
    options = BackendOptions(
        device="cpu",
        model_path=TINY_MODEL,
        kv_cache_bytes=2**25,
        max_context=320,
        engines=EngineBlocks(vllm=VllmOptions(enforce_eager=True)),
    )
    kwargs = vb.engine_kwargs(group, options)
    cfg = ServerConfig.from_engine_kwargs(kwargs, served_model_name="tiny")
    assert (cfg.dtype, cfg.kv_cache_dtype, cfg.quantization) == ("float32", "fp8_e4m3", None)
    assert (cfg.max_model_len, cfg.kv_cache_memory_bytes, cfg.enforce_eager) == (320, 2**25, True)
    assert cfg.gpu_memory_utilization is None and not cfg.enable_prefix_caching


def test_config_from_engine_kwargs_refuses_an_argument_it_cannot_map() -> None:
    with pytest.raises(ValueError, match="long_prefill_token_threshold"):
        ServerConfig.from_engine_kwargs({"model": "m", "long_prefill_token_threshold": 4})


def test_a_speculative_group_is_served_with_its_speculative_config_as_json() -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
            "prompt_lookup_max": 4}  # fmt: skip
    cfg = ServerConfig.from_engine_kwargs({"model": "m", "speculative_config": spec})
    args = cfg.serve_args("127.0.0.1", 8000)
    at = args.index("--speculative-config")
    assert json.loads(args[at + 1]) == spec
    assert "--speculative-config" not in ServerConfig(model="m").serve_args("127.0.0.1", 1)


def test_the_metrics_page_reads_as_samples_and_speculation_counters() -> None:
    page = "\n".join([
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="harness"} 10.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="harness"} 40.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="harness"} 13.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="harness",'
        'position="0"} 8.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="harness",'
        'position="1"} 5.0',
        "process_open_fds 12",
    ])  # fmt: skip
    samples = metric_samples(page)
    assert samples[0] == (
        "vllm:spec_decode_num_drafts_total",
        {"engine": "0", "model_name": "harness"},
        10.0,
    )
    assert samples[-1] == ("process_open_fds", {}, 12.0)
    counters = from_prometheus(samples)
    # drafts 10, draft tokens 40, accepted 13; per position 8 and 5 (positions 0 and 1)
    assert counters == Counters(drafts=10, draft_tokens=40, accepted=13, accepted_per_pos=(8, 5))


def test_free_port_is_free_and_tail_lines(tmp_path: Path) -> None:
    assert not port_in_use(free_port())
    log = tmp_path / "log.txt"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail_lines(log, 3) == ["line 97", "line 98", "line 99"]
    assert tail_lines(tmp_path / "absent.txt") == []


# --- life cycle, with the stand-in ----------------------------------------------------------------


def test_starts_health_checks_and_stops_its_whole_group(tmp_path: Path) -> None:
    server = VllmServer(
        config(),
        log_path=tmp_path / "server.log",
        command=fake_command("ok"),
        startup_timeout_s=60,
        grace_s=2,
    )
    with server:
        assert server.alive() and port_in_use(server.port)
        assert server.base_url == f"http://127.0.0.1:{server.port}"
        pgid = server.pgid
        assert pgid is not None and len(group_members(pgid)) >= 2  # the server and its child
    # The child ignored SIGTERM: only SIGKILL after the grace period ended it.
    assert group_members(pgid) == [] and not port_in_use(server.port)
    assert "fake server starting" in (tmp_path / "server.log").read_text()


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    server = VllmServer(
        config(),
        log_path=tmp_path / "s.log",
        command=fake_command("stubborn"),
        startup_timeout_s=60,
        grace_s=1,
    )
    server.start()
    pgid = server.pgid
    assert pgid is not None
    started = time.monotonic()
    server.stop()
    assert group_members(pgid) == [] and time.monotonic() - started >= 1.0
    server.stop()  # idempotent


def test_a_server_that_exits_at_start_raises_with_its_log_tail(tmp_path: Path) -> None:
    server = VllmServer(
        config(),
        log_path=tmp_path / "s.log",
        command=fake_command("crash"),
        startup_timeout_s=60,
        grace_s=1,
    )
    with pytest.raises(ServerError) as info, server:
        pass
    assert "exited with code 3" in str(info.value)
    assert "ValueError: something the engine refused" in info.value.log_tail
    assert server.pgid is not None and group_members(server.pgid) == []


def test_a_server_never_ready_times_out_and_its_group_is_stopped(tmp_path: Path) -> None:
    server = VllmServer(
        config(),
        log_path=tmp_path / "s.log",
        command=fake_command("never-ready"),
        startup_timeout_s=3,
        grace_s=1,
    )
    with pytest.raises(ServerError, match="not ready after 3 s"):
        server.start()
    assert server.pgid is not None and group_members(server.pgid) == []


def test_a_failure_inside_the_block_still_stops_the_group(tmp_path: Path) -> None:
    server = VllmServer(
        config(),
        log_path=tmp_path / "s.log",
        command=fake_command("ok"),
        startup_timeout_s=60,
        grace_s=1,
    )
    with pytest.raises(KeyError), server:
        raise KeyError("a level failed")
    assert server.pgid is not None and group_members(server.pgid) == []


def test_kill_ends_the_group_at_once(tmp_path: Path) -> None:
    server = VllmServer(
        config(),
        log_path=tmp_path / "s.log",
        command=fake_command("ok"),
        startup_timeout_s=60,
        grace_s=1,
    )
    with server:
        server.kill()
        deadline = time.monotonic() + 10
        while server.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not server.alive() and server.returncode() == -signal.SIGKILL
    assert server.pgid is not None and group_members(server.pgid) == []
    assert os.getpgid(os.getpid()) != server.pgid  # the test itself was never in its group


# --- the prefix cache's counters ------------------------------------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_prefix_cache_counters_are_read_from_a_real_metrics_answer() -> None:
    text = (FIXTURES / "metrics-prefix-cache.txt").read_text()
    assert counter_total(text, PREFIX_CACHE_QUERIES) == 49648.0
    assert counter_total(text, PREFIX_CACHE_HITS) == 4096.0
    # the `_created` gauges and the external (KV connector) counters are other samples
    assert counter_total(text, "vllm:external_prefix_cache_hits") == 0.0
    assert counter_total(text, "vllm:no_such_counter") is None


def test_a_counter_sums_its_label_sets() -> None:
    text = 'x_total{engine="0"} 3.0\nx_total{engine="1"} 4.5\nx_created{engine="0"} 9.0\n'
    assert counter_total(text, "x") == 7.5
