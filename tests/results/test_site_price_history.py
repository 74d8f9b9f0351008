"""The site keeps a dated price history per card from the imported tariff files (`harness site
--price-history FILE`, repeatable): price-history.csv in the site folder and a table per card on
its index, rows by date, old and example prices flagged. The history itself is
``harness.prices.verdicts.price_history``; two tariff files of different dates are written here.

File ``march`` (hand-written, 2026-03, one example offer): H100 lambda ×8 at 23.92 $/h (2.99 per
card-hour, EXAMPLE) and runpod ×1 at 2.69; RTX 4090 runpod at 0.69. File ``december`` (a feed,
read 2026-12-06, stale only after 3650 days): H100 runpod at 2.49 and vastai spot at 1.80 with 2
interruptions a day × 360 s restart; RTX 4090 runpod at 0.59.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.prices.verdicts import price_history
from harness.spec.tariffs import load_tariffs
from tests import factories as F

H100, RTX = "H100-SXM-80GB", "RTX-4090"
WEEK = "    packages: [{days: 7, discount_pct: 10}]\n"

MARCH = f"""tariffs:
  - provider: lambda
    gpu: {H100}
    gpus_per_node: 8
    hourly_usd: 23.92
    source: hand-typed example
    date: 2026-03
    example: true
{WEEK}  - provider: runpod
    gpu: {H100}
    hourly_usd: 2.69
    source: https://www.runpod.io/pricing
    date: 2026-03
{WEEK}  - provider: runpod
    gpu: {RTX}
    hourly_usd: 0.69
    source: https://www.runpod.io/pricing
    date: 2026-03
{WEEK}"""

DECEMBER_FEED = (
    "    date: 2026-12-06\n    feed: gpuhunt-csv\n    feed_version: v2\n"
    "    observed_at: '2026-12-06T09:00:00Z'\n"
)
DECEMBER = f"""stale_after_days: 3650
tariffs:
  - provider: runpod
    gpu: {H100}
    hourly_usd: 2.49
    source: gpuhunt catalog
{DECEMBER_FEED}{WEEK}  - provider: vastai
    gpu: {H100}
    hourly_usd: 1.80
    basis: spot
    interruptions_per_day: 2
    restart_s: 360
    source: gpuhunt catalog
{DECEMBER_FEED}{WEEK}  - provider: runpod
    gpu: {RTX}
    hourly_usd: 0.59
    source: gpuhunt catalog
{DECEMBER_FEED}{WEEK}"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    march, december = tmp_path / "march.yaml", tmp_path / "december.yaml"
    march.write_text(MARCH)
    december.write_text(DECEMBER)
    return march, december


def test_the_history_has_one_row_per_file_and_card_by_date(files: tuple[Path, Path]) -> None:
    march, december = files
    # given newest first: each card's rows still come by date
    history = price_history([load_tariffs(december), load_tariffs(march)], dt.date(2026, 12, 8))
    assert history["gpu"].tolist() == [H100, H100, RTX, RTX]
    assert history["date"].tolist() == ["2026-03-01", "2026-12-06"] * 2  # a month: its 1st
    h100 = history[history["gpu"] == H100].to_dict(orient="records")
    # March: lambda 23.92 / 8 = 2.99, runpod 2.69 → cheapest runpod 2.69, median 2.84
    assert (h100[0]["provider"], h100[0]["tariff_basis"]) == ("runpod", "on-demand")
    assert h100[0]["card_hour_usd_min"] == pytest.approx(2.69)
    assert h100[0]["card_hour_usd_median"] == pytest.approx((2.69 + 2.99) / 2)
    assert h100[0]["card_hour_usd_max"] == pytest.approx(2.99)
    # 2026-03-01 → 2026-12-08: 31+30+31+30+31+31+30+31+30 = 275 days to 12-01, + 7 = 282 > 7
    assert h100[0]["price_age_days"] == 282 and h100[0]["price_stale"]
    assert h100[0]["tariff_example"]  # lambda's offer is an example
    assert h100[0]["price_read"] == "2026-03-01, 282 d, STALE, EXAMPLE"
    assert (h100[0]["feed"], h100[0]["card_offers"]) == ("hand-written", 2)
    # December: spot 1.80 + 2 / 24 × 360 / 3600 × 1.80 = 1.80 + 0.015 = 1.815 beats runpod 2.49
    assert (h100[1]["provider"], h100[1]["tariff_basis"]) == ("vastai", "spot")
    assert h100[1]["card_hour_usd_min"] == pytest.approx(1.815)
    assert h100[1]["card_hour_usd_median"] == pytest.approx((1.815 + 2.49) / 2)
    assert (h100[1]["feed"], h100[1]["feed_version"]) == ("gpuhunt-csv", "v2")
    assert h100[1]["price_read"] == "2026-12-06, 2 d"  # 2 days ≤ 3650: not stale
    assert not h100[1]["price_stale"] and not h100[1]["tariff_example"]
    rtx = history[history["gpu"] == RTX]
    assert rtx["card_hour_usd_min"].tolist() == pytest.approx([0.69, 0.59])
    assert rtx["tariff_example"].tolist() == [False, False]  # only the H100 offer is an example


def site(tmp_path: Path, *args: str | Path) -> tuple[int, str]:
    run = F.write_run(tmp_path / "run", F.small_grid())
    result = CliRunner().invoke(app, ["site", str(run), "--out", str(tmp_path / "site"), *args])
    return result.exit_code, result.output


def history_rows(page: str, card: str) -> list[str]:
    """The rows of the card's history table, as text."""
    found = re.search(rf'<table class="sortable" id="history-{card}">(.*?)</table>', page)
    assert found is not None, f"no history table for {card}"
    return re.findall(r"<tr>(.*?)</tr>", found.group(1))[1:]  # the header row first


def test_the_site_keeps_and_shows_the_price_history(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    march, december = files
    args = ["--tariffs", december, "--price-history", december, "--price-history", march]
    code, output = site(tmp_path, *map(str, args))
    assert code == 0, output
    out = tmp_path / "site"
    csv = pd.read_csv(out / "price-history.csv")
    # 2 files × 2 cards, each card's rows by date
    assert list(zip(csv["gpu"], csv["date"], strict=True)) == [
        (H100, "2026-03-01"),
        (H100, "2026-12-06"),
        (RTX, "2026-03-01"),
        (RTX, "2026-12-06"),
    ]
    assert csv["provider"].tolist() == ["runpod", "vastai", "runpod", "runpod"]
    # March is older than 7 days whenever this runs (today ≥ 2026-12-08); December's file
    # flags only after 3650 days
    assert csv["price_stale"].tolist() == [True, False, True, False]
    page = (out / "index.html").read_text()
    assert "<h2>Price history per card</h2>" in page
    assert '<a href="price-history.csv">' in page
    assert re.search(r'class="warn">2 of 4 rows STALE, 1 EXAMPLE', page)
    h100 = history_rows(page, H100)
    assert len(h100) == 2
    assert "<td>2026-03-01</td><td>runpod</td><td>on-demand</td>" in h100[0]
    assert "STALE, EXAMPLE</td>" in h100[0]
    assert "<td>2026-12-06</td><td>vastai</td><td>spot</td>" in h100[1]
    assert "STALE" not in h100[1] and "EXAMPLE" not in h100[1]
    assert "gpuhunt-csv" in h100[1] and "v2" in h100[1]
    assert len(history_rows(page, RTX)) == 2


def test_without_price_history_the_site_has_none(tmp_path: Path) -> None:
    code, output = site(tmp_path)
    assert code == 0, output
    assert not (tmp_path / "site" / "price-history.csv").exists()
    assert "Price history" not in (tmp_path / "site" / "index.html").read_text()


def test_a_bad_tariff_file_writes_nothing(files: tuple[Path, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(MARCH.replace("hourly_usd: 0.69", "hourly_usd: -0.69"))
    code, output = site(tmp_path, "--price-history", str(files[1]), "--price-history", str(bad))
    assert code == 2 and "bad.yaml" in output
    assert not (tmp_path / "site").exists()


def test_the_history_csv_is_formula_safe(tmp_path: Path) -> None:
    """Both writers of price-history.csv go through harness.csvtext: a provider a spreadsheet
    would run as a formula is written with a leading quote."""
    evil = tmp_path / "evil.yaml"
    evil.write_text(MARCH.replace("provider: runpod", "provider: '=HYPERLINK(1)'"))
    result = CliRunner().invoke(
        app, ["tariffs", "history", str(evil), "--out", str(tmp_path / "h")]
    )
    assert result.exit_code == 0, result.output
    text = (tmp_path / "h" / "price-history.csv").read_text()
    assert "'=HYPERLINK(1)" in text and ",=HYPERLINK" not in text
