"""Publish one run: CSV, Parquet, JSON, Markdown and one self-contained HTML report.

``report(run_dir, tariffs)`` writes ``run_dir/published/``:

- ``points.csv`` / ``points.parquet``: every row (ok or not) with the gate and flag columns;
- ``cost.csv``: one row per priced row × tariff package (formulas in ``harness.results.pricing``);
- ``summary.json``: counts, unreadable files, the headline, cheapest configurations, ratios;
- ``README.md``: the headline table, the method, the formulas, the data licences;
- ``report.html``: the same with sortable tables and inline SVG charts. No network: no external
  script, style, font or image; every string from the data is HTML-escaped.

Everything is written into a temporary folder beside ``published/`` and renamed into place, so a
failure leaves the previous publication (or nothing), never half of one.

Modules: ``files`` (the folder and its atomic swap), ``summary`` (JSON), ``markdown``, ``html``
(the page), ``svg`` (its charts), ``headline`` (the table every output leads with), ``format``
(numbers as text), ``method`` (formulas and licences).
"""

from harness.results.publish.files import FILES, PUBLISHED, report, write_published
from harness.results.publish.headline import COMPACT, headline_table

__all__ = ["COMPACT", "FILES", "PUBLISHED", "headline_table", "report", "write_published"]
