"""Priced per node: a layout over k of a node's n cards pays 1 ÷ ⌊n ÷ k⌋ of the node (its k cards
when k divides n; its share of the idle cards too when it does not), and the node holds ⌊n ÷ k⌋
replicas of it (harness.results.pricing). Every expected figure is computed by hand.

The node: 8 × H100 at $24.00 per node-hour, one 30-day package at no discount, utilisation 1.

    package price     = 24 × 24 h × 30 d                     = $17,280
    node $/hour       = 17,280 ÷ (30 × 24)                    = $24.00
    hours             = 30 × 24                               = 720

    layout  k  decode tok/s  $/hour (24 ÷ ⌊8/k⌋) $/Mtok out = $/h ÷ (tok/s × 3600) × 10⁶   ⌊8/k⌋
    one     1  1000          3                   3 ÷ 3.6    = 0.833333                      8
    tp=2    2  2500          6                   6 ÷ 9.0    = 0.666667                      4
    tp=3    3  3000          12 (not 9: 2 idle)  12 ÷ 10.8  = 1.111111                      2
    tp=8    8  6000          24                  24 ÷ 21.6  = 1.111111                      1

    tokens/package = tok/s × 3600 × 720 × ⌊8/k⌋:
    one   1000 × 3600 × 720 × 8 = 20,736,000,000
    tp=2  2500 × 3600 × 720 × 4 = 25,920,000,000
    tp=3  3000 × 3600 × 720 × 2 = 15,552,000,000   (not × 8/3: two replicas fit, two cards idle)
    tp=8  6000 × 3600 × 720 × 1 = 15,552,000,000
"""

from __future__ import annotations

import pandas as pd
import pytest

from harness.results.aggregate import Aggregate, aggregate
from harness.results.frame import frame_from_rows
from harness.results.pricing import gpus_used, layout_cards, replicas_per_node
from harness.spec.tariffs import Package
from tests import factories as F

EXPECTED = {  # layout → ($/Mtok out, tokens per package, replicas per node, cards)
    None: (3 / 3.6, 20_736_000_000, 8, 1),
    "tp=2": (6 / 9.0, 25_920_000_000, 4, 2),
    "tp=3": (12 / 10.8, 15_552_000_000, 2, 3),
    "tp=8": (24 / 21.6, 15_552_000_000, 1, 8),
}
DECODE = {None: 1000.0, "tp=2": 2500.0, "tp=3": 3000.0, "tp=8": 6000.0}


def node_result() -> Aggregate:
    rows = [F.reference(decode_tok_s=DECODE[None])] + [
        F.row(layout=layout, decode_tok_s=DECODE[layout], **F.quality(100.0))
        for layout in ("tp=2", "tp=3", "tp=8")
    ]
    node = F.tariff(hourly_usd=24.0, packages=[Package(days=30, discount_pct=0)])
    return aggregate(frame_from_rows(rows), F.tariffs(node), 1.0)


def by_layout(table: pd.DataFrame) -> dict[object, pd.Series]:
    return {(None if pd.isna(r["layout"]) else r["layout"]): r for _, r in table.iterrows()}


def test_a_layout_is_priced_on_its_own_cards_with_floor_n_over_k_replicas() -> None:
    cost = by_layout(node_result().cost)
    assert set(cost) == set(EXPECTED)
    for layout, (usd, tokens, replicas, cards) in EXPECTED.items():
        row = cost[layout]
        assert row["gpus_used"] == cards
        assert row["replicas_per_node"] == replicas
        assert row["usd_per_mtok_output"] == pytest.approx(usd, rel=1e-9)
        assert row["tokens_per_package"] == pytest.approx(tokens, rel=1e-9)


def test_the_cheapest_table_lists_every_layout_side_by_side_with_its_ratio() -> None:
    cheapest = node_result().cheapest
    cheapest = cheapest[cheapest["quality_class"] == "99"]
    rows = by_layout(cheapest)
    assert set(rows) == set(EXPECTED)  # one row per layout, not one per GPU
    # ratio to the cheapest layout (tp=2 at 0.666667): 0.833333 ÷ 0.666667 = 1.25,
    # 1.111111 ÷ 0.666667 = 1.666667 (tp=3 and tp=8)
    assert rows["tp=2"]["ratio_to_cheapest_gpu"] == pytest.approx(1.0)
    assert rows[None]["ratio_to_cheapest_gpu"] == pytest.approx(1.25)
    assert rows["tp=3"]["ratio_to_cheapest_gpu"] == pytest.approx(5 / 3)
    assert rows["tp=8"]["ratio_to_cheapest_gpu"] == pytest.approx(5 / 3)
    assert next(iter(cheapest["layout"])) == "tp=2"  # cheapest first
    assert rows[None]["layout"] is None  # one card: no layout, not NaN


def test_layout_cards_and_replicas_by_hand() -> None:
    assert [layout_cards(x) for x in (None, float("nan"), "", "tp=2", "tp=4,pp=2", "tp=8,ep")] == [
        1, 1, 1, 2, 8, 8,
    ]  # fmt: skip
    frame = pd.DataFrame({"layout": [None, "tp=2", "tp=2,pp=2"]})
    assert list(gpus_used(frame)) == [1.0, 2.0, 4.0]
    assert list(gpus_used(pd.DataFrame({"x": [1, 2]}))) == [1.0, 1.0]
    # ⌊8/1⌋, ⌊8/3⌋, ⌊8/8⌋, ⌊2/1⌋, ⌊2/2⌋
    assert list(replicas_per_node([8, 8, 8, 2, 2], [1, 3, 8, 1, 2])) == [8, 2, 1, 2, 1]  # type: ignore[arg-type]


def test_a_package_divided_by_its_tokens_is_the_printed_price_for_every_layout() -> None:
    """The audit's case: tp=3 on an 8-card node printed $0.8333/Mtok, while the package
    ($17,280) over its 15,552,000,000 tokens is $1.1111/Mtok: the two idle cards were free."""
    for layout, row in by_layout(node_result().cost).items():
        per_mtok = 17_280 / row["tokens_per_package"] * 1e6
        assert row["usd_per_mtok_output"] == pytest.approx(per_mtok, rel=1e-9), layout
