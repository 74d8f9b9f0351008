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
