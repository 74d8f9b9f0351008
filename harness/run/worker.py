"""One group on one device: each mode's points of the group through that mode's runner.

`iter_group` resolves the group's model once, collects its provenance, opens its energy meter,
and hands each mode's points (in `harness.modes.REGISTRY` order: offline, serving, training) to
the mode's `run` part with one `harness.run.device.Job`. Each row is handed on the moment it
exists (the store writes it atomically), so a crash loses at most the point in flight. An OOM
in a point becomes an `oom` row and the group goes on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from harness import corpus, modes
from harness.backends.base import WindowScores, backend_class
from harness.measure import energy
from harness.plan import PointPlan
from harness.row import ProcessPath, ResultRow
from harness.run import node, provenance
from harness.run.contracts import GroupItem, WorkContext, is_reference
from harness.run.device import Job, Runner, bound_adapter
from harness.run.forking import Started
from harness.run.store import keep_scores, load_scores, reference_artifact
from harness.spec import models
from harness.spec.capabilities import layout_executor
from harness.spec.scenario import GroupKey, Point

if TYPE_CHECKING:
    from harness.run.sweep import Work

Emit = Callable[[ResultRow], None]


class GroupActor:
    """A Ray actor on a worker node, one per group that cannot fork (a fresh process: one
    group's memory figures never carry another's leftovers): measures the group here, with its
    engine imported here, and streams each item back with the node's id. Implements
    harness.run.launchers.actor.GroupActor; the actor launcher starts it."""

    def __init__(self, simulate_on_cpu: bool = False) -> None:
        self.simulate_on_cpu = simulate_on_cpu
        os.environ["OMP_NUM_THREADS"] = str(node.node_threads())

    def measure(
        self, work: Work, points: list[Point], ctx: WorkContext, reference: WindowScores | None
    ) -> Iterator[tuple[GroupItem | Started, str]]:
        import ray
        import torch

        node_id = ray.get_runtime_context().get_node_id()
        yield Started(), node_id
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        for item in iter_group(
            work.group, points, ctx, reference=reference,
            device_override="cpu" if self.simulate_on_cpu else None, process="fresh",
            plans=work.plans,
        ):  # fmt: skip
            yield item, node_id


def measure_in_child(
    work: Work, points: list[Point], ctx: WorkContext, reference: WindowScores | None,
    simulate_on_cpu: bool, node_id: str,
) -> Iterator[GroupItem]:  # fmt: skip
    """A group in a fresh child of its node's host server (harness.run.host: the engines already
    imported; the driver pickles this call, the group's Ray task relays it, `node_id` is that
    task's node). Implements harness.run.launchers.forked.ChildRun; that launcher hands it over."""
    device_override = "cpu" if simulate_on_cpu else None
    return iter_group(
        work.group, points, ctx, reference=reference, device_override=device_override,
        process="forkserver", node_id=node_id, plans=work.plans,
    )  # fmt: skip


VISIBLE_CARDS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")  # as Ray sets them for a group


def layout_facts(group: GroupKey, device: str) -> dict[str, Any]:
    """A layout's ranks, executor and binding (Provenance's fields); none on one card. The
    binding is what the engine was given: its environment for the layout (each CPU rank's cores,
    the engine's ``Backend.engine_environment``), else the cards Ray made visible."""
    if group.layout is None:
        return {}
    cores = sorted(os.sched_getaffinity(0))
    bound = backend_class(group.backend).engine_environment(group, device, cores)
    binding = next(iter(bound.values()), None) or next(
        (f"{name}={os.environ[name]}" for name in VISIBLE_CARDS if os.environ.get(name)), None
    )
    return {
        "ranks": group.layout.cards,
        "executor": layout_executor(group.layout, group.target),
        "binding": binding,
    }


def device_for(target: str) -> str:
    return "cpu" if target == "cpu" else "cuda"


def measure_group(
    group: GroupKey, points: list[Point], ctx: WorkContext, emit: Emit
) -> list[ResultRow]:
    """In-process: the reference's scores are read from and saved to the run folder."""
    artifact = reference_artifact(ctx, group)
    rows: list[ResultRow] = []
    reference = None if is_reference(group, ctx) else load_scores(artifact)
    for item in iter_group(group, points, ctx, reference=reference):
        if isinstance(item, ResultRow):
            emit(item)
            rows.append(item)
        else:
            keep_scores(ctx, group, item)
    return rows


def iter_group(
    group: GroupKey,
    points: list[Point],
    ctx: WorkContext,
    *,
    reference: WindowScores | None = None,
    device_override: str | None = None,
    process: ProcessPath = "in-process",
    node_id: str | None = None,
    plans: Sequence[PointPlan] = (),
) -> Iterator[GroupItem]:
    """Each mode's points of the group through its runner (`harness.run.device.Runner`), in
    registry order: the offline points (load once, score quality once, then each point: the
    group's WindowScores once, then a row per point), then the serving levels behind a server
    (the offline engine closed by then), then the training points (a fresh model each; a
    training point is a group of its own). Each runner closes what it loaded however this ends
    (a failure, or a consumer that stops early), so an in-process `measure` never carries one
    group's engine memory into the next.

    `device_override="cpu"` runs GPU-target groups on the CPU: only the multi-node tests use it
    (routing on one machine); the rows' provenance then names the CPU that really ran them.
    `process` and `node_id` go into the rows' provenance (which process measured them, on which
    Ray node: a forked child is not a Ray worker itself). `plans`: the points' plans as
    orchestration made them (harness.run.sweep.Work.plans), which the runners use on the card
    they were made for (harness.run.device.Job.plan); none: each point is planned here."""
    device = device_override or device_for(group.target)
    random = group.weights == "random"
    # a hub id: its snapshot; random weights need its config.json only
    resolved = models.resolve(group.model, group.revision, need="config" if random else "weights")
    corpus_hash = corpus.corpus_hash()
    adapter = bound_adapter(group, resolved)
    prov = provenance.collect(
        device, corpus_hash, model_commit=resolved.commit, adapter=adapter, process=process,
        node_id=node_id, layout=layout_facts(group, device),
    )  # fmt: skip
    by_mode = {name: [p for p in points if p.mode == name] for name in modes.REGISTRY}
    with energy.metering(device) as meter:  # one meter for the group, every mode's runner
        job = Job(
            ctx=ctx,
            device=device,
            model_path=str(resolved.path),
            tokenizer_dir=random_weights_tokenizer(resolved) if random else str(resolved.path),
            corpus_hash=corpus_hash,
            random_weights=random,
            reference_group=is_reference(group, ctx),
            reference=reference,
            provenance=prov,
            meter=meter,
            adapter=adapter,
            plans={plan.point: plan for plan in plans},
        )
        for name, mode in modes.REGISTRY.items():
            if by_mode[name]:
                run: Runner = mode.load("run")
                yield from run(group, by_mode[name], job)


def random_weights_tokenizer(resolved: models.ResolvedModel) -> str:
    """The tokenizer for a random-weights model's prompts: its own when its folder has one (a
    hub snapshot, say), else the shipped tiny model's (the catalog's configs ship none); the
    offline runner clips the ids below the model's vocabulary."""
    if resolved.has_tokenizer:
        return str(resolved.path)
    return str(models.PACKAGE_DATA / "tiny-llama")
