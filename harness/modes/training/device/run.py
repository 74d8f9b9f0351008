"""The training points of a group (device side): one fresh model per point, `steps` optimizer
steps on the train block, the held-out loss on the eval block, one row per point (mode: training).

Memory per phase is measured on the last step (a steady state: gradients, optimizer states and
activations all exist), next to the plan's figures for the same phases (harness.modes.training.memory).
Energy, where the device's counter is readable, over extra steps after the measured ones
(back to back for at least ENERGY_MIN_S: one step is shorter than the counter resolves).
A point that fails (an OOM, say) gives an `oom`/`error` row with its plan, and the group goes on.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from harness import plan as planner
from harness.measure import energy
from harness.measure.memory import PhaseMemory, measure_phase
from harness.row import (
    Energy,
    HarnessTime,
    Memory,
    Part,
    Prediction,
    ResultRow,
    Status,
    Training,
)
from harness.run.contracts import WorkContext
from harness.spec import catalog
from harness.spec.scenario import GroupKey, Point
from harness.modes.training import data
from harness.modes.training.memory import TrainingMemory
from harness.modes.training.device import trainer
from harness.units import to_mib

# (point, status, error, parts, card name) → the row
MakeRow = Callable[[Point, Status, str | None, list[Part], str | None], ResultRow]


@functools.cache
def cached_split(
    tokenizer_dir: str, train: str, eval_: str, fraction: float, vocab: int
) -> data.Split:
    """The split, tokenized once per worker process (every point of a group reads it)."""
    split = data.load_split(tokenizer_dir, train, eval_, fraction)
    return data.Split(
        train=data.clip_ids(split.train, vocab), eval=data.clip_ids(split.eval, vocab)
    )


def comparable_mib(phase: PhaseMemory, device: str) -> float | None:
    """The figure the plan predicts: on a GPU the device memory this process uses when NVML sees
    it, else the allocator's peak; on the CPU the process's RSS peak."""
    if device.startswith("cuda") and not phase.global_fallback:
        return phase.device_used_mib or phase.peak_allocated_mib
    return phase.peak_allocated_mib


def steps_to_target(evals: list[tuple[int, float]], target: float | None) -> int | None:
    """The first evaluated step count whose held-out loss is at or below the target."""
    if target is None:
        return None
    return next((step for step, loss in evals if loss <= target), None)


def train_points(
    group: GroupKey,
    points: list[Point],
    ctx: WorkContext,
    make_row: MakeRow,
    *,
    device: str,
    model_path: str,
    tokenizer_path: str,
    random_weights: bool,
    meter: energy.EnergyMeter[Any] | None = None,
) -> Iterator[ResultRow]:
    meter = meter or energy.EnergyMeter.unavailable("no meter given")
    card = planner.default_card(group.target, ctx.gpu) if device == "cpu" else None
    if card is None:
        from harness.run import provenance

        card = catalog.gpu_for_device_name(provenance.device_name(device)) or planner.default_card(
            group.target, ctx.gpu
        )
    for point in points:
        plan = planner.plan_point(point, card)
        try:
            parts = train_point(
                point, plan, device, model_path, tokenizer_path, random_weights, meter
            )
            status: Status = "ok"
            error = None
        except Exception as exc:  # one failing point must not end the group
            status = "oom" if _is_oom(exc) else "error"
            error = f"{type(exc).__name__}: {exc}"[:2000]
            parts = [prediction_part(plan), planned_training(point, plan)]
        finally:
            import gc

            gc.collect()
            if device.startswith("cuda"):
                import torch

                torch.cuda.empty_cache()
        yield make_row(point, status, error, parts, card.name)


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or "out of memory" in str(exc).lower()


def prediction_part(plan: planner.PointPlan) -> Prediction:
    return Prediction(
        predicted_weights_mib=to_mib(plan.weights_gib * 2**30),
        predicted_kv_cache_mib=0.0,
        predicted_activations_mib=to_mib(plan.activations_gib * 2**30),
        predicted_peak_mib=to_mib(plan.total_gib * 2**30),
    )


def planned_training(point: Point, plan: planner.PointPlan) -> Training:
    """The configuration and the plan's figures (what a failed point still says)."""
    train = point.training
    mem = plan.mode_memory
    assert train is not None and isinstance(mem, TrainingMemory)
    return Training(
        train_method=train.method,
        micro_batch=train.micro_batch,
        grad_accum=train.grad_accum,
        seq_len=train.seq_len,
        gradient_checkpointing=train.gradient_checkpointing,
        optimizer=train.optimizer,
        lr=train.lr,
        tokens_per_step=train.tokens_per_step,
        predicted_train_mib_forward=to_mib(mem.forward),
        predicted_train_mib_backward=to_mib(mem.backward),
        predicted_train_mib_optimizer=to_mib(mem.optimizer_step),
        predicted_gradients_mib=to_mib(mem.gradients),
        predicted_optimizer_mib=to_mib(mem.optimizer),
        target_eval_loss=train.target_eval_loss,
        train_data=train.train_data,
        train_data_hash=data.data_hash(train.train_data),
    )


def train_point(
    point: Point,
    plan: planner.PointPlan,
    device: str,
    model_path: str,
    tokenizer_path: str,
    random_weights: bool,
    meter: energy.EnergyMeter[Any],
) -> list[Part]:
    train = point.training
    assert train is not None
    vocab = catalog.model(point.model, point.revision).vocab_size
    split = cached_split(
        tokenizer_path, train.train_data, train.eval_data, train.eval_fraction, vocab
    )
    windows = split.eval_windows(train.seq_len, train.eval_windows)
    started = time.perf_counter()
    with measure_phase(device) as load_phase:
        model = trainer.load_model(
            model_path, train, device, seed=point.seed, random_weights=random_weights
        )
    load_s = time.perf_counter() - started
    run = trainer.Trainer(model, train, device)
    records: list[trainer.StepRecord] = []
    evals: list[tuple[int, trainer.EvalResult]] = []
    measured_step = train.steps - 1
    began = time.perf_counter()

    def batches(step: int) -> list[list[list[int]]]:
        return split.micro_batches(step, train.micro_batch, train.grad_accum, train.seq_len)

    for record, evaluated in trainer.run(run, batches, windows, measure_step=measured_step):
        if record is not None:
            records.append(record)
        if evaluated is not None:
            evals.append((run.step, evaluated))
    train_s = time.perf_counter() - began
    joules = step_energy(meter, functools.partial(next_step, run, batches), train.tokens_per_step)
    total = sum(p.numel() for p in model.parameters())
    phases = records[measured_step].phases or {}
    out = planned_training(point, plan)
    out.train_steps = len(records)
    out.trainable_params = sum(p.numel() for p in run.params)
    out.total_params = int(total)
    fwd, bwd, opt = (phases.get(k) for k in ("forward", "backward", "optimizer"))
    out.train_peak_mib_forward = comparable_mib(fwd, device) if fwd else None
    out.train_peak_mib_backward = comparable_mib(bwd, device) if bwd else None
    out.train_peak_mib_optimizer = comparable_mib(opt, device) if opt else None
    measured = [
        v
        for v in (
            out.train_peak_mib_forward,
            out.train_peak_mib_backward,
            out.train_peak_mib_optimizer,
        )
        if v is not None
    ]
    predicted = prediction_part(plan)
    planned = plan.mode_memory
    if device != "cpu" and isinstance(planned, TrainingMemory):  # the allocator's peaks: tensors

        out.train_alloc_mib_forward = fwd.peak_allocated_mib if fwd else None
        out.train_alloc_mib_backward = bwd.peak_allocated_mib if bwd else None
        out.train_alloc_mib_optimizer = opt.peak_allocated_mib if opt else None
        tensors = to_mib(planned.peak - planner.runtime_context_bytes(point.target))
        out.predicted_train_tensors_mib = tensors
        alloc = [v for v in (out.train_alloc_mib_forward, out.train_alloc_mib_backward,
                             out.train_alloc_mib_optimizer) if v is not None]  # fmt: skip
        if alloc and tensors > 0:
            out.train_alloc_gap_pct = 100.0 * (max(alloc) - tensors) / tensors
    if measured and predicted.predicted_peak_mib:
        gap = 100.0 * (max(measured) - predicted.predicted_peak_mib) / predicted.predicted_peak_mib
        out.train_peak_gap_pct = predicted.peak_gap_pct = gap
    out.step_s = trainer.median_step_s(records, {measured_step})
    out.train_tok_s = train.tokens_per_step / out.step_s if out.step_s > 0 else None
    out.train_s = train_s
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
    out.eval_windows = len(windows)
    out.steps_to_target = steps_to_target(curve, train.target_eval_loss)
    out.train_tokens, out.eval_tokens = len(split.train), len(split.eval)
    memory = Memory(
        peak_mib_load=comparable_mib(load_phase.result, device),
        memory_source=load_phase.result.source,
        memory_global_fallback=load_phase.result.global_fallback,
    )
    del run, model
    return [memory, predicted, out, joules, HarnessTime(load_s=load_s, measured_s=train_s)]


def next_step(run: trainer.Trainer, batches: Callable[[int], Any]) -> trainer.StepRecord:
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
