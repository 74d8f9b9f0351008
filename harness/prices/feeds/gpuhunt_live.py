"""gpuhunt's own API, live (``gpuhunt.Catalog``): the offline providers' published catalogs.

``Catalog().load(version=...)`` pins one catalog version for every provider (a reproducible
pricing run); without --feed-version the latest of each provider is read and each provider's
version is recorded. ``GPUHUNT_CATALOG_URL`` (gpuhunt's own setting) points it at another copy
of the catalog bucket: the tests point it at a recorded response on disk. The items go through
the same conversion as gpuhunt's catalog CSV (``gpuhunt_csv.gpuhunt_offer``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from harness.errors import UserInputError
from harness.prices.feeds import FeedRequest
from harness.prices.feeds.gpuhunt_csv import gpuhunt_offer
from harness.prices.offer import FeedRead, Offer, unique_offers


def item_cells(item: Any) -> dict[str, str]:
    """A ``gpuhunt.CatalogItem`` as the cells of its catalog CSV row."""
    return {
        "instance_name": str(item.instance_name),
        "location": str(item.location),
        "price": str(item.price),
        "gpu_count": str(item.gpu_count),
        "gpu_name": item.gpu_name or "",
        "gpu_memory": "" if item.gpu_memory is None else str(item.gpu_memory),
        "spot": str(item.spot),
    }


def loaded_version(catalog: Any, pinned: str | None) -> str:
    """The version read: the pinned one, or each provider's latest (``provider@version``)."""
    if pinned:
        return pinned
    return " ".join(f"{p}@{c.version}" for p, c in sorted(catalog.catalog.items()))


def read_live(request: FeedRequest) -> FeedRead:
    import gpuhunt

    catalog = gpuhunt.Catalog(balance_resources=False, auto_reload=False)
    try:
        catalog.load(version=request.version)
        items = catalog.query(provider=list(request.providers) or None)
    except (gpuhunt.GPUHuntError, OSError, ValueError) as exc:
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""
        raise UserInputError(
            f"gpuhunt could not read its catalog: {exc}{cause}", field="gpuhunt"
        ) from None
    version = loaded_version(catalog, request.version)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    source = f"gpuhunt {gpuhunt_version()} catalog {version}"
    feed = FeedRead("gpuhunt", version, now, source)
    offers: list[Offer] = []
    for index, item in enumerate(items, start=1):
        offer = gpuhunt_offer(
            item_cells(item), str(item.provider), index, source, feed, request.strict
        )
        if offer is not None:
            offers.append(offer)
    feed.offers = unique_offers(offers, source, feed.skipped)
    return feed


def gpuhunt_version() -> str:
    from importlib.metadata import version

    return version("gpuhunt")
