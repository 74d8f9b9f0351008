"""Training points: one per (model, backend, target, training configuration), and why one
cannot run."""

from __future__ import annotations

from harness.errors import UserInputError
from harness.modes.training.spec import Training
from harness.spec import catalog
from harness.spec.scenario import Point, Scenario


def training_points(scenario: Scenario, accepted: list[Point]) -> list[Point]:
    """One point per (model, backend, target, training configuration). Its quantization is the
    method's base format (qlora: bnb-nf4), its batch the micro-batch, its context the sequence
    length; it generates nothing (output_tokens 0) and runs once (repeats 1)."""
    if scenario.training is None:
        return []
    for m in scenario.models:
        check_lora_rank(scenario.training, catalog.model(m.id, m.revision), m.id)
    return [
        Point(
            **m.point_fields(),
            backend=backend,
            quantization=train.base_format,
            kv_cache_dtype="auto",
            batch=train.micro_batch,
            context=train.seq_len,
            output_tokens=0,
            target=target,
            repeats=1,
            warmups=0,
            seed=scenario.seed,
            window_tokens=train.seq_len,
            max_windows=train.eval_windows,
            training=train,
        )
        for m in scenario.models
        for backend in scenario.backend
        for train in scenario.training.points()
        for target in scenario.targets
    ]


def check_lora_rank(training: Training, arch: catalog.ModelArch, model_id: str) -> None:
    """A LoRA rank above min(in, out) of a targeted linear adds no capacity, only parameters
    (rank r on an in × out matrix is full at min(in, out)): refused in one line."""
    if not set(training.method) & {"lora", "qlora"}:
        return
    shapes = arch.linear_shapes()
    r = training.lora.r
    for target in training.lora.targets:
        top = min(shapes[target])
        if r > top:
            raise UserInputError(
                f"lora.r {r} exceeds min(in, out) = {top} of {target} "
                f"({shapes[target][0]} × {shapes[target][1]}) on model {model_id!r}: a rank "
                f"above it adds parameters, not capacity; give r ≤ {top}",
                field="training.lora.r",
            )


def training_skip_reason(point: Point, arch: catalog.ModelArch) -> str | None:
    """Why a training point cannot run (None: it can)."""
    if point.adapter is not None:
        return (
            "training starts from the base model, not from an adapter on it "
            "[rule training-from-the-base]"
        )
    if point.backend != "transformers":
        return (
            f"the {point.backend} engine does not train (training runs on transformers + peft) "
            "[rule training-needs-transformers]"
        )
    return None
