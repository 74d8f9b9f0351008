"""The modes' facts (harness.modes.base.Facts) as the core reads them: the row's modes, the
points' payloads, the results' tables."""

from __future__ import annotations

from typing import get_args

import pandas as pd
import pytest

from harness import modes
from harness.results.aggregate import aggregate
from harness.row import Mode
from tests import factories as F


def test_the_rows_modes_are_the_registrys() -> None:
    # harness.row keeps its closed Literal (the stored format); it must name the same modes
    assert get_args(Mode) == tuple(modes.REGISTRY)


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
    assert isinstance(result.at_slo, pd.DataFrame)
    assert result.at_slo.empty and result.training_cost.empty
    with pytest.raises(AttributeError, match="no attribute 'at_sla'"):
        _ = result.at_sla
