"""The scenario's parallel block (harness.spec.parallel): every layout of its axes, tensor ranks
inside a node, tensor × pipeline inside the cluster."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.spec.parallel import Parallel


def test_every_combination_is_a_layout_and_one_card_is_none() -> None:
    layouts = Parallel.model_validate({"tensor": [1, 2], "pipeline": [1, 2]}).layouts()
    # (tp, pp) in product order: (1, 1) is one card (None), then tp1·pp2, tp2·pp1, tp2·pp2
    assert [None if x is None else (x.tensor, x.pipeline) for x in layouts] == [
        None, (1, 2), (2, 1), (2, 2),
    ]  # fmt: skip


def test_tensor_ranks_stay_inside_one_node() -> None:
    with pytest.raises(ValidationError, match=r"tensor=4 exceeds the node's 2 cards"):
        Parallel.model_validate({"cards": 2, "tensor": [1, 4]})


def test_tensor_times_pipeline_stays_inside_the_cluster() -> None:
    # 2 nodes of 2 cards = 4 cards; tensor 2 × pipeline 4 = 8 > 4
    with pytest.raises(ValidationError, match=r"2 × 4 = 8 exceeds the cluster's 4 cards"):
        Parallel.model_validate({"cards": 2, "nodes": 2, "tensor": [2], "pipeline": [4]})
    ok = Parallel.model_validate({"cards": 2, "nodes": 2, "tensor": [2], "pipeline": [2]})
    assert [(x.tensor, x.pipeline) for x in ok.layouts() if x is not None] == [(2, 2)]
