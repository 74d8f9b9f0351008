"""Each feed schema read from a hand-written fixture: the offers, the cards mapped through the
catalog's aliases, what was skipped and why (expected values read off the fixture rows).

The readers: harness.prices.feeds.gpuhunt_csv, harness.prices.feeds.skypilot_csv and
harness.prices.feeds.gpuhunt_live (through the registry, harness.prices.feeds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.prices.cards import catalog_card
from harness.prices.feeds import FeedRequest, reader
from tests.prices.recorded import LAMBDA_VMS, LIVE_VERSION, RUNPOD_CSV, point_gpuhunt_at

AT = "2026-12-07T09:00:00Z"


def snapshot(path: Path, strict: bool = False) -> FeedRequest:
    return FeedRequest(path, None, "v1", AT, strict)


def test_a_feeds_card_name_maps_through_the_catalog_with_its_memory_first() -> None:
    assert catalog_card("A100", 40) == "A100-SXM-40GB"  # "A100-40GB" is the 40 GB card's alias
    assert catalog_card("A100", 80) == "A100-SXM-80GB"
    assert catalog_card("H100", 80) == "H100-SXM-80GB"  # no "H100-80GB" alias: the name alone
    assert catalog_card("GTX1080", 8) is None


def test_gpuhunt_catalog_csv_gives_one_offer_per_priced_gpu_row() -> None:
    feed = reader("gpuhunt-csv")(snapshot(RUNPOD_CSV))
    # 9 rows: 7 priced GPU rows, a GTX 1080 (not in the catalog) and a CPU-only node
    assert len(feed.offers) == 8
    assert dict(feed.skipped) == {"unknown card GTX1080": 1}
    cpu = feed.offers[-1]
    assert (cpu.card, cpu.cards_per_node, cpu.hourly_usd) == ("cpu", 1, 0.08)
    first = feed.offers[0]
    assert (first.provider, first.region, first.card, first.cards_per_node) == (
        "runpod", "EU-RO-1", "H100-SXM-80GB", 1,
    )  # fmt: skip
    assert (first.basis, first.hourly_usd, first.row) == ("on-demand", 2.69, 2)
    assert feed.offers[1].basis == "spot" and feed.offers[1].hourly_usd == 1.75
    assert (feed.feed, feed.version, feed.observed_at) == ("gpuhunt-csv", "v1", AT)


def test_skypilot_vms_csv_gives_on_demand_and_spot_offers_of_one_row() -> None:
    feed = reader("skypilot-csv")(snapshot(LAMBDA_VMS))
    # rows: H100 ×1 and ×8 (on-demand), A100-80GB (on-demand 1.79 + spot 0.90), GH200, an A6000
    # (not in the catalog) and a CPU-only node: 6 offers
    got = [(o.card, o.cards_per_node, o.basis, o.hourly_usd) for o in feed.offers]
    assert got == [
        ("H100-SXM-80GB", 1, "on-demand", 3.29),
        ("H100-SXM-80GB", 8, "on-demand", 23.92),
        ("A100-SXM-80GB", 1, "on-demand", 1.79),
        ("A100-SXM-80GB", 1, "spot", 0.90),
        ("GH200-96GB", 1, "on-demand", 1.49),
        ("cpu", 1, "on-demand", 0.12),
    ]
    assert {o.provider for o in feed.offers} == {"lambda"}  # the folder's name
    assert dict(feed.skipped) == {"unknown card A6000": 1}


def test_an_unknown_card_in_strict_mode_names_file_row_and_field() -> None:
    with pytest.raises(UserInputError) as caught:
        reader("skypilot-csv")(snapshot(LAMBDA_VMS, strict=True))
    assert caught.value.line == 6 and caught.value.field == "AcceleratorName"  # the A6000 row
    assert "'A6000' is not a catalog card" in caught.value.message


def test_a_snapshot_without_its_version_is_refused() -> None:
    with pytest.raises(UserInputError, match="--feed-version"):
        reader("gpuhunt-csv")(FeedRequest(RUNPOD_CSV, None, None, AT, False))


def test_the_live_gpuhunt_feed_reads_a_pinned_catalog_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_gpuhunt_at(tmp_path / "bucket", monkeypatch)
    feed = reader("gpuhunt")(FeedRequest(None, None, LIVE_VERSION, None, False, ("lambdalabs",)))
    assert feed.version == LIVE_VERSION
    # the recorded lambdalabs catalog: H100 ×1 3.29, H100 ×8 23.92, A100 80 GB 1.79; gpuhunt's
    # query returns them by price
    got = sorted((o.provider, o.card, o.cards_per_node, o.hourly_usd) for o in feed.offers)
    assert got == [
        ("lambdalabs", "A100-SXM-80GB", 1, 1.79),
        ("lambdalabs", "H100-SXM-80GB", 1, 3.29),
        ("lambdalabs", "H100-SXM-80GB", 8, 23.92),
    ]


def test_the_live_feed_unpinned_records_each_providers_latest_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_gpuhunt_at(tmp_path / "bucket", monkeypatch)
    feed = reader("gpuhunt")(FeedRequest(None, None, None, None, False))
    assert f"runpod@{LIVE_VERSION}" in feed.version and f"lambdalabs@{LIVE_VERSION}" in feed.version
    assert {o.provider for o in feed.offers} == {"runpod", "lambdalabs"}  # the others: none


def test_the_live_feed_at_a_missing_version_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_gpuhunt_at(tmp_path / "bucket", monkeypatch)
    with pytest.raises(UserInputError, match="gpuhunt could not read its catalog"):
        reader("gpuhunt")(FeedRequest(None, None, "19990101-1", None, False))
