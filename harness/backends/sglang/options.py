"""SGLang's options (the scenario's ``engines: {sglang: {...}}``), by its own ServerArgs names
(python/sglang/srt/arg_groups/fields/: schedule.py, exec_.py)."""

from __future__ import annotations

from pydantic import Field

from harness.spec.yamlinput import Input


class SglangOptions(Input):
    """mem_fraction_static: the share of a GPU it takes up front for the weights and the KV pool
    (the planner's capacity); chunked_prefill_size: the prefill chunk (None: SGLang's own,
    which depends on the card's memory); disable_cuda_graph: no CUDA graphs (faster start)."""

    mem_fraction_static: float = Field(0.88, gt=0.0, le=1.0)
    chunked_prefill_size: int | None = Field(None, gt=0, le=1 << 20)
    disable_cuda_graph: bool = False

    @property
    def gpu_share(self) -> float | None:
        """The share of a GPU it pre-allocates."""
        return self.mem_fraction_static
