"""What the serving tables share: a configuration's and its quality's columns, and the cheapest
passing row per class (``harness.modes.serving.price``)."""

from __future__ import annotations

import pandas as pd

from harness.results.columns import ENGINE_WEIGHTS_KV
from harness.results.pricing import PASS_COLUMNS, VERDICT_COLUMNS, cheapest_by_class, pass_column

QUALITY_COLUMNS = (
    "quality_class", *VERDICT_COLUMNS, *PASS_COLUMNS, "ppl", "ppl_ref", "dppl_pct",
)  # fmt: skip
# a serving configuration: its group's, and whether the server cached prefixes (None: no axis)
CONFIG_COLUMNS = (
    "run", "group", "model", "weights", *ENGINE_WEIGHTS_KV, "layout", "speculative", "target",
    "gpu", "device", "prefix_caching",
)  # fmt: skip


def cheapest_passing(frame: pd.DataFrame, keys: tuple[str, ...], cost: str) -> pd.DataFrame:
    """Per class and `keys`: the row of least `cost` among those that pass the class (empty
    when none does)."""
    if frame.empty:
        return frame.iloc[0:0]
    return cheapest_by_class(lambda name: frame[frame[pass_column(name)].astype(bool)], keys, cost)
