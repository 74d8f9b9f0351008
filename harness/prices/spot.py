"""The restart a spot interruption costs, measured: a run's model load and engine start
(``load_s``, the largest of its rows: the dearest restart) plus the image pull and weights
download the run did not time (``pull_s``, given or the stated default)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.errors import UserInputError

DEFAULT_PULL_S = 300.0  # image pull + weights download after a reclaim: stated, not measured


def measured_load_s(points: pd.DataFrame, where: str) -> float:
    """The largest measured ``load_s`` of a run's rows (seconds), or a clear error."""
    loads = points["load_s"].dropna() if "load_s" in points else pd.Series(dtype="float64")
    loads = loads[loads > 0]
    if loads.empty:
        raise UserInputError(
            "no row of this run measured load_s (model load + engine start); give --restart-s",
            file=where,
            field="--restart-from",
        )
    return float(loads.max())


def restart_from_run(run: Path, pull_s: float = DEFAULT_PULL_S) -> tuple[float, str]:
    """(restart seconds, how they were stated) from a run folder's measured load."""
    from harness.results.aggregate import aggregate_run

    if not run.is_dir():
        raise UserInputError("run folder not found (expected results/<run>/)", file=str(run))
    load = measured_load_s(aggregate_run(run).points, str(run))
    return (
        load + pull_s,
        f"measured: load + engine start {load:.1f} s in {run.name} + pull {pull_s:g} s",
    )
