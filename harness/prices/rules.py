"""Package rules: the 3/7/30-day packages are rules applied to an hourly price, each naming its
published source (no feed sells fixed multi-day packages). A rule is global or for one provider
(the provider's own rule wins for its length); a provider's billing and stopped-storage price
are filled where a published source says them.

A rules file (``tariffs/package-rules.yaml``)::

    packages:
      - {days: 7, discount_pct: 10, source: "FPT Cloud fixed rental, week rate -10 %"}
      - {provider: vastai, days: 30, discount_pct: 20, source: "Vast.ai reserved 1 month -20 %"}
    providers:
      runpod: {billing: second, source: "<the provider's billing page>"}
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from harness.spec.tariffs import (
    MAX_DAYS,
    MAX_NOTE,
    MAX_PACKAGES,
    MAX_STORAGE_USD_PER_DAY,
    MAX_TEXT,
    Package,
)
from harness.spec.yamlinput import Input, load_model

RULES_FILE = Path(__file__).resolve().parents[2] / "tariffs" / "package-rules.yaml"


class PackageRule(Input):
    days: int = Field(gt=0, le=MAX_DAYS)
    discount_pct: float = Field(ge=0, lt=100)
    source: str = Field(min_length=1, max_length=MAX_TEXT)  # the published rule
    provider: str | None = Field(None, min_length=1, max_length=MAX_TEXT)  # None: every provider


class ProviderTerms(Input):
    billing: Literal["second", "minute", "hour"] | None = None
    storage_usd_per_day: float | None = Field(None, ge=0, le=MAX_STORAGE_USD_PER_DAY)
    source: str = Field(min_length=1, max_length=MAX_TEXT)


class PackageRules(Input):
    packages: list[PackageRule] = Field(min_length=1, max_length=MAX_PACKAGES)
    providers: dict[str, ProviderTerms] = Field(default_factory=dict, max_length=MAX_PACKAGES)
    note: str | None = Field(None, max_length=MAX_NOTE)

    @field_validator("packages")
    @classmethod
    def one_rule_per_length(cls, value: list[PackageRule]) -> list[PackageRule]:
        seen: set[tuple[str | None, int]] = set()
        for rule in value:
            key = (rule.provider and rule.provider.lower(), rule.days)
            if key in seen:
                who = rule.provider or "every provider"
                raise ValueError(f"two rules of {rule.days} days for {who}; give each once")
            seen.add(key)
        return value

    def packages_for(self, provider: str) -> list[Package]:
        """The provider's packages: its own rule for a length, else the global one."""
        chosen: dict[int, PackageRule] = {}
        for rule in self.packages:
            mine = rule.provider is not None and rule.provider.lower() == provider.lower()
            if (rule.provider is None and rule.days not in chosen) or mine:
                chosen[rule.days] = rule
        return [
            Package(days=days, discount_pct=r.discount_pct, rule=r.source)
            for days, r in sorted(chosen.items())
        ]

    def terms_for(self, provider: str) -> ProviderTerms | None:
        lowered = {name.lower(): terms for name, terms in self.providers.items()}
        return lowered.get(provider.lower())


def load_rules(path: Path | None = None) -> PackageRules:
    """The rules file (the shipped ``tariffs/package-rules.yaml`` where none is given)."""
    return load_model(path or RULES_FILE, PackageRules, "package rules")
