"""The device loop's shared parts (device side): the one contract every mode's runner keeps, the
job it gets, and the helpers all runners use instead of copying them.

- `Job`: what a group's runners get from `harness.run.worker.iter_group`, the same object for
  every mode (context, device, model and tokenizer folders, the group's provenance, the energy
  meter, the quality reference, the points' plans orchestration made), the one way they make a
  row (`Job.row`) and a point's plan (`Job.plan`);
- `Runner`: a mode's `run` part (`harness.modes.<name>.device.run`): a group's points of that
  mode, measured here, one row per point the moment it exists;
- the helpers: OOM detection (`is_oom`), memory released between points (`free_memory`), the
  card that ran the group (`card_for_device`) and the one its plan assumes (`plan_card`), the
  point's plan (`point_plan`: the carried one, made again only on another card) and its figures
  as a row part (`predicted`), the measured figure the plan's total predicts
  (`comparable_peak_mib`) and the gap between them (`gap_pct`), and the KV pool an engine that
  sizes it up front gets (`kv_pool_bytes`).
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness import modes
from harness import plan as planner
from harness.backends.base import BackendOptions, WindowScores
from harness.console import err_console, shown
from harness.measure import energy
from harness.measure.memory import PhaseMemory
from harness.row import Part, Prediction, Provenance, ResultRow, Status
from harness.run.contracts import GroupItem, WorkContext, point_row
from harness.spec import adapters, catalog, models
from harness.spec.engine_options import gpu_share
from harness.spec.scenario import GroupKey, Point
from harness.units import GIB, to_mib


def no_meter() -> energy.EnergyMeter[Any]:
    return energy.EnergyMeter.unavailable("no meter given")


@dataclass(frozen=True)
class Job:
    """What every mode's runner gets for one group (see `Runner`): the same for each mode."""

    ctx: WorkContext
    device: str  # where the group runs: "cpu" or "cuda"
    model_path: str  # the resolved model's folder (its config; its weights unless random)
    tokenizer_dir: str  # the model's own, or the shipped one for random weights without one
    corpus_hash: str
    random_weights: bool = False
    reference_group: bool = False  # the group is its model's quality reference (is_reference)
    reference: WindowScores | None = None  # the reference's window scores (offline quality)
    provenance: Provenance | None = None  # the group's, collected once on this device
    meter: energy.EnergyMeter[Any] = field(default_factory=no_meter)  # open for the whole group
    adapter: adapters.Adapter | None = None  # the group's LoRA folder, its binding checked
    # each point's plan as orchestration made it (budget.plan_grid), carried with the work;
    # empty where the group is measured without one (a point is then planned here)
    plans: Mapping[Point, planner.PointPlan] = field(default_factory=dict)

    def card(self, target: str) -> catalog.GpuSpec | None:
        """The catalog card that ran the group (see `card_for_device`)."""
        name = self.provenance.device_name if self.provenance is not None else None
        return card_for_device(name or "", target, self.ctx)

    def plan(self, point: Point, card: catalog.GpuSpec | None) -> planner.PointPlan:
        """The point's plan on the card that ran it (`point_plan`): the carried one where it was
        made for that card."""
        return point_plan(point, card, self.ctx, self.plans.get(point))

    def predicted(self, plan: planner.PointPlan) -> Prediction:
        """The plan's figures as the row's Prediction part (`predicted`)."""
        return predicted(plan, self.plans.get(plan.point))

    def backend_options(
        self, seed: int, max_context: int, kv_cache_bytes: int | None
    ) -> BackendOptions:
        """The group's engine options: this job's device, model, tokenizer and vLLM settings,
        with the points' seed, longest sequence and (where sized up front) KV pool."""
        return BackendOptions(
            device=self.device,
            model_path=self.model_path,
            tokenizer_path=self.tokenizer_dir,
            random_weights=self.random_weights,
            seed=seed,
            engines=self.ctx.engines,
            max_context=max_context,
            kv_cache_bytes=kv_cache_bytes,
            adapter_path=str(self.adapter.path) if self.adapter is not None else None,
            adapter_rank=self.adapter.rank if self.adapter is not None else None,
        )

    def row(
        self,
        point: Point,
        status: Status,
        error: str | None,
        parts: list[Part],
        *,
        card: str | None = None,
        load_generator: str | None = None,
    ) -> ResultRow:
        """The point's row (`contracts.point_row`) with the group's run, corpus and provenance;
        `card` names the card it ran on, `load_generator` the generator of a serving row. Only
        offline rows of the reference group are the reference (serving rows have no quality)."""
        prov = self.provenance
        if load_generator is not None:
            prov = (prov or Provenance()).model_copy(update={"load_generator": load_generator})
        reference = self.reference_group and not modes.never_reference(point.mode)
        return point_row(
            point, *parts, run=self.ctx.run, corpus_hash=self.corpus_hash, status=status,
            error=error, is_reference=reference, gpu=card, provenance=prov,
        )  # fmt: skip


def bound_adapter(group: GroupKey, base: models.ResolvedModel) -> adapters.Adapter | None:
    """The group's adapter read and checked against the base whose weights are loaded (its
    id, revision, commit and weights hash), or None without one; a mismatch is refused."""
    if group.adapter is None:
        return None
    adapter = adapters.read_adapter(group.adapter)
    adapters.check_binding(
        adapter, group.model, group.revision, base_weights=base.path, base_commit=base.commit
    )
    return adapter


class Runner(Protocol):
    """A mode's `run` part, registered in `harness.modes.REGISTRY` (`run="..."`): the group's
    points of that mode, measured on `job.device`. It yields each point's row the moment it is
    made (a mode that scores quality yields the group's WindowScores once, before its rows),
    never raises for one failing point (an `oom`/`error` row instead), and releases what it
    loaded however it ends (a failure, a consumer that stops early)."""

    def __call__(self, group: GroupKey, points: list[Point], job: Job) -> Iterator[GroupItem]: ...


# --- failures and memory -------------------------------------------------------------------


def is_oom(exc: BaseException) -> bool:
    """An out-of-memory failure, however the engine says it: MemoryError, torch's
    OutOfMemoryError, an OOMError, or a message that says "out of memory"."""
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    return name in {"OutOfMemoryError", "OOMError"} or "out of memory" in str(exc).lower()


def failure_status(exc: BaseException) -> Status:
    return "oom" if is_oom(exc) else "error"


MAX_ERROR_CHARS = 2000  # a row's error text: enough for the exception, never a whole log


def failure_text(exc: BaseException, where: str = "") -> str:
    """The row's error: ``[where: ]Type: message``, cut to MAX_ERROR_CHARS."""
    prefix = f"{where}: " if where else ""
    return f"{prefix}{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]


def free_memory(device: str) -> None:
    """Release what the last point (or engine) left: garbage, the C heap's free pages, and on a
    GPU the allocator's cached blocks, so the next point's memory figures do not count them."""
    gc.collect()
    trim_heap()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def trim_heap() -> bool:
    """Hand glibc's freed heap pages back to the system (`malloc_trim(0)`): the CPU counterpart
    of `torch.cuda.empty_cache()`. Without it a process's RSS keeps the quality pass's freed
    activations (100-580 MiB on the default CPU bench, different in every run), and the points
    measured after it carry them. False where the C library has no malloc_trim (not glibc)."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


# --- cards and the plan --------------------------------------------------------------------


def card_for_device(device_name: str, target: str, ctx: WorkContext) -> catalog.GpuSpec | None:
    """The catalog card that really ran the group (None: an unknown GPU and no --gpu given)."""
    if target == "cpu":
        return catalog.gpu("cpu")
    found = catalog.gpu_for_device_name(device_name)
    if found is None and ctx.gpu:
        return catalog.gpu(ctx.gpu)
    return found


def plan_card(card: catalog.GpuSpec | None, target: str, ctx: WorkContext) -> catalog.GpuSpec:
    """The card a point is planned on: the one that ran it, else the target's default card (as
    `harness plan` assumes)."""
    return card or planner.default_card(target, ctx.gpu)


def point_plan(
    point: Point,
    card: catalog.GpuSpec | None,
    ctx: WorkContext,
    carried: planner.PointPlan | None = None,
) -> planner.PointPlan:
    """The plan of the point on `plan_card(card, ...)`: the one orchestration made and the work
    carried (`carried`, budget.plan_grid) where it was made for that card; else made here, as
    `harness plan` makes it, and said on stderr where it replaces a carried plan (the row says
    so too: `predicted`)."""
    on = plan_card(card, point.target, ctx)
    if carried is not None and carried.gpu == on.name:
        return carried
    if carried is not None:
        err_console.print(replanned_line(point, carried.gpu, on.name), highlight=False)
    share = gpu_share(ctx.engines, point.backend)
    return planner.plan_point(point, on, gpu_memory_utilization=share)


def replanned_line(point: Point, planned_on: str, ran_on: str) -> str:
    """What the log says where a point is planned again on the card that ran it."""
    return (
        f"note: {shown(point.group.label)}: planned on {shown(planned_on)}, measured on "
        f"{shown(ran_on)}: its prediction is planned again on {shown(ran_on)}"
    )


def predicted(plan: planner.PointPlan, carried: planner.PointPlan | None = None) -> Prediction:
    """The plan's memory figures as the row's Prediction part (gaps filled by the runner);
    `replanned_from` names the card of the carried plan where this one replaced it."""
    return Prediction(
        predicted_weights_mib=to_mib(plan.weights_gib * GIB),
        predicted_kv_cache_mib=to_mib(plan.kv_cache_gib * GIB),
        predicted_activations_mib=to_mib(plan.activations_gib * GIB),
        predicted_peak_mib=to_mib(plan.total_gib * GIB),
        replanned_from=carried.gpu if carried is not None and carried.gpu != plan.gpu else None,
    )


def comparable_peak_mib(phase: PhaseMemory, device: str) -> float | None:
    """The measured figure that the plan's total predicts: on a GPU the device memory this
    process uses (it includes the CUDA/HIP context, as the plan's reserve does) when NVML sees
    the process, else the allocator's peak; on the CPU the process RSS peak."""
    if device.startswith("cuda") and not phase.global_fallback:
        return phase.device_used_mib or phase.peak_allocated_mib
    return phase.peak_allocated_mib


def gap_pct(measured: float | None, predicted: float | None) -> float | None:
    """How far the measured figure is from the predicted one, in % of the prediction."""
    if measured is None or not predicted:
        return None
    return 100.0 * (measured - predicted) / predicted


# --- the KV pool ---------------------------------------------------------------------------

# The pool an engine that sizes it up front gets is the plan's (harness.plan.kv_pool_bytes), so
# the plan's memory and the engine's pool are one formula; re-exported for the runners.
KV_POOL_HEADROOM = planner.KV_POOL_HEADROOM
KV_POOL_MIN_BYTES = planner.KV_POOL_MIN_BYTES
kv_pool_bytes = planner.kv_pool_bytes
