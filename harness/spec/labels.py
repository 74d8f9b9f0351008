"""How a configuration is named to a person: one label, built here for every table and line.

``configuration_label({"backend": "vllm", "quantization": "none", "kv_cache_dtype": "fp8",
"batch": 4, "context": 512})`` → ``"vllm none kv=fp8 b=4 ctx=512"``. Fields a row lacks are left
out; the order is always that of ``LABEL_FIELDS``. A model at a revision other than ``main``
is named ``id@revision`` (``model_key``), so two revisions of one id never share a label; a LoRA
adapter on it is named by its folder and a hash of its path (``adapter_label``), so two folders
of one name never share one either.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

# field → its prefix in a label ("" for a bare value), in label order
LABEL_FIELDS: dict[str, str] = {
    "model": "",
    "backend": "",
    "quantization": "",
    "kv_cache_dtype": "kv=",
    "layout": "",  # tp=2, tp=4,pp=2, tp=8,ep (harness.spec.capabilities.Layout); one card: none
    "speculative": "spec=",  # ngram:k=4,lookup=2-4 (harness.spec.speculative); without: none
    "batch": "b=",
    "context": "ctx=",
    "target": "",
}
# the configuration within a model: engine, weights, KV cache, batch, context
CONFIGURATION: tuple[str, ...] = (
    "backend", "quantization", "kv_cache_dtype", "layout", "speculative", "batch", "context",
)  # fmt: skip
# the configuration without the engine (tables that have an engine column of their own)
WITHOUT_ENGINE: tuple[str, ...] = (
    "quantization", "kv_cache_dtype", "layout", "speculative", "batch", "context",
)  # fmt: skip
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
        if f in fields and not absent(row.get(f))
    ]
    return sep.join(parts)


def absent(value: object) -> bool:
    """A field a row lacks: None, or NaN where a frame's column holds no value for it."""
    return value is None or (isinstance(value, float) and value != value)


ADAPTER_PATH_HEX = 6  # hex digits of an adapter's path hash in its label


def adapter_label(path: str) -> str:
    """A LoRA adapter as every label and group names it: its folder's name, ``#`` and the first
    hex digits of the sha256 of its path as the scenario writes it, normalised (``lora``,
    ``./lora/`` and ``lora/.`` are one path): ``lora#<6 hex>``. Two folders of one name, in
    different places, never share a label (nor a group, nor a windows file); the same scenario
    names an adapter the same way on every machine."""
    written = posixpath.normpath(path)
    name = PurePath(written).name or written
    return f"{name}#{hashlib.sha256(written.encode()).hexdigest()[:ADAPTER_PATH_HEX]}"


def model_shown(row: Mapping[Any, object]) -> str:
    """A row's model as a person reads it: with its revision (``model_key``) and, with a LoRA
    adapter on it, ``+<adapter_label>``."""
    adapter = row.get("adapter")
    lora = f"+{adapter_label(str(adapter))}" if adapter else ""
    return model_key(str(row["model"]), row.get("revision")) + lora
