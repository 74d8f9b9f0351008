"""The training points of a group (device side): one fresh model per point, `steps` optimizer
steps on the train block, the held-out loss on the eval block, one row per point (mode: training).

Memory per phase is measured on the last step (a steady state: gradients, optimizer states and
activations all exist), next to the plan's figures for the same phases
(harness.modes.training.memory). Energy, where the device's counter is readable, over extra
steps after the measured ones (back to back for at least ENERGY_MIN_S: one step is shorter than
the counter resolves).
A point that fails (an OOM, say) gives an `oom`/`error` row with its plan, and the group goes on.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import plan as planner
from harness.measure import energy
from harness.measure.memory import PhaseMemory, measure_phase
from harness.modes.training import data
from harness.modes.training.device import trainer
from harness.modes.training.memory import TrainingMemory
from harness.row import Energy, HarnessTime, Memory, Part, Prediction, ResultRow, Status, Training
from harness.run import device as loop
from harness.spec import adapters, catalog
from harness.spec.scenario import GroupKey, Point
from harness.units import to_mib

Batches = Callable[[int], list[list[list[int]]]]  # a step's micro-batches of token windows


@functools.cache
def cached_split(
    tokenizer_dir: str, train: str, eval_: str, fraction: float, vocab: int
) -> data.Split:
    """The split, tokenized once per worker process (every point of a group reads it)."""
    split = data.load_split(tokenizer_dir, train, eval_, fraction)
    if isinstance(split, data.ExampleSplit):
        return split  # examples are the model's own tokenizer's (not borrowed: nothing to clip)
    return data.Split(
        train=data.clip_ids(split.train, vocab), eval=data.clip_ids(split.eval, vocab)
    )


def steps_to_target(evals: list[tuple[int, float]], target: float | None) -> int | None:
    """The first evaluated step count whose held-out loss is at or below the target."""
    if target is None:
        return None
    return next((step for step, loss in evals if loss <= target), None)


def train_points(group: GroupKey, points: list[Point], job: loop.Job) -> Iterator[ResultRow]:
    """The group's training points (the `Runner` contract), one fresh model each, planned on
    the card that ran them, else the target's default card (the plan the job carries where it
    was made for that card); a point that fails (an OOM, say) gives an `oom`/`error` row with its
    plan, and the next point starts with its memory freed."""
    card = loop.plan_card(job.card(group.target), group.target, job.ctx)
    for point in points:
        plan = job.plan(point, card)
        try:
            parts = train_point(point, plan, job)
            status: Status = "ok"
            error = None
        except Exception as exc:  # one failing point must not end the group
            status = loop.failure_status(exc)
            error = loop.failure_text(exc)
            parts = [job.predicted(plan), planned_training(point, plan)]
        finally:
            loop.free_memory(job.device)
        yield job.row(point, status, error, parts, card=card.name)


# The training configuration's settings its row repeats under the same names (row.Training).
ROW_SETTINGS = (
    "micro_batch", "grad_accum", "seq_len", "gradient_checkpointing", "optimizer", "lr",
    "tokens_per_step", "target_eval_loss", "train_data",
)  # fmt: skip


def planned_training(point: Point, plan: planner.PointPlan) -> Training:
    """The configuration (its ROW_SETTINGS, its method, its data's hash) and the plan's figures:
    what a failed point still says."""
    train = point.training
    mem = plan.mode_memory
    assert train is not None and isinstance(mem, TrainingMemory)
    return Training(
        **{name: getattr(train, name) for name in ROW_SETTINGS},
        train_method=train.method,
        train_data_hash=data.data_hash(train.train_data),
        predicted_train_mib_forward=to_mib(mem.forward),
        predicted_train_mib_backward=to_mib(mem.backward),
        predicted_train_mib_optimizer=to_mib(mem.optimizer_step),
        predicted_gradients_mib=to_mib(mem.gradients),
        predicted_optimizer_mib=to_mib(mem.optimizer),
    )


@dataclass
class Trained:
    """What a point's optimizer steps leave for its row."""

    model: Any
    run: trainer.Trainer
    batches: Batches
    split: data.Split
    eval_windows: int
    records: list[trainer.StepRecord]
    evals: list[tuple[int, trainer.EvalResult]]  # (steps done, held-out result)
    load: PhaseMemory
    load_s: float
    train_s: float

    @property
    def measured_step(self) -> int:
        """The step whose memory per phase is measured: the last (a steady state)."""
        return self.run.train.steps - 1


def train_steps(point: Point, job: loop.Job) -> Trained:
    """A fresh model of the point's method (its load measured), then `steps` optimizer steps on
    the train block with the held-out loss evaluated on the eval block; memory per phase is
    measured on the last step."""
    train = point.training
    assert train is not None
    vocab = catalog.model(point.model, point.revision).vocab_size
    split = cached_split(
        job.tokenizer_dir, train.train_data, train.eval_data, train.eval_fraction, vocab
    )
    windows = split.eval_windows(train.seq_len, train.eval_windows)
    started = time.perf_counter()
    with measure_phase(job.device) as load_phase:
        model = trainer.load_model(
            job.model_path, train, job.device, seed=point.seed, random_weights=job.random_weights
        )
    load_s = time.perf_counter() - started
    run = trainer.Trainer(model, train, job.device)
    records: list[trainer.StepRecord] = []
    evals: list[tuple[int, trainer.EvalResult]] = []
    began = time.perf_counter()

    def batches(step: int) -> list[list[list[int]]]:
        return split.micro_batches(step, train.micro_batch, train.grad_accum, train.seq_len)

    for record, evaluated in trainer.run(run, batches, windows, measure_step=train.steps - 1):
        if record is not None:
            records.append(record)
        if evaluated is not None:
            evals.append((run.step, evaluated))
    train_s = time.perf_counter() - began
    return Trained(model, run, batches, split, len(windows), records, evals, load_phase.result,
                   load_s, train_s)  # fmt: skip


def train_point(point: Point, plan: planner.PointPlan, job: loop.Job) -> list[Part]:
    """One training point's row parts: its steps (`train_steps`), then extra steps for energy
    (`step_energy`, where the counter is readable), its memory against the plan, its curves."""
    train = point.training
    assert train is not None
    trained = train_steps(point, job)
    if train.save_adapter and train.uses_lora:  # before the energy steps change the weights
        save_adapter(trained.model, point, job)
    step = functools.partial(next_step, trained.run, trained.batches)
    joules = step_energy(job.meter, step, train.tokens_per_step)
    out = planned_training(point, plan)
    prediction = job.predicted(plan)
    memory_columns(out, prediction, trained, plan, job.device)
    curve_columns(out, trained, train.target_eval_loss)
    load = trained.load
    memory = Memory(
        peak_mib_load=loop.comparable_peak_mib(load, job.device),
        memory_source=load.source,
        memory_global_fallback=load.global_fallback,
    )
    timing = HarnessTime(load_s=trained.load_s, measured_s=trained.train_s)
    return [memory, prediction, out, joules, timing]


def adapter_folder(point: Point, job: loop.Job) -> Path:
    """Where a point's adapter is saved: ``<run>/adapters/<point key>/``."""
    return Path(job.ctx.run_dir) / "adapters" / point.key(job.corpus_hash)


def save_adapter(model: Any, point: Point, job: loop.Job) -> Path:
    """The trained adapter as a PEFT folder with its base binding (harness.spec.adapters),
    written whole into a temporary folder, then renamed into place."""
    folder = adapter_folder(point, job)
    commit = job.provenance.model_commit if job.provenance is not None else None
    trainer.save_peft(model, folder, point.model, point.revision)
    adapters.write_binding(
        folder, adapters.binding_for(folder, point.model, point.revision, Path(job.model_path),
                                     commit),
    )  # fmt: skip
    return folder


def memory_columns(
    out: Training, prediction: Prediction, trained: Trained, plan: planner.PointPlan, device: str
) -> None:
    """The measured step's peaks per phase (forward, backward, optimizer) against the plan: the
    comparable figure (`comparable_peak_mib`) against the plan's total and, on a GPU, the
    allocator's peaks (tensors only) against the plan's tensors."""
    phases = trained.records[trained.measured_step].phases or {}
    fwd, bwd, opt = (phases.get(k) for k in ("forward", "backward", "optimizer"))
    out.train_peak_mib_forward = loop.comparable_peak_mib(fwd, device) if fwd else None
    out.train_peak_mib_backward = loop.comparable_peak_mib(bwd, device) if bwd else None
    out.train_peak_mib_optimizer = loop.comparable_peak_mib(opt, device) if opt else None
    measured = [v for v in (out.train_peak_mib_forward, out.train_peak_mib_backward,
                            out.train_peak_mib_optimizer) if v is not None]  # fmt: skip
    planned = plan.mode_memory
    if device != "cpu" and isinstance(planned, TrainingMemory):  # the allocator's peaks: tensors
        out.train_alloc_mib_forward = fwd.peak_allocated_mib if fwd else None
        out.train_alloc_mib_backward = bwd.peak_allocated_mib if bwd else None
        out.train_alloc_mib_optimizer = opt.peak_allocated_mib if opt else None
        tensors = to_mib(planned.peak - planner.runtime_context_bytes(plan.point.target))
        out.predicted_train_tensors_mib = tensors
        alloc = [v for v in (out.train_alloc_mib_forward, out.train_alloc_mib_backward,
                             out.train_alloc_mib_optimizer) if v is not None]  # fmt: skip
        if alloc and tensors > 0:
            out.train_alloc_gap_pct = loop.gap_pct(max(alloc), tensors)
    if measured and prediction.predicted_peak_mib:
        gap = loop.gap_pct(max(measured), prediction.predicted_peak_mib)
        out.train_peak_gap_pct = prediction.peak_gap_pct = gap


def curve_columns(out: Training, trained: Trained, target_eval_loss: float | None) -> None:
    """Speed, the loss and gradient-norm curves, the held-out loss (start, end, its CI, per
    window) and the steps to the target loss."""
    records, evals = trained.records, trained.evals
    run = trained.run
    out.train_steps = len(records)
    out.trainable_params = sum(p.numel() for p in run.params)
    out.total_params = int(sum(p.numel() for p in trained.model.parameters()))
    out.step_s = trainer.median_step_s(records, {trained.measured_step})
    tokens_per_step = run.train.tokens_per_step
    out.train_tok_s = tokens_per_step / out.step_s if out.step_s > 0 else None
    out.train_s = trained.train_s
    losses = [r.loss for r in records]
    out.loss_first, out.loss_last, out.loss_curve = losses[0], losses[-1], losses
    norms = [r.grad_norm for r in records]
    out.grad_norm_median, out.grad_norm_last = float(np.median(norms)), norms[-1]
    curve = [(step, e.loss) for step, e in evals]
    out.eval_curve = [[float(step), loss] for step, loss in curve]
    final = evals[-1][1]
    out.eval_loss_start = evals[0][1].loss
    out.eval_loss = final.loss
    out.eval_loss_ci_low, out.eval_loss_ci_high = final.ci()
    out.eval_window_nll = [s / n for s, n in zip(final.nll_sum, final.tokens, strict=True)]
    out.eval_windows = trained.eval_windows
    out.steps_to_target = steps_to_target(curve, target_eval_loss)
    out.train_tokens, out.eval_tokens = len(trained.split.train), len(trained.split.eval)


def next_step(run: trainer.Trainer, batches: Batches) -> trainer.StepRecord:
    """One more optimizer step on the next step's micro-batches (energy's extra steps)."""
    return run.run_step(batches(run.step))


def step_energy(
    meter: energy.EnergyMeter[Any],
    step: Callable[[], object],
    tokens_per_step: int,
    *,
    min_duration_s: float = energy.ENERGY_MIN_S,
) -> Energy:
    """J per optimizer step and per training token, mean W, over extra steps run back to back
    for at least ``min_duration_s`` (none run when the counter cannot be read)."""
    out = Energy(energy_source=meter.source, energy_unavailable_reason=meter.unavailable_reason)
    if not meter.available:
        return out
    span, _ = energy.metered_calls(meter, step, min_duration_s=min_duration_s)
    out.energy_unavailable_reason = span.reason
    per_step = span.joules_per_call
    if per_step is not None:
        out.energy_j_train_step = per_step
        out.j_per_token_train = per_step / tokens_per_step
        out.avg_power_w_train = per_step / span.seconds_per_call
    return out


_CONTRACT: loop.Runner = train_points  # mypy checks the runner against harness.run.device.Runner
