"""The modes of a row, behind one registry: `offline` (a fixed batch through the engine in
process), `serving` (load levels behind a real `vllm serve`) and `training` (one fine-tuning
step shape). Each is a package here (see `base` for the roles of its files); the core stages ask
this registry for a mode's part and never import a mode module themselves.

To add a mode: a package `harness/modes/<name>/` with its role files, one `mode(...)` line in
`REGISTRY`, and (when its points carry a payload) the payload type re-exported below for `Point`.
"""

from __future__ import annotations

from harness.errors import UserInputError, did_you_mean
from harness.modes.base import PARTS, Mode, Part, mode

# The point payloads the core's `Point` carries (pure pydantic types: cheap, engine-free).
from harness.modes.serving.spec import SPARE_TOKENS, Serving, ServingLevel
from harness.modes.training.spec import Training, TrainingPoint

# In the order a group runs them and the grid lists them: a mode may build on the points of
# those before it (serving levels follow the groups measured offline).
REGISTRY: dict[str, Mode] = {
    m.name: m
    for m in (
        mode(
            "offline",
            "a fixed batch through the engine, in process: speed, memory, quality",
            points="offline_points",
            plan="plan_offline_point",
            run="iter_offline",
        ),
        mode(
            "serving",
            "load levels behind a real `vllm serve`, driven by `vllm bench serve`",
            points="serving_points",
            skip_reason="serving_skip_reason",
            plan="plan_serving_point",
            run="serve_points",
            price="price",
            report="REPORT",
        ),
        mode(
            "training",
            "one fine-tuning step shape (full / LoRA / QLoRA x micro-batch x accumulation)",
            points="training_points",
            skip_reason="training_skip_reason",
            plan="plan_training_point",
            manifest="manifest_entries",
            run="train_points",
            price="price",
            report="REPORT",
        ),
    )
}


def get(name: str) -> Mode:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UserInputError(
            f"unknown mode {name!r}{did_you_mean(name, REGISTRY)}; known: {', '.join(REGISTRY)}",
        ) from None


__all__ = [
    "PARTS",
    "REGISTRY",
    "SPARE_TOKENS",
    "Mode",
    "Part",
    "Serving",
    "ServingLevel",
    "Training",
    "TrainingPoint",
    "get",
]
