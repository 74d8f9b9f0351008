"""harness.results.publish.summary: summary.json holds only what JSON can say (no NaN, no numpy
scalars)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from harness.results.publish.summary import json_safe, records


def test_nan_and_infinities_become_null_and_numpy_scalars_plain_numbers() -> None:
    value = {1: [np.float64(2.5), math.nan, (np.int64(3), math.inf)], "x": pd.NA}
    safe = json_safe(value)
    assert safe == {"1": [2.5, None, [3, None]], "x": None}
    assert type(safe["1"][0]) is float and type(safe["1"][2][0]) is int
    assert json.dumps(safe, allow_nan=False) == '{"1": [2.5, null, [3, null]], "x": null}'


def test_records_are_json_safe_rows_cut_to_the_limit() -> None:
    frame = pd.DataFrame({"gpu": ["a", "b", "c"], "usd": [1.5, np.nan, 3.0]})
    assert records(frame) == [
        {"gpu": "a", "usd": 1.5}, {"gpu": "b", "usd": None}, {"gpu": "c", "usd": 3.0},
    ]  # fmt: skip
    assert records(frame, limit=1) == [{"gpu": "a", "usd": 1.5}]
