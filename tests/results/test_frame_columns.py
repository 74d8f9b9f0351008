"""Columns joined to a wide frame (harness.results.frame.with_columns) leave it in few blocks: a
frame whose float and int columns interleave (as ``normalise`` leaves the points) split into one
block per column when columns were dropped, even none, and the next ``assign`` (report.html's
memory caption) raised pandas' "highly fragmented" warning, an error in the tests."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from pandas.errors import PerformanceWarning

from harness.results.frame import with_columns

WIDE = 150  # float and int columns each, interleaved: 300 columns in two blocks


def interleaved() -> pd.DataFrame:
    columns: dict[str, np.ndarray] = {}
    for i in range(WIDE):
        columns[f"f{i}"] = np.arange(3, dtype=np.float64)
        columns[f"i{i}"] = np.arange(3, dtype=np.int64)
    return pd.DataFrame(columns)


def blocks(frame: pd.DataFrame) -> int:
    return len(frame._mgr.blocks)


def test_new_columns_join_without_splitting_the_frame() -> None:
    frame = interleaved()
    assert blocks(frame) == 2
    out = with_columns(frame, pd.DataFrame({"new": [1.0, 2.0, 3.0]}))
    assert blocks(out) == 3  # the two blocks and the new one
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        out.assign(more=0.0)


def test_a_replaced_column_takes_its_new_values_and_the_frame_is_consolidated() -> None:
    out = with_columns(interleaved(), pd.DataFrame({"f7": [9.0, 9.0, 9.0]}))
    assert list(out["f7"]) == [9.0, 9.0, 9.0]
    assert len(out.columns) == 2 * WIDE and list(out.columns).count("f7") == 1
    assert blocks(out) == 2  # floats and ints, one block each
