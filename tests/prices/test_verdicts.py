"""Does the verdict survive the feed: two feeds that disagree on one card's price flip the
cheapest configuration, and the flip is printed; the dated price history per card.

The run is ``factories.small_grid``: decode tok/s = base(GPU) × batch × speed(quant) ÷ (1 +
context ÷ 1024), base H100 1000 and RTX 4090 400. Its cheapest class-99 configuration on
either card is bnb-nf4 (speed 1.3), batch 4, context 128: 4 × 1.3 ÷ 1.125 = 4.6222 × base.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.prices.verdicts import flip_lines, price_history, survival
from harness.results.aggregate import aggregate_run
from harness.spec.tariffs import load_tariffs
from tests import factories as F
from tests.prices.recorded import RUNPOD_CSV

HEADER = RUNPOD_CSV.read_text().splitlines()[0]


def feed_file(folder: Path, h100_usd: float) -> Path:
    """A gpuhunt catalog of one provider: an H100 at ``h100_usd`` and an RTX 4090 at 1.00 $/h."""
    folder.mkdir(parents=True)
    path = folder / "runpod.csv"
    path.write_text(
        f"{HEADER}\n"
        f"h100,EU,{h100_usd},24,251,1,H100,80,False,,nvidia,,x86,{{}}\n"
        "4090,EU,1.00,16,62,1,RTX4090,24,False,,nvidia,,x86,{}\n"
    )
    return path


def imported(tmp_path: Path, name: str, h100_usd: float, observed_at: str) -> Path:
    out = tmp_path / f"{name}.yaml"
    args = ["tariffs", "import", "gpuhunt-csv", str(feed_file(tmp_path / name, h100_usd))]
    args += ["--out", str(out), "--feed-version", name, "--observed-at", observed_at]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def two_feeds(tmp_path: Path) -> tuple[Path, Path, Path]:
    run = F.write_run(tmp_path / "run", F.small_grid())
    cheap = imported(tmp_path, "a", 2.00, "2026-12-01T09:00:00Z")
    dear = imported(tmp_path, "b", 3.00, "2026-12-07T09:00:00Z")
    return run, cheap, dear


def test_two_feeds_disagreeing_on_one_card_flip_the_verdict(
    two_feeds: tuple[Path, Path, Path],
) -> None:
    run, cheap, dear = two_feeds
    points = aggregate_run(run).points
    found = {s.key: s for s in survival(points, [load_tariffs(cheap), load_tariffs(dear)], 1.0)}
    week = found[("tiny-llama", "99", 7)]
    assert not week.same
    first, second = week.winners
    assert first is not None and second is not None
    # a: H100 at 2.00 × 0.9 = 1.80 $/h ÷ (4622.2 tok/s × 3600) × 10⁶ = 0.10817 $/Mtok beats the
    #    RTX 4090's 1.00 × 0.9 = 0.90 $/h ÷ (1848.9 × 3600) × 10⁶ = 0.13522 $/Mtok
    assert first.gpu == "H100-SXM-80GB"
    assert first.usd_per_mtok == pytest.approx(1.8e6 / (1000 * 5.2 / 1.125 * 3600))
    # b: H100 at 3.00 × 0.9 = 2.70 $/h → 0.16226 $/Mtok: the RTX 4090's 0.13522 wins
    assert second.gpu == "RTX-4090"
    assert second.usd_per_mtok == pytest.approx(0.9e6 / (400 * 5.2 / 1.125 * 3600))
    (line,) = [x for x in flip_lines([week], ["a.yaml", "b.yaml"])]
    assert line.startswith("FLIP tiny-llama, class 99, 7-day package: a.yaml: H100-SXM-80GB")
    assert "b.yaml: RTX-4090 (runpod EU on-demand)" in line


def test_the_verdicts_command_prints_the_flip(two_feeds: tuple[Path, Path, Path]) -> None:
    run, cheap, dear = two_feeds
    args = ["tariffs", "verdicts", str(run), "--tariffs", str(cheap), "--tariffs", str(dear)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "FLIP tiny-llama, class 99, 7-day package: a.yaml: H100-SXM-80GB" in result.output
    # 3 package lengths, each flipping the same way (the discounts scale both cards alike)
    assert "0 of 3 verdicts survive the change of tariff file; 3 flip" in result.output


def test_one_tariff_file_is_not_a_comparison(two_feeds: tuple[Path, Path, Path]) -> None:
    run, cheap, _ = two_feeds
    result = CliRunner().invoke(app, ["tariffs", "verdicts", str(run), "--tariffs", str(cheap)])
    assert result.exit_code == 2 and "two or more --tariffs" in result.output


def test_the_price_history_keeps_each_card_per_dated_file(
    two_feeds: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, cheap, dear = two_feeds
    history = price_history([load_tariffs(dear), load_tariffs(cheap)])
    h100 = history[history["gpu"] == "H100-SXM-80GB"]
    assert h100["date"].tolist() == ["2026-12-01", "2026-12-07"]  # by date, whatever the order
    assert h100["card_hour_usd_min"].tolist() == [2.0, 3.0]
    assert h100["feed_version"].tolist() == ["a", "b"]
    site = tmp_path / "site"
    result = CliRunner().invoke(
        app, ["tariffs", "history", str(cheap), str(dear), "--out", str(site)]
    )
    assert result.exit_code == 0, result.output
    # 2 files × 2 cards, plus the header
    assert len((site / "price-history.csv").read_text().splitlines()) == 5
