"""Cross-engine agreement, published with every run: the same model in the same served dtype,
scored by transformers and by every other engine (vLLM, llama.cpp, SGLang) on the same corpus
windows, must have the same perplexity (within `AGREEMENT_TOLERANCE`). A larger gap means one
engine computes something else (a wrong dtype, a kernel bug, a tokenization difference), and its
speed is then not the other's at equal quality."""

from __future__ import annotations

import pandas as pd

from harness.errors import UserInputError
from harness.spec import catalog
from harness.spec.engines import REGISTRY, engine

AGREEMENT_TOLERANCE = 0.005  # relative perplexity difference
EXPLICIT_DTYPES = {"fp32", "bf16", "fp16"}
TORCH_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
COLUMNS = ("model", "dtype", "engine", "ppl_transformers", "ppl_engine", "difference_pct", "agrees")
REFERENCE_ENGINE = "transformers"  # every other engine is compared with it


def served_dtype(model: str, backend: str, quantization: str) -> str | None:
    """The dtype a group's weights are computed in, where both engines can be held to it.

    An explicit dtype is what both engines serve. "none" is the checkpoint's dtype where the
    engine's card says so (transformers, llama.cpp); vLLM and SGLang serve a float32 checkpoint in
    16 bit, so their "none" is left unpaired.
    """
    if quantization in EXPLICIT_DTYPES:
        return quantization
    if quantization != "none" or backend not in REGISTRY or not engine(backend).none_is_own_dtype:
        return None
    try:
        return TORCH_DTYPE_NAMES.get(catalog.model(model).dtype)
    except (UserInputError, ValueError):  # a model this machine cannot resolve: no pair
        return None


def engine_agreement(points: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, served dtype) that both engines measured ok with a model-dtype KV."""
    needed = {"model", "backend", "quantization", "kv_cache_dtype", "status", "ppl"}
    if points.empty or not needed <= set(points.columns):
        return pd.DataFrame(columns=list(COLUMNS))
    ok = points[(points["status"] == "ok") & (points["kv_cache_dtype"] == "auto")]
    ok = ok[ok["ppl"].notna()]
    perplexity: dict[tuple[str, str, str], float] = {}
    for (model, backend, quantization), group in ok.groupby(
        ["model", "backend", "quantization"], observed=True
    ):
        dtype = served_dtype(str(model), str(backend), str(quantization))
        if dtype is not None:  # every point of a group has its group's perplexity
            perplexity[(str(model), dtype, str(backend))] = float(group["ppl"].iloc[0])
    rows = []
    for (model, dtype, backend), ppl_engine in sorted(perplexity.items()):
        reference = (model, dtype, REFERENCE_ENGINE)
        if backend == REFERENCE_ENGINE or reference not in perplexity:
            continue
        ppl_transformers = perplexity[reference]
        difference = (ppl_engine - ppl_transformers) / ppl_transformers
        rows.append({"model": model, "dtype": dtype, "engine": backend,
                     "ppl_transformers": ppl_transformers, "ppl_engine": ppl_engine,
                     "difference_pct": 100 * difference,
                     "agrees": abs(difference) <= AGREEMENT_TOLERANCE})  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))


def agreement_lines(table: pd.DataFrame) -> list[str]:
    """The check in words, one line per pair (or why there is none), for the published reports."""
    if table.empty:
        return [
            "no model was measured by both engines in the same served dtype (an explicit fp32, "
            "bf16 or fp16, or transformers' 'none' against another engine's explicit checkpoint "
            "dtype or its own 'none' where that is the checkpoint's)"
        ]
    return [
        f"{row.model} {row.dtype}: transformers PPL {row.ppl_transformers:.4f}, {row.engine} PPL "
        f"{row.ppl_engine:.4f} ({row.difference_pct:+.3f} %): "
        + ("agree" if row.agrees else f"DISAGREE (over {100 * AGREEMENT_TOLERANCE:g} %)")
        for row in table.itertuples()
    ]
