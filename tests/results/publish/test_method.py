"""harness.results.publish.method: every publication states its formulas and its data's
licences."""

from __future__ import annotations

from harness.measure.verdict import METHOD
from harness.results.publish.method import FORMULAS, LICENCES


def test_each_licence_names_its_data_and_links_its_licence() -> None:
    assert LICENCES, "a publication without its data's licences"
    for data, attribution in LICENCES:
        assert data and "Licensed" in attribution
        assert "https://creativecommons.org/licenses/" in attribution, data


def test_the_formulas_state_the_price_per_million_tokens_and_each_equal_quality_rule() -> None:
    assert any(f.startswith("$/Mtok (package) = ") and "× 10⁶" in f for f in FORMULAS)
    for what, text in METHOD.items():
        assert f"equal quality, {what}: {text}" in FORMULAS
