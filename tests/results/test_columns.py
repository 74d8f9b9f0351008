"""The column registry: every column a report table shows is declared once (label, unit,
format, direction), the tables take it from there, and `harness compare` reads its directions."""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness import modes
from harness.cli import results as cli_results
from harness.results import compare
from harness.results import publish as publish_pkg
from harness.results.aggregate import aggregate_run
from harness.results.columns import (
    COLUMNS,
    COMPARED,
    ColumnSpec,
    headers,
    spec,
    table_columns,
)
from harness.results.publish import format as fmt
from harness.results.publish import headline_table, report
from harness.spec.labels import configuration_label
from harness.spec.tariffs import load_tariffs
from tests import factories as F

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tariffs" / "example.yaml"
# Sections still being written whose columns are not declared yet: module → its table ids.
PENDING: dict[str, set[str]] = {}


def table_modules() -> Iterator[ModuleType]:
    """Every publish module and every mode's report module."""
    for info in pkgutil.iter_modules(publish_pkg.__path__, f"{publish_pkg.__name__}."):
        if info.name not in PENDING:
            yield importlib.import_module(info.name)
    for mode in modes.REGISTRY.values():
        ref = mode.ref("report")
        if ref is not None:
            yield importlib.import_module(ref.partition(":")[0])


def tables() -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
    """(module.NAME, its columns as (field,), (field, label) or (field, label, formatter)) for
    every module-level table of those modules: *_COLUMNS, *_HEADERS, HEADLINE, PROVENANCE."""
    for module in table_modules():
        for name, value in vars(module).items():
            if not (name.endswith(("_COLUMNS", "_HEADERS")) or name in ("HEADLINE", "PROVENANCE")):
                continue
            if isinstance(value, dict):
                yield f"{module.__name__}.{name}", list(value.items())
            elif isinstance(value, list | tuple):
                yield (
                    f"{module.__name__}.{name}",
                    [c if isinstance(c, tuple) else (c,) for c in value],
                )


def test_the_tables_are_found() -> None:
    found = {name.rsplit(".", 1)[1] for name, _ in tables()}
    assert {"CHEAPEST_COLUMNS", "ENERGY_COLUMNS", "HEADLINE", "SERVING_COLUMNS"} <= found
    assert {"COST_HEADERS", "RUN_COLUMNS", "SPEED_ONLY_HEADERS"} <= found


@pytest.mark.parametrize("table", [t for t, _ in tables()])
def test_every_column_a_report_table_shows_is_declared_with_its_label_and_format(
    table: str,
) -> None:
    columns = dict(tables())[table]
    missing = [c[0] for c in columns if c[0] not in COLUMNS]
    assert not missing, f"{table}: declare {missing} in harness.results.columns.COLUMNS"
    for column in columns:
        declared = COLUMNS[column[0]]
        if len(column) >= 2:
            assert column[1] == declared.label, f"{table}: {column[0]} restates its label"
        if len(column) == 3:
            assert column[2] is declared.formatter(), f"{table}: {column[0]} has its own format"


@pytest.mark.parametrize("table", [t for t, _ in tables()])
def test_no_table_shows_two_columns_under_one_label(table: str) -> None:
    labels = [COLUMNS[c[0]].label for c in dict(tables())[table]]
    assert len(labels) == len(set(labels)), table  # a Markdown row is keyed by label


def test_every_column_has_a_label_a_unit_a_known_format_and_a_direction() -> None:
    for name, column in COLUMNS.items():
        assert column.name == name
        assert column.label.strip(), name
        assert isinstance(column.unit, str), name
        assert column.direction in (-1, 0, 1), name
        formatter = column.formatter()
        assert formatter is None or formatter is getattr(fmt, str(column.fmt)), name


def test_each_mode_declares_its_own_columns_through_the_registry_once() -> None:
    from harness.modes.serving.columns import COLUMNS as SERVING
    from harness.modes.training.columns import COLUMNS as TRAINING
    from harness.results.columns import declared_once, mode_columns

    assert [c.name for c in mode_columns()] == [row[0] for row in (*SERVING, *TRAINING)]
    assert spec("output_tok_s") == ColumnSpec("output_tok_s", "output tok/s", "tok/s",
                                              "fmt_float", +1)  # fmt: skip
    assert spec("train_tok_s").fmt == "fmt_value" and spec("train_tok_s").direction == +1
    twice = [ColumnSpec("model", "model"), ColumnSpec("model", "the model")]
    with pytest.raises(ValueError, match="column 'model' is declared twice"):
        declared_once(twice)


def test_units_of_priced_and_timed_columns_say_what_they_count() -> None:
    assert spec("usd_per_mtok_output").unit == "USD per 1e6 output tokens"
    assert spec("peak_mib_decode").unit == "MiB" and spec("decode_tok_s").unit == "tok/s"
    assert spec("model").unit == "" and spec("model").fmt is None


def test_compare_takes_each_metrics_direction_and_label_from_the_registry() -> None:
    assert list(compare.METRICS) == list(COMPARED)
    assert {m: COLUMNS[m].direction for m in COMPARED} == compare.METRICS
    assert all(d != 0 for d in compare.METRICS.values())  # a verdict needs a good direction
    assert compare.METRICS["decode_tok_s"] == +1 and compare.METRICS["ppl"] == -1
    assert {m: COLUMNS[m].label for m in COMPARED} == cli_results.METRIC_LABELS


def test_an_undeclared_column_is_refused_with_the_closest_names() -> None:
    with pytest.raises(KeyError, match="did you mean decode_tok_s"):
        table_columns(("decode_tok_z",))
    assert headers(("model", "quantization")) == {"model": "model", "quantization": "quant"}
    assert table_columns(("batch",)) == [("batch", "batch", fmt.fmt_int)]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """test_publish's run: two models (one named with a script) on two GPUs, one OOM row."""
    run_dir = tmp_path_factory.mktemp("runs") / "run"
    rows = F.small_grid() + F.small_grid(model=F.XSS_MODEL)
    rows += [F.row(status="oom", decode_tok_s=None, error="CUDA out of memory <b>")]
    F.write_run(run_dir, rows)
    report(run_dir, load_tariffs(EXAMPLE), utilisation=0.8)
    return run_dir


def test_every_header_of_the_published_page_is_a_declared_label(run: Path) -> None:
    page = (run / "published" / "report.html").read_text()
    labels = {c.label for c in COLUMNS.values()}
    pending = set().union(*PENDING.values())
    shown = re.findall(r'<table class="sortable" id="([^"]+)"><thead><tr>(.*?)</tr>', page)
    assert {"cheapest", "points", "ratios", "effects"} <= {table for table, _ in shown}
    for table, head in shown:
        if table in pending:
            continue
        for th in re.findall(r"<th[^>]*>(.*?)</th>", head):
            assert th.replace("&amp;", "&") in labels, f"table {table}: {th!r} is not declared"


def test_the_published_headline_names_the_engine_under_the_declared_labels(run: Path) -> None:
    readme = (run / "published" / "README.md").read_text()
    head = "| " + " | ".join(COLUMNS[n].label for n in publish_pkg.headline.HEADLINE) + " |"
    assert head in readme and "| backend |" in head and "× cheapest GPU" in head
    page = (run / "published" / "report.html").read_text()
    assert '<th data-type="num">J/Mtok out</th>' in page  # one label where there were three


def test_the_compact_headline_shows_the_one_configuration_label(run: Path) -> None:
    result = aggregate_run(run, load_tariffs(EXAMPLE), 0.8)
    rows = headline_table(result, "99", package_days=30, compact=True)
    cheapest = result.cheapest
    first = cheapest[(cheapest["quality_class"] == "99") & (cheapest["package_days"] == 30)]
    record = {str(k): v for k, v in first.iloc[0].to_dict().items()}
    assert rows[0]["config"] == configuration_label(record)
    assert rows[0]["config"].startswith("transformers ")  # the engine, first
    assert list(rows[0]) == [COLUMNS[n].label for n in publish_pkg.headline.COMPACT_COLUMNS]
