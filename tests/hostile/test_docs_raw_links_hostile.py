"""A raw-HTML link to a missing docs page fails the strict docs build (issue 43, item 10):
mkdocs checks Markdown links only, so the build hooks .ci/docs_links.py, run here over docs/
without mkdocs (the docs have their own venv)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def links() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_links", REPO / ".ci" / "docs_links.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_raw_link_to_a_missing_page_is_named() -> None:
    page = '<a href="../guide/nowhere.md">x</a> <img src="missing.png"> <a href="/abs/">a</a>'
    broken = links().broken_links(page, "concepts/budget.md", DOCS)
    assert broken == [
        "'../guide/nowhere.md' (no such page or file)",
        "'missing.png' (no such page or file)",
        "'/abs/' (absolute: link relative to the page)",
    ]


def test_raw_links_to_pages_by_source_or_by_url_and_external_ones_pass() -> None:
    page = (
        '<a href="../guide/install.md#top">by source</a> <a href="../../guide/install/">by url</a>'
        ' <a href="https://example.com/x">external</a> <a href="#here">anchor</a>'
        ' <a href="../reference/">a folder index</a>'
    )
    assert links().broken_links(page, "concepts/budget.md", DOCS) == []


def test_the_shipped_docs_have_no_broken_raw_link_and_the_build_runs_the_check() -> None:
    module = links()
    broken = {
        str(md.relative_to(DOCS)): found
        for md in DOCS.rglob("*.md")
        if (found := module.broken_links(md.read_text(), str(md.relative_to(DOCS)), DOCS))
    }
    assert broken == {}
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert ".ci/docs_links.py" in config["hooks"] and config["strict"] is True
