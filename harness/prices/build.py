"""Offers → a tariff file: filters, one tariff per (provider, region, card, cards per node,
basis) at its cheapest offer, packages from the rules, spot with its restart charge, validated
whole before one atomic write (nothing half-written).

Spot: each spot tariff states its interruptions per day and the restart each costs (pull + load
+ engine start, seconds), given on the command line or the stated defaults below, so a spot
package is charged ``interruptions/day × restart_s ÷ 3600 × hourly`` per day
(``harness.spec.tariffs.Tariff.spot_restart_usd``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePath

import yaml
from pydantic import ValidationError

from harness.atomic import atomic_write_text
from harness.errors import UserInputError
from harness.prices.offer import FeedRead, Offer, offer_error
from harness.prices.rules import PackageRules
from harness.spec.tariffs import MAX_TARIFFS, STALE_AFTER_DAYS, Tariff, TariffTable, parse_tariffs

# Stated defaults (assumptions, not measurements: give the provider's and your run's figures).
DEFAULT_INTERRUPTIONS_PER_DAY = 1.0  # a spot node reclaimed once a day
DEFAULT_RESTART_S = 600.0  # image pull + model load + engine start after a reclaim, seconds

TariffKey = tuple[str, str, str, int, str]


@dataclass(frozen=True)
class Filters:
    """Which offers to keep (empty: all): catalog cards, providers, regions, min cards/node."""

    cards: frozenset[str] = frozenset()
    providers: frozenset[str] = frozenset()  # lower case
    regions: frozenset[str] = frozenset()
    min_cards: int = 1

    def keeps(self, offer: Offer) -> bool:
        """Whether the offer passes every filter; a CPU-only node only when --card cpu asks."""
        wanted = offer.card in self.cards if self.cards or offer.card == "cpu" else True
        return (
            wanted
            and (not self.providers or offer.provider.lower() in self.providers)
            and (not self.regions or offer.region in self.regions)
            and offer.cards_per_node >= self.min_cards
        )


@dataclass(frozen=True)
class SpotTerms:
    interruptions_per_day: float = DEFAULT_INTERRUPTIONS_PER_DAY
    restart_s: float = DEFAULT_RESTART_S
    stated: str = "stated defaults"  # "given" when the user gave them


@dataclass
class Imported:
    """The table built, the offers read and what was left out on the way (reason → count)."""

    table: TariffTable
    offers: int
    left_out: Counter[str] = field(default_factory=Counter)


def tariff_key(offer: Offer) -> TariffKey:
    return (offer.provider, offer.region, offer.card, offer.cards_per_node, offer.basis)


def cheapest_offers(offers: list[Offer]) -> dict[TariffKey, tuple[Offer, int]]:
    """Per tariff key, the cheapest offer (first on ties) and how many offers shared the key."""
    out: dict[TariffKey, tuple[Offer, int]] = {}
    for offer in offers:
        key = tariff_key(offer)
        best, n = out.get(key, (offer, 0))
        out[key] = (offer if offer.hourly_usd < best.hourly_usd else best, n + 1)
    return out


def source_text(feed: FeedRead, offer: Offer, offers: int) -> str:
    where = f" {offer.region}" if offer.region else ""
    many = f"; cheapest of {offers} offers" if offers > 1 else ""
    read_from = f"{PurePath(offer.source).name} " if offer.source else ""
    return f"{feed.feed} {feed.version}: {offer.instance}{where}, {read_from}row {offer.row}{many}"


def tariff_of(
    offer: Offer, offers: int, feed: FeedRead, rules: PackageRules, spot: SpotTerms, example: bool
) -> Tariff:
    terms = rules.terms_for(offer.provider)
    on_spot = offer.basis == "spot"
    return Tariff(
        provider=offer.provider,
        gpu=offer.card,
        gpus_per_node=offer.cards_per_node,
        hourly_usd=offer.hourly_usd,
        packages=rules.packages_for(offer.provider),
        source=source_text(feed, offer, offers),
        date=feed.observed_at[:10],
        example=example,
        billing=(terms.billing if terms and terms.billing else "hour"),
        storage_usd_per_day=terms.storage_usd_per_day if terms else None,
        region=offer.region,
        basis=offer.basis,
        storage_included=offer.storage_included,
        feed=feed.feed,
        feed_version=feed.version,
        observed_at=feed.observed_at,
        interruptions_per_day=spot.interruptions_per_day if on_spot else None,
        restart_s=spot.restart_s if on_spot else None,
    )


def checked_tariff(
    offer: Offer, offers: int, feed: FeedRead, rules: PackageRules, spot: SpotTerms, example: bool
) -> Tariff:
    """``tariff_of``, or one line naming the feed row whose offer makes no valid tariff."""
    try:
        return tariff_of(offer, offers, feed, rules, spot, example)
    except ValidationError as exc:
        raise offer_error(offer.source or feed.source, offer.row, exc) from None


def import_note(feed: FeedRead, rules: PackageRules, spot: SpotTerms, example: bool) -> str:
    lead = "EXAMPLE, not quotes: " if example else ""
    files = feed.source.split(", ")
    where = files[0] if len(files) == 1 else f"{len(files)} files, listed at the top"
    spot_rows = any(o.basis == "spot" for o in feed.offers)
    restarts = (
        f" Spot rows are charged {spot.interruptions_per_day:g} interruption(s) per day × "
        f"{spot.restart_s:g} s restart at the node's hourly price ({spot.stated})."
        if spot_rows
        else ""
    )
    return (
        f"{lead}imported by `harness tariffs import` from {feed.feed} (version {feed.version}, "
        f"read {feed.observed_at}, {where}). {rules.note or ''}{restarts}"
    ).replace("  ", " ")


def build_table(
    feed: FeedRead,
    rules: PackageRules,
    filters: Filters,
    spot: SpotTerms,
    example: bool = False,
    stale_after_days: int = STALE_AFTER_DAYS,
) -> Imported:
    kept = [o for o in feed.offers if filters.keeps(o)]
    left_out = Counter(feed.skipped)
    cpu = sum(o.card == "cpu" for o in feed.offers) if "cpu" not in filters.cards else 0
    if cpu:
        left_out["CPU-only node (keep them with --card cpu)"] += cpu
    if len(kept) + cpu < len(feed.offers):
        left_out["filtered out"] += len(feed.offers) - len(kept) - cpu
    if not kept:
        raise UserInputError(
            f"no offer left to write ({len(feed.offers)} read; left out: "
            f"{dict(left_out) or 'none'}); widen --card/--provider/--region/--min-cards",
            file=feed.source,
        )
    chosen = cheapest_offers(kept)
    if len(chosen) > MAX_TARIFFS:
        raise UserInputError(
            f"{len(chosen)} tariffs; a tariff file holds at most {MAX_TARIFFS}: filter by "
            "--card, --provider or --region",
            file=feed.source,
        )
    tariffs = [checked_tariff(o, n, feed, rules, spot, example) for o, n in chosen.values()]
    table = TariffTable(
        tariffs=tariffs,
        note=import_note(feed, rules, spot, example),
        stale_after_days=stale_after_days,
    )
    return Imported(table, len(feed.offers), left_out)


def tariff_yaml(table: TariffTable, header: str) -> str:
    """The table as a tariff file (checked by reading it back: what is written reads)."""
    rows = []
    for tariff in table.tariffs:
        row = tariff.model_dump(exclude_none=True)
        row.pop("currency")
        row["packages"] = [p.model_dump(exclude_none=True) for p in tariff.packages]
        rows.append(row)
    body = {"note": table.note, "stale_after_days": table.stale_after_days, "tariffs": rows}
    text = "".join(f"# {line}\n" for line in header.splitlines())
    text += yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100)
    parse_tariffs(text, "<imported tariffs>")
    return text


def write_tariff_file(path: Path, text: str) -> None:
    atomic_write_text(path, text)


def merged(reads: list[FeedRead]) -> FeedRead:
    """Several files of one feed (gpuhunt keeps one catalog CSV per provider) as one read."""
    first = reads[0]
    out = FeedRead(first.feed, first.version, first.observed_at, ", ".join(r.source for r in reads))
    for read in reads:
        out.offers += read.offers
        out.skipped.update(read.skipped)
    return out
