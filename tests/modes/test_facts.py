"""The modes' facts (harness.modes.base.Facts) as the core reads them: the row's modes, the
points' payloads, the results' tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness import modes
from harness.results.aggregate import aggregate
from tests import factories as F


def test_a_row_of_a_mode_the_registry_does_not_know_is_unreadable_by_name(tmp_path: Path) -> None:
    from harness.run.store import read_row, write_row

    for name in modes.REGISTRY:  # every registered mode's name is a row's mode
        assert F.row(mode=name).mode == name
    path = write_row(tmp_path, F.row(key="k", mode="streaming"))
    assert read_row(path) == (
        "mode: 'streaming' is not a mode; expected one of: offline, serving, training"
    )


def test_payloads_and_the_mode_of_a_point_without_one() -> None:
    assert modes.payloads() == ("serving", "training")
    assert modes.without_payload() == "offline"
    assert modes.standalone() == ("training",)


def test_each_table_belongs_to_one_mode() -> None:
    tables = modes.tables()
    assert tables["at_slo"] == "serving"
    assert tables["training_cost"] == "training"
    declared = [t for m in modes.REGISTRY.values() for t in m.facts.tables]
    assert len(declared) == len(set(declared))


def test_a_mode_table_reads_as_an_attribute_and_is_empty_without_its_rows() -> None:
    result = aggregate(pd.DataFrame([r.model_dump() for r in F.small_grid()]), F.tariffs())
    assert isinstance(result.table("at_slo"), pd.DataFrame)
    assert result.table("at_slo").empty and result.table("training_cost").empty
    with pytest.raises(AttributeError, match="no attribute 'at_sla'"):
        _ = result.at_sla
