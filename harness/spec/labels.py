"""How a configuration is named to a person: one label, built here for every table and line.

``configuration_label({"backend": "vllm", "quantization": "none", "kv_cache_dtype": "fp8",
"batch": 4, "context": 512})`` → ``"vllm none kv=fp8 b=4 ctx=512"``. Fields a row lacks are left
out; the order is always that of ``LABEL_FIELDS``. A model at a revision other than ``main``
is named ``id@revision`` (``model_key``), so two revisions of one id never share a label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

# field → its prefix in a label ("" for a bare value), in label order
LABEL_FIELDS: dict[str, str] = {
    "model": "",
    "backend": "",
    "quantization": "",
    "kv_cache_dtype": "kv=",
    "batch": "b=",
    "context": "ctx=",
    "target": "",
}
# the configuration within a model: engine, weights, KV cache, batch, context
CONFIGURATION: tuple[str, ...] = ("backend", "quantization", "kv_cache_dtype", "batch", "context")
# the configuration without the engine (tables that have an engine column of their own)
WITHOUT_ENGINE: tuple[str, ...] = ("quantization", "kv_cache_dtype", "batch", "context")
# the configuration over every batch and context: engine, weights, KV cache (a reference, a
# quality interval)
ENGINE_WEIGHTS_KV: tuple[str, ...] = ("backend", "quantization", "kv_cache_dtype")
# one group's identity in `harness plan`: every field
PLAN_LABEL: tuple[str, ...] = tuple(LABEL_FIELDS)


MAIN = "main"  # the revision a model id means when none is given


def model_key(model: str, revision: object = MAIN) -> str:
    """A model as one key, everywhere a model is named or looked up: its id at ``main`` (as
    before revisions were honoured), else ``id@revision``; two revisions never share a key."""
    return model if revision in (None, MAIN) else f"{model}@{revision}"


def configuration_label(
    row: Mapping[Any, object], fields: Sequence[str] = CONFIGURATION, *, sep: str = " "
) -> str:
    """The label of ``row``'s configuration over ``fields`` (in LABEL_FIELDS order); ``row``: any
    mapping with those keys (a frame's record is keyed by ``Hashable``)."""
    unknown = [f for f in fields if f not in LABEL_FIELDS]
    if unknown:
        raise ValueError(f"no label for fields {unknown}; known: {', '.join(LABEL_FIELDS)}")
    parts = [
        f"{LABEL_FIELDS[f]}{model_shown(row) if f == 'model' else row[f]}"
        for f in LABEL_FIELDS
        if f in fields and row.get(f) is not None
    ]
    return sep.join(parts)


def model_shown(row: Mapping[Any, object]) -> str:
    """A row's model as a person reads it: with its revision (``model_key``) and, with a LoRA
    adapter on it, ``+<adapter folder name>``."""
    adapter = row.get("adapter")
    lora = f"+{PurePath(str(adapter)).name}" if adapter else ""
    return model_key(str(row["model"]), row.get("revision")) + lora
