"""Does the verdict survive the feed? The cheapest passing configuration per (model, quality
class, package length), re-priced under each of two or more tariff files (two feeds, or one feed
on two dates), and whether the winner is the same under each; and the dated price history per
card of the imported files.

The winner is the whole pick: card, provider (with region and basis) and configuration. Its
cost is the offline ``cheapest`` table's decode $/Mtok (``harness.results.pricing``), so a flip
here is exactly a change of the report's cheapest row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from harness.results.pricing import cheapest_passing, packages_frame
from harness.spec.labels import configuration_label
from harness.spec.tariffs import TariffTable, card_hour_usd, utc_today

Key = tuple[str, str, int]  # model, quality class, package days


@dataclass(frozen=True)
class Winner:
    gpu: str
    offer: str  # provider, region, basis
    configuration: str
    usd_per_mtok: float

    @property
    def pick(self) -> tuple[str, str, str]:
        return (self.gpu, self.offer, self.configuration)

    def text(self) -> str:
        return f"{self.gpu} ({self.offer}) {self.configuration}: ${self.usd_per_mtok:.4g}/Mtok"


@dataclass(frozen=True)
class Survival:
    """One (model, class, package length): its winner under each tariff file."""

    key: Key
    winners: tuple[Winner | None, ...]  # None: nothing passes on that file's cards

    @property
    def same(self) -> bool:
        picks = {w.pick if w else None for w in self.winners}
        return len(picks) == 1


def offer_text(record: dict[str, object]) -> str:
    region = str(record.get("tariff_region") or "")
    basis = str(record.get("tariff_basis") or "on-demand")
    return " ".join(p for p in (str(record["provider"]), region, basis) if p)


def winners(points: pd.DataFrame, table: TariffTable, utilisation: float) -> dict[Key, Winner]:
    """The cheapest passing configuration per (model, class, package days) over every card."""
    cheapest = cheapest_passing(points, packages_frame(table), utilisation)
    out: dict[Key, Winner] = {}
    if cheapest.empty:
        return out
    ordered = cheapest.sort_values("usd_per_mtok_output", kind="stable")
    for record in ordered.to_dict(orient="records"):
        rec = {str(k): v for k, v in record.items()}
        key = (str(rec["model"]), str(rec["quality_class"]), int(rec["package_days"]))
        if key not in out:
            out[key] = Winner(
                str(rec["gpu"]),
                offer_text(rec),
                configuration_label(rec),
                float(rec["usd_per_mtok_output"]),
            )
    return out


def survival(
    points: pd.DataFrame, tables: Sequence[TariffTable], utilisation: float
) -> list[Survival]:
    """Per (model, class, package days) priced under any file: the winner under each file."""
    per_file = [winners(points, t, utilisation) for t in tables]
    keys = sorted({k for found in per_file for k in found})
    return [Survival(k, tuple(found.get(k) for found in per_file)) for k in keys]


def flip_lines(results: Sequence[Survival], names: Sequence[str]) -> list[str]:
    """One line per flipped verdict: the winner under each file."""
    lines = []
    for s in results:
        if s.same:
            continue
        model, quality_class, days = s.key
        picks = "; ".join(
            f"{name}: {w.text() if w else 'nothing passes'}"
            for name, w in zip(names, s.winners, strict=True)
        )
        lines.append(f"FLIP {model}, class {quality_class}, {days}-day package: {picks}")
    return lines


HISTORY_COLUMNS = [
    "date",
    "feed",
    "feed_version",
    "gpu",
    "provider",
    "tariff_basis",
    "card_offers",
    "cheapest_offer",
    "card_hour_usd_min",
    "card_hour_usd_median",
    "card_hour_usd_max",
    "price_age_days",
    "price_stale",
    "tariff_example",
    "price_read",
]


def price_history(tables: Sequence[TariffTable], today: dt.date | None = None) -> pd.DataFrame:
    """Per imported tariff file and card, in date order per card: the day its prices were read
    (its oldest offer's, so an age is never understated), that offer's feed, the cheapest offer
    (provider, basis) and the spread of USD per card-hour, and the age on ``today`` (UTC today
    where not given), flagged STALE past the file's ``stale_after_days`` and EXAMPLE where any of
    the card's offers is an example."""
    day = today or utc_today()
    rows = []
    for table in tables:
        spread = table.card_spread()
        for card in sorted(spread):
            offers = table.for_gpu(card)
            oldest = min(offers, key=lambda t: t.read_on())
            cheapest = min(offers, key=card_hour_usd)
            example = any(t.example for t in offers)
            age = oldest.age_days(day)
            read = oldest.model_copy(update={"example": example})
            rows.append(
                {
                    "date": oldest.read_on().isoformat(),
                    "feed": oldest.feed or "hand-written",
                    "feed_version": oldest.feed_version or "",
                    "gpu": card,
                    "provider": cheapest.provider,
                    "tariff_basis": cheapest.basis,
                    **spread[card].columns(),
                    "price_age_days": age,
                    "price_stale": age > table.stale_after_days,
                    "tariff_example": example,
                    "price_read": read.price_read(day, table.stale_after_days),
                }
            )
    frame = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
    return frame.sort_values(["gpu", "date"], kind="stable").reset_index(drop=True)
