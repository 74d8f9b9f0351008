"""SGLang's card (harness.spec.engines): its facts and its own name for each weight format (its
``dtype`` and ``quantization``) and KV-cache dtype (its ``kv_cache_dtype``), as ServerArgs
spells them (python/sglang/srt/arg_groups/fields/model.py, sglang 0.5.23)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness.spec.engines import Engine, EngineParallelism, PerDevice
from harness.units import MIB

# SGLang prefills in chunks of at most this many tokens on an 80 GB-class card (its default
# chunked_prefill_size there; smaller cards get smaller chunks).
CHUNKED_PREFILL_TOKENS = 8192


class SglangWeights(BaseModel):
    """dtype / quantization: ServerArgs' ``dtype`` ("auto": FP16 for FP32/FP16 models, BF16
    for BF16 models) and ``quantization`` (None: the checkpoint's own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    dtype: str = "auto"
    quantization: str | None = None


# Not yet measured by this harness (no GPU lent to the session that added it): the figures are
# vLLM's on CUDA, its nearest kin (a server process with CUDA graphs and a pre-allocated pool),
# until a run's history calibrates them (harness.run.history).
CARD = Engine[SglangWeights, str](
    name="sglang",
    cpu_process_bytes=800 * MIB,
    cpu_first_forward_bytes=0.0,
    start_s=PerDevice(cpu=60.0, cuda=60.0),
    step_floor_s=PerDevice(cpu=0.003, cuda=0.003),
    quality_unit_s=PerDevice(cpu=0.026, cuda=0.026),
    own_processes=True,  # its scheduler and detokenizer are processes of their own
    targets=frozenset({"cuda", "rocm"}),
    gpu_share=True,  # mem_fraction_static × the card
    prefill_chunk_tokens=CHUNKED_PREFILL_TOKENS,
    draft_in_pool=True,
    # ServerArgs.speculative_algorithm (fields/spec.py): NGRAM, STANDALONE (a draft model),
    # EAGLE, EAGLE3, NEXTN (the checkpoint's MTP layers)
    speculation={
        "ngram": "NGRAM", "draft": "STANDALONE", "eagle": "EAGLE", "eagle3": "EAGLE3",
        "mtp": "NEXTN",
    },
    # ServerArgs.tp_size / pp_size / ep_size (fields/parallel.py)
    parallelism=EngineParallelism(tensor=True, pipeline=True, expert=True),
    weights={
        "none": SglangWeights(),
        "fp32": SglangWeights(dtype="float32"),
        "bf16": SglangWeights(dtype="bfloat16"),
        "fp16": SglangWeights(dtype="float16"),
        "gptq-int4": SglangWeights(quantization="gptq"),
        "fp8": SglangWeights(quantization="fp8"),
    },
    kv_caches={"auto": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"},
    package="sglang",
    backend="harness.backends.sglang.backend:SglangBackend",
    options="harness.backends.sglang.options:SglangOptions",
    server="harness.backends.sglang.server:SglangServer",
)  # fmt: skip
