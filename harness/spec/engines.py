"""The engine registry: one line per engine, naming its card in its own folder
(``harness/backends/<engine>/card.py``), loaded lazily by name as the mode registry loads a
mode's parts (so this low module imports no engine folder).

A card (``Engine``) is everything the rest of the harness may know of an engine without
importing it:
- what a group of it costs before its first point: the bytes its process holds on the CPU,
  what its first forward leaves there, the seconds its model load and engine start take (before
  any history calibrates them, harness.run.history), the floors of a decode step and of a scored
  quality unit, and whether it starts processes of its own (the planner, the budget and the
  process path read these);
- its facts: where it runs, whether it pre-allocates a share of a GPU, where it holds its KV
  pool from the load on, the chunk it prefills in, whether it reserves LoRA slots and puts a
  draft's KV in its pool, the speculation it takes and the layouts it runs;
- its own name for each weight format and KV-cache dtype it runs (the capability tables,
  harness.spec.capabilities, keep the engine-neutral facts; which engines run a format is read
  here, ``engines_running_weights`` / ``engines_running_kv``);
- where its backend, its options model (the scenario's ``engines: {<engine>: {...}}``) and its
  server (the serving mode's protocol) live, as "module:Class" paths.

The device kinds of the seconds: ``cpu`` and ``cuda``; ``rocm`` has no figures of its own yet and
reads cuda's (``device_kind``).

API: ``REGISTRY``, ``engine(name)``, ``engines()``, ``device_kind(target)``,
``engines_running_weights(format)``, ``engines_running_kv(dtype)``, ``load_ref(path)``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from harness.errors import did_you_mean

DeviceKind = str  # "cpu" | "cuda": the kinds a default was measured on

# The one line per engine: its card, in its own folder.
REGISTRY: dict[str, str] = {
    "transformers": "harness.backends.transformers.card:CARD",
    "vllm": "harness.backends.vllm.card:CARD",
    "llamacpp": "harness.backends.llamacpp.card:CARD",
    "sglang": "harness.backends.sglang.card:CARD",
}

W = TypeVar("W")
K = TypeVar("K")


class PerDevice(BaseModel):
    """A figure per device kind the defaults were measured on (seconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cpu: float
    cuda: float

    def on(self, kind: DeviceKind) -> float:
        value: float = getattr(self, kind)
        return value


class EngineParallelism(BaseModel):
    """What an engine's real API lays out over cards, and why not where it does not."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tensor: bool
    pipeline: bool
    expert: bool
    why_not: str = ""


class Engine(BaseModel, Generic[W, K]):
    """One engine's card (the module docstring); each figure's source is its card's comment.

    cpu_process_bytes: an inference group's process on the CPU (RSS), less the weights and the KV
      pool (harness.plan.runtime_context_bytes).
    cpu_first_forward_bytes: what its first forward leaves in a CPU process, the heap trimmed
      after the quality pass (harness.plan.first_forward_bytes); GPUs count tensors only.
    start_s: its model load's engine start, per device kind, before the weights' own seconds.
    step_floor_s: the seconds one decode step takes at least (any batch).
    quality_unit_s: the seconds one scored quality unit (a window) takes at least.
    own_processes: it starts processes of its own (an engine core, a server): a group of it
      never runs in a child forked from a node's host (harness.run.host), but in a fresh process.
    none_is_own_dtype: its "none" weights compute in the checkpoint's own dtype (a float32
      checkpoint in float32): the engine-agreement check pairs it with transformers' "none".
    targets: where the harness runs it.
    gpu_share: on a GPU it takes a share of the card up front (its options model's
      ``gpu_share``), and a point fits when its tensors fit in that share.
    kv_pool_held_on: the targets where it holds its whole KV pool from the load on (a pool the
      harness sizes: harness.plan.kv_pool_bytes).
    prefill_chunk_tokens: it prefills at most this many tokens at once (None: the whole batch).
    lora_slots: it reserves LoRA slots of its own beside an adapter (harness.spec.adapters).
    draft_in_pool: a speculative draft's KV shrinks its pre-allocated pool (the plan says how).
    speculation: the speculation methods it takes (harness.spec.speculative), by its own name.
    parallelism: the layouts it runs over several cards.
    weights / kv_caches: its own names for each weight format and KV-cache dtype it runs.
    package: its distribution on the package registry (a run's manifest records its version).
    backend / options / server: "module:Class" of its backend (harness.backends.base.Backend),
      its options model, and its server (harness.backends.base.Server; None: it serves not).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    cpu_process_bytes: float
    cpu_first_forward_bytes: float
    start_s: PerDevice
    step_floor_s: PerDevice
    quality_unit_s: PerDevice
    own_processes: bool = False
    none_is_own_dtype: bool = False
    targets: frozenset[str]
    gpu_share: bool = False
    kv_pool_held_on: frozenset[str] = frozenset()
    prefill_chunk_tokens: int | None = None
    lora_slots: bool = False
    draft_in_pool: bool = False
    speculation: Mapping[str, str] = {}
    parallelism: EngineParallelism
    weights: Mapping[str, W]
    kv_caches: Mapping[str, K]
    package: str
    backend: str
    options: str
    server: str | None = None

    def options_model(self) -> type[BaseModel]:
        """The class of its options (the scenario's ``engines.<name>`` block)."""
        model: type[BaseModel] = load_ref(self.options)
        return model


def load_ref(ref: str) -> Any:
    """The object a "module:name" path names, imported now."""
    module_name, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


@cache
def engine(name: str) -> Engine[Any, Any]:
    """The engine's card; KeyError naming the known engines."""
    try:
        ref = REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"no engine {name!r} in harness.spec.engines.REGISTRY{did_you_mean(name, REGISTRY)}: "
            f"{list(REGISTRY)}"
        ) from None
    card: Engine[Any, Any] = load_ref(ref)
    if card.name != name:
        raise ValueError(f"the registry line {name!r} names the card of {card.name!r} ({ref})")
    return card


def engines() -> dict[str, Engine[Any, Any]]:
    """Every engine's card, in registry order."""
    return {name: engine(name) for name in REGISTRY}


def engines_running_weights(quantization: str) -> frozenset[str]:
    """The engines whose card names the weight format."""
    return frozenset(name for name, card in engines().items() if quantization in card.weights)


def engines_running_kv(kv_cache_dtype: str) -> frozenset[str]:
    """The engines whose card names the KV-cache dtype."""
    return frozenset(name for name, card in engines().items() if kv_cache_dtype in card.kv_caches)


def device_kind(target: str) -> DeviceKind:
    """The device kind a default was measured on: rocm has none of its own yet (cuda's)."""
    return "cuda" if target == "rocm" else target
