"""Package rules: a provider's own rule wins for its length; each rule names its source."""

from __future__ import annotations

import pytest

from harness.errors import UserInputError
from harness.prices.rules import PackageRules, load_rules
from harness.spec.yamlinput import parse_model

RULES = """\
packages:
  - {days: 7, discount_pct: 10, source: "global week -10 %"}
  - {provider: vastai, days: 7, discount_pct: 15, source: "Vast week -15 %"}
  - {days: 30, discount_pct: 20, source: "global month -20 %"}
providers:
  RunPod: {billing: second, source: "billing page"}
"""


def test_a_providers_own_rule_wins_and_the_global_rules_fill_the_rest() -> None:
    rules = parse_model(RULES, PackageRules, "r.yaml", "package rules")
    vast = {p.days: (p.discount_pct, p.rule) for p in rules.packages_for("VastAI")}
    assert vast == {7: (15, "Vast week -15 %"), 30: (20, "global month -20 %")}
    other = {p.days: p.discount_pct for p in rules.packages_for("lambdalabs")}
    assert other == {7: 10, 30: 20}
    terms = rules.terms_for("runpod")
    assert terms is not None and terms.billing == "second"  # names match case-insensitively


def test_two_rules_of_one_length_for_one_provider_are_refused() -> None:
    twice = (
        "packages:\n"
        '  - {days: 7, discount_pct: 10, source: "a"}\n'
        '  - {days: 7, discount_pct: 5, source: "b"}\n'
    )
    with pytest.raises(UserInputError, match="two rules of 7 days for every provider"):
        parse_model(twice, PackageRules, "r.yaml", "package rules")


def test_the_shipped_rules_name_a_source_for_each_package() -> None:
    rules = load_rules()
    assert sorted(p.days for p in rules.packages_for("lambdalabs")) == [3, 7, 30]
    assert all(p.rule for p in rules.packages_for("vastai"))
