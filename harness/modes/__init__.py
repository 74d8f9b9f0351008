"""The modes of a row, behind one registry: `offline` (a fixed batch through the engine in
process), `serving` (load levels behind a real `vllm serve`) and `training` (one fine-tuning
step shape). Each is a package here (see `base` for the roles of its files); the core stages ask
this registry for a mode's part and never import a mode module themselves.

To add a mode: a package `harness/modes/<name>/` with its role files, one `mode(...)` entry in
`REGISTRY` (its parts and its `Facts`: budget phase, the row field that measures it, process
path, tables), and (when its points carry a payload) the payload type re-exported below for
`Point` and its field on `Point`.
"""

from __future__ import annotations

from harness.errors import UserInputError, did_you_mean
from harness.modes.base import PARTS, Facts, GroupStart, Mode, Part, mode

# The point payloads the core's `Point` carries (pure pydantic types: cheap, engine-free).
from harness.modes.serving.spec import SPARE_TOKENS, Serving, ServingLevel
from harness.modes.training.spec import Training, TrainingPoint

# The serving mode's tables in the results' `Aggregate` (harness.modes.serving.price)
SERVING_TABLES = (
    "serving", "at_slo", "priced_at_slo", "cheapest_at_slo", "slo_search", "interactivity",
    "interactivity_bands", "speculation_bands",
)  # fmt: skip

# In the order a group runs them and the grid lists them: a mode may build on the points of
# those before it (serving levels follow the groups measured offline).
REGISTRY: dict[str, Mode] = {
    m.name: m
    for m in (
        mode(
            "offline",
            "a fixed batch through the engine, in process: speed, memory, quality",
            Facts(
                phase="measured",
                phase_label="measured work",
                figure="measured_s",
                scores_quality=True,
                step_floor=True,
            ),
            points="offline_points",
            plan="plan_offline_point",
            run="iter_offline",
            check="offline_problem",
        ),
        mode(
            "serving",
            "load levels behind a real `vllm serve`, driven by `vllm bench serve`",
            Facts(
                phase="serving",
                phase_label="serving levels",
                figure="serving_duration_s",
                # a `vllm serve` start per group (process, engine, health check: 30-100 s
                # measured on the 2-core CPU with the tiny model)
                start=GroupStart("server_start", "server starts", 90.0, "server_start_s"),
                forks=False,  # its server is a process of its own
                payload=True,
                levels=True,
                never_reference="its rows carry no quality: the group's offline rows are compared",
                tables=SERVING_TABLES,
            ),
            points="serving_points",
            skip_reason="serving_skip_reason",
            inputs="serving_inputs",
            plan="plan_serving_point",
            run="serve_points",
            price="price",
            report="REPORT",
            check="serving_problem",
            columns="COLUMNS",
        ),
        mode(
            "training",
            "one fine-tuning step shape (full / LoRA / QLoRA x micro-batch x accumulation)",
            Facts(
                phase="training",
                phase_label="training steps",
                figure="train_s",
                load_per_point=True,
                payload=True,
                standalone=True,
                generates=False,
                never_reference="training compares with the full fine-tune",
                tables=("training", "training_cost"),
            ),
            points="training_points",
            skip_reason="training_skip_reason",
            plan="plan_training_point",
            manifest="manifest_entries",
            run="train_points",
            price="price",
            report="REPORT",
            check="training_problem",
            columns="COLUMNS",
        ),
    )
}


def payloads() -> tuple[str, ...]:
    """The modes whose points carry a payload field of their name (``Point.<name>``)."""
    return tuple(name for name, m in REGISTRY.items() if m.facts.payload)


def without_payload() -> str:
    """The mode of a point that carries no payload (offline: the engine in process)."""
    return next(name for name, m in REGISTRY.items() if not m.facts.payload)


def standalone() -> tuple[str, ...]:
    """The modes whose scenario block alone makes points (no inference axes needed)."""
    return tuple(name for name, m in REGISTRY.items() if m.facts.standalone)


def tables() -> dict[str, str]:
    """Every table a mode fills in the results' ``Aggregate``, and the mode that fills it."""
    return {table: name for name, m in REGISTRY.items() for table in m.facts.tables}


def forks_from_host(backend: str, names: set[str]) -> bool:
    """Does a group of this engine, with points of these modes, run in a child forked from its
    node's host? Not when its engine (harness.spec.engines) or one of its modes starts processes
    of its own: forking a process that imported them is not proven safe."""
    from harness.spec.engines import engine  # here: the registry's import stays payload types

    return not engine(backend).own_processes and all(get(n).facts.forks for n in names)


def never_reference(name: str) -> str | None:
    """Why a point or row of this mode is never the quality reference (None: it may be)."""
    return get(name).facts.never_reference


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
    "Facts",
    "GroupStart",
    "Mode",
    "Part",
    "Serving",
    "ServingLevel",
    "Training",
    "TrainingPoint",
    "forks_from_host",
    "get",
    "never_reference",
    "payloads",
    "standalone",
    "tables",
    "without_payload",
]
