"""SkyPilot's catalog ``vms.csv`` (skypilot-org/skypilot-catalog, ``catalogs/v8/<cloud>/``).

Columns (order varies by cloud): InstanceType, vCPUs, MemoryGiB, AcceleratorName,
AcceleratorCount, GPUInfo, Region, AvailabilityZone, Price, SpotPrice, Arch. ``Price`` is
on-demand and ``SpotPrice`` spot, USD per hour for the whole instance; either cell may be empty.
One row gives up to two offers; a row without an accelerator is a node of the catalog's ``cpu``
card. The cloud is the folder's name (``catalogs/v8/vast/vms.csv``)
unless --provider says it. No storage or term prices are in this schema. Its data licence is not
stated: read it at run time, never ship it.
"""

from __future__ import annotations

from pydantic import ValidationError

from harness.errors import UserInputError
from harness.prices.cards import known_card
from harness.prices.feeds import FeedRequest
from harness.prices.feeds.gpuhunt_csv import snapshot_read
from harness.prices.offer import FeedRead, Offer, count_cell, offer_error, price_cell, unique_offers
from harness.prices.read import csv_rows, feed_text

NEEDED = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Region", "Price", "SpotPrice")
BASES = (("Price", "on-demand"), ("SpotPrice", "spot"))


def row_offers(
    cells: dict[str, str], provider: str, row: int, source: str, feed: FeedRead, strict: bool
) -> list[Offer]:
    """The on-demand and spot offers of one row (an empty cell: no such offer)."""
    prices = {c: price_cell(source, row, c, cells[c]) for c, _ in BASES if cells[c]}
    cpu_only = not cells["AcceleratorName"]
    count = 1.0
    if not cpu_only:
        count = count_cell(source, row, "AcceleratorCount", cells["AcceleratorCount"])
        if count == 0 or count != int(count):
            feed.skipped["fraction of a GPU"] += 1
            return []
    name = cells["AcceleratorName"]
    card = "cpu" if cpu_only else known_card(name, None, strict, (source, row, "AcceleratorName"))
    if card is None:
        feed.skipped[f"unknown card {cells['AcceleratorName']}"] += 1
        return []
    if not prices:
        feed.skipped["no price"] += 1
        return []
    try:
        return [
            Offer(
                provider=provider,
                region=cells["Region"],
                zone=cells.get("AvailabilityZone", ""),
                instance=cells["InstanceType"],
                card=card,
                cards_per_node=int(count),
                basis=basis,  # type: ignore[arg-type]
                hourly_usd=prices[column],
                row=row,
                source=source,
            )
            for column, basis in BASES
            if column in prices
        ]
    except ValidationError as exc:
        raise offer_error(source, row, exc) from None


def read_vms_csv(request: FeedRequest) -> FeedRead:
    path = request.path
    if path is None:
        raise UserInputError("skypilot-csv reads a file: give its path", field="path")
    provider = request.provider or path.parent.name
    if not provider:
        raise UserInputError("give --provider (the cloud this vms.csv is of)", file=str(path))
    source = str(path)
    feed = snapshot_read("skypilot-csv", request, source)
    offers: list[Offer] = []
    for row, cells in csv_rows(feed_text(path, "SkyPilot vms.csv"), source, NEEDED):
        offers += row_offers(cells, provider, row, source, feed, request.strict)
    feed.offers = unique_offers(offers, source)
    return feed
