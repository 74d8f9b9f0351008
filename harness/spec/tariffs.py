"""Tariff files: what a GPU node costs per hour and per multi-day package.

A tariff prices one **node** of one catalog GPU (``gpus_per_node`` cards) from one provider.
``hourly_usd`` is the price of the whole node per hour. Each package is a fixed rental of ``days``
whole days, priced either directly (``price_usd``, for the whole node and the whole period) or as a
discount on hourly billing (``discount_pct``: price = hourly_usd × 24 × days × (1 − pct/100)).

Validation happens before anything is priced; errors name the file, the line and the field, the
same way scenario errors do (the helpers are shared with ``harness.spec.scenario``).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    field_validator,
    model_validator,
)

from harness.errors import UserInputError
from harness.spec import catalog
from harness.spec.yamlinput import load_model, parse_model

HOURS_PER_DAY = 24


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Package(_Strict):
    """A fixed rental of ``days`` days of one node: a price, or a discount on hourly billing."""

    days: PositiveInt
    price_usd: float | None = Field(None, gt=0)
    discount_pct: float | None = Field(None, ge=0, lt=100)
    rule: str | None = None  # which published rule gave the price, in words

    @model_validator(mode="after")
    def price_or_discount(self) -> Package:
        if (self.price_usd is None) == (self.discount_pct is None):
            raise ValueError("give exactly one of price_usd or discount_pct")
        return self


class Tariff(_Strict):
    provider: str = Field(min_length=1)
    gpu: str  # catalog name; an alias is accepted and stored as the catalog name
    gpus_per_node: PositiveInt = 1
    hourly_usd: float = Field(gt=0)  # the whole node, per hour
    packages: list[Package] = Field(default_factory=list)
    currency: Literal["USD"] = "USD"
    source: str = Field(min_length=1)  # URL or words: where the price was read
    date: str = Field(pattern=r"^\d{4}-\d{2}(-\d{2})?$")  # when it was read: YYYY-MM[-DD]
    example: bool = False  # True = illustrative, not a quote

    @field_validator("gpu")
    @classmethod
    def gpu_is_in_catalog(cls, value: str) -> str:
        try:
            return catalog.gpu(value).name
        except UserInputError as exc:
            raise ValueError(exc.message) from None

    @field_validator("date", mode="before")
    @classmethod
    def date_as_text(cls, value: Any) -> Any:
        return value.isoformat() if isinstance(value, _dt.date) else value

    @field_validator("packages")
    @classmethod
    def one_package_per_length(cls, value: list[Package]) -> list[Package]:
        days = [p.days for p in value]
        twice = sorted({d for d in days if days.count(d) > 1})
        if twice:
            raise ValueError(f"two packages of {twice[0]} days; give each length once")
        return value

    @property
    def label(self) -> str:
        return f"{self.provider} {self.gpu}×{self.gpus_per_node}"

    def package_price_usd(self, package: Package) -> float:
        """The whole node for the whole package, in USD."""
        if package.price_usd is not None:
            return package.price_usd
        assert package.discount_pct is not None
        return self.hourly_usd * HOURS_PER_DAY * package.days * (1 - package.discount_pct / 100)


class TariffTable(_Strict):
    tariffs: list[Tariff] = Field(min_length=1)
    note: str | None = None

    def for_gpu(self, gpu: str) -> list[Tariff]:
        return [t for t in self.tariffs if t.gpu == gpu]

    def package_rows(self) -> list[dict[str, Any]]:
        """One flat row per (tariff, package): what aggregate merges onto result rows."""
        out: list[dict[str, Any]] = []
        for index, tariff in enumerate(self.tariffs):
            for package in tariff.packages:
                out.append(
                    {
                        "tariff_index": index,
                        "provider": tariff.provider,
                        "gpu": tariff.gpu,
                        "gpus_in_package": tariff.gpus_per_node,
                        "hourly_usd": tariff.hourly_usd,
                        "package_days": package.days,
                        "package_price_usd": tariff.package_price_usd(package),
                        "package_rule": package.rule or "",
                        "tariff_source": tariff.source,
                        "tariff_date": tariff.date,
                        "tariff_example": tariff.example,
                    }
                )
        return out


# --- loading ----------------------------------------------------------------------------------


def load_tariffs(path: str | Path) -> TariffTable:
    """Read and validate a tariff file; every error is a UserInputError with file and line."""
    return load_model(path, TariffTable, "tariff")


def parse_tariffs(text: str, filename: str = "<tariffs>") -> TariffTable:
    return parse_model(text, TariffTable, filename, "tariff")
