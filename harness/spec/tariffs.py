"""Tariff files: what a GPU node costs per hour and per multi-day package.

A tariff prices one **node** of one catalog GPU (``gpus_per_node`` cards) from one provider.
``hourly_usd`` is the price of the whole node per hour. Each package is a fixed rental of ``days``
whole days, priced either directly (``price_usd``, for the whole node and the whole period) or as a
discount on hourly billing (``discount_pct``: price = hourly_usd × 24 × days × (1 − pct/100)).

Validation happens before anything is priced; errors name the file, the line and the field, the
same way scenario errors do (the helpers are shared with ``harness.spec.scenario``). Reading is
strict: no coercion ("2.5" is not 2.5), every number finite and inside the bounds below, lists
capped, and a tariff (provider, GPU, cards per node) given twice is refused, never last-wins.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from harness.errors import UserInputError
from harness.spec import catalog
from harness.spec.yamlinput import excerpt, load_model, parse_model

HOURS_PER_DAY = 24

# Plausible bounds: a value outside them is a typo or an attack, never a price.
MAX_HOURLY_USD = 10_000.0  # one node per hour
MAX_PACKAGE_USD = 100_000_000.0
MAX_DAYS = 3650
MAX_GPUS_PER_NODE = 64
MAX_TARIFFS = 1000
MAX_PACKAGES = 64
MAX_TEXT = 500  # characters of provider, source, rule
MAX_USD_PER_KWH = 10.0  # electricity: retail prices are 0.05-0.6 USD per kWh
MAX_PURCHASE_USD = 100_000_000.0  # buying one node outright
MAX_NOTE = 4000
MAX_STORAGE_USD_PER_DAY = 10_000.0  # a stopped node's disk, per day
# Billing granularity: hourly billing charges each start's time rounded up to this many seconds.
BILLING_SECONDS = {"second": 1, "minute": 60, "hour": 3600}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Package(_Strict):
    """A fixed rental of ``days`` days of one node: a price, or a discount on hourly billing."""

    days: int = Field(gt=0, le=MAX_DAYS)
    price_usd: float | None = Field(None, gt=0, le=MAX_PACKAGE_USD)
    discount_pct: float | None = Field(None, ge=0, lt=100)
    rule: str | None = Field(None, max_length=MAX_TEXT)  # which published rule gave the price

    @model_validator(mode="after")
    def price_or_discount(self) -> Package:
        if (self.price_usd is None) == (self.discount_pct is None):
            raise ValueError("give exactly one of price_usd or discount_pct")
        return self


class Tariff(_Strict):
    provider: str = Field(min_length=1, max_length=MAX_TEXT)
    gpu: str = Field(max_length=MAX_TEXT)  # catalog name; an alias is stored as the catalog name
    gpus_per_node: int = Field(1, gt=0, le=MAX_GPUS_PER_NODE)
    hourly_usd: float = Field(gt=0, le=MAX_HOURLY_USD)  # the whole node, per hour
    packages: list[Package] = Field(default_factory=list, max_length=MAX_PACKAGES)
    currency: Literal["USD"] = "USD"
    source: str = Field(min_length=1, max_length=MAX_TEXT)  # URL or words: where it was read
    date: str = Field(pattern=r"^\d{4}-\d{2}(-\d{2})?$")  # when it was read: YYYY-MM[-DD]
    example: bool = False  # True = illustrative, not a quote
    # What buying the same node would cost (optional): with the table's electricity price it
    # gives the report's "rent vs own" break-even (harness.results.energy).
    purchase_usd: float | None = Field(None, gt=0, le=MAX_PURCHASE_USD)
    # Optional, for the package that fits a traffic (harness.projection.rent): how hourly billing
    # rounds each start ("hour" where not given: the dearest reading), and what a stopped node's
    # storage costs per day (none where not given).
    billing: Literal["second", "minute", "hour"] = "hour"
    storage_usd_per_day: float | None = Field(None, ge=0, le=MAX_STORAGE_USD_PER_DAY)

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
        seen: set[int] = set()
        for package in value:
            if package.days in seen:
                raise ValueError(f"two packages of {package.days} days; give each length once")
            seen.add(package.days)
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
    tariffs: list[Tariff] = Field(min_length=1, max_length=MAX_TARIFFS)
    note: str | None = Field(None, max_length=MAX_NOTE)
    # Optional: what electricity costs where the hardware would be owned (USD per kWh): the
    # energy cost per million tokens, and with a tariff's purchase_usd the rent-vs-own break-even.
    electricity_usd_per_kwh: float | None = Field(None, gt=0, le=MAX_USD_PER_KWH)

    @field_validator("tariffs")
    @classmethod
    def each_tariff_once(cls, value: list[Tariff]) -> list[Tariff]:
        seen: dict[tuple[str, str, int], int] = {}
        for index, tariff in enumerate(value):
            key = (tariff.provider, tariff.gpu, tariff.gpus_per_node)
            if key in seen:
                raise ValueError(
                    f"tariffs[{index}] repeats tariffs[{seen[key]}] ({excerpt(tariff.provider)} "
                    f"{tariff.gpu}×{tariff.gpus_per_node}); give each tariff once"
                )
            seen[key] = index
        return value

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
