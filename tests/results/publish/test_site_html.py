"""harness.results.publish.site_html: the site's index: one self-contained page (no network,
relative links, every string escaped), the runs linking to their reports, the cheapest table
across runs with where each row came from, the banners, and the counts."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from harness.results.publish import site_html
from harness.results.publish.html import CHEAPEST_COLUMNS
from tests.factories import XSS_MODEL, tariffs

RUNS = pd.DataFrame([
    {"run": "run a", "folder": "results/run a", "rows": 3, "ok": 2, "unreadable": 1,
     "reference": XSS_MODEL},
    {"run": "b/../c", "folder": "results/b", "rows": 1, "ok": 1},
])  # fmt: skip
CHEAPEST = pd.DataFrame([{"model": "tiny-llama", "quality_class": "99", "gpu": "H100-SXM-80GB",
                          "provider": "TestCloud", "run": "run a"}])  # fmt: skip


def index(**kw: Any) -> str:
    args: dict[str, Any] = {
        "runs": RUNS, "cheapest": CHEAPEST, "mixed": [],
        "counts": {"rows": 4, "by_status": {"ok": 3, "oom": 1}, "priced_rows": 9,
                   "eligible_without_tariff": 0},
        "unreadable": [("points/x.json", "<bad> json")], "tariffs": tariffs(),
        "quality_class": "99", "utilisation": 0.5, "files": ["rows all.csv"], **kw,
    }  # fmt: skip
    return site_html.index_html(**args)


def test_the_page_is_self_contained_and_escapes_every_string() -> None:
    page = index()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing from the network
    assert XSS_MODEL not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;bad&gt; json" in page and '<li class="warn">points/x.json' in page


def test_each_run_links_to_its_own_report_relatively() -> None:
    assert site_html.page_link("run a") == "runs/run%20a/report.html"
    assert site_html.page_link("b/../c") == "runs/b%2F..%2Fc/report.html"  # never out of runs/
    page = index()
    assert '<a href="runs/run%20a/report.html">run a</a>' in page
    assert '<a href="runs/b%2F..%2Fc/report.html">b/../c</a>' in page
    assert "<h1>One comparison across 2 runs</h1>" in page


def test_the_cheapest_table_names_the_run_after_the_provider_and_provenance_last() -> None:
    names = [c[0] for c in site_html.cheapest_columns()]
    at = names.index("provider")
    assert names[at + 1] == "run"
    assert names[-4:] == ["provenance_hostname", "provenance_device_name",
                          "provenance_harness", "provenance_git_sha"]  # fmt: skip
    assert len(names) == len(CHEAPEST_COLUMNS) + 1 + 4


def test_tariffs_price_the_table_and_without_them_nothing_is_priced() -> None:
    page = index()
    assert 'id="cheapest"' in page
    # the factory tariff: TestCloud's 8 × H100 node at $23.92 an hour, an example
    assert "TestCloud H100-SXM-80GB $23.92/node-hour (example)" in page
    bare = index(tariffs=None)
    assert "No tariffs given: nothing is priced." in bare and 'id="cheapest"' not in bare


def test_mixed_runs_and_differing_verdicts_are_banners_and_titled() -> None:
    assert 'id="mixed"' not in index() and "<title>harness site</title>" in index()
    page = index(mixed=["run a: scenario <x>"], verdicts_differ=["row k1: pass here"])
    assert "<title>harness site (MIXED runs)</title>" in page
    assert 'id="mixed" role="alert"' in page and "<li>run a: scenario &lt;x&gt;</li>" in page
    assert 'id="verdicts-differ"' in page and "<li>row k1: pass here</li>" in page


def test_sections_come_in_reading_order_with_the_counts_last() -> None:
    page = index(charts=["<svg id='chart'></svg>"], extra=["<h2>Before you rent</h2>"])
    order = [
        "<h2>Runs</h2>",
        "Cheapest configuration",
        "Cost against interactivity",
        "<svg id='chart'>",
        "<h2>Before you rent</h2>",
        "<h2>Every row",
        "<h2>Rows</h2>",
    ]
    positions = [page.index(part) for part in order]
    assert positions == sorted(positions)
    assert '<a href="rows%20all.csv">rows all.csv</a>' in page
    assert "rows read: 4; by status: ok 3, oom 1" in page
    assert "unreadable point files, skipped: 1" in page
    assert "utilisation 0.5" in page and "Cost against interactivity" not in index()
