"""The site across runs in a real browser: headless Debian chromium opens index.html from disk
(no server, no network), its links lead to each run's own report, and a `<script>` in a model name
or a hostname is shown as text and never runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.results.site import build_site
from harness.row import Provenance
from tests import factories as F
from tests.results.browser import headless_chromium, skip_without_chromium

pytestmark = pytest.mark.browser
skip_without_chromium()

XSS_HOST = "<script>alert(2)</script>.example"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site-browser")
    first = F.write_run(root / "provider-one", F.small_grid() + F.small_grid(model=F.XSS_MODEL))
    rows = [  # measured twice as fast elsewhere: the cheapest rows of tiny-llama come from here
        r.model_copy(
            update={
                "decode_tok_s": 2 * (r.decode_tok_s or 0),
                "provenance": Provenance(hostname=XSS_HOST, device_name="B <b>"),
            }
        )
        for r in F.small_grid(run="run-b")
    ]
    second = F.write_run(root / "provider-two", rows)
    out = root / "site"
    build_site([first, second], out, F.tariffs(F.tariff("H100-SXM-80GB"), F.tariff("RTX-4090")))
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium() as driver:
        yield driver


def no_alert(driver: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018


def test_the_index_opens_from_disk_with_runs_and_the_cheapest_table(
    site: Path, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    browser.get((site / "index.html").as_uri())
    no_alert(browser)
    assert browser.title == "harness site"
    assert browser.execute_script("return document.readyState") == "complete"
    assert len(browser.find_elements(By.CSS_SELECTOR, "table#runs tbody tr")) == 2
    runs = {c.text for c in browser.find_elements(By.CSS_SELECTOR, "table#cheapest tbody td")}
    assert {"provider-one", "provider-two"} <= runs


def test_each_run_link_opens_that_runs_report(site: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    for name in ("provider-one", "provider-two"):
        browser.get((site / "index.html").as_uri())
        browser.find_element(By.LINK_TEXT, name).click()
        assert browser.current_url == (site / "runs" / name / "report.html").as_uri()
        assert browser.title == "harness report"
        assert browser.find_elements(By.CSS_SELECTOR, "table#points tbody tr")
        no_alert(browser)


def test_scripts_in_a_model_name_and_a_hostname_are_shown_as_text(site: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get((site / "index.html").as_uri())
    no_alert(browser)
    cells = {c.text for c in browser.find_elements(By.CSS_SELECTOR, "table tbody td")}
    assert F.XSS_MODEL in cells and XSS_HOST in cells and "B <b>" in cells
    assert browser.execute_script("return document.scripts.length") == 1  # ours: sorting
    assert browser.execute_script("return document.querySelectorAll('td script, td b').length") == 0
