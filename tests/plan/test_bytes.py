"""The bytes a model holds (harness.plan.bytes), by hand on Llama-2-7B (32 layers, 32 heads of
128, hidden 4,096, vocabulary 32,000, untied embeddings, 6,738,415,616 parameters)."""

from __future__ import annotations

from harness.plan.bytes import kv_bytes_per_token, kv_cache_bytes, param_counts, weights_bytes
from harness.spec import catalog

LLAMA = "meta-llama/Llama-2-7b-hf"


def test_the_parameters_and_the_fp16_weights() -> None:
    arch = catalog.model(LLAMA)
    counts = param_counts(arch)
    assert counts.total == 6_738_415_616
    assert counts.embeddings == 32_000 * 4_096  # the input table: 131,072,000
    assert weights_bytes(arch, "fp16") == 6_738_415_616 * 2  # 13,476,831,232 B


def test_the_kv_cache_per_token_and_for_a_batch() -> None:
    arch = catalog.model(LLAMA)
    # 2 (K and V) × 32 layers × 32 KV heads × 128 × 2 B = 524,288 B a token
    assert kv_bytes_per_token(arch, "auto", "fp16") == 524_288
    # 192 tokens (128 + 128 / 2, the mean decode context) × batch 1
    assert kv_cache_bytes(arch, "auto", "fp16", 192, 1) == 100_663_296
    # an fp8 cache holds 1 B a value: half
    assert kv_bytes_per_token(arch, "fp8", "fp16") == 262_144
