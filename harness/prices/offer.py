"""The one row every feed fills: an offer of one node of one catalog card, with where it came from.

A feed reader turns each of its rows into an ``Offer`` (or a reason it was skipped); a bad value
(a negative or NaN price, a count that is not whole) is a ``UserInputError`` naming the file, the
row and the field, raised before anything is written.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import UserInputError, quote
from harness.spec.tariffs import MAX_GPUS_PER_NODE, MAX_HOURLY_USD, MAX_TEXT, Basis


class Offer(BaseModel):
    """One node (``cards_per_node`` cards of ``card``) offered by ``provider`` in ``region``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    provider: str = Field(min_length=1, max_length=MAX_TEXT)
    region: str = Field(max_length=MAX_TEXT)
    zone: str = Field("", max_length=MAX_TEXT)  # part of the offer's identity, not of the tariff
    instance: str = Field(max_length=MAX_TEXT)
    card: str  # the catalog name (harness.prices.cards)
    cards_per_node: int = Field(gt=0, le=MAX_GPUS_PER_NODE)
    basis: Basis
    hourly_usd: float = Field(gt=0, le=MAX_HOURLY_USD)  # the whole node, per hour
    storage_included: bool | None = None
    row: int  # the feed row it was read from (1 = the header line)
    source: str = ""  # the file (or catalog) it was read from

    @property
    def identity(self) -> tuple[str, str, str, str, str]:
        """What makes two rows the same offer: given twice, the feed is refused."""
        return (self.provider, self.instance, self.region, self.zone, self.basis)


@dataclass
class FeedRead:
    """What one feed gave: its offers, its name, version and read time, and what it skipped."""

    feed: str  # "gpuhunt", "gpuhunt-csv", "skypilot-csv"
    version: str  # the catalog version or commit
    observed_at: str  # UTC, 2026-12-07T09:00:00Z
    source: str  # the file or the catalog address it was read from
    offers: list[Offer] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # reason → rows


def feed_error(source: str, row: int, column: str, message: str) -> UserInputError:
    """One line naming the feed file, the row and the field."""
    return UserInputError(message, file=source, line=row, field=column)


def offer_error(source: str, row: int, exc: ValidationError) -> UserInputError:
    """A row whose cells make no valid Offer (a region of 600 characters): its first problem."""
    problem = exc.errors()[0]
    field = ".".join(str(p) for p in problem["loc"]) or "row"
    return feed_error(source, row, field, problem["msg"])


def price_cell(source: str, row: int, column: str, text: str) -> float:
    """An hourly price in USD: a finite number above 0, at most ``MAX_HOURLY_USD``."""
    try:
        value = float(text)
    except ValueError:
        raise feed_error(
            source, row, column, f"{quote(text)} is not a price (USD per hour)"
        ) from None
    if not math.isfinite(value) or value <= 0 or value > MAX_HOURLY_USD:
        raise feed_error(
            source,
            row,
            column,
            f"{quote(text)} is not a price: expected a finite USD per hour above 0 and at most "
            f"{MAX_HOURLY_USD:g}",
        )
    return value


def count_cell(source: str, row: int, column: str, text: str) -> float:
    """A card count: a finite number at least 0 (a fraction is kept, for the caller to skip)."""
    try:
        value = float(text)
    except ValueError:
        raise feed_error(source, row, column, f"{quote(text)} is not a card count") from None
    if not math.isfinite(value) or value < 0:
        raise feed_error(source, row, column, f"{quote(text)} is not a card count (0 or more)")
    return value


def bool_cell(source: str, row: int, column: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise feed_error(source, row, column, f"{quote(text)} is not true or false")
    return lowered == "true"


def unique_offers(
    offers: list[Offer], source: str, skipped: Counter[str] | None = None
) -> list[Offer]:
    """The offers, or an error naming the row that repeats an earlier one (a file); with
    ``skipped`` (a live feed, whose rows nobody can fix) a repeat is counted there instead."""
    seen: dict[tuple[str, str, str, str, str], int] = {}
    kept = []
    for offer in offers:
        if offer.identity in seen and skipped is not None:
            skipped["duplicated offer"] += 1
            continue
        if offer.identity in seen:
            raise feed_error(
                source,
                offer.row,
                "offer",
                f"repeats row {seen[offer.identity]} ({quote(offer.instance)} in "
                f"{quote(offer.region or offer.zone)}, {offer.basis}): a duplicated offer",
            )
        seen[offer.identity] = offer.row
        kept.append(offer)
    return kept
