"""`harness tariffs import`: the file it writes is priced by aggregate, report and rent as is;
bad feed input is one line naming file, row and field, with nothing written (the reading:
harness.prices.read)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.spec.tariffs import load_tariffs
from tests import factories as F
from tests.prices.recorded import LAMBDA_VMS, RUNPOD_CSV, SNAPSHOT

HEADER = RUNPOD_CSV.read_text().splitlines()[0]
GOOD = "NVIDIA H100 80GB HBM3,EU-RO-1,2.69,24,251,1,H100,80,False,,nvidia,,x86,{}"


def run_import(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["tariffs", "import", *args])
    return result.exit_code, result.output


def test_import_writes_one_tariff_per_offer_with_its_feed_and_date(tmp_path: Path) -> None:
    out = tmp_path / "t.yaml"
    code, output = run_import("gpuhunt-csv", str(RUNPOD_CSV), "--out", str(out), *SNAPSHOT)
    assert code == 0, output
    table = load_tariffs(out)
    # 7 priced GPU offers, each its own (provider, region, card, cards, basis)
    assert len(table.tariffs) == 7
    assert {t.feed for t in table.tariffs} == {"gpuhunt-csv"}
    assert {t.observed_at for t in table.tariffs} == {"2026-12-07T09:00:00Z"}
    assert {t.date for t in table.tariffs} == {"2026-12-07"}
    spot = next(t for t in table.tariffs if t.basis == "spot" and t.gpu == "RTX-4090")
    assert (spot.interruptions_per_day, spot.restart_s) == (1.0, 600.0)  # the stated defaults
    assert [p.days for p in spot.packages] == [3, 7, 30]
    assert "left out: 1 × unknown card GTX1080" in output
    assert "left out: 1 × CPU-only node (keep them with --card cpu)" in output


def test_import_keeps_cpu_only_nodes_when_asked_and_reads_several_files(tmp_path: Path) -> None:
    out = tmp_path / "t.yaml"
    code, output = run_import(
        "gpuhunt-csv", str(RUNPOD_CSV), str(RUNPOD_CSV.parent / "gpuhunt-live" / "lambdalabs.csv"),
        "--out", str(out), *SNAPSHOT, "--card", "cpu", "--card", "H100",
    )  # fmt: skip
    assert code == 0, output
    got = sorted((t.provider, t.gpu, t.gpus_per_node, t.basis) for t in load_tariffs(out).tariffs)
    # runpod: H100 EU on-demand + spot, H100 US (one region key each), the CPU node;
    # lambdalabs: H100 ×1 and ×8 in us-east-1
    assert got == [
        ("lambdalabs", "H100-SXM-80GB", 1, "on-demand"),
        ("lambdalabs", "H100-SXM-80GB", 8, "on-demand"),
        ("runpod", "H100-SXM-80GB", 1, "on-demand"),
        ("runpod", "H100-SXM-80GB", 1, "on-demand"),
        ("runpod", "H100-SXM-80GB", 1, "spot"),
        ("runpod", "cpu", 1, "on-demand"),
    ]


def test_import_filters_cards_providers_regions_and_cards_per_node(tmp_path: Path) -> None:
    out = tmp_path / "t.yaml"
    code, output = run_import(
        "skypilot-csv", str(LAMBDA_VMS), "--out", str(out), *SNAPSHOT,
        "--card", "H100", "--region", "us-east-1", "--min-cards", "8",
    )  # fmt: skip
    assert code == 0, output
    (only,) = load_tariffs(out).tariffs  # of 5 offers only H100 ×8 in us-east-1 is left
    assert (only.gpu, only.gpus_per_node, only.hourly_usd) == ("H100-SXM-80GB", 8, 23.92)
    # 7-day package: 23.92 × 24 × 7 × 0.9 = 3616.704
    assert only.package_price_usd(only.packages[1]) == pytest.approx(3616.704)


def test_the_imported_file_is_priced_by_aggregate_report_and_rent(tmp_path: Path) -> None:
    tariffs = tmp_path / "t.yaml"
    assert run_import("gpuhunt-csv", str(RUNPOD_CSV), "--out", str(tariffs), *SNAPSHOT)[0] == 0
    run = F.write_run(tmp_path / "run", F.small_grid())
    for command in ("aggregate", "rent"):
        result = CliRunner().invoke(app, [command, str(run), "--tariffs", str(tariffs)])
        assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["report", str(run), "--tariffs", str(tariffs)])
    assert result.exit_code == 0, result.output
    with (run / "published" / "cost.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows
    assert {r["tariff_feed"] for r in rows} == {"gpuhunt-csv"}
    assert {r["tariff_date"] for r in rows} == {"2026-12-07"}
    assert {r["tariff_feed_version"] for r in rows} == {"20261207-3"}
    assert {r["gpu"] for r in rows} == {"H100-SXM-80GB", "RTX-4090"}


BAD_ROWS = {
    "negative price": (
        GOOD.replace(",2.69,", ",-1,"), "runpod.csv:3: price", "'-1' is not a price",
    ),
    "NaN price": (GOOD.replace(",2.69,", ",nan,"), "runpod.csv:3: price", "'nan' is not a price"),
    "duplicated offer": (GOOD, "runpod.csv:3: offer", "repeats row 2"),
    "huge region": (
        GOOD.replace(",EU-RO-1,", f",{'x' * 600},"), "runpod.csv:3: region", "at most 500",
    ),
    "unknown card": (
        GOOD.replace(",H100,", ",GTX1080,"), "runpod.csv:3: gpu_name", "not a catalog card",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_bad_feed_row_is_one_line_naming_file_row_and_field(tmp_path: Path, case: str) -> None:
    line, where, what = BAD_ROWS[case]
    feed = tmp_path / "runpod.csv"
    feed.write_text(f"{HEADER}\n{GOOD}\n{line}\n")
    out = tmp_path / "t.yaml"
    code, output = run_import("gpuhunt-csv", str(feed), "--out", str(out), "--strict", *SNAPSHOT)
    assert code == 2
    assert where in output and what in output
    assert len(output.strip().splitlines()) == 1
    assert not out.exists()


def test_a_non_utf8_byte_is_named_with_its_line(tmp_path: Path) -> None:
    feed = tmp_path / "runpod.csv"
    feed.write_bytes(f"{HEADER}\n{GOOD}\n".encode() + b"NVIDIA \xff,EU,1,1,1,1,H100,80,False\n")
    out = tmp_path / "t.yaml"
    code, output = run_import("gpuhunt-csv", str(feed), "--out", str(out), *SNAPSHOT)
    assert code == 2 and "runpod.csv:3:" in output and "not UTF-8: byte 0xff" in output
    assert not out.exists()


def test_a_huge_feed_file_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("harness.prices.read.MAX_FEED_BYTES", 100)
    feed = tmp_path / "runpod.csv"
    feed.write_text(f"{HEADER}\n{GOOD}\n")  # 230 bytes over a 100-byte cap
    out = tmp_path / "t.yaml"
    code, output = run_import("gpuhunt-csv", str(feed), "--out", str(out), *SNAPSHOT)
    assert code == 2 and "runpod.csv" in output and "the limit is 100" in output
    assert not out.exists()


def test_a_missing_header_column_is_named(tmp_path: Path) -> None:
    feed = tmp_path / "vms.csv"
    feed.write_text("InstanceType,Price\nx,1\n")
    code, output = run_import(
        "skypilot-csv", str(feed), "--provider", "x", "--out", str(tmp_path / "t.yaml"), *SNAPSHOT
    )
    assert code == 2 and "vms.csv:1: header" in output and "AcceleratorName" in output


def test_stale_and_spot_prices_are_said_in_the_console_and_the_report(tmp_path: Path) -> None:
    tariffs = tmp_path / "t.yaml"
    old = ["--feed-version", "v0", "--observed-at", "2026-01-05T00:00:00Z"]  # months before now
    assert run_import("gpuhunt-csv", str(RUNPOD_CSV), "--out", str(tariffs), *old)[0] == 0
    run = F.write_run(tmp_path / "run", F.small_grid())
    result = CliRunner().invoke(app, ["aggregate", str(run), "--tariffs", str(tariffs)])
    assert result.exit_code == 0, result.output
    assert "STALE prices: 7 of 7 tariffs were read more than 7 days ago" in result.output
    # RTX 4090 spot at 0.34 $/h: 1 a day ÷ 24 × 600 s ÷ 3600 × 0.34 = 0.0023611 $/h
    assert "SPOT runpod RTX-4090×1 EU-RO-1: interruptible" in result.output
    assert "= $0.002361/h, included in its package prices" in result.output
    result = CliRunner().invoke(app, ["report", str(run), "--tariffs", str(tariffs)])
    assert result.exit_code == 0, result.output
    readme = (run / "published" / "README.md").read_text()
    assert "(read 2026-01-05," in readme and "STALE" in readme
    assert "(spot: 1 interruption(s) a day × 600 s restart" in readme
    with (run / "published" / "cost.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {r["price_stale"] for r in rows} == {"True"}
