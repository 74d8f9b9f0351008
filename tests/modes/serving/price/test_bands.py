"""Cost against interactivity's own rules (harness.modes.serving.price.bands): tok/s/user at the
stated TPOT percentile, the bands the rows state; and the cheapest passing row per class
(harness.modes.serving.price.common)."""

from __future__ import annotations

import math

import pandas as pd

from harness.modes.serving.price.bands import bands_of, tok_s_per_user
from harness.modes.serving.price.common import cheapest_passing


def test_tok_s_per_user_is_1000_over_the_stated_tpot_percentile() -> None:
    rows = pd.DataFrame({
        "interactivity_tpot": ["p50", "p90", None, "p50"],
        "tpot_ms_p50": [10.0, 10.0, 8.0, 0.0],
        "tpot_ms_p90": [40.0, 25.0, 20.0, 5.0],
    })  # fmt: skip
    got = tok_s_per_user(rows)
    # 1000 / 10 = 100; 1000 / 25 (p90) = 40; none stated: p50, 1000 / 8 = 125; TPOT 0: none
    assert got[:3].tolist() == [100.0, 40.0, 125.0] and math.isnan(got[3])


def test_the_bands_are_every_one_the_rows_state_once_in_order() -> None:
    rows = pd.DataFrame({"interactivity_bands": ["30 10", None, "100 30"]})
    assert bands_of(rows) == [10.0, 30.0, 100.0]
    assert bands_of(pd.DataFrame()) == []


def test_the_cheapest_passing_row_per_class_ignores_a_cheaper_row_that_fails() -> None:
    frame = pd.DataFrame({
        "model": ["m", "m", "m"], "usd": [1.0, 2.0, 3.0],
        "quality_class": ["below", "99", "99.9"],
        "pass_99": [False, True, True], "pass_99_9": [False, False, True],
    })  # fmt: skip
    got = cheapest_passing(frame, ("model",), "usd")
    by_class = dict(zip(got["quality_class"], got["usd"], strict=True))
    assert by_class == {"99": 2.0, "99.9": 3.0}  # 1.0 fails both classes
    assert got["achieved_class"].tolist() == ["99", "99.9"]  # each row's own, kept
