"""Tariff files: what a GPU node costs per hour and per multi-day package.

A tariff prices one **node** of one catalog GPU (``gpus_per_node`` cards) from one provider.
``hourly_usd`` is the price of the whole node per hour. Each package is a fixed rental of ``days``
whole days, priced either directly (``price_usd``, for the whole node and the whole period) or as a
discount on hourly billing (``discount_pct``: price = hourly_usd × 24 × days × (1 − pct/100)).

Validation happens before anything is priced; errors name the file, the line and the field, the
same way scenario errors do (the helpers are shared with ``harness.spec.scenario``). Reading is
strict: no coercion ("2.5" is not 2.5), every number finite and inside the bounds below, lists
capped, and a tariff (provider, region, GPU, cards per node, basis) given twice is refused, never
last-wins.

A row imported from a price feed (``harness tariffs import``, ``harness.prices``) also keeps its
region, its basis (on-demand, spot or reserved), whether storage is included, the feed, the feed's
version or commit and when it was read (``observed_at``, UTC). A spot row states its
interruption rate and the restart it costs (pull + load + engine start), and every package of it
is charged that restart time at the node's hourly price per interruption (``spot_restart_usd``):
a spot price never beats on-demand without that line.
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
SECONDS_PER_DAY = 86_400
MAX_INTERRUPTIONS_PER_DAY = 1000.0
MAX_RESTART_S = 86_400.0  # a restart longer than a day is a typo
STALE_AFTER_DAYS = 7  # a price older than this is flagged (the table's ``stale_after_days``)
Basis = Literal["on-demand", "spot", "reserved"]
OBSERVED_AT = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?Z$"  # UTC: 2026-12-07T09:00:00Z


def utc_today() -> _dt.date:
    return _dt.datetime.now(_dt.UTC).date()


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
    # Where a feed gave it (harness.prices): the offer's region, its price basis, whether the
    # hourly price includes storage (None: not said), the feed, its version or commit, and the
    # UTC time it was read. A spot row states its interruptions per day and the restart each
    # costs in seconds (pull + load + engine start).
    region: str = Field("", max_length=MAX_TEXT)
    basis: Basis = "on-demand"
    storage_included: bool | None = None
    feed: str | None = Field(None, max_length=MAX_TEXT)
    feed_version: str | None = Field(None, max_length=MAX_TEXT)
    observed_at: str | None = Field(None, pattern=OBSERVED_AT)
    interruptions_per_day: float | None = Field(None, ge=0, le=MAX_INTERRUPTIONS_PER_DAY)
    restart_s: float | None = Field(None, gt=0, le=MAX_RESTART_S)

    @model_validator(mode="after")
    def spot_states_its_risk(self) -> Tariff:
        stated = self.interruptions_per_day is not None and self.restart_s is not None
        if self.basis == "spot" and not stated:
            raise ValueError(
                "a spot tariff states interruptions_per_day and restart_s (pull + load + engine "
                "start, seconds): spot is never priced without its restart cost"
            )
        if self.basis != "spot" and (self.interruptions_per_day or self.restart_s):
            raise ValueError("interruptions_per_day and restart_s are for basis: spot only")
        return self

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

    @field_validator("date")
    @classmethod
    def date_is_a_day(cls, value: str) -> str:
        try:
            _dt.date.fromisoformat(value if len(value) == 10 else f"{value}-01")
        except ValueError:
            raise ValueError(f"{excerpt(value)} is not a date (YYYY-MM or YYYY-MM-DD)") from None
        return value

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

    def read_on(self) -> _dt.date:
        """The day the price was read: ``observed_at``'s day, else ``date`` (a month alone is
        read as its first day: the older reading, so staleness is never understated)."""
        if self.observed_at is not None:
            return _dt.date.fromisoformat(self.observed_at[:10])
        return _dt.date.fromisoformat(self.date if len(self.date) == 10 else f"{self.date}-01")

    def age_days(self, today: _dt.date) -> int:
        """Whole days between the reading and ``today`` (0 for a reading dated in the future)."""
        return max(0, (today - self.read_on()).days)

    def price_read(self, today: _dt.date, stale_after_days: int) -> str:
        """The day the price was read and its age, flagged STALE past ``stale_after_days`` and
        EXAMPLE when it is not a quote: "2026-11-20, 17 d, STALE"."""
        age = self.age_days(today)
        flags = [", STALE"] if age > stale_after_days else []
        flags += [", EXAMPLE"] if self.example else []
        return f"{self.read_on().isoformat()}, {age} d{''.join(flags)}"

    def spot_restart_usd_per_hour(self) -> float:
        """What interruptions cost per hour on spot: interruptions_per_day ÷ 24 × restart_s ÷
        3600 × hourly_usd (each restart pays the node for its restart time); 0 off spot."""
        if self.basis != "spot" or self.interruptions_per_day is None or self.restart_s is None:
            return 0.0
        return self.interruptions_per_day / HOURS_PER_DAY * self.restart_s / 3600 * self.hourly_usd

    def spot_restart_usd(self, days: int) -> float:
        """The restart charge over ``days`` days: interruptions × restart time × hourly price."""
        return self.spot_restart_usd_per_hour() * HOURS_PER_DAY * days

    def package_price_usd(self, package: Package) -> float:
        """The whole node for the whole package, in USD (spot: with its restart charge)."""
        restarts = self.spot_restart_usd(package.days)
        if package.price_usd is not None:
            return package.price_usd + restarts
        assert package.discount_pct is not None
        bare = self.hourly_usd * HOURS_PER_DAY * package.days * (1 - package.discount_pct / 100)
        return bare + restarts


class CardSpread(_Strict):
    """One card's offers in a tariff table: the cheapest and the spread of USD per card-hour."""

    offers: int
    cheapest_offer: str  # "runpod EU-RO-1 ×1 spot"
    usd_min: float
    usd_median: float
    usd_max: float

    @classmethod
    def of(cls, offers: list[Tariff]) -> CardSpread:
        prices = sorted(card_hour_usd(t) for t in offers)
        best = min(offers, key=card_hour_usd)
        where = f" {best.region}" if best.region else ""
        middle = len(prices) // 2
        median = prices[middle] if len(prices) % 2 else (prices[middle - 1] + prices[middle]) / 2
        return cls(
            offers=len(offers),
            cheapest_offer=f"{best.provider}{where} ×{best.gpus_per_node} {best.basis}",
            usd_min=prices[0],
            usd_median=median,
            usd_max=prices[-1],
        )

    def columns(self) -> dict[str, Any]:
        return {
            "card_offers": self.offers,
            "cheapest_offer": self.cheapest_offer,
            "card_hour_usd_min": self.usd_min,
            "card_hour_usd_median": self.usd_median,
            "card_hour_usd_max": self.usd_max,
        }


def card_hour_usd(tariff: Tariff) -> float:
    """USD per card-hour of a tariff: (hourly + spot's restart charge per hour) ÷ cards."""
    return (tariff.hourly_usd + tariff.spot_restart_usd_per_hour()) / tariff.gpus_per_node


class TariffTable(_Strict):
    tariffs: list[Tariff] = Field(min_length=1, max_length=MAX_TARIFFS)
    note: str | None = Field(None, max_length=MAX_NOTE)
    # Optional: what electricity costs where the hardware would be owned (USD per kWh): the
    # energy cost per million tokens, and with a tariff's purchase_usd the rent-vs-own break-even.
    electricity_usd_per_kwh: float | None = Field(None, gt=0, le=MAX_USD_PER_KWH)
    # A price older than this many days is flagged stale in the console, report and site.
    stale_after_days: int = Field(STALE_AFTER_DAYS, gt=0, le=MAX_DAYS)

    @field_validator("tariffs")
    @classmethod
    def each_tariff_once(cls, value: list[Tariff]) -> list[Tariff]:
        seen: dict[tuple[str, str, str, int, str], int] = {}
        for index, tariff in enumerate(value):
            key = (tariff.provider, tariff.region, tariff.gpu, tariff.gpus_per_node, tariff.basis)
            if key in seen:
                where = f" {excerpt(tariff.region)}" if tariff.region else ""
                raise ValueError(
                    f"tariffs[{index}] repeats tariffs[{seen[key]}] ({excerpt(tariff.provider)}"
                    f"{where} {tariff.gpu}×{tariff.gpus_per_node} {tariff.basis}); give each "
                    "tariff once"
                )
            seen[key] = index
        return value

    def card_spread(self) -> dict[str, CardSpread]:
        """Per card: its offers' price per card-hour (spot with its restart charge), the
        cheapest offer, and the spread (min / median / max, count)."""
        by_card: dict[str, list[Tariff]] = {}
        for tariff in self.tariffs:
            by_card.setdefault(tariff.gpu, []).append(tariff)
        return {card: CardSpread.of(offers) for card, offers in by_card.items()}

    def read_label(self, tariff: Tariff, today: _dt.date | None = None) -> str:
        """What a tariff line adds after its price: " (read 2026-11-20, 17 d, STALE)", and on
        spot its risk and the restart charge its packages include."""
        read = f" (read {tariff.price_read(today or utc_today(), self.stale_after_days)})"
        if tariff.basis != "spot":
            return read
        return (
            f"{read} (spot: {tariff.interruptions_per_day:g} interruption(s) a day × "
            f"{tariff.restart_s:g} s restart = ${tariff.spot_restart_usd_per_hour():.4g}/h, "
            "included in its packages)"
        )

    def for_gpu(self, gpu: str) -> list[Tariff]:
        return [t for t in self.tariffs if t.gpu == gpu]

    def package_rows(self, today: _dt.date | None = None) -> list[dict[str, Any]]:
        """One flat row per (tariff, package): what aggregate merges onto result rows, with each
        price's feed, basis and age in days on ``today`` (UTC today where not given)."""
        day = today or utc_today()
        spread = self.card_spread()
        out: list[dict[str, Any]] = []
        for index, tariff in enumerate(self.tariffs):
            age = tariff.age_days(day)
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
                        "tariff_region": tariff.region,
                        "tariff_basis": tariff.basis,
                        "tariff_feed": tariff.feed or "",
                        "tariff_feed_version": tariff.feed_version or "",
                        "price_age_days": age,
                        "price_read": tariff.price_read(day, self.stale_after_days),
                        "price_stale": age > self.stale_after_days,
                        "spot_restart_usd": tariff.spot_restart_usd(package.days),
                        **spread[tariff.gpu].columns(),
                    }
                )
        return out


# --- loading ----------------------------------------------------------------------------------


def load_tariffs(path: str | Path) -> TariffTable:
    """Read and validate a tariff file; every error is a UserInputError with file and line."""
    return load_model(path, TariffTable, "tariff")


def parse_tariffs(text: str, filename: str = "<tariffs>") -> TariffTable:
    return parse_model(text, TariffTable, filename, "tariff")
