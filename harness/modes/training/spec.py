"""The `training:` block of a scenario: fine-tuning step scenarios (mode: training).

Its axes (method × micro_batch × grad_accum × seq_len × gradient_checkpointing × optimizer) expand
like the inference grid, once per model, backend and target of the scenario. Reading is as strict
as the rest of the scenario (no coercion, bounds in the message, no duplicates).

    method      full: every parameter trains; lora: LoRA adapters on a frozen base in its own
                dtype; qlora: LoRA adapters on a bnb-nf4 base (peft + bitsandbytes)
    optimizer   adamw: torch AdamW (two fp32 moments per trainable parameter); adamw-8bit:
                bitsandbytes' AdamW8bit (two uint8 moments + one fp32 absmax per 256 values)
    data        train and eval are contiguous blocks of the same text: the eval block is the last
                `eval_fraction` of its tokens, the train block everything before it; `snips`: the
                SNIPS TRAIN split's (prompt, answer) examples, eval on its few-shot split
                (harness.modes.training.data); `snips-intent`: the same, intent task only
"""

from __future__ import annotations

import itertools
import math
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.spec.yamlinput import unique

TrainMethod = Literal["full", "lora", "qlora"]
TrainOptimizer = Literal["adamw", "adamw-8bit"]
TrainData = Literal["tinyshakespeare", "snips", "snips-intent"]
# (prompt, answer) examples (harness.modes.training.data): snips-intent is the intent task alone
EXAMPLE_DATA = frozenset({"snips", "snips-intent"})

MAX_AXIS_VALUES = 64
MAX_MICRO_BATCH = 4096
MAX_GRAD_ACCUM = 1024
MAX_SEQ_LEN = 1 << 20
MAX_STEPS = 100_000
MAX_LORA_RANK = 4096
MAX_EVAL_WINDOWS = 10_000

DEFAULT_LORA_TARGETS: tuple[LoraTarget, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
ADAMW: list[TrainOptimizer] = ["adamw"]

# The weight format each method loads its base in (the planner's bytes and the group's key).
BASE_FORMAT: dict[str, str] = {"full": "none", "lora": "none", "qlora": "bnb-nf4"}


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


Few = Field(min_length=1, max_length=MAX_AXIS_VALUES)
MicroBatch = Annotated[int, Field(gt=0, le=MAX_MICRO_BATCH)]
GradAccum = Annotated[int, Field(gt=0, le=MAX_GRAD_ACCUM)]
SeqLen = Annotated[int, Field(gt=1, le=MAX_SEQ_LEN)]
# The linear layers of a Llama-style decoder layer that LoRA can adapt (the planner counts them).
LoraTarget = Literal["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraSettings(_Input):
    r: int = Field(8, gt=0, le=MAX_LORA_RANK)
    alpha: int = Field(16, gt=0, le=1_000_000)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    targets: list[LoraTarget] = Field(
        default_factory=lambda: list(DEFAULT_LORA_TARGETS),
        min_length=1,
        max_length=MAX_AXIS_VALUES,
    )

    @field_validator("targets")
    @classmethod
    def no_duplicates(cls, value: list[str]) -> list[str]:
        return unique(value)


class DataSettings(_Input):
    train: TrainData = "tinyshakespeare"
    eval: TrainData = "tinyshakespeare"
    eval_fraction: float = Field(0.1, gt=0.0, lt=0.5)  # the last share of the tokens: eval block
    eval_windows: int = Field(32, gt=0, le=MAX_EVAL_WINDOWS)  # seq_len windows scored, at most


# The training block's axes: each a list of values, every combination one point (TrainingPoint's
# fields of the same names).
AXES = ("method", "micro_batch", "grad_accum", "seq_len", "gradient_checkpointing", "optimizer")


class Training(_Input):
    method: list[TrainMethod] = Few
    micro_batch: list[MicroBatch] = Few
    grad_accum: list[GradAccum] = Field(default_factory=lambda: [1], min_length=1, max_length=64)
    seq_len: list[SeqLen] = Few
    gradient_checkpointing: list[bool] = Field(
        default_factory=lambda: [False], min_length=1, max_length=2
    )
    optimizer: list[TrainOptimizer] = Field(
        default_factory=lambda: list(ADAMW), min_length=1, max_length=2
    )
    steps: int = Field(gt=0, le=MAX_STEPS)
    lr: float = Field(2.0e-4, gt=0.0, le=1.0)
    lora: LoraSettings = LoraSettings()
    data: DataSettings = DataSettings()
    # the held-out loss (nats/token) whose reach is priced; None: no cost-to-target
    target_eval_loss: float | None = Field(None, gt=0.0, le=100.0)
    # the held-out loss is scored every this many optimizer steps (and after the last one)
    eval_every: int = Field(10, gt=0, le=MAX_STEPS)
    # LoRA points save their adapter (PEFT folder + base binding, harness.spec.adapters) under
    # <run>/adapters/<point key>/, usable as a model entry's `adapter:`
    save_adapter: bool = False

    @model_validator(mode="after")
    def examples_train_and_eval_together(self) -> Training:
        sides = {self.data.train in EXAMPLE_DATA, self.data.eval in EXAMPLE_DATA}
        if len(sides) > 1:
            raise ValueError(
                f"data: train {self.data.train!r} and eval {self.data.eval!r}: example data "
                f"({', '.join(sorted(EXAMPLE_DATA))}) is its own train and eval (its disjoint "
                "splits); give it as both"
            )
        return self

    @field_validator(*AXES)
    @classmethod
    def no_duplicates(cls, value: list[object]) -> list[object]:
        return unique(value)

    @property
    def cells(self) -> int:
        return math.prod(len(getattr(self, axis)) for axis in AXES)

    def points(self) -> list[TrainingPoint]:
        """Every combination of the axes (AXES), in the order they are written."""
        combos = itertools.product(*(getattr(self, axis) for axis in AXES))
        return [
            TrainingPoint(
                **dict(zip(AXES, combo, strict=True)),
                steps=self.steps,
                lr=self.lr,
                lora_r=self.lora.r,
                lora_alpha=self.lora.alpha,
                lora_dropout=self.lora.dropout,
                lora_targets=tuple(self.lora.targets),
                train_data=self.data.train,
                eval_data=self.data.eval,
                eval_fraction=self.data.eval_fraction,
                eval_windows=self.data.eval_windows,
                target_eval_loss=self.target_eval_loss,
                eval_every=self.eval_every,
                save_adapter=self.save_adapter,
            )
            for combo in combos
        ]


class TrainingPoint(BaseModel):
    """One training configuration of the grid (hashable: a Point's part and its group's key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # the fields a point's key leaves out while False (the keys of earlier runs stay theirs)
    KEY_OMITS_WHEN_FALSE: ClassVar[tuple[str, ...]] = ("save_adapter",)
    method: TrainMethod
    micro_batch: int
    grad_accum: int
    seq_len: int
    gradient_checkpointing: bool = False
    optimizer: TrainOptimizer = "adamw"
    steps: int
    lr: float = 2.0e-4
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_targets: tuple[LoraTarget, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    train_data: TrainData = "tinyshakespeare"
    eval_data: TrainData = "tinyshakespeare"
    eval_fraction: float = 0.1
    eval_windows: int = 32
    target_eval_loss: float | None = None
    eval_every: int = 10
    save_adapter: bool = False  # not part of the point's key when False (earlier runs' keys)

    @property
    def base_format(self) -> str:
        return BASE_FORMAT[self.method]

    @property
    def uses_lora(self) -> bool:
        return self.method != "full"

    @property
    def tokens_per_step(self) -> int:
        """Training tokens one optimizer step consumes: micro_batch × accumulation × seq_len."""
        return self.micro_batch * self.grad_accum * self.seq_len

    @property
    def label(self) -> str:
        ckpt = "+ckpt" if self.gradient_checkpointing else ""
        return (
            f"train={self.method} mb={self.micro_batch} acc={self.grad_accum} "
            f"seq={self.seq_len}{ckpt} {self.optimizer}"
        )
