"""A scenario's ``parallel:`` block: the layouts over several cards to measure (tensor, pipeline
and expert parallelism; ``harness.spec.capabilities.Layout``), held to the node and the cluster
they are priced on."""

from __future__ import annotations

import itertools
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator

from harness.spec.capabilities import MAX_CARDS, Layout
from harness.spec.yamlinput import Input, unique

Cards = Annotated[int, Field(gt=0, le=MAX_CARDS)]


class Parallel(Input):
    """The layouts to measure (harness.spec.capabilities.Layout): every combination of
    `tensor`, `pipeline` and `expert`. `cards`: the cards of one node, `nodes`: the nodes of the
    cluster (when given, tensor ranks stay inside a node and tensor × pipeline within the
    cluster). Data parallelism follows from the node's cards (pricing), not listed here."""

    cards: Cards | None = None
    nodes: Cards = 1
    tensor: list[Cards] = Field(default_factory=lambda: [1], min_length=1, max_length=64)
    pipeline: list[Cards] = Field(default_factory=lambda: [1], min_length=1, max_length=64)
    expert: list[bool] = Field(default_factory=lambda: [False], min_length=1, max_length=2)

    @field_validator("tensor", "pipeline", "expert")
    @classmethod
    def each_once(cls, value: list[Any]) -> list[Any]:
        return unique(value)

    @field_validator("tensor")
    @classmethod
    def tensor_within_a_node(cls, value: list[int], info: ValidationInfo) -> list[int]:
        cards = info.data.get("cards")
        if cards is not None and max(value) > cards:
            raise ValueError(
                f"tensor={max(value)} exceeds the node's {cards} cards (parallel.cards); tensor "
                "ranks all-reduce every layer and stay inside one node"
            )
        return value

    @field_validator("pipeline")
    @classmethod
    def ranks_within_the_cluster(cls, value: list[int], info: ValidationInfo) -> list[int]:
        cards, nodes = info.data.get("cards"), info.data.get("nodes", 1)
        tensor = info.data.get("tensor")
        if cards is None or not tensor:
            return value
        largest = max(tensor) * max(value)
        if largest > cards * nodes:
            raise ValueError(
                f"tensor × pipeline = {max(tensor)} × {max(value)} = {largest} exceeds the "
                f"cluster's {cards * nodes} cards ({nodes} node(s) of {cards}: parallel.cards, "
                "parallel.nodes)"
            )
        return value

    def layouts(self) -> list[Layout | None]:
        """Every layout, in (tensor, pipeline, expert) order; one card without experts spread
        is None (the keys of earlier runs)."""
        out: list[Layout | None] = []
        for tp, pp, ep in itertools.product(self.tensor, self.pipeline, self.expert):
            layout = Layout(tensor=tp, pipeline=pp, expert=ep)
            out.append(None if layout.is_single_card else layout)
        return out
