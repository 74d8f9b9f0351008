"""The scenario's ``engines:`` block: each engine's own options, by the engine's name, each
typed by the options model its card names (``harness/backends/<engine>/options.py``), so the
scenario only routes to them (an error names the file, line and ``engines.<engine>.<option>``).
The old top-level ``vllm:`` key is still read, as ``engines: {vllm: ...}``, and said to be
renamed.

API: ``EngineBlocks`` (the block's model, one optional field per registered engine),
``renamed_keys(data)`` (a before-validator's work), ``options_for(blocks, engine)``,
``gpu_share(blocks, engine)``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, create_model

from harness.spec.engines import REGISTRY, engine
from harness.spec.yamlinput import Input

# Top-level keys of earlier scenarios that are now an engine's block.
RENAMED = {"vllm": "vllm"}

if TYPE_CHECKING:

    class EngineBlocks(Input):
        """Each engine's options, by its name (an engine left out runs with its defaults)."""

        def __init__(self, **blocks: Any) -> None: ...

else:
    EngineBlocks = create_model(
        "EngineBlocks",
        __base__=Input,
        __doc__="Each engine's options, by its name (an engine left out runs with its defaults).",
        **{name: (engine(name).options_model() | None, None) for name in REGISTRY},
    )


def renamed_keys(data: Any) -> Any:
    """A scenario's mapping with its old engine keys (``vllm:``) moved into ``engines:``, with a
    FutureWarning saying so; a block given both ways is a ValueError."""
    if not isinstance(data, dict) or not any(k in data for k in RENAMED):
        return data
    data = dict(data)
    blocks = data.get("engines")
    blocks = dict(blocks) if isinstance(blocks, dict) else {}
    for old, name in RENAMED.items():
        if old not in data:
            continue
        if name in blocks:
            raise ValueError(f"`{old}:` and `engines: {{{name}: ...}}` both given: keep the latter")
        warnings.warn(
            f"scenario key `{old}:` is renamed `engines: {{{name}: ...}}`; read as such",
            FutureWarning,
            stacklevel=2,
        )
        blocks[name] = data.pop(old)
    data["engines"] = blocks
    return data


def options_for(blocks: BaseModel | None, name: str) -> BaseModel:
    """The engine's options: its block, else its options model's defaults."""
    block = getattr(blocks, name, None) if blocks is not None else None
    if isinstance(block, BaseModel):
        return block
    return engine(name).options_model()()


def gpu_share(blocks: BaseModel | None, name: str) -> float:
    """The share of a GPU the engine takes up front (its options' ``gpu_share``: vLLM's
    gpu_memory_utilization, SGLang's mem_fraction_static); 1.0 for an engine that takes none."""
    share = getattr(options_for(blocks, name), "gpu_share", None)
    return float(share) if share is not None and engine(name).gpu_share else 1.0
