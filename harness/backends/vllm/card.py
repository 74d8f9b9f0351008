"""vLLM's card (harness.spec.engines): its facts and its own name for each weight format (its
`quantization` and `dtype` arguments, the checkpoint methods it accepts) and KV-cache dtype (its
`kv_cache_dtype`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness.spec.engines import Engine, EngineParallelism, PerDevice
from harness.units import MIB

# vLLM's name for FP8 quantized on the fly from a 16-bit checkpoint differs between builds
# ("fp8_per_tensor" where registered, else "fp8"): the dialect resolves this placeholder.
VLLM_ONLINE_FP8 = "online-fp8"
# vLLM prefills in chunks of at most this many tokens (its max_num_batched_tokens default).
MAX_BATCHED_TOKENS = 8192


class VllmWeights(BaseModel):
    """quantization / dtype: vLLM's `quantization` and `dtype` arguments ("auto": the
    checkpoint's own dtype, a float32 checkpoint served in 16 bit); checkpoint_methods: the
    `quantization_config.quant_method`s a checkpoint may declare for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    quantization: str | None = None
    dtype: str = "auto"
    checkpoint_methods: frozenset[str] = frozenset()


# Sources (this 2-core CPU and an H200; docs/guide/engines.md): vLLM 0.32 CPU, always a fresh
# actor: its import + 109 MiB (371), its engine start and the actor 750-810 MiB (800 planned);
# first forward 0 (its load peak, the profiling run, is above its points'); engine start 15.9-21.6
# s on the CPU (18.8 planned), 51.2-51.9 s with CUDA graphs on the H200 (vLLM 0.26); a step
# 1.8-9.7 ms (median 3.4) on the CPU, 3 ms assumed on CUDA; a quality unit 44.6 ms (CPU).
CARD = Engine[VllmWeights, str](
    name="vllm",
    cpu_process_bytes=800 * MIB,
    cpu_first_forward_bytes=0.0,
    start_s=PerDevice(cpu=18.8, cuda=51.0),
    step_floor_s=PerDevice(cpu=0.0034, cuda=0.003),
    quality_unit_s=PerDevice(cpu=0.0446, cuda=0.026),
    own_processes=True,
    targets=frozenset({"cpu", "cuda", "rocm"}),
    gpu_share=True,  # gpu_memory_utilization × the card
    kv_pool_held_on=frozenset({"cpu"}),  # kv_cache_memory_bytes, sized by the plan
    prefill_chunk_tokens=MAX_BATCHED_TOKENS,
    lora_slots=True,  # max_loras × max_lora_rank over every linear
    draft_in_pool=True,
    # vllm/config/speculative.py, SpeculativeConfig.method
    speculation={
        "ngram": "ngram", "draft": "draft_model", "eagle": "eagle", "eagle3": "eagle3",
        "mtp": "mtp",
    },
    # ParallelConfig.tensor_parallel_size / pipeline_parallel_size / enable_expert_parallel
    # (https://docs.vllm.ai/en/latest/api/vllm/config/parallel/), ranks started by its executor
    # ("mp" on one node, "ray" across nodes).
    parallelism=EngineParallelism(tensor=True, pipeline=True, expert=True),
    weights={
        "none": VllmWeights(),
        "fp32": VllmWeights(dtype="float32"),
        "bf16": VllmWeights(dtype="bfloat16"),
        "fp16": VllmWeights(dtype="float16"),
        "gptq-int4": VllmWeights(quantization="gptq", checkpoint_methods=frozenset({"gptq"})),
        "fp8": VllmWeights(quantization=VLLM_ONLINE_FP8, checkpoint_methods=frozenset({"fp8"})),
        # issue 46's formats, each loaded from a checkpoint that declares its quant_method
        "fp8-block": VllmWeights(quantization="fp8", checkpoint_methods=frozenset({"fp8"})),
        "nvfp4": VllmWeights(
            quantization="modelopt_fp4",
            checkpoint_methods=frozenset({"modelopt_fp4", "compressed-tensors"}),
        ),
        "mxfp4": VllmWeights(quantization="mxfp4", checkpoint_methods=frozenset({"mxfp4"})),
        "w8a8-int8": VllmWeights(
            quantization="compressed-tensors",
            checkpoint_methods=frozenset({"compressed-tensors"}),
        ),
        "w4a16": VllmWeights(
            quantization="compressed-tensors",
            checkpoint_methods=frozenset({"compressed-tensors"}),
        ),
    },
    kv_caches={"auto": "auto", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"},
    package="vllm",
    backend="harness.backends.vllm.backend:VllmBackend",
    options="harness.backends.vllm.options:VllmOptions",
    # its server is `vllm serve`, driven by the serving mode itself (harness.modes.serving.device)
    server=None,
)  # fmt: skip
