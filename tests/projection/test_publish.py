"""Before you rent, shown (harness.projection.publish): the report's section (ranking charts,
tables, verdicts, the line that keeps projections out of measured tables) and the error ledger,
in report.html, README.md and on the site.

The run: ``F.small_grid`` measures the same 24 configurations on an H100 (decode m) and an
RTX 4090 (decode 0.4 × m); every one passes class 99. Tariffs: those two cards (measured), an
L40S (projected) and a CPU (not projected: CPU and GPU figures never mix).

Your runs' ledger by hand (bandwidths: H100 3,350 GB/s, RTX 4090 1,008 GB/s):
- 4090 held out, projected from the H100: m × 1008 / 3350 against 0.4 m: ratio projected ÷
  measured 0.752239, APE 24.776 %;
- H100 held out, projected from the 4090: 0.4 m × 3350 / 1008 = 1.329365 m against m: APE
  32.937 %;
- one pair each way per key: MAPE (24.776 + 32.937) / 2 = 28.856 % → "28.9"; the band of the
  one cell (decode, dense, nvidia → nvidia; measured ÷ projected), 24 ratios 0.752 and 24 ratios
  1.329: rank ⌈49 × 0.9⌉ = 45 from either end, the 4th smallest 1 / 1.329365 = 0.752 and the
  45th smallest 1 / 0.752239 = 1.329, median (0.752239 + 1.329365) / 2 = 1.041; two cards: with
  either left out nothing is left to fit on, so no held-out check and no validated band.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.projection import book, publish
from harness.results.aggregate import aggregate_run
from harness.results.publish import report
from harness.results.publish.svg import hatch_id
from harness.results.site import build_site
from harness.spec.tariffs import TariffTable
from tests import factories as F

SVG = "{http://www.w3.org/2000/svg}"
CLASS = "direction, or all of a class"
HELD_OUT = "held-out coverage, a card left out (%)"
ARGONNE = "argonne-lcf/LLM-Inference-Bench@4211f5d4e9bc"


def tariffs() -> TariffTable:
    return F.tariffs(
        F.tariff("H100-SXM-80GB"),
        F.tariff("RTX-4090", gpus_per_node=1),
        F.tariff("L40S", gpus_per_node=1),
        F.tariff("cpu", gpus_per_node=1, hourly_usd=0.5),
    )


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the run's published/ folder, the site's folder) of the same run."""
    base = tmp_path_factory.mktemp("rent")
    run = F.write_run(base / "run", F.small_grid())
    table = tariffs()
    result = aggregate_run(run, table, 1.0)
    extra = publish.sections(result.points, table, "99", 1.0)
    out = report(run, table, result=result, extra_markdown=extra.markdown, extra_html=extra.html)
    site = build_site([run], base / "site", table, extras=publish.extras(table, "99"))
    return out, site.out


def ranking_charts(page: str) -> list[ET.Element]:
    charts = [ET.fromstring(s) for s in re.findall(r"<svg.*?</svg>", page, re.S)]
    return [c for c in charts if c.find(f".//{SVG}pattern") is not None]


def labelled_bars(chart: ET.Element) -> dict[str, str]:
    """Each bar's label (the text just before it) → its fill."""
    out: dict[str, str] = {}
    label = ""
    for element in chart:
        if element.tag == f"{SVG}text":
            label = element.text or ""
        elif "bar" in element.get("class", "").split():
            out[label] = element.get("fill", "")
    return out


def table_rows(page: str, table_id: str) -> list[list[str]]:
    found = re.search(rf'<table class="sortable" id="{table_id}">(.*?)</table>', page, re.S)
    assert found, f"no table {table_id}"
    rows = re.findall(r"<tr>(.*?)</tr>", found.group(1), re.S)
    return [
        [
            html.unescape(re.sub(r"<[^>]+>", "", c))
            for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r)
        ]
        for r in rows
    ]


def test_the_report_draws_one_bar_per_card_hatched_where_projected(
    published: tuple[Path, Path],
) -> None:
    page = (published[0] / "report.html").read_text()
    assert "<h2>Before you rent: every tariff's card, class 99</h2>" in page
    charts = ranking_charts(page)
    assert len(charts) == 3  # one model × packages of 3, 7 and 30 days
    for chart in charts:
        title = chart.find(f"{SVG}text").text or ""
        hatch = f"url(#{hatch_id(title)})"
        bars = labelled_bars(chart)
        # the three priced cards; only the L40S is projected (hatched)
        assert sorted(bars) == ["H100-SXM-80GB×8 (TestCloud)", "L40S×1 (TestCloud)",
                                "RTX-4090×1 (TestCloud)"]  # fmt: skip
        assert [name for name, fill in bars.items() if fill == hatch] == ["L40S×1 (TestCloud)"]
        assert {fill for name, fill in bars.items() if "L40S" not in name} == {"#1f77b4"}
    assert "cpu×1 (TestCloud): CPU and GPU figures are not projected" in page
    assert html.escape(publish.NEVER_MEASURED) in page
    assert page.count('<p class="verdict">') == 3


def test_the_report_publishes_the_ledger_with_its_sources(published: tuple[Path, Path]) -> None:
    page = (published[0] / "report.html").read_text()
    rows = table_rows(page, "ledger")
    head = rows[0]
    mine = [dict(zip(head, r, strict=True)) for r in rows[1:] if r[0] == "your runs"]
    assert [(r["phase"], r[CLASS], r["dense or MoE"]) for r in mine] == [
        ("decode", "nvidia → nvidia", "dense"),
        ("decode", "same vendor", "all"),
        ("decode", "all", "all"),
    ]
    line = mine[0]
    assert line["MAPE (%)"] == "28.9"  # by hand in the module docstring
    assert line["band, measured ÷ projected"] == (
        "[0.752, 1.329] median 1.041, not validated: measure it"
    )
    assert line[HELD_OUT] == "—" and line["stated coverage (%)"] == "80.0"
    assert line["pairs no band could score"] == "48"
    assert line["pairs (source → held-out card)"] == "48"  # 24 keys × 2 directions
    readme = (published[0] / "README.md").read_text()
    assert "## The error ledger" in readme and ARGONNE in readme
    assert "BSD-3-Clause" in page


def test_the_site_shows_the_ranking_and_the_ledger_table(published: tuple[Path, Path]) -> None:
    index = (published[1] / "index.html").read_text()
    assert len(ranking_charts(index)) == 3
    rows = table_rows(index, "ledger")
    head = rows[0]
    lines = [dict(zip(head, r, strict=True)) for r in rows[1:]]
    (argonne,) = book.shipped_books()
    cell = argonne.cells[("decode", "dense", "nvidia → nvidia")]
    where = ("shipped Argonne", "decode", "nvidia → nvidia", "dense")
    shipped = next(
        r for r in lines if (r["ledger"], r["phase"], r[CLASS], r["dense or MoE"]) == where
    )
    assert shipped["pairs (source → held-out card)"] == str(cell.pairs)
    assert shipped[HELD_OUT] == f"{cell.held_out_coverage_pct:.1f}"
    assert shipped["band, measured ÷ projected"] == (
        f"[{cell.low:.3f}, {cell.high:.3f}] median {cell.median:.3f}"
    )  # validated: no "measure it"
    prefill = next(
        r for r in lines if (r["ledger"], r["phase"], r[CLASS]) == (where[0], "prefill", where[2])
    )
    assert prefill["band, measured ÷ projected"] == "too few keys to state a band: 6"
    assert shipped["source"] == ARGONNE
    assert any(r["ledger"] == "your runs" and r["MAPE (%)"] == "28.9" for r in lines)
    assert len(re.findall(r"leave-one-card-out error per phase", index)) >= 3  # one chart each
    run_page = next((published[1] / "runs").glob("*/report.html")).read_text()
    assert 'id="ledger"' in run_page and "Before you rent" in run_page
