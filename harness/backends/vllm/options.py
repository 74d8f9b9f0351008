"""vLLM's options (the scenario's ``engines: {vllm: {...}}``; the old top-level ``vllm:`` key is
still read, and said to be renamed): its own argument names (vllm/engine/arg_utils.py,
EngineArgs)."""

from __future__ import annotations

from pydantic import Field

from harness.spec.yamlinput import Input

MAX_CONTEXT = 1 << 20  # tokens: a scenario's longest context (harness.spec.scenario)


class VllmOptions(Input):
    """gpu_memory_utilization: the share of a GPU vLLM takes up front (its KV pool is what the
    share leaves); enforce_eager: no CUDA graphs; max_model_len: the longest sequence (None: the
    group's longest context + output)."""

    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0)
    enforce_eager: bool = False
    max_model_len: int | None = Field(None, gt=0, le=MAX_CONTEXT)

    @property
    def gpu_share(self) -> float | None:
        """The share of a GPU it pre-allocates (the planner's capacity)."""
        return self.gpu_memory_utilization
