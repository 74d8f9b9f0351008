"""The checks the guides ask for before a training campaign (device side; seeded, CPU in tests).

- Accumulation equivalence: on fixed data, one micro-batch of N sequences (accumulation 1) and N
  micro-batches of one sequence (accumulation N) give the same gradients when the loss is
  normalised by the step's tokens. `max_rel_diff` is the largest, over trainable tensors, of
  ‖g_a − g_b‖ / ‖g_a‖; the check passes at or below `ACCUMULATION_TOLERANCE`. With padded
  sequences of different lengths and a per-micro-batch mean (`micro-mean`), it breaks.
- Resume: k steps, save, a fresh model and optimizer, load, continue to n steps: the training
  losses of steps k..n equal those of one uninterrupted run (max absolute difference
  `RESUME_TOLERANCE`, nats/token). Resuming without the optimizer's state breaks it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.modes.training.device import trainer
from harness.modes.training.device.trainer import LossNormalisation
from harness.modes.training.spec import TrainingPoint

# fp32 on the CPU: the sums of four micro-batches differ from one batch's only by rounding order
ACCUMULATION_TOLERANCE = 1e-5
RESUME_TOLERANCE = 0.0  # seeded, the same kernels, the same order: bit-identical on the CPU


@dataclass(frozen=True)
class AccumulationCheck:
    max_rel_diff: float
    tolerance: float
    normalisation: str
    padded: bool

    @property
    def passed(self) -> bool:
        return self.max_rel_diff <= self.tolerance


@dataclass(frozen=True)
class ResumeCheck:
    uninterrupted: list[float]  # losses of steps k..n, one run
    resumed: list[float]  # the same steps after save and resume
    max_abs_diff: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.max_abs_diff <= self.tolerance


def gradients(
    model: Any,
    sequences: list[list[int]],
    micro_batch: int,
    normalisation: LossNormalisation,
) -> dict[str, Any]:
    """The accumulated gradient of `sequences` cut into micro-batches of `micro_batch`."""
    for _, p in trainer.trainable(model):
        p.grad = None
    micro = [sequences[i : i + micro_batch] for i in range(0, len(sequences), micro_batch)]
    trainer.accumulate(model, micro, "cpu", normalisation=normalisation)
    return {n: p.grad.detach().clone() for n, p in trainer.trainable(model) if p.grad is not None}


def accumulation_equivalence(
    model: Any,
    sequences: list[list[int]],
    *,
    normalisation: LossNormalisation = "token",
    tolerance: float = ACCUMULATION_TOLERANCE,
) -> AccumulationCheck:
    """micro_batch N × accumulation 1 against micro_batch 1 × accumulation N on `sequences`."""
    import torch

    whole = gradients(model, sequences, len(sequences), normalisation)
    split = gradients(model, sequences, 1, normalisation)
    worst = 0.0
    for name, g in whole.items():
        norm = float(torch.linalg.vector_norm(g))
        if norm > 0:
            worst = max(worst, float(torch.linalg.vector_norm(g - split[name])) / norm)
    padded = len({len(s) for s in sequences}) > 1
    return AccumulationCheck(worst, tolerance, normalisation, padded)


def resume_trajectory(
    model_path: str,
    train: TrainingPoint,
    batches: Any,
    *,
    stop_after: int,
    seed: int = 0,
    optimizer_state: bool = True,
    tolerance: float = RESUME_TOLERANCE,
) -> ResumeCheck:
    """One run of `train.steps` steps, and one stopped after `stop_after`, saved, loaded into a
    fresh model and optimizer, and continued; compares the losses of the steps after the stop."""
    if not 0 < stop_after < train.steps:
        raise ValueError(f"stop_after must be in 1..{train.steps - 1}, got {stop_after}")

    def fresh() -> trainer.Trainer:
        return trainer.Trainer(
            trainer.load_model(model_path, train, "cpu", seed=seed), train, "cpu"
        )

    one = fresh()
    straight = [r.loss for r, _ in trainer.run(one, batches, []) if r is not None]
    first = fresh()
    list(trainer.run(first, batches, [], until=stop_after))
    with tempfile.TemporaryDirectory() as folder:
        first.save(Path(folder))
        second = fresh()
        second.load(Path(folder), optimizer_state=optimizer_state)
    resumed = [r.loss for r, _ in trainer.run(second, batches, []) if r is not None]
    expected = straight[stop_after:]
    diff = max(abs(a - b) for a, b in zip(expected, resumed, strict=True))
    return ResumeCheck(expected, resumed, diff, tolerance)
