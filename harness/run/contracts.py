"""What the orchestration side (sweep, driver) and the device side (worker) agree on.

The worker implements these contracts; sweep and driver use them without importing the worker:
- ``WorkContext``: what a worker needs beyond its points, the same for every group of a run;
- ``is_reference``: whether a group is its model's quality reference;
- ``point_row``: the one way a result row is made for a point (measured, skipped or lost);
- ``GroupItem``: what measuring a group yields, in order: its window scores once (after the load
  and quality scoring), then one row per point the moment it is measured.
Where results live (rows, manifest, window scores) is ``harness.run.store``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness import modes
from harness.backends.base import WindowScores
from harness.row import Energy, Header, Part, PointColumns, Provenance, ResultRow, Status
from harness.spec.engine_options import EngineBlocks
from harness.spec.quality import QualitySettings
from harness.spec.scenario import GroupKey, Point, Reference

GroupItem = WindowScores | ResultRow


class WorkContext(BaseModel):
    """What a worker needs beyond its points; the same for every group of a run."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    run_dir: str
    run: str
    reference: Reference
    quality: QualitySettings
    engines: EngineBlocks = EngineBlocks()  # each engine's options (harness.spec.engine_options)
    reference_backend: str
    gpu: str | None = None  # catalog card when the device name is not matched


def apart_from_reference(group: GroupKey) -> bool:
    """Is the group one of a mode whose rows are never the reference, named on the group by its
    payload's label (a training configuration: its own group)?"""
    return any(
        getattr(group, name, None) is not None and modes.never_reference(name)
        for name in modes.payloads()
    )


def is_reference(group: GroupKey, ctx: WorkContext) -> bool:
    """Random weights are never a quality reference (they have no quality), nor is a training
    group (its quality is a held-out loss, compared in harness.modes.training.price)."""
    return (
        group.weights == "checkpoint"
        and group.adapter is None  # an adapter is compared with its base, never the reference
        and not apart_from_reference(group)  # a mode never the reference (its Facts say why)
        and group.layout is None  # one card: a layout over k cards is compared with it
        and group.speculative is None  # plain decoding: a speculative one is compared with it
        and group.quantization == ctx.reference.quantization
        and group.kv_cache_dtype == ctx.reference.kv_cache_dtype
        and group.backend == ctx.reference_backend
    )


def point_row(
    point: Point,
    *parts: Part,
    run: str,
    corpus_hash: str,
    status: Status,
    error: str | None = None,
    is_reference: bool = False,
    gpu: str | None = None,
    provenance: Provenance | None = None,
) -> ResultRow:
    """The one way a row is made for a point: its key, its group, its columns, and what was
    found (typed parts: speed, memory, prediction, quality, …), measured or not."""
    header = Header(
        key=point.key(corpus_hash),
        run=run,
        mode=point.mode,
        status=status,
        error=error,
        group=point.group.label,
    )
    columns = PointColumns.model_validate(
        {**point.model_dump(include=set(PointColumns.model_fields)), "is_reference": is_reference}
    )
    columns.gpu = gpu
    if provenance is not None and point.inputs:  # the content its key holds, for a person
        files = ",".join(f"{what}={sha}" for what, sha in point.inputs)
        provenance = provenance.model_copy(update={"inputs_sha256": files})
    row = ResultRow.compose(header, columns, *parts, provenance=provenance)
    if row.energy_unavailable_reason is None and not any(
        getattr(row, name) is not None for name in ENERGY_FIGURES
    ):
        why = "no reason recorded" if status == "ok" else f"the point is {status}"
        row.energy_unavailable_reason = f"not measured: {why}"
    return row


# every energy figure a row may carry (the Energy part less its source and reason)
ENERGY_FIGURES = tuple(set(Energy.model_fields) - {"energy_source", "energy_unavailable_reason"})
