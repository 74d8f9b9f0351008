"""report.html in a real browser: headless Debian chromium opens it from disk (no network).

Tables have rows, the SVG charts have marks, clicking a header sorts, and a model named
`<script>alert(1)</script>` is shown as text and never runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.results.publish import report
from harness.spec.tariffs import load_tariffs
from tests import factories as F
from tests.results.browser import headless_chromium, skip_without_chromium

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]

skip_without_chromium()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    run = tmp_path_factory.mktemp("browser") / "run"
    F.write_run(run, F.small_grid() + F.small_grid(model=F.XSS_MODEL))
    published = report(run, load_tariffs(ROOT / "tariffs" / "example.yaml"), utilisation=0.8)
    with headless_chromium() as driver:
        driver.get((published / "report.html").as_uri())
        yield driver


def test_the_report_loads_without_an_alert_or_script_errors(page: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        page.switch_to.alert.text  # noqa: B018
    assert page.title == "harness report"
    assert page.execute_script("return document.readyState") == "complete"


def test_tables_have_rows(page: Any) -> None:
    from selenium.webdriver.common.by import By

    for table_id in ("cheapest", "ratios", "points", "effects"):
        rows = page.find_elements(By.CSS_SELECTOR, f"table#{table_id} tbody tr")
        assert rows, table_id
    assert len(page.find_elements(By.CSS_SELECTOR, "table#points tbody tr")) == 96


def test_charts_have_marks(page: Any) -> None:
    from selenium.webdriver.common.by import By

    charts = page.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert len(charts) >= 5  # cost per package ×2 models, two Pareto, memory, quality ×2
    marks = [len(chart.find_elements(By.CSS_SELECTOR, "rect.bar, circle.pt")) for chart in charts]
    assert all(n > 0 for n in marks), marks
    box = charts[0].rect
    assert box["width"] > 100 and box["height"] > 100  # laid out, not collapsed


def test_clicking_a_header_sorts_the_column_both_ways(page: Any) -> None:
    from selenium.webdriver.common.by import By

    table = page.find_element(By.ID, "points")
    headers = table.find_elements(By.CSS_SELECTOR, "thead th")
    column = [h.text for h in headers].index("decode tok/s")

    def values() -> list[float]:
        script = (
            "var col = arguments[0];"
            "return Array.from(document.querySelectorAll('#points tbody tr'))"
            ".map(function (r) { return parseFloat(r.cells[col].getAttribute('data-v')); });"
        )
        return list(page.execute_script(script, column))

    assert values() != sorted(values())
    headers[column].click()
    assert values() == sorted(values())
    assert headers[column].get_attribute("aria-sort") == "ascending"
    headers[column].click()
    assert values() == sorted(values(), reverse=True)

    model = [h.text for h in headers].index("model")
    headers[model].click()
    names = page.execute_script(
        "return Array.from(document.querySelectorAll('#points tbody tr'))"
        ".map(function (r) { return r.cells[0].textContent; });"
    )
    assert names == sorted(names, key=str.lower) or names == sorted(names)


def test_a_script_in_a_model_name_is_shown_as_text(page: Any) -> None:
    from selenium.webdriver.common.by import By

    cells = page.find_elements(By.CSS_SELECTOR, "table#cheapest tbody td:first-child")
    assert "<script>alert(1)</script>" in {c.text for c in cells}
    titles = page.find_elements(By.CSS_SELECTOR, "svg.chart text.title")
    assert any("<script>alert(1)</script>" in t.text for t in titles)
    # exactly one script element: ours; the model name created none
    assert page.execute_script("return document.scripts.length") == 1
    assert page.execute_script("return document.querySelectorAll('td script').length") == 0


# --- serving: the search, cost against interactivity and the band table ----------------------


@pytest.fixture(scope="module")
def serving_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """report.html of two runs' serving rows (tests/modes/serving/test_report.py: an RTX 4090 and
    an H100 at equal quality, levels and a search)."""
    from harness.results.aggregate import aggregate
    from harness.results.frame import frame_from_rows
    from tests.modes.serving import test_report as serving

    result = aggregate(frame_from_rows(serving.rows()), serving.TARIFFS)
    run = tmp_path_factory.mktemp("browser-serving") / "run"
    published = report(run, serving.TARIFFS, result=result)
    with headless_chromium() as driver:
        driver.get((published / "report.html").as_uri())
        yield driver


def test_the_cost_against_interactivity_chart_is_drawn_with_its_front(serving_page: Any) -> None:
    from selenium.webdriver.common.by import By

    charts = [
        chart
        for chart in serving_page.find_elements(By.CSS_SELECTOR, "svg.chart")
        if "cost against interactivity" in chart.find_element(By.CSS_SELECTOR, "text.title").text
    ]
    assert len(charts) == 3  # one per package length
    for chart in charts:
        box = chart.rect
        assert box["width"] > 100 and box["height"] > 100
        assert len(chart.find_elements(By.CSS_SELECTOR, "circle.pt")) >= 11 + 3  # levels + front
        (front,) = chart.find_elements(By.CSS_SELECTOR, "polyline.front")
        assert len(front.get_attribute("points").split()) >= 3
        labels = chart.text
        assert "tok/s per user" in labels and "USD per 1e6 output tokens" in labels


def test_the_band_and_search_tables_have_rows_and_sort(serving_page: Any) -> None:
    from selenium.webdriver.common.by import By

    bands = serving_page.find_elements(By.CSS_SELECTOR, "table#interactivity-bands tbody tr")
    assert len(bands) == 12  # 4 bands × 3 package lengths, class 99
    cells = [r.find_elements(By.TAG_NAME, "td") for r in bands]
    assert {c[4].text for c in cells} == {"RTX-4090", "H100-SXM-80GB"}  # the card flips
    search = serving_page.find_elements(By.CSS_SELECTOR, "table#slo-search tbody tr")
    assert len(search) == 3
    table = serving_page.find_element(By.ID, "interactivity-bands")
    headers = table.find_elements(By.CSS_SELECTOR, "thead th")
    column = [h.text for h in headers].index("$/Mtok out")
    headers[column].click()
    values = serving_page.execute_script(
        "var col = arguments[0];"
        "return Array.from(document.querySelectorAll('#interactivity-bands tbody tr'))"
        ".map(function (r) { return parseFloat(r.cells[col].getAttribute('data-v')); });",
        column,
    )
    assert values == sorted(values) and len(set(values)) > 1
