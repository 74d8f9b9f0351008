"""The vLLM backend up to the engine boundary: argument mapping, result parsing, and the backend
driven against a fake engine shaped like vLLM 0.33's `LLM`; plus one real-engine test that runs
only where vLLM imports and a GPU is present."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest

from harness.backends import vllm as vb
from harness.backends.base import BackendOptions, backend_class
from harness.compat import rule_for
from harness.errors import UserInputError
from harness.quantization import KV_CACHE_DTYPES, QUANTIZATIONS
from harness.scenario import GroupKey, VllmOptions

REPO = Path(__file__).resolve().parents[2]
TINY_MODEL = REPO / "harness" / "data" / "tiny-llama"


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
    return BackendOptions(device="cuda", model_path=model_path, **fields)


# --- engine_kwargs ------------------------------------------------------------------------------

EXPECTED_WEIGHTS = {  # ours -> (quantization, dtype)
    "none": (None, "auto"),
    "bf16": (None, "bfloat16"),
    "fp16": (None, "float16"),
    "fp32": (None, "float32"),
    "fp8": ("fp8_per_tensor", "auto"),
    "gptq-int4": ("gptq", "auto"),
}
EXPECTED_KV = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16", "fp8": "fp8",
               "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}  # fmt: skip
MISMATCHED = {("fp16", "bf16"), ("fp32", "bf16"), ("bf16", "fp16"), ("fp32", "fp16")}


@pytest.mark.parametrize(("quant", "kv"), list(itertools.product(EXPECTED_WEIGHTS, EXPECTED_KV)))
def test_every_weight_and_kv_name_maps_to_vllm_arguments(
    tmp_path: Path, quant: str, kv: str
) -> None:
    path = checkpoint(tmp_path, "gptq" if quant == "gptq-int4" else None)
    g = group(quantization=quant, kv_cache_dtype=kv)
    if (quant, kv) in MISMATCHED:
        with pytest.raises(UserInputError) as err:
            vb.engine_kwargs(g, options(path))
        assert err.value.field == "kv_cache_dtype"
        assert "match the model dtype" in str(err.value)
        return
    kwargs = vb.engine_kwargs(g, options(path))
    assert (kwargs["quantization"], kwargs["dtype"]) == EXPECTED_WEIGHTS[quant]
    assert kwargs["kv_cache_dtype"] == EXPECTED_KV[kv]


def test_engine_arguments_carry_the_scenario_options_and_start_no_ray(tmp_path: Path) -> None:
    path = checkpoint(tmp_path)
    vllm = VllmOptions(gpu_memory_utilization=0.55, enforce_eager=True, max_model_len=3000)
    kwargs = vb.engine_kwargs(group(), options(path, seed=7, vllm=vllm, max_context=1024))
    assert kwargs["model"] == kwargs["tokenizer"] == path
    assert kwargs["gpu_memory_utilization"] == 0.55
    assert kwargs["enforce_eager"] is True
    assert kwargs["max_model_len"] == 3000
    assert kwargs["seed"] == 7
    assert kwargs["tensor_parallel_size"] == 1
    assert kwargs["distributed_executor_backend"] == "uni"  # never "ray"
    assert kwargs["enable_prefix_caching"] is False  # the full pass must redo its prefill
    assert kwargs["max_logprobs"] == vb.MAX_LOGPROBS
    assert kwargs["worker_extension_cls"] == "harness.backends.vllm.HarnessWorkerExtension"
    assert "revision" not in kwargs  # a local directory has no revision


def test_max_model_len_defaults_to_the_groups_largest_context(tmp_path: Path) -> None:
    kwargs = vb.engine_kwargs(group(), options(checkpoint(tmp_path), max_context=4096))
    assert kwargs["max_model_len"] == 4096
    assert kwargs["gpu_memory_utilization"] == VllmOptions().gpu_memory_utilization


def test_a_hub_id_passes_its_revision() -> None:
    kwargs = vb.engine_kwargs(group(revision="abc123"), options("org/not-a-local-dir"))
    assert kwargs["revision"] == "abc123"


def test_an_fp8_serialized_checkpoint_keeps_vllms_fp8_method(tmp_path: Path) -> None:
    kwargs = vb.engine_kwargs(group(quantization="fp8"), options(checkpoint(tmp_path, "fp8")))
    assert kwargs["quantization"] == "fp8"


@pytest.mark.parametrize(
    ("fields", "opts", "field", "words"),
    [
        ({"backend": "transformers"}, {}, "backend", "vLLM backend"),
        ({"target": "cpu"}, {}, "target", "CUDA and ROCm"),
        ({}, {"device": "cpu"}, "target", "CUDA and ROCm"),
        ({"quantization": "bnb-nf4"}, {}, "quantization", "cannot serve"),
        ({"quantization": "quanto-int8"}, {}, "quantization", "cannot serve"),
        ({"kv_cache_dtype": "int8"}, {}, "kv_cache_dtype", "no 'int8' KV cache"),
        ({"kv_cache_dtype": "int4"}, {}, "kv_cache_dtype", "no 'int4' KV cache"),
        ({"target": "rocm", "kv_cache_dtype": "fp8_e5m2"}, {}, "kv_cache_dtype", "ROCm"),
        ({"quantization": "gptq-int4"}, {}, "quantization", "needs a GPTQ checkpoint"),
    ],
)
def test_what_vllm_cannot_serve_is_refused_naming_the_field(
    tmp_path: Path, fields: dict[str, str], opts: dict[str, str], field: str, words: str
) -> None:
    with pytest.raises(UserInputError) as err:
        vb.engine_kwargs(group(**fields), options(checkpoint(tmp_path)).model_copy(update=opts))
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
        vb.engine_kwargs(group(quantization=quant), options(checkpoint(tmp_path, declared)))
    assert err.value.field == "quantization"
    assert f"already quantized ({declared})" in str(err.value)


def test_what_the_plan_allows_for_vllm_the_engine_mapping_accepts(tmp_path: Path) -> None:
    """compat.RULES and engine_kwargs agree: nothing the plan lets through is refused."""
    gptq, plain = checkpoint(tmp_path, "gptq"), checkpoint(tmp_path)
    refused = set()
    for quant, kv, target in itertools.product(QUANTIZATIONS, KV_CACHE_DTYPES, ("cuda", "rocm")):
        fields = {"backend": "vllm", "quantization": quant, "kv_cache_dtype": kv, "target": target}
        if rule_for(fields) is not None:
            continue
        path = gptq if quant == "gptq-int4" else plain
        try:
            vb.engine_kwargs(group(**fields), options(path))
        except UserInputError:
            refused.add((quant, kv))
    assert refused == set()


def test_checkpoint_quant_method_reads_only_local_configs(tmp_path: Path) -> None:
    assert vb.checkpoint_quant_method(checkpoint(tmp_path, "GPTQ")) == "gptq"
    assert vb.checkpoint_quant_method(checkpoint(tmp_path)) is None
    assert vb.checkpoint_quant_method("org/hub-id") is None
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert vb.checkpoint_quant_method(str(broken)) is None


# --- sampling_params_kwargs ---------------------------------------------------------------------


def test_sampling_is_greedy_with_a_fixed_length_and_no_text() -> None:
    assert vb.sampling_params_kwargs(32) == {
        "n": 1,
        "temperature": 0.0,
        "max_tokens": 32,
        "min_tokens": 32,
        "ignore_eos": True,
        "detokenize": False,
    }


def test_sampling_can_ask_for_prompt_logprobs_and_fixed_ids() -> None:
    kwargs = vb.sampling_params_kwargs(1, prompt_logprobs=5, prompt_logprob_token_ids=[[1, 2]])
    assert kwargs["prompt_logprobs"] == 5
    assert kwargs["prompt_logprob_token_ids"].tolist() == [[1, 2]]
    assert vb.sampling_params_kwargs(1, prompt_logprobs=0)["prompt_logprobs"] == 0


@pytest.mark.parametrize(
    ("new_tokens", "extra"), [(0, {}), (1, {"prompt_logprobs": -1}), (1, {"prompt_logprobs": 65})]
)
def test_sampling_refuses_what_the_harness_never_means(new_tokens: int, extra: Any) -> None:
    with pytest.raises(ValueError):
        vb.sampling_params_kwargs(new_tokens, **extra)


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
    scores = vb.parse_prompt_logprobs(plps, windows, None, 3)
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
    scores = vb.parse_prompt_logprobs([vllm_prompt_logprobs(table, window[0], 3)], window, ref, 3)
    assert scores.logprobs_at_ref is not None
    at_ref = scores.logprobs_at_ref[0]
    assert at_ref[:, 0] == pytest.approx(table[[1, 4]].max(axis=1))
    assert np.isnan(at_ref[:, 1]).all()


def test_reference_ids_scored_by_the_engine_are_taken_as_given() -> None:
    table = bigram_table()
    window = [[1, 4, 2]]
    ref = np.array([[[5, 6], [7, 8]]])
    scored = np.array([[-1.0, -2.0], [-3.0, -4.0]])
    scores = vb.parse_prompt_logprobs(
        [vllm_prompt_logprobs(table, window[0], 2)], window, ref, 2, token_id_logprobs=[scored]
    )
    assert scores.logprobs_at_ref is not None
    np.testing.assert_array_equal(scores.logprobs_at_ref[0], scored)


def test_a_topk_of_one_still_finds_the_argmax_and_the_actual_token() -> None:
    table = bigram_table()
    window = [[3, 3, 3, 3]]
    scores = vb.parse_prompt_logprobs([vllm_prompt_logprobs(table, window[0], 1)], window, None, 1)
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
        vb.parse_prompt_logprobs(plps, windows, ref, 2)


def completion(token_ids: list[int]) -> SimpleNamespace:
    return SimpleNamespace(outputs=[SimpleNamespace(token_ids=token_ids, index=0)])


def test_generation_counts_come_from_the_outputs_not_the_request() -> None:
    outputs = [completion([5] * 16), completion([1] * 9), SimpleNamespace(outputs=[])]
    gen = vb.parse_generation(outputs, 120.0, prefill_ms=20.0)
    assert gen.new_tokens == [16, 9, 0]
    assert gen.step_ms == [20.0]
    assert gen.e2e_ms == 120.0
    assert gen.timer == "perf_counter"
    assert vb.parse_generation(outputs[:1], 5.0).step_ms == []
    assert vb.parse_generation(outputs[:1], 5.0, prefill_ms=6.0).step_ms == [5.0]  # noise capped


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
    ids, n_context = vb.split_pair(no_bos, "The", " cat sat")
    assert ids == [7, 3, 4]
    assert n_context == 1


@pytest.mark.parametrize(("context", "continuation"), [("The", ""), ("", " cat")])
def test_a_pair_without_context_or_continuation_tokens_is_refused(
    context: str, continuation: str
) -> None:
    with pytest.raises(ValueError, match="need a token each"):
        vb.split_pair(no_bos, context, continuation)


def test_continuation_logprob_sums_the_continuation_only() -> None:
    table = bigram_table()
    ids = [0, 7, 3, 4]
    plp = vllm_prompt_logprobs(table, ids, 0)
    assert vb.continuation_logprob(plp, ids, 2) == pytest.approx(table[7, 3] + table[3, 4])
    with pytest.raises(ValueError):
        vb.continuation_logprob(plp, ids, 0)


# --- memory -------------------------------------------------------------------------------------


def test_kv_block_bytes_follow_the_kv_formula() -> None:
    # Llama-3.1-8B, 16-token blocks, bf16: 2 × 32 × 8 × 128 × 16 × 2 = 2 MiB
    assert (
        vb.kv_block_bytes(
            num_layers=32, num_kv_heads=8, head_size=128, block_size=16, dtype_bytes=2
        )
        == 2 * 2**20
    )
    assert vb.kv_dtype_bytes("auto", 2) == 2
    assert vb.kv_dtype_bytes("fp8_e5m2", 2) == 1
    assert vb.kv_dtype_bytes("float16", 4) == 2
    with pytest.raises(ValueError):
        vb.kv_dtype_bytes("int8_per_token_head", 2)


def test_memory_facts_keep_preallocation_apart_from_weights_and_kv() -> None:
    facts = vb.build_memory_facts(
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
    empty = vb.build_memory_facts(
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
    report = vb.HarnessWorkerExtension.harness_memory_report(worker)  # type: ignore[arg-type]
    assert report == {"weights_bytes": 123, "kv_available_bytes": 9000, "total_bytes": 10**9,
                      "kv_allocated_bytes": 4 * 1024 * 2}  # fmt: skip
    assert all(type(v) is int for v in report.values())


# --- the backend against a fake engine ----------------------------------------------------------


class FakeValidationError(Exception):
    """Stands for vllm.exceptions.VLLMValidationError (not a ValueError)."""


class FakeLLM:
    """Shaped like vllm.LLM 0.33: a bigram "model", greedy decoding, prompt log-probs."""

    instances: ClassVar[list[FakeLLM]] = []

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.table = bigram_table(vocab=12)
        self.calls: list[tuple[list[list[int]], Any]] = []
        self.v2_runner = True
        self.shut_down = False
        cache = SimpleNamespace(num_gpu_blocks=100, block_size=16, cache_dtype="auto",
                                gpu_memory_utilization=kwargs["gpu_memory_utilization"],
                                kv_cache_size_tokens=1600)  # fmt: skip
        model_config = SimpleNamespace(
            dtype=SimpleNamespace(itemsize=2),
            max_model_len=kwargs["max_model_len"],
            get_num_layers=lambda parallel: 2,
            get_num_kv_heads=lambda parallel: 2,
            get_head_size=lambda: 8,
        )
        self.llm_engine = SimpleNamespace(
            vllm_config=SimpleNamespace(cache_config=cache, parallel_config=object()),
            model_config=model_config,
            engine_core=SimpleNamespace(shutdown=self._shutdown),
        )
        FakeLLM.instances.append(self)

    def _shutdown(self) -> None:
        self.shut_down = True

    def get_tokenizer(self) -> Any:
        return SimpleNamespace(encode=words)

    def collective_rpc(self, method: str) -> list[dict[str, int]]:
        worker = SimpleNamespace(model_runner=SimpleNamespace(model_memory_usage=4096))
        return [getattr(vb.HarnessWorkerExtension, method)(worker)]

    def generate(self, prompts: list[dict[str, Any]], params: Any, use_tqdm: bool) -> list[Any]:
        assert use_tqdm is False
        ids = [p["prompt_token_ids"] for p in prompts]
        per_prompt = params if isinstance(params, list) else [params] * len(ids)
        for p in per_prompt:  # requests are validated before any runs
            if p.prompt_logprob_token_ids is not None and not self.v2_runner:
                raise FakeValidationError("prompt_logprob_token_ids requires the V2 model runner")
        self.calls.append((ids, params))
        outputs = []
        for prompt, p in zip(ids, per_prompt, strict=True):
            tokens, last = [], prompt[-1]
            for _ in range(p.max_tokens):
                last = int(self.table[last].argmax())
                tokens.append(last)
            plp = None
            if p.prompt_logprobs is not None:
                plp = vllm_prompt_logprobs(self.table, prompt, p.prompt_logprobs)
            scored = None
            if p.prompt_logprob_token_ids is not None:
                rows = self.table[prompt[:-1]]
                scored = np.take_along_axis(rows, np.asarray(p.prompt_logprob_token_ids), axis=1)
            completion = SimpleNamespace(token_ids=tokens)
            outputs.append(
                SimpleNamespace(
                    outputs=[completion], prompt_logprobs=plp, prompt_token_id_logprobs=scored
                )
            )
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Fake `vllm` modules with the names the backend imports, and what they were asked."""
    seen: dict[str, Any] = {"cleanup": []}

    def module(name: str, **attrs: Any) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, mod)
        return mod

    def sampling_params(**kwargs: Any) -> SimpleNamespace:
        full = {"prompt_logprobs": None, "prompt_logprob_token_ids": None, **kwargs}
        return SimpleNamespace(**full)

    module("vllm", LLM=FakeLLM, SamplingParams=sampling_params)
    module("vllm.inputs", TokensPrompt=dict)
    module("vllm.exceptions", VLLMValidationError=FakeValidationError)
    module("vllm.distributed")
    module(
        "vllm.distributed.parallel_state",
        cleanup_dist_env_and_memory=lambda shutdown_ray: seen["cleanup"].append(shutdown_ray),
    )
    platform = SimpleNamespace(get_device_total_memory=lambda device: 1000 * 2**20)
    module("vllm.platforms", current_platform=platform)
    FakeLLM.instances.clear()
    return seen


def loaded_backend(tmp_path: Path) -> vb.VllmBackend:
    backend = vb.VllmBackend(
        group(), options(checkpoint(tmp_path), vllm=VllmOptions(gpu_memory_utilization=0.5))
    )
    backend.load()
    return backend


def test_the_registry_resolves_vllm_without_importing_vllm() -> None:
    assert backend_class("vllm") is vb.VllmBackend
    code = "import sys, harness.backends.vllm; assert 'vllm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_a_bad_group_fails_before_any_engine_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # any import of vllm would now fail
    with pytest.raises(UserInputError):
        vb.VllmBackend(group(target="cpu"), options("x"))


def test_generate_runs_a_prefill_pass_then_the_full_pass(
    fake_vllm: dict[str, Any], tmp_path: Path
) -> None:
    backend = loaded_backend(tmp_path)
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["distributed_executor_backend"] == "uni"
    gen = backend.generate([[1, 2, 3], [4, 5, 6]], 8)
    (prefill_ids, prefill), (full_ids, full) = llm.calls
    assert prefill_ids == full_ids == [[1, 2, 3], [4, 5, 6]]
    assert (prefill.max_tokens, prefill.min_tokens) == (1, 1)
    assert (full.max_tokens, full.min_tokens, full.ignore_eos) == (8, 8, True)
    assert full.temperature == 0.0 and full.detokenize is False
    assert gen.new_tokens == [8, 8]
    assert len(gen.step_ms) == 1 and gen.step_ms[0] >= 0
    single = backend.generate([[1, 2, 3]], 1)
    assert single.step_ms == [single.e2e_ms]  # one token: the call is its own prefill


def test_windows_are_scored_with_the_reference_ids_on_the_v2_runner(
    fake_vllm: dict[str, Any], tmp_path: Path
) -> None:
    backend = loaded_backend(tmp_path)
    llm = FakeLLM.instances[-1]
    windows = [[1, 4, 2, 9], [3, 3, 7, 0]]
    ref = np.stack([np.argsort(-llm.table[w[:-1]], axis=1)[:, :3] for w in windows])
    scores = backend.score_windows(windows, ref, 3)
    assert scores.logprobs_at_ref is not None
    expected = np.stack(
        [np.take_along_axis(llm.table[w[:-1]], r, 1) for w, r in zip(windows, ref, strict=True)]
    )
    np.testing.assert_allclose(scores.logprobs_at_ref, expected)
    ((_, params),) = llm.calls
    assert isinstance(params, list) and params[0].prompt_logprobs == 3
    direct = -sum(llm.table[w[i], w[i + 1]] for w in windows for i in range(3))
    assert scores.nll_sum.sum() == pytest.approx(direct)


def test_without_the_v2_runner_reference_ids_are_looked_up_in_the_topk(
    fake_vllm: dict[str, Any], tmp_path: Path
) -> None:
    backend = loaded_backend(tmp_path)
    llm = FakeLLM.instances[-1]
    llm.v2_runner = False
    windows = [[1, 4, 2, 9]]
    ref = np.argsort(-llm.table[windows[0][:-1]], axis=1)[:, [0, 11]][None]
    scores = backend.score_windows(windows, ref, 3)
    assert scores.logprobs_at_ref is not None
    assert np.isfinite(scores.logprobs_at_ref[..., 0]).all()
    assert np.isnan(scores.logprobs_at_ref[..., 1]).all()  # the worker reports KL unmeasured
    assert len(llm.calls) == 1  # the refused request was never run


def test_a_topk_beyond_max_logprobs_is_a_user_error(
    fake_vllm: dict[str, Any], tmp_path: Path
) -> None:
    with pytest.raises(UserInputError):
        loaded_backend(tmp_path).score_windows([[1, 2]], None, vb.MAX_LOGPROBS + 1)


def test_continuations_are_scored_from_prompt_logprobs(
    fake_vllm: dict[str, Any], tmp_path: Path
) -> None:
    backend = loaded_backend(tmp_path)
    table = FakeLLM.instances[-1].table
    (score,) = backend.score_continuations([("The", " cat sat")])
    assert score == pytest.approx(table[7, 3] + table[3, 4])


def test_memory_facts_come_from_the_engine_and_the_worker(
    fake_vllm: dict[str, Any], tmp_path: Path
) -> None:
    facts = loaded_backend(tmp_path).memory_facts()
    assert facts.kv_cache_bytes == 100 * (2 * 2 * 2 * 8 * 16 * 2)
    assert facts.preallocated_bytes == 500 * 2**20
    assert facts.weights_bytes == 4096
    assert facts.extra["kv_cache_size_tokens"] == 1600


def test_close_shuts_the_engine_down_without_touching_ray(
    fake_vllm: dict[str, Any], tmp_path: Path
) -> None:
    backend = loaded_backend(tmp_path)
    llm = FakeLLM.instances[-1]
    backend.close()
    assert llm.shut_down
    assert fake_vllm["cleanup"] == [False]
    with pytest.raises(RuntimeError, match="load"):
        backend.generate([[1]], 1)


# --- the real engine (GPU machines with vLLM only) ----------------------------------------------


@pytest.mark.vllm
@pytest.mark.gpu
def test_the_real_engine_generates_exact_counts_and_a_finite_perplexity() -> None:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA/ROCm device")
    if not (TINY_MODEL / "config.json").is_file():
        pytest.skip(f"{TINY_MODEL} is not there")
    backend = vb.VllmBackend(
        group(model="tiny-llama"),
        BackendOptions(device="cuda", model_path=str(TINY_MODEL), max_context=512,
                       vllm=VllmOptions(gpu_memory_utilization=0.3, enforce_eager=True)),
    )  # fmt: skip
    backend.load()
    try:
        ids = backend.encode((REPO / "harness/data/corpus/wiki.test.raw").read_text()[:20000])
        windows = [ids[i * 128 : (i + 1) * 128] for i in range(4)]
        gen = backend.generate([w[:32] for w in windows], 12)
        assert gen.new_tokens == [12] * 4
        assert gen.step_ms and gen.e2e_ms >= gen.step_ms[0] > 0
        scores = backend.score_windows(windows, None, 5)
        ppl = math.exp(scores.nll_sum.sum() / scores.tokens.sum())
        assert math.isfinite(ppl) and ppl > 1
        facts = backend.memory_facts()
        assert facts.kv_cache_bytes and facts.preallocated_bytes
        assert facts.preallocated_bytes > facts.kv_cache_bytes
    finally:
        backend.close()


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
    args = gpu_check.parse_args(["--out", "x", "--skip-1b"])
    assert args.skip_1b and args.out == "x"


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
    assert gpu_check.main(["--out", str(tmp_path), "--skip-1b"]) == 2
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["ok"] is False and "no CUDA" in report["error"]
