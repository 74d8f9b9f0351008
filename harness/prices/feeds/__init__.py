"""The feeds `harness tariffs import` reads: a name → "module:function" (imported when used).

Each reader takes a ``FeedRequest`` and returns a ``FeedRead`` (``harness.prices.offer``).
A new feed is a module here and one line below.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserInputError, one_of
from harness.prices.offer import FeedRead

FEEDS = {
    "gpuhunt": "harness.prices.feeds.gpuhunt_live:read_live",
    "gpuhunt-csv": "harness.prices.feeds.gpuhunt_csv:read_catalog_csv",
    "skypilot-csv": "harness.prices.feeds.skypilot_csv:read_vms_csv",
}


@dataclass(frozen=True)
class FeedRequest:
    """What a reader needs: the file (None for a live feed), the provider where the file does
    not say it, the version or commit and read time of a snapshot, strict card names, and the
    providers to ask a live feed for."""

    path: Path | None
    provider: str | None
    version: str | None
    observed_at: str | None
    strict: bool
    providers: tuple[str, ...] = ()


Reader = Callable[[FeedRequest], FeedRead]


def reader(name: str) -> Reader:
    if name not in FEEDS:
        raise UserInputError(
            f"{name!r} is not a feed; expected one of: {one_of(FEEDS)}", field="feed"
        )
    module, function = FEEDS[name].split(":")
    found: Reader = getattr(importlib.import_module(module), function)
    return found
