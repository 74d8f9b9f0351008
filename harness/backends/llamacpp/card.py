"""llama.cpp's card (harness.spec.engines): its facts and its own name for each weight format
(the GGUF file type a model folder is converted to, harness.backends.llamacpp.gguf) and KV-cache
dtype (its ``type_k`` / ``type_v``, ggml types)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness.backends.llamacpp.options import LlamaCppOptions
from harness.spec.engines import Engine, EngineParallelism, PerDevice
from harness.units import MIB

# ggml's type ids (ggml/include/ggml.h, enum ggml_type) and llama.cpp's file types
# (include/llama.h, enum llama_ftype), as llama-cpp-python exposes them.
GGML_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "bf16": 30}
LLAMA_FTYPE = {"F32": 0, "F16": 1, "Q8_0": 7, "Q4_K_M": 15, "BF16": 32}


class GgufWeights(BaseModel):
    """file_type: the GGUF file type (llama_ftype) the weights are converted to; None: the
    checkpoint's own float dtype (F32, F16 or BF16)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    file_type: str | None


# Sources (2026-12-07, llama-cpp-python 0.3.36 built for this 2-core CPU, tiny-llama, machine
# loaded by other jobs): a group runs in a child forked from the node's host like transformers'
# (the host has imported torch and transformers; the harness tokenizes with transformers'
# tokenizer), so its process is planned as transformers' (375 MiB) until history calibrates it;
# the model load (GGUF file already converted) took 0.17-0.76 s; a 64-token window scored in
# 0.5-4 s under load (its logits are read per position), planned at 20 ms a unit; the GPU
# figures are assumptions (no CUDA build measured).
CARD = Engine[GgufWeights, str | None](
    name="llamacpp",
    cpu_process_bytes=375 * MIB,
    cpu_first_forward_bytes=0.0,
    start_s=PerDevice(cpu=0.5, cuda=5.0),
    step_floor_s=PerDevice(cpu=0.002, cuda=0.003),
    quality_unit_s=PerDevice(cpu=0.02, cuda=0.026),
    # this harness builds llama-cpp-python for the CPU (make venv ENGINES=llamacpp); a CUDA or
    # ROCm build needs CMAKE_ARGS=-DGGML_CUDA=on / -DGGML_HIP=on at install
    none_is_own_dtype=True,  # the checkpoint's float type as the GGUF file's
    targets=frozenset({"cpu"}),
    # llama.cpp allocates the KV cache for n_ctx tokens when the context is created
    kv_pool_held_on=frozenset({"cpu", "cuda", "rocm"}),
    prefill_chunk_tokens=LlamaCppOptions().n_batch,
    parallelism=EngineParallelism(
        tensor=False, pipeline=False, expert=False,
        why_not="llama.cpp splits a model over the GPUs of one process (split_mode), which is "
        "not a tensor / pipeline layout of ranks; the harness measures it on one device",
    ),
    weights={
        "none": GgufWeights(file_type=None),
        "fp32": GgufWeights(file_type="F32"),
        "bf16": GgufWeights(file_type="BF16"),
        "fp16": GgufWeights(file_type="F16"),
        "gguf-q8_0": GgufWeights(file_type="Q8_0"),
        "gguf-q4_k_m": GgufWeights(file_type="Q4_K_M"),
    },
    # None: the compute dtype (f32 weights keep an f32 cache; llama.cpp's default is f16)
    kv_caches={"auto": None, "fp16": "f16", "q8_0": "q8_0", "q4_0": "q4_0"},
    package="llama-cpp-python",
    backend="harness.backends.llamacpp.backend:LlamaCppBackend",
    options="harness.backends.llamacpp.options:LlamaCppOptions",
    server="harness.backends.llamacpp.server:LlamaCppServer",
)  # fmt: skip
