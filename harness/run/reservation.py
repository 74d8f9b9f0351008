"""The cards a group holds, reserved at once: a Ray placement group per group of several cards.

A group on one card asks Ray for its card as its actor's (or task's) own resource
(`harness.run.node.actor_options`). A group laid out over k cards
(`harness.spec.capabilities.Layout`) reserves all k with a placement group before its process
starts, is scheduled inside it (`PlacementGroupSchedulingStrategy`), and gives the reservation
back when it ends, however it ends (the driver's `release`, in a `finally`): Ray then holds no
card for a group that is gone, and the next group gets them.

The bundles (each bundle sits on one node) follow the executor that starts the ranks
(`harness.spec.capabilities.layout_executor`):

- "mp" on a GPU node: one bundle of k cards, STRICT_PACK. The group's process holds all k (Ray
  names them in CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES) and vLLM starts a process per rank
  under it; k bundles of one card could not give one process all k.
- "ray" (pipeline stages on GPUs): k bundles of one card, PACK (one node when one has k free
  cards, else as few as can hold them); the group's process takes no card in bundle 0, captures
  its child tasks, and vLLM's Ray executor finds the placement group as the current one and
  places a rank per bundle.
- the CPU: a CPU node offers one `accel:cpu` slot (the whole node, `harness.run.node`); its
  "cards" are cores, a rank per core (VLLM_CPU_OMP_THREADS_BIND binds them). One bundle of the
  slot and k CPUs, STRICT_PACK.

Ray is imported inside the functions only.
"""

from __future__ import annotations

from typing import Any

from harness.spec.capabilities import layout_executor
from harness.spec.scenario import GroupKey

STRATEGY = {"mp": "STRICT_PACK", "ray": "PACK"}  # executor → placement strategy


def needs_reservation(group: GroupKey) -> bool:
    """Does this group hold several cards (or, on a CPU node, several cores for its ranks)?"""
    return group.cards > 1


def bundles(group: GroupKey, options: dict[str, Any]) -> list[dict[str, float]]:
    """The placement group's bundles for `group`, from its one-card actor `options`
    (`harness.run.driver.placement`: num_cpus, num_gpus and custom resources per card)."""
    k = group.cards
    per_card = {
        **{name: float(amount) for name, amount in options["resources"].items()},
        "CPU": float(options["num_cpus"]),
        "GPU": float(options["num_gpus"]),
    }
    if group.target == "cpu":
        # the node's one slot, and a core per rank (at least the one the actor asks)
        return [positive({**per_card, "CPU": float(max(k, options["num_cpus"]))})]
    if layout_executor(group.layout, group.target) == "ray":
        return [positive(per_card) for _ in range(k)]
    return [positive({name: amount * k for name, amount in per_card.items()})]


def positive(bundle: dict[str, float]) -> dict[str, float]:
    """Ray refuses a bundle resource of 0 (a simulated GPU group asks for none)."""
    return {name: amount for name, amount in bundle.items() if amount > 0}


def strategy(group: GroupKey) -> str:
    return STRATEGY["ray" if layout_executor(group.layout, group.target) == "ray" else "mp"]


def total(group: GroupKey, options: dict[str, Any]) -> dict[str, float]:
    """Everything the group holds while it runs, summed over its bundles (or its one card)."""
    if not needs_reservation(group):
        return {k: float(v) for k, v in options["resources"].items()}
    out: dict[str, float] = {}
    for bundle in bundles(group, options):
        for name, amount in bundle.items():
            out[name] = out.get(name, 0.0) + amount
    return out


def reserve(group: GroupKey, options: dict[str, Any], name: str) -> Any:
    """A placement group holding the group's cards (pending until a node can host it: Ray
    queues it, as it queues an actor)."""
    from ray.util.placement_group import placement_group

    return placement_group(bundles(group, options), strategy=strategy(group), name=name)


def scheduled_in(group: GroupKey, options: dict[str, Any], reservation: Any) -> dict[str, Any]:
    """The group's actor (or task) options inside its placement group's bundle 0: with the
    bundle's resources (all of them on one node; none but its own process under vLLM's Ray
    executor, which places each rank itself in the bundles)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    own = bundles(group, options)[0]
    if layout_executor(group.layout, group.target) == "ray":
        own = {}
    resources = {n: a for n, a in own.items() if n not in ("CPU", "GPU")}
    return {
        **options,
        "num_cpus": own.get("CPU", 0.0),
        "num_gpus": own.get("GPU", 0.0),
        "resources": resources,
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=reservation,
            placement_group_bundle_index=0,
            placement_group_capture_child_tasks=True,
        ),
    }


def release(reservation: Any) -> None:
    """Give the cards back (the group's processes in it end with it); once is enough, and a
    placement group already removed is not an error."""
    from ray.util.placement_group import remove_placement_group

    try:
        remove_placement_group(reservation)
    except Exception:  # already removed, or the GCS gone at shutdown
        return
