"""gpuhunt's catalog CSV (dstackai/gpuhunt, ``_internal/storage.py`` ``CATALOG_V2_FIELDS``).

Columns: instance_name, location, price, cpu, memory, gpu_count, gpu_name, gpu_memory, spot,
disk_size, gpu_vendor, flags, cpu_arch, provider_data. ``price`` is USD per hour for the whole
instance; ``spot`` is true or false; the provider is the file's name (``runpod.csv``), as in
gpuhunt's own catalogs, unless --provider says it. gpuhunt's Vast rows fold the disk's cost into
the price (``providers/vastai.py``): their storage is included.
"""

from __future__ import annotations

from pydantic import ValidationError

from harness.errors import UserInputError
from harness.prices.cards import known_card
from harness.prices.feeds import FeedRequest
from harness.prices.offer import (
    FeedRead,
    Offer,
    bool_cell,
    count_cell,
    offer_error,
    price_cell,
    unique_offers,
)
from harness.prices.read import csv_rows, feed_text

NEEDED = ("instance_name", "location", "price", "gpu_count", "gpu_name", "gpu_memory", "spot")
STORAGE_IN_PRICE = {"vastai"}  # gpuhunt adds disk × storage_cost to these providers' prices


def gpuhunt_offer(
    cells: dict[str, str], provider: str, row: int, source: str, feed: FeedRead, strict: bool
) -> Offer | None:
    """One gpuhunt item (a CSV row, or a live item written the same way) → an Offer (a CPU-only
    node: the catalog's ``cpu`` card), or None (counted in ``feed.skipped``) for a fraction of a
    GPU or an unknown card."""
    price = price_cell(source, row, "price", cells["price"])
    count = count_cell(source, row, "gpu_count", cells["gpu_count"])
    spot = bool_cell(source, row, "spot", cells["spot"])
    if count != int(count):
        feed.skipped["fraction of a GPU"] += 1
        return None
    cpu_only = count == 0 or not cells["gpu_name"]
    memory = count_cell(source, row, "gpu_memory", cells["gpu_memory"] or "0")
    card = (
        "cpu"
        if cpu_only
        else known_card(cells["gpu_name"], memory, strict, (source, row, "gpu_name"))
    )
    if card is None:
        feed.skipped[f"unknown card {cells['gpu_name']}"] += 1
        return None
    try:
        return Offer(
            provider=provider,
            region=cells["location"],
            instance=cells["instance_name"],
            card=card,
            cards_per_node=max(1, int(count)),  # a CPU-only node: one "cpu" card
            basis="spot" if spot else "on-demand",
            hourly_usd=price,
            storage_included=True if provider in STORAGE_IN_PRICE else None,
            row=row,
            source=source,
        )
    except ValidationError as exc:
        raise offer_error(source, row, exc) from None


def read_catalog_csv(request: FeedRequest) -> FeedRead:
    path = request.path
    if path is None:
        raise UserInputError("gpuhunt-csv reads a file: give its path", field="path")
    provider = request.provider or path.name.removesuffix(".csv")
    source = str(path)
    feed = snapshot_read("gpuhunt-csv", request, source)
    offers = []
    for row, cells in csv_rows(feed_text(path, "gpuhunt catalog"), source, NEEDED):
        offer = gpuhunt_offer(cells, provider, row, source, feed, request.strict)
        if offer is not None:
            offers.append(offer)
    feed.offers = unique_offers(offers, source)
    return feed


def snapshot_read(name: str, request: FeedRequest, source: str) -> FeedRead:
    """A snapshot file's FeedRead: its version and read time are given, never guessed."""
    if not request.version:
        raise UserInputError(
            f"a {name} snapshot needs --feed-version (the catalog version or commit it is from)",
            file=source,
            field="--feed-version",
        )
    if not request.observed_at:
        raise UserInputError(
            f"a {name} snapshot needs --observed-at (when it was read, UTC: 2026-12-07T09:00:00Z)",
            file=source,
            field="--observed-at",
        )
    return FeedRead(name, request.version, request.observed_at, source)
