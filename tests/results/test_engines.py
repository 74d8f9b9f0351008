"""The cross-engine agreement check pairs the same model and served dtype, and nothing else."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.results.engines import agreement_lines, engine_agreement, served_dtype


def rows(*specs: tuple[str, str, str, float], status: str = "ok") -> pd.DataFrame:
    records: list[dict[str, Any]] = [
        {"model": "tiny-llama", "backend": b, "quantization": q, "kv_cache_dtype": kv,
         "status": status, "ppl": ppl}
        for b, q, kv, ppl in specs
    ]  # fmt: skip
    return pd.DataFrame(records)


def test_transformers_none_pairs_with_vllm_in_the_checkpoint_dtype() -> None:
    assert served_dtype("tiny-llama", "transformers", "none") == "fp32"  # an fp32 checkpoint
    assert served_dtype("tiny-llama", "vllm", "none") is None  # vLLM serves it in 16 bit
    assert served_dtype("tiny-llama", "vllm", "bnb-int8") is None
    assert served_dtype("not/a-model-here", "transformers", "none") is None
    table = engine_agreement(rows(("transformers", "none", "auto", 200.0),
                                  ("vllm", "fp32", "auto", 200.5),
                                  ("vllm", "none", "auto", 190.0)))  # fmt: skip
    assert table[["model", "dtype", "engine"]].values.tolist() == [["tiny-llama", "fp32", "vllm"]]
    assert table["difference_pct"].iloc[0] == 0.25
    assert bool(table["agrees"].iloc[0])


def test_a_gap_over_half_a_percent_is_published_as_a_disagreement() -> None:
    table = engine_agreement(rows(("transformers", "bf16", "auto", 200.0),
                                  ("vllm", "bf16", "auto", 202.0)))  # fmt: skip
    assert not bool(table["agrees"].iloc[0])
    (line,) = agreement_lines(table)
    assert "DISAGREE" in line and "+1.000 %" in line


def test_fp8_kv_groups_and_failed_rows_are_not_paired() -> None:
    assert engine_agreement(rows(("transformers", "fp32", "auto", 200.0),
                                 ("vllm", "fp32", "fp8", 200.1))).empty  # fmt: skip
    failed = rows(("transformers", "fp32", "auto", 200.0), ("vllm", "fp32", "auto", 200.1),
                  status="error")  # fmt: skip
    assert engine_agreement(failed).empty
    assert "no model was measured by both engines" in agreement_lines(engine_agreement(failed))[0]


def test_llamacpp_none_is_the_checkpoint_dtype_and_pairs_with_transformers() -> None:
    assert served_dtype("tiny-llama", "llamacpp", "none") == "fp32"  # an F32 GGUF file
    assert served_dtype("tiny-llama", "sglang", "none") is None  # SGLang's "auto": 16 bit
    table = engine_agreement(rows(("transformers", "none", "auto", 206.4367),
                                  ("llamacpp", "none", "auto", 206.4384),
                                  ("vllm", "fp32", "auto", 206.5)))  # fmt: skip
    assert table["engine"].tolist() == ["llamacpp", "vllm"]
    # 100 × (206.4384 - 206.4367) / 206.4367 = 100 × 0.0017 / 206.4367 = 0.000823 %
    assert round(float(table["difference_pct"].iloc[0]), 6) == 0.000823
    (line, _) = agreement_lines(table)
    assert "transformers PPL 206.4367, llamacpp PPL 206.4384 (+0.001 %): agree" in line
