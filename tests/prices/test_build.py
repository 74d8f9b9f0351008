"""Offers → a tariff table: one tariff per (provider, region, card, cards, basis) at its
cheapest offer, filters, the note, and bad offers refused with their row."""

from __future__ import annotations

import pytest

from harness.errors import UserInputError
from harness.prices.build import Filters, SpotTerms, build_table, merged, tariff_yaml
from harness.prices.offer import FeedRead, Offer
from harness.prices.rules import load_rules
from harness.spec.tariffs import parse_tariffs

AT = "2026-12-07T09:00:00Z"


def offer(row: int, usd: float, **extra: object) -> Offer:
    fields: dict[str, object] = {
        "provider": "vastai", "region": "US", "instance": f"i{row}", "card": "RTX-4090",
        "cards_per_node": 1, "basis": "on-demand", "hourly_usd": usd, "row": row,
        "source": "vastai.csv",
    }  # fmt: skip
    fields.update(extra)
    return Offer.model_validate(fields)


def feed(*offers: Offer) -> FeedRead:
    return FeedRead("gpuhunt-csv", "v1", AT, "vastai.csv", list(offers))


def test_offers_of_one_key_become_one_tariff_at_the_cheapest() -> None:
    got = build_table(feed(offer(2, 0.40), offer(3, 0.31), offer(4, 0.35)), load_rules(),
                      Filters(), SpotTerms())  # fmt: skip
    (only,) = got.table.tariffs
    assert only.hourly_usd == 0.31
    assert only.source.endswith("vastai.csv row 3; cheapest of 3 offers")
    # vastai's own 30-day rule: 0.31 × 24 × 30 × 0.8 = 178.56
    assert only.package_price_usd(only.packages[-1]) == pytest.approx(178.56)


def test_filters_leave_out_and_count() -> None:
    offers = feed(offer(2, 0.4), offer(3, 2.0, card="H100-SXM-80GB", cards_per_node=8))
    got = build_table(offers, load_rules(), Filters(min_cards=8), SpotTerms())
    assert [t.gpu for t in got.table.tariffs] == ["H100-SXM-80GB"]
    assert got.left_out["filtered out"] == 1
    with pytest.raises(UserInputError, match="no offer left to write"):
        build_table(offers, load_rules(), Filters(regions=frozenset({"EU"})), SpotTerms())


def test_a_spot_offer_gets_the_given_restart_terms_and_the_note_says_them() -> None:
    got = build_table(feed(offer(2, 0.2, basis="spot")), load_rules(), Filters(),
                      SpotTerms(3.0, 120.0, "given"))  # fmt: skip
    (spot,) = got.table.tariffs
    assert (spot.interruptions_per_day, spot.restart_s) == (3.0, 120.0)
    assert got.table.note is not None and "3 interruption(s) per day × 120 s" in got.table.note


def test_what_is_written_reads_back_the_same() -> None:
    table = build_table(feed(offer(2, 0.4)), load_rules(), Filters(), SpotTerms(), True).table
    back = parse_tariffs(tariff_yaml(table, "header"), "t.yaml")
    assert back == table and back.tariffs[0].example


def test_an_offer_that_makes_no_valid_tariff_names_its_row() -> None:
    with pytest.raises(UserInputError) as caught:
        build_table(feed(offer(5, 0.4, instance="x" * 490)), load_rules(), Filters(), SpotTerms())
    assert caught.value.file == "vastai.csv" and caught.value.line == 5
    assert caught.value.field == "source"


def test_several_files_of_one_feed_merge_their_offers_and_skips() -> None:
    a, b = feed(offer(2, 0.4)), feed(offer(2, 0.5, provider="runpod"))
    a.skipped["no price"] += 1
    both = merged([a, b])
    assert len(both.offers) == 2 and both.skipped["no price"] == 1
