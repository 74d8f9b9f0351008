"""llama.cpp through llama-cpp-python (harness.backends.llamacpp): the GGUF conversion of the
tiny model (harness.backends.llamacpp.gguf), and `harness measure` beside transformers with the
engine-agreement check (harness.backends.llamacpp.backend). The tests that need the engine skip
with the reason where llama-cpp-python is not installed (`make venv ENGINES=llamacpp`); CI builds
it first (.ci/run), so they run there."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.backends.base import BackendOptions
from harness.backends.llamacpp.backend import check_served, context_tokens
from harness.backends.llamacpp.gguf import permute_rope_rows, tensor_name
from harness.cli.main import app
from harness.errors import UserInputError
from harness.results.engines import AGREEMENT_TOLERANCE, engine_agreement
from harness.spec import models
from harness.spec.scenario import GroupKey

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "tests" / "fixtures" / "llamacpp-cpu.yaml"
TINY = models.PACKAGE_DATA / "tiny-llama"
needs_llamacpp = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python is not installed (make venv ENGINES=llamacpp builds it)",
)


def test_rope_rows_go_from_hugging_face_halves_to_llama_cpp_pairs() -> None:
    # one head of 4 rows: HF's halves (0, 1 | 2, 3) become llama.cpp's pairs (0, 2), (1, 3)
    rows = np.arange(4, dtype=np.float32).reshape(4, 1)
    assert permute_rope_rows(rows, heads=1)[:, 0].tolist() == [0.0, 2.0, 1.0, 3.0]
    # two heads of 4 rows each: each head on its own
    rows = np.arange(8, dtype=np.float32).reshape(8, 1)
    assert permute_rope_rows(rows, heads=2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_tensor_names_are_llama_cpp_s() -> None:
    assert tensor_name("model.embed_tokens.weight") == "token_embd.weight"
    assert tensor_name("model.layers.3.mlp.down_proj.weight") == "blk.3.ffn_down.weight"
    assert tensor_name("model.layers.0.self_attn.k_proj.weight") == "blk.0.attn_k.weight"
    assert tensor_name("model.layers.0.self_attn.rotary_emb.inv_freq") is None


def test_the_context_holds_the_plan_s_pool() -> None:
    options = BackendOptions(device="cpu", model_path=str(TINY), max_context=40,
                             kv_cache_bytes=64 * 2**20)  # fmt: skip
    # tiny-llama, f32 cache: 2 × 4 layers × 2 KV heads × 64 × 4 bytes = 4096 bytes a token;
    # 64 MiB / 4096 = 16384 tokens, already a multiple of 256
    assert context_tokens(options, 4096.0) == 16384
    # a pool smaller than the longest sequence: the sequence, rounded up to 256
    small = options.model_copy(update={"kv_cache_bytes": 4096 * 10})
    assert context_tokens(small, 4096.0) == 256


def test_llamacpp_refuses_what_its_card_does_not_name() -> None:
    options = BackendOptions(device="cpu", model_path=str(TINY))
    group = GroupKey(target="cpu", model="tiny-llama", revision="main", backend="llamacpp",
                     quantization="bnb-nf4", kv_cache_dtype="auto")  # fmt: skip
    with pytest.raises(UserInputError, match=r"llama\.cpp has no .bnb-nf4."):
        check_served(group, options)
    gpu = group.model_copy(update={"quantization": "none", "target": "cuda"})
    with pytest.raises(UserInputError, match="expected one of: cpu"):
        check_served(gpu, options)


@needs_llamacpp
@pytest.mark.engine
def test_the_tiny_model_converts_to_gguf_once_per_file_type(tmp_path: Path) -> None:
    import gguf

    from harness.backends.llamacpp.gguf import gguf_file

    path = gguf_file(TINY, None, tmp_path)  # the checkpoint's own dtype: float32
    assert path.name == "model-F32.gguf" and gguf_file(TINY, "F32", tmp_path) == path
    reader = gguf.GGUFReader(str(path))
    names = {t.name for t in reader.tensors}
    # 2 model tensors + 9 per layer × 4 layers; the tied lm_head is token_embd itself
    assert len(names) == 2 + 9 * 4 and "output.weight" not in names
    quantized = gguf_file(TINY, "Q8_0", tmp_path)
    # Q8_0: 34 bytes per 32 weights, so well under half of the F32 file
    assert quantized.stat().st_size < path.stat().st_size / 2


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("llamacpp") / "run"
    result = CliRunner().invoke(app, ["measure", str(SCENARIO), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]
    return [r for r in rows if r["status"] != "skipped"]  # the excluded combinations


@needs_llamacpp
@pytest.mark.engine
@pytest.mark.slow
def test_llamacpp_rows_are_ok_gated_and_agree_with_transformers(
    measured: list[dict[str, Any]],
) -> None:
    by_config = {(r["backend"], r["quantization"], r["kv_cache_dtype"]): r for r in measured}
    assert set(by_config) == {
        ("transformers", "none", "auto"), ("llamacpp", "none", "auto"),
        ("llamacpp", "gguf-q4_k_m", "q4_0"),
    }  # fmt: skip
    assert all(r["status"] == "ok" for r in measured), [r.get("error") for r in measured]
    for row in measured:
        assert row["generated_tokens"] == 2 * 4 and row["decode_tok_s"] > 0
        assert row["ppl"] is not None and row["predicted_peak_mib"] > 0
    # the same model in the same dtype (fp32) on both engines: the agreement check's pair
    table = engine_agreement(pd.DataFrame(measured))
    assert table[["dtype", "engine"]].values.tolist() == [["fp32", "llamacpp"]]
    assert abs(float(table["difference_pct"].iloc[0])) <= 100 * AGREEMENT_TOLERANCE
    # 4-bit weights and a 4-bit cache cost perplexity, and the gate compared them
    quantized = by_config[("llamacpp", "gguf-q4_k_m", "q4_0")]
    assert quantized["ppl"] > by_config[("llamacpp", "none", "auto")]["ppl"]


@needs_llamacpp
@pytest.mark.engine
def test_llamacpp_serves_the_group_through_its_openai_compatible_server(tmp_path: Path) -> None:
    """harness.backends.llamacpp.server: the command starts `llama_cpp.server` on loopback; one
    greedy completion of 4 tokens comes back (bounded: 60 s to start, one request)."""
    import socket
    import subprocess
    import time
    import urllib.request

    from harness.backends.base import server_class

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    group = GroupKey(target="cpu", model="tiny-llama", revision="main", backend="llamacpp",
                     quantization="gguf-q8_0", kv_cache_dtype="q8_0")  # fmt: skip
    options = BackendOptions(device="cpu", model_path=str(TINY), max_context=512,
                             cache_dir=str(tmp_path))  # fmt: skip
    server = server_class("llamacpp")
    assert server is not None
    command = server.command(group, options, "127.0.0.1", port, "harness")
    assert command[1:3] == ["-m", "llama_cpp.server"] and "--type_k" in command
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            try:
                with urllib.request.urlopen(base + server.ready_path, timeout=2) as ready:
                    if ready.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline, "llama_cpp.server did not start in 60 s"
                time.sleep(0.5)
        body = json.dumps({"model": "harness", "prompt": "The tower is", "max_tokens": 4,
                           "temperature": 0.0}).encode()  # fmt: skip
        request = urllib.request.Request(base + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        assert answer["usage"]["completion_tokens"] >= 1
        assert answer["choices"][0]["text"] is not None
    finally:
        process.terminate()
        process.wait(timeout=30)
