"""The backend protocol: what a worker needs from an engine, and nothing engine-specific.

A backend is built for one group (model, quantization, KV dtype, target), loads once, then
serves every (batch, context) point of that group. Engines are imported only inside the
concrete backend modules, so planning and aggregation never import torch or vLLM.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from harness.errors import UserInputError, did_you_mean
from harness.spec.engine_options import EngineBlocks
from harness.spec.engines import REGISTRY, engine, load_ref

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from harness.measure.speculation import Counters
    from harness.spec.scenario import GroupKey


class BackendOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    device: str  # "cpu" or "cuda" (ROCm included: torch reports HIP as cuda)
    model_path: str  # a local directory or a hub id (hub ids only where a hub is reachable)
    tokenizer_path: str | None = None  # None: the model's own (random weights may borrow one)
    seed: int = 0
    cache_dir: str | None = None  # e.g. GPTQ-quantized checkpoints, keyed by model + calibration
    # each engine's options by its name (the scenario's `engines:`; harness.spec.engine_options)
    engines: EngineBlocks = EngineBlocks()
    max_context: int = 2048  # the largest context + output the group will see (vLLM max_model_len)
    kv_cache_bytes: int | None = None  # the KV pool of an engine that holds one from its load
    random_weights: bool = False  # the architecture on random weights: speed and memory only
    adapter_path: str | None = None  # a LoRA folder loaded on the model (checked against it)
    adapter_rank: int | None = None  # its LoRA rank (vLLM's max_lora_rank)


@dataclass
class Generation:
    """One generate call over a batch. Token counts come from the outputs, never the request."""

    new_tokens: list[int]  # per row
    step_ms: list[float]  # ms from the call's start to each step's logits; [0] = first token
    e2e_ms: float
    timer: str  # "cuda_events" | "perf_counter" | "engine_timestamps"
    tpot_ms: float | None = None  # the engine's own mean time per output token, where it gives one
    # each row's generated token ids as a short digest (harness.measure.speculation.item_digest),
    # where the engine gives them: greedy identity with and without speculation
    token_digests: list[str] = field(default_factory=list)


@dataclass
class WindowScores:
    """Teacher-forced scores of fixed corpus windows; positions are predicted tokens (T − 1)."""

    nll_sum: NDArray[Any]  # [W] nats, float64
    tokens: NDArray[Any]  # [W] predicted tokens per window
    argmax: NDArray[Any]  # [W, T-1] the most likely next token
    topk_ids: NDArray[Any]  # [W, T-1, k] own top-k ids (what a reference caches)
    topk_logprobs: NDArray[Any]  # [W, T-1, k]
    logprobs_at_ref: NDArray[Any] | None = None  # [W, T-1, k] own logprobs at the reference's ids
    # The group's per-item task results (ARC-Easy's among them), as named arrays
    # (harness.tasks.metrics.to_arrays: "task__<name>__<array>"), carried with its window scores
    # to the run folder (paired tests and the error analysis vs the reference).
    task_arrays: dict[str, NDArray[Any]] | None = None


@dataclass
class MemoryFacts:
    """What the engine itself says about its memory, in bytes; None when it cannot say."""

    weights_bytes: int | None = None
    kv_cache_bytes: int | None = None
    preallocated_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(ABC):
    name: ClassVar[str]

    def __init__(self, group: GroupKey, options: BackendOptions) -> None:
        self.group = group
        self.options = options

    @abstractmethod
    def load(self) -> None: ...

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def generate(self, prompts: list[list[int]], new_tokens: int) -> Generation:
        """Greedy, exactly `new_tokens` per row (min = max, EOS ignored)."""

    @abstractmethod
    def generate_text(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        """Greedy continuation of each text prompt (encoded as ``encode`` does), stopping at EOS
        or after ``max_new_tokens`` tokens: the generated text only, special tokens dropped
        (extract tasks, harness.tasks)."""

    @abstractmethod
    def score_windows(
        self, windows: list[list[int]], ref_topk_ids: NDArray[Any] | None, k: int
    ) -> WindowScores: ...

    @abstractmethod
    def score_continuations(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Log-likelihood (nats) of each continuation given its context (multiple choice)."""

    @abstractmethod
    def memory_facts(self) -> MemoryFacts: ...

    def speculation_counters(self) -> Counters | None:
        """The engine's cumulative speculative-decoding counters now (None: it speculates not,
        or cannot say); a pass's figures are the difference of two readings."""
        return None

    def text_digests(self) -> list[str]:
        """One digest per item that ``generate_text`` generated so far, in order (greedy
        identity of the extract tasks' items; empty where the engine does not record them)."""
        return []

    def close(self) -> None:  # noqa: B027 — optional hook, a no-op by default
        """Release the model and the device memory it holds."""

    @staticmethod
    def engine_environment(group: GroupKey, device: str, cores: Sequence[int]) -> dict[str, str]:
        """What the engine must see in its environment for the group's layout (each rank's
        cores, say): nothing by default."""
        return {}


class Server(ABC):
    """An engine's OpenAI-compatible server for one group: the command that starts it (in its
    own process, on `host`:`port`, serving the model as `served_model_name`) and the path that
    answers once it is ready. The serving mode starts it, waits for `ready_path` and drives it."""

    ready_path: ClassVar[str] = "/v1/models"

    @classmethod
    @abstractmethod
    def command(
        cls, group: GroupKey, options: BackendOptions, host: str, port: int, served_model_name: str
    ) -> list[str]: ...


def server_class(name: str) -> type[Server] | None:
    """The engine's server (its card's `server`), None where it serves not through this seam."""
    ref = engine(name).server
    if ref is None:
        return None
    cls: type[Server] = load_ref(ref)
    return cls


def backend_class(name: str) -> type[Backend]:
    """Resolve a backend lazily by name, through its engine's card (harness.spec.engines); an
    unknown one says what was meant."""
    if name not in REGISTRY:
        raise UserInputError(
            f"unknown backend {name!r}{did_you_mean(name, REGISTRY)}; known: {', '.join(REGISTRY)}",
            field="backend",
        )
    cls: type[Backend] = load_ref(engine(name).backend)
    return cls
